// SQL: type a query, see its plan drawn while typing (EXPLAIN through
// /api/v1/explain), run it and watch the first rows arrive live
// (server-sent events from /api/v1/sql/stream).

import { api, ApiError } from "../api";
import { DagView } from "../dag";
import { el } from "../format";
import type { Page } from "../poll";

const EXPLAIN_DEBOUNCE_MS = 400;
/** Rows kept on the page; the server stops at its own bound too. */
const PREVIEW_ROWS_SHOWN_MAX = 200;

const EXAMPLE = `SELECT window_start, auction, count(*) AS bids
FROM TUMBLE(bids, date_time, INTERVAL '1' SECOND)
GROUP BY window_start, window_end, auction`;

export function sqlPage(root: HTMLElement): Page {
  const editor = el("textarea", { rows: "8", spellcheck: "false", "data-testid": "sql-input" }) as HTMLTextAreaElement;
  editor.value = sessionStorage.getItem("sluice.sql") ?? EXAMPLE;
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
  let source: EventSource | null = null;
  let timer: number | undefined;
  let explainSeq = 0;

  async function explain(): Promise<void> {
    const seq = ++explainSeq;
    const sql = editor.value.trim();
    sessionStorage.setItem("sluice.sql", editor.value);
    if (!sql) return;
    try {
      const { dag } = await api.explain(sql);
      if (seq !== explainSeq) return;
      planNote.textContent = `${dag.operators.length} operators, ${dag.edges.length} edges`;
      planBox.hidden = false;
      plan.update(dag);
    } catch (e) {
      if (seq !== explainSeq) return;
      planNote.textContent = e instanceof ApiError ? `No plan: ${e.message}` : String(e);
      planBox.hidden = true;
    }
  }

  function closeSource(): void {
    source?.close();
    source = null;
  }

  function table(columns: { name: string; type: string }[]): HTMLTableSectionElement {
    const body = el("tbody");
    results.replaceChildren(
      el("table", {}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { title: c.type }, c.name)))), body),
    );
    return body;
  }

  function start(): void {
    closeSource();
    results.replaceChildren();
    status.textContent = "running…";
    let body: HTMLTableSectionElement | null = null;
    let received = 0;
    const es = new EventSource(`/api/v1/sql/stream?sql=${encodeURIComponent(editor.value)}`);
    source = es;
    es.addEventListener("command", (e) => {
      const c = JSON.parse((e as MessageEvent).data);
      status.textContent = c.rows_affected === null ? c.tag : `${c.tag} ${c.rows_affected}`;
    });
    es.addEventListener("columns", (e) => {
      body = table(JSON.parse((e as MessageEvent).data));
      status.textContent = "waiting for rows…";
    });
    es.addEventListener("rows", (e) => {
      const rows: (string | null)[][] = JSON.parse((e as MessageEvent).data);
      received += rows.length;
      for (const row of rows) {
        if (!body || body.rows.length >= PREVIEW_ROWS_SHOWN_MAX) break;
        body.append(el("tr", { "data-testid": "result-row" }, ...row.map((v) => el("td", { class: v === null ? "null" : "" }, v ?? "NULL"))));
      }
      status.textContent = `${received} rows so far…`;
    });
    es.addEventListener("end", (e) => {
      const end = JSON.parse((e as MessageEvent).data);
      status.textContent = `${end.rows} rows${end.truncated ? " (preview stopped at its limit)" : ""}`;
      closeSource();
    });
    es.addEventListener("error", (e) => {
      const data = (e as MessageEvent).data;
      if (data) {
        const err = JSON.parse(data);
        status.textContent = `ERROR ${err.sqlstate ?? ""}: ${err.error}`;
        status.classList.add("error");
      }
      closeSource();
    });
    status.classList.remove("error");
  }

  editor.addEventListener("input", () => {
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
