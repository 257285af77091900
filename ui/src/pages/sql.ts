// SQL: type a query, see its plan drawn while typing (EXPLAIN through
// /api/v1/explain), run it and watch the first rows arrive live
// (server-sent events from /api/v1/sql/stream, read through fetch so they
// carry the credential). A statement the role may not run shows
// "Permission denied"; it runs as the signed-in role, as in psql.

import { api, ApiError, deniedText, errorText, INSUFFICIENT_PRIVILEGE, type StreamEvent } from "../api";
import { DagView } from "../dag";
import { el } from "../format";
import type { Page } from "../poll";

const EXPLAIN_DEBOUNCE_MS = 400;
/** Rows kept on the page; the server stops at its own bound too. */
const PREVIEW_ROWS_SHOWN_MAX = 200;

const EXAMPLE = `SELECT window_start, auction, count(*) AS bids
FROM TUMBLE(bids, date_time, INTERVAL '1' SECOND)
GROUP BY window_start, window_end, auction`;

/**
 * The editor's text while the dashboard is open, kept when moving between
 * pages. In memory only, like the credential (auth.ts): a statement can
 * hold a password (`CREATE USER … PASSWORD`) or a connector secret, and
 * browser storage outlives the tab and is readable by any script of the
 * origin.
 */
let draft = EXAMPLE;

export function sqlPage(root: HTMLElement): Page {
  const editor = el("textarea", { rows: "8", spellcheck: "false", "data-testid": "sql-input" }) as HTMLTextAreaElement;
  editor.value = draft;
  const run = el("button", { "data-testid": "sql-run" }, "Run");
  const stop = el("button", {}, "Stop");
  const planNote = el("p", { class: "muted", "data-testid": "plan-note" });
  const planBox = el("div", { class: "dag-box", "data-testid": "plan" });
  const status = el("p", { class: "status-line", "data-testid": "sql-status" });
  const results = el("div", { "data-testid": "sql-results" });
  root.append(
    el("section", { class: "card" }, el("h2", {}, "SQL"), editor, el("div", { class: "actions" }, run, stop)),
    el("section", { class: "card" }, el("h2", {}, "Plan"), planNote, planBox),
    el("section", { class: "card" }, el("h2", {}, "Result"), status, results),
  );
  const plan = new DagView(planBox);
  let running: AbortController | null = null;
  let timer: number | undefined;
  let explainSeq = 0;

  async function explain(): Promise<void> {
    const seq = ++explainSeq;
    const sql = editor.value.trim();
    if (!sql) return;
    try {
      const { dag } = await api.explain(sql);
      if (seq !== explainSeq) return;
      planNote.textContent = `${dag.operators.length} operators, ${dag.edges.length} edges`;
      planBox.hidden = false;
      plan.update(dag);
    } catch (e) {
      if (seq !== explainSeq) return;
      planNote.textContent = e instanceof ApiError && !e.denied ? `No plan: ${e.message}` : errorText(e);
      planBox.hidden = true;
    }
  }

  /** Stops the preview running, if any (the server then stops the query). */
  function closeSource(): void {
    running?.abort();
    running = null;
  }

  function table(columns: { name: string; type: string }[]): HTMLTableSectionElement {
    const body = el("tbody");
    results.replaceChildren(
      el("table", {}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { title: c.type }, c.name)))), body),
    );
    return body;
  }

  function fail(text: string): void {
    status.textContent = text;
    status.classList.add("error");
  }

  function start(): void {
    closeSource();
    results.replaceChildren();
    status.textContent = "running…";
    status.classList.remove("error");
    let body: HTMLTableSectionElement | null = null;
    let received = 0;
    const controller = new AbortController();
    running = controller;
    const on = ({ event, data }: StreamEvent) => {
      if (running !== controller) return;
      const value = JSON.parse(data);
      if (event === "command") {
        status.textContent = value.rows_affected === null ? value.tag : `${value.tag} ${value.rows_affected}`;
      } else if (event === "columns") {
        body = table(value);
        status.textContent = "waiting for rows…";
      } else if (event === "rows") {
        const rows: (string | null)[][] = value;
        received += rows.length;
        for (const row of rows) {
          if (!body || body.rows.length >= PREVIEW_ROWS_SHOWN_MAX) break;
          body.append(el("tr", { "data-testid": "result-row" }, ...row.map((v) => el("td", { class: v === null ? "null" : "" }, v ?? "NULL"))));
        }
        status.textContent = `${received} rows so far…`;
      } else if (event === "end") {
        status.textContent = `${value.rows} rows${value.truncated ? " (preview stopped at its limit)" : ""}`;
        closeSource();
      } else if (event === "error") {
        const denied = value.sqlstate === INSUFFICIENT_PRIVILEGE;
        fail(denied ? `${deniedText(value.error)} (${value.sqlstate})` : `ERROR ${value.sqlstate ?? ""}: ${value.error}`);
        closeSource();
      }
    };
    api.preview(editor.value, on, controller.signal).then(
      () => {
        if (running === controller) running = null;
      },
      (e) => {
        if (controller.signal.aborted || running !== controller) return;
        running = null;
        fail(errorText(e));
      },
    );
  }

  editor.addEventListener("input", () => {
    draft = editor.value;
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void explain(), EXPLAIN_DEBOUNCE_MS);
  });
  run.addEventListener("click", start);
  stop.addEventListener("click", () => {
    closeSource();
    status.textContent += " (stopped)";
  });
  void explain();
  return {
    dispose() {
      closeSource();
      window.clearTimeout(timer);
    },
  };
}
