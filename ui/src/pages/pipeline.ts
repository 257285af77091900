// One pipeline: its DAG with live per-operator metrics, a selected
// operator's instances and charts over the last minutes, errors, and every
// version with the statement that made it and its diff from the one before
// (the DAG outlines what the last ALTER kept, replaced or added).

import { api, CHANGES, errorText, type Change, type DiffLine, type History, type InstanceMetrics, type PipelineDetail, type PipelineVersion } from "../api";
import { TimeChart } from "../chart";
import { DagView } from "../dag";
import { count, duration, el, percent, rate, timestamp } from "../format";
import { navigate, poll, type Page } from "../poll";

function instanceTable(instances: InstanceMetrics[]): HTMLElement {
  const head = ["instance", "worker", "rows in", "in/s", "rows out", "out/s", "busy", "backpressure", "queued rows", "state groups", "watermark", "lag"];
  const rows = instances.map((i) =>
    el(
      "tr",
      { "data-testid": "instance-row" },
      el("td", {}, String(i.instance)),
      el("td", { "data-testid": "instance-worker" }, i.worker === null ? "–" : el("a", { href: "/workers" }, i.worker)),
      el("td", { class: "num" }, count(i.rows_in)),
      el("td", { class: "num" }, rate(i.rows_in_per_s)),
      el("td", { class: "num" }, count(i.rows_out)),
      el("td", { class: "num" }, rate(i.rows_out_per_s)),
      el("td", { class: "num", title: `longest poll ${count(i.poll_max_us)} µs` }, percent(i.busy_share)),
      el("td", { class: "num" }, percent(i.backpressure_share)),
      el("td", { class: "num" }, count(i.queued_rows)),
      el("td", { class: "num" }, count(i.state_groups)),
      el("td", {}, timestamp(i.watermark_ms)),
      el("td", { class: "num" }, duration(i.watermark_lag_ms)),
    ),
  );
  return el("table", { "data-testid": "instances" }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))), el("tbody", {}, ...rows));
}

/** A change as a word in its colour (the word, so not by colour alone). */
function changeBadge(change: Change): HTMLElement {
  return el("span", { class: `change diff-${change}` }, change);
}

/** `old → new` when a value changed, else the value; "–" for none. */
function fromTo(old: string | number | null, now: string | number | null): string {
  const show = (v: string | number | null) => (v === null ? "–" : String(v));
  return old === now ? show(now) : `${show(old)} → ${show(now)}`;
}

/** One row per operator: what the ALTER did to it and to its state. */
function diffTable(lines: DiffLine[]): HTMLElement {
  const head = ["operator", "kind", "change", "state", "parallelism", "uid", "detail"];
  const rows = lines.map((l) =>
    el(
      "tr",
      { class: `diff-row diff-${l.change}`, "data-testid": "diff-row", "data-change": l.change, "data-kind": l.kind, "data-operator": String(l.operator) },
      el("td", { class: "num" }, String(l.operator)),
      el("td", {}, l.kind),
      el("td", {}, changeBadge(l.change)),
      el("td", { "data-testid": "diff-state" }, l.state),
      el("td", { class: "num" }, fromTo(l.old_parallelism, l.parallelism)),
      el("td", { class: "uid" }, fromTo(l.old_uid, l.uid)),
      el("td", { class: "detail" }, l.detail),
    ),
  );
  return el("table", { class: "diff", "data-testid": "diff" }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))), el("tbody", {}, ...rows));
}

/** "2 kept, 1 replaced": how many operators each change touched. */
function diffSummary(lines: DiffLine[]): string {
  return CHANGES.map((c) => [c, lines.filter((l) => l.change === c).length] as const)
    .filter(([, n]) => n > 0)
    .map(([c, n]) => `${n} ${c}`)
    .join(", ");
}

/** A version: its number and start, the statement that made it, the SQL it runs and its diff. */
function versionView(v: PipelineVersion, running: boolean): HTMLElement {
  const parts: HTMLElement[] = [el("h3", {}, `version ${v.version}${running ? " (running)" : ""} · since ${timestamp(v.created_ms)}`)];
  if (v.changed_by === null) {
    parts.push(el("p", { class: "muted" }, "Made by the statement that created the pipeline:"));
  } else {
    parts.push(el("p", { class: "muted" }, "Made by:"), el("pre", { "data-testid": "changed-by" }, v.changed_by), el("p", { class: "muted" }, "Runs:"));
  }
  parts.push(el("pre", { "data-testid": "sql" }, v.sql));
  if (v.version > 1) {
    parts.push(
      v.diff.length === 0
        ? el("p", { class: "muted" }, "No diff recorded.")
        : el("div", {}, el("p", { class: "muted" }, `Diff from version ${v.version - 1}: ${diffSummary(v.diff)}.`), diffTable(v.diff)),
    );
  }
  return el("div", { class: "version", "data-testid": "version", "data-version": String(v.version) }, ...parts);
}

