// Overview: cluster health and every pipeline with its rates and sparkline.

import { api, errorText, type Cluster, type PipelineSummary } from "../api";
import { sparkline } from "../chart";
import { count, duration, el, rate, timestamp } from "../format";
import { poll, type Page } from "../poll";

function clusterCard(c: Cluster): HTMLElement {
  const masters = c.masters.map((m) =>
    el("li", {}, el("span", { class: `health ${m.health}` }, m.health), ` ${m.id} (${m.role})`),
  );
  // The playground's worker counts its tasks; a cluster's count the slots they use.
  const load = (w: Cluster["workers"][number]) =>
    w.used_slots !== undefined ? `${w.used_slots} of ${w.slots} slots used` : `${w.tasks ?? 0} tasks on ${w.slots} slots, ${w.pipelines_running ?? 0} pipelines`;
  const workers = c.workers.map((w) =>
    el("li", {}, el("span", { class: `health ${w.health}` }, w.health), ` ${w.id}: ${load(w)}, heartbeat ${duration(w.heartbeat_age_ms)} ago`),
  );
  return el(
    "section",
    { class: "card", "data-testid": "cluster" },
    el("h2", {}, "Cluster"),
    el("p", {}, `Sluice ${c.version}, up ${duration(c.uptime_ms)}`),
    el("h3", {}, "Masters"),
    el("ul", {}, ...masters),
    el("h3", {}, "Workers"),
    el("ul", {}, ...workers),
    workers.length === 0 ? el("p", { class: "muted" }, "No worker is registered.") : "",
    el("p", {}, el("a", { href: "/workers" }, "Workers and their tasks →")),
  );
}

function pipelineRow(p: PipelineSummary): HTMLElement {
  const link = el("a", { href: `/pipelines/${encodeURIComponent(p.name)}` }, p.name);
  return el(
    "tr",
    { "data-testid": "pipeline-row", "data-name": p.name, "data-rows-out": String(p.rows_out) },
    el("td", {}, link),
    el("td", {}, el("span", { class: `state ${p.state.replace(" ", "-")}` }, p.state)),
    el("td", { class: "num", title: `version ${p.version} since ${timestamp(p.changed_ms)}` }, `v${p.version}`),
    el("td", { class: "num" }, count(p.rows_in)),
    el("td", { class: "num", "data-testid": "rate-in" }, rate(p.rows_in_per_s)),
    el("td", {}, sparkline(p.sparkline.rows_in_per_s)),
    el("td", { class: "num" }, count(p.rows_out)),
    el("td", { class: "num" }, rate(p.rows_out_per_s)),
    el("td", { class: "num" }, duration(p.watermark_lag_ms)),
    el("td", { class: "num" }, count(p.late_rows_dropped)),
    el("td", { class: p.error ? "error" : "" }, p.error ?? (p.errors ? `${p.errors}` : "")),
  );
}

export function overviewPage(root: HTMLElement): Page {
  const cluster = el("div");
  const table = el("tbody");
  const empty = el("p", { class: "muted" }, "No pipelines yet: CREATE SINK … AS SELECT … in psql or on the SQL page.");
  const message = el("p", { class: "error", "data-testid": "page-error" });
  const head = ["pipeline", "state", "version", "rows in", "in/s", "last minute", "rows out", "out/s", "watermark lag", "late rows", "errors"];
  root.append(
    message,
    cluster,
    el(
      "section",
      { class: "card" },
      el("h2", {}, "Pipelines"),
      el("table", { "data-testid": "pipelines" }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))), table),
      empty,
    ),
  );
  return poll(async () => {
    let c: Cluster;
    let p: { pipelines: PipelineSummary[] };
    try {
      [c, p] = await Promise.all([api.cluster(), api.pipelines()]);
    } catch (e) {
      message.textContent = errorText(e);
      return;
    }
    message.textContent = "";
    cluster.replaceChildren(clusterCard(c));
    table.replaceChildren(...p.pipelines.map(pipelineRow));
    empty.hidden = p.pipelines.length > 0;
  });
}