export function pipelinePage(root: HTMLElement, name: string): Page {
  const title = el("h1", {}, name);
  const status = el("p", { class: "status-line" });
  const actions = el("div", { class: "actions" });
  const message = el("p", { class: "error", "data-testid": "page-error" });
  const dagBox = el("div", { class: "dag-box" });
  const operatorTitle = el("h2", {}, "Operator");
  const instances = el("div");
  const throughputBox = el("div", { class: "chart", "data-testid": "throughput-chart" });
  const latencyBox = el("div", { class: "chart", "data-testid": "latency-chart" });
  const operatorCard = el("section", { class: "card", "data-testid": "operator-panel" }, operatorTitle, instances, throughputBox, latencyBox);
  operatorCard.hidden = true;
  const versions = el("div");
  let shownVersions = "";
  const errors = el("div");
  const legend = el("p", { class: "muted", "data-testid": "diff-legend" });
  legend.hidden = true;
  root.append(
    el("section", { class: "card" }, title, status, actions, message),
    el(
      "section",
      { class: "card" },
      el("h2", {}, "Dataflow"),
      el("p", { class: "muted" }, "Click an operator for its instances and charts. Colour: share of time waiting on downstream (backpressure)."),
      legend,
      dagBox,
    ),
    operatorCard,
    el("section", { class: "card" }, el("h2", {}, "Errors"), errors),
    el("section", { class: "card" }, el("h2", {}, "SQL and versions"), versions),
  );

  let selected: number | null = null;
  let latest: PipelineDetail | null = null;
  let history: History | null = null;
  const throughput = new TimeChart(throughputBox, "Throughput (rows/s)");
  const latency = new TimeChart(latencyBox, "Watermark lag (s) and backpressure (%)");
  const dag = new DagView(dagBox, (op) => {
    selected = op;
    dag.select(op);
    drawOperator();
  });

  const act = (label: string, run: () => Promise<void>) => {
    const b = el("button", {}, label);
    b.addEventListener("click", async () => {
      try {
        await run();
        message.textContent = "";
      } catch (e) {
        message.textContent = errorText(e);
      }
    });
    return b;
  };
  actions.append(
    act("Pause", () => api.pause(name)),
    act("Resume", () => api.resume(name)),
    act("Drop", async () => {
      if (!confirm(`Drop pipeline ${name}?`)) return;
      await api.drop(name);
      navigate("/");
    }),
  );

  function drawOperator(): void {
    if (selected === null || !latest) return;
    const op = latest.dag.operators.find((o) => o.id === selected);
    if (!op) return;
    operatorCard.hidden = false;
    operatorTitle.textContent = `Operator ${op.id}: ${op.kind} ×${op.parallelism} — ${op.detail}`;
    instances.replaceChildren(instanceTable(op.instances ?? []));
    const h = history?.operators.find((o) => o.id === selected);
    if (!h) return;
    throughput.update(h.t_ms, [
      { label: "rows in/s", values: h.rows_in_per_s, colour: "#2563eb" },
      { label: "rows out/s", values: h.rows_out_per_s, colour: "#16a34a" },
    ]);
    latency.update(h.t_ms, [
      { label: "watermark lag (s)", values: h.watermark_lag_ms.map((v) => (v === null ? null : v / 1000)), colour: "#9333ea" },
      { label: "backpressure %", values: h.backpressure_share.map((v) => v * 100), colour: "#dc2626", scale: "%" },
    ]);
  }

  const page = poll(async () => {
    try {
      [latest, history] = await Promise.all([api.pipeline(name), api.history(name)]);
    } catch (e) {
      message.textContent = errorText(e);
      return;
    }
    const p = latest.pipeline;
    root.dataset.state = p.state;
    status.replaceChildren(
      el("span", { class: `state ${p.state.replace(" ", "-")}` }, p.state),
      ` ${p.kind} · version ${p.version} · in ${count(p.rows_in)} (${rate(p.rows_in_per_s)}) · out ${count(p.rows_out)} (${rate(p.rows_out_per_s)}) · watermark ${timestamp(p.watermark_ms)} (lag ${duration(p.watermark_lag_ms)}) · late rows ${count(p.late_rows_dropped)}`,
    );
    dag.update(latest.dag);
    // The running version's diff (none for version 1): outline what it changed.
    const running = latest.versions[latest.versions.length - 1];
    const diff = running && running.version > 1 ? running.diff : [];
    dag.markChanges(new Map(diff.filter((l) => l.change !== "removed").map((l) => [l.operator, l.change])));
    legend.hidden = diff.length === 0;
    if (running && diff.length > 0) {
      const removed = diff.filter((l) => l.change === "removed").length;
      legend.replaceChildren(
        `Outline: what ALTER PIPELINE did to each operator in version ${running.version}: `,
        ...CHANGES.filter((c) => c !== "removed").flatMap((c) => [changeBadge(c), " "]),
        removed > 0 ? ` (${removed} removed: listed under SQL and versions)` : "",
      );
    }
    drawOperator();
    errors.replaceChildren(
      latest.errors.length === 0 && !p.error
        ? el("p", { class: "muted" }, "No errors.")
        : el(
            "ul",
            { "data-testid": "errors" },
            ...latest.errors.map((e) => el("li", { class: "error" }, `${timestamp(e.time_ms)} operator ${e.operator} instance ${e.instance}: ${e.message}`)),
            ...(latest.errors.length === 0 && p.error ? [el("li", { class: "error" }, p.error)] : []),
          ),
    );
    // Newest first; drawn again only when a version is added (keeps a text selection).
    const versionsKey = JSON.stringify(latest.versions);
    if (versionsKey !== shownVersions) {
      shownVersions = versionsKey;
      const last = latest.versions.length - 1;
      versions.replaceChildren(...latest.versions.map((v, i) => versionView(v, i === last)).reverse());
    }
  });
  return {
    dispose() {
      page.dispose();
      throughput.destroy();
      latency.destroy();
    },
  };
}
