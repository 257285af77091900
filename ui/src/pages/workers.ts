// Workers: the masters and workers of the cluster, live, and the task
// instances each worker runs (from the pipelines' REST data, `tasks[].worker`),
// each linking to its pipeline. A worker the master stops listing (declared
// dead, or gone after draining) stays on the page as "lost" until it
// registers again, so a kill is visible without a reload; a page opened
// later shows the lost workers the master remembers (REST `lost_workers`). In the playground
// (one process) the one in-process worker runs everything, and the page says so.

import { api, errorText, LOCAL_WORKER, singleProcess, type Cluster, type ClusterWorker, type PipelineDetail } from "../api";
import { bytes, count, duration, el, percent, timestamp } from "../format";
import { poll, type Page } from "../poll";

/** One task instance as listed under its worker. */
interface Task {
  pipeline: string;
  operator: number;
  instance: number;
  kind: string;
  detail: string;
}

/** A worker's counters at one poll, for rates over the last seconds. */
interface Sample {
  t: number;
  cpuNs: number;
  sent: number;
  received: number;
}

/** Rates are taken over this much history (heartbeats come once a second). */
const RATE_WINDOW_MS = 5000;

/** A worker no longer listed: what it last looked like and when it went. */
interface Lost {
  last: ClusterWorker;
  since: number;
}

const dash = "–";

function healthBadge(health: string): HTMLElement {
  return el("span", { class: `health ${health}`, "data-testid": "health" }, health);
}

function labelText(labels: Record<string, string> | undefined): string {
  const pairs = Object.entries(labels ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return pairs.length === 0 ? dash : pairs.map(([k, v]) => `${k}=${v}`).join(", ");
}

function table(testid: string, head: string[], rows: HTMLElement[]): HTMLElement {
  return el(
    "table",
    { "data-testid": testid },
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows),
  );
}

function mastersTable(c: Cluster): HTMLElement {
  const rows = c.masters.map((m) =>
    el(
      "tr",
      { "data-testid": "master-row", "data-master": m.id },
      el("td", { "data-testid": "id" }, m.id),
      el("td", { "data-testid": "address" }, m.address ?? "in this process"),
      el("td", { "data-testid": "role" }, m.role),
      el("td", {}, healthBadge(m.health)),
    ),
  );
  return table("masters", ["master", "control address", "role", "health"], rows);
}

/** A total with its rate beside it, muted. */
function withRate(testid: string, total: string, perSecond: string | null): HTMLElement {
  return el(
    "td",
    { class: "num" },
    el("span", { "data-testid": testid }, total),
    perSecond === null ? "" : el("span", { class: "muted rate" }, ` ${perSecond}`),
  );
}

export function workersPage(root: HTMLElement): Page {
  const message = el("p", { class: "error", "data-testid": "workers-error" });
  const summary = el("p", { class: "muted" });
  const masters = el("div");
  const note = el("p", { class: "note", "data-testid": "single-process" });
  note.hidden = true;
  const legend = el("p", { class: "muted" });
  const workers = el("div");
  const tasks = el("div", { "data-testid": "tasks-by-worker" });
  root.append(
    el("section", { class: "card" }, el("h1", {}, "Workers"), summary, message),
    el("section", { class: "card" }, el("h2", {}, "Masters"), masters),
    el(
      "section",
      { class: "card" },
      el("h2", {}, "Workers"),
      note,
      legend,
      workers,
    ),
    el(
      "section",
      { class: "card" },
      el("h2", {}, "Task instances by worker"),
      el("p", { class: "muted" }, "Each running pipeline's operator instances on the worker that runs them (operator id, kind, #instance); click one for its pipeline."),
      tasks,
    ),
  );

  const samples = new Map<string, Sample[]>();
  const lost = new Map<string, Lost>();
  let seen = new Map<string, ClusterWorker>();

  /** CPU share and data-plane bytes/s of a worker over RATE_WINDOW_MS. */
  function rates(w: ClusterWorker, now: number): { cpu: number; sent: number; received: number } | null {
    if (w.cpu_ns === undefined) return null;
    const list = samples.get(w.id) ?? [];
    list.push({ t: now, cpuNs: w.cpu_ns, sent: w.data_bytes_sent ?? 0, received: w.data_bytes_received ?? 0 });
    while (list.length > 2 && now - list[1].t >= RATE_WINDOW_MS) list.shift();
    samples.set(w.id, list);
    const first = list[0];
    const dt = now - first.t;
    if (dt < 1500) return null;
    return {
      cpu: (w.cpu_ns - first.cpuNs) / (dt * 1e6),
      sent: ((w.data_bytes_sent ?? 0) - first.sent) / (dt / 1000),
      received: ((w.data_bytes_received ?? 0) - first.received) / (dt / 1000),
    };
  }

  /** A worker's row; in one process only the columns it has (no address, labels or process metrics). */
  function workerRow(w: ClusterWorker, taskCount: number, now: number, single: boolean, gone?: number): HTMLElement {
    const r = gone === undefined ? rates(w, now) : null;
    const live = <T,>(v: T) => (gone === undefined ? v : null);
    const slots =
      w.used_slots !== undefined
        ? `${gone === undefined ? w.used_slots : dash} / ${w.slots}`
        : `${w.slots}`;
    const state = gone === undefined ? w.health : "lost";
    const cells = [
      el("td", { "data-testid": "id" }, w.id),
      single ? null : el("td", { "data-testid": "address" }, w.data_address ?? dash),
      el("td", {}, healthBadge(state)),
      el("td", { class: "num", "data-testid": "slots", title: single ? "slots" : "slots used by tasks / slots" }, slots),
      el("td", { class: "num", "data-testid": "instances" }, gone === undefined ? count(taskCount) : dash),
      single ? null : el("td", { "data-testid": "labels" }, labelText(w.labels)),
      el(
        "td",
        { class: "num", "data-testid": "heartbeat" },
        gone === undefined ? (w.heartbeat_age_ms === null ? dash : `${duration(w.heartbeat_age_ms)} ago`) : `lost at ${timestamp(gone).slice(11, 19)}`,
      ),
    ];
    const metrics = single
      ? []
      : [
          el("td", { class: "num", "data-testid": "rss" }, bytes(live(w.rss_bytes))),
          withRate("cpu", w.cpu_ns === undefined || gone !== undefined ? dash : `${(w.cpu_ns / 1e9).toFixed(1)} s`, r ? percent(r.cpu) : null),
          withRate("data-sent", bytes(live(w.data_bytes_sent)), r ? `${bytes(Math.round(r.sent))}/s` : null),
          withRate("data-received", bytes(live(w.data_bytes_received)), r ? `${bytes(Math.round(r.received))}/s` : null),
          el("td", { class: "num", "data-testid": "credit-wait" }, w.credit_wait_ns === undefined || gone !== undefined ? dash : duration(Math.round(w.credit_wait_ns / 1e6))),
        ];
    return el(
      "tr",
      { "data-testid": "worker-row", "data-worker": w.id, "data-health": state, class: gone === undefined ? "" : "lost" },
      ...cells.filter((c): c is HTMLTableCellElement => c !== null),
      ...metrics,
    );
  }

  /** A worker's task instances, grouped by pipeline. */
  function taskList(worker: string, title: string, list: Task[], status: HTMLElement | null): HTMLElement {
    const byPipeline = new Map<string, Task[]>();
    for (const t of list) byPipeline.set(t.pipeline, [...(byPipeline.get(t.pipeline) ?? []), t]);
    const pipelines = [...byPipeline.keys()].sort();
    const items = pipelines.map((p) => {
      const href = `/pipelines/${encodeURIComponent(p)}`;
      const mine = byPipeline.get(p)!.sort((a, b) => a.operator - b.operator || a.instance - b.instance);
      return el(
        "li",
        { "data-testid": "worker-pipeline", "data-pipeline": p },
        el("a", { href, class: "pipeline-link" }, p),
        ": ",
        ...mine.flatMap((t, i) => [
          i === 0 ? "" : " ",
          el(
            "a",
            {
              href,
              class: "task",
              "data-testid": "task",
              "data-pipeline": t.pipeline,
              "data-operator": String(t.operator),
              "data-instance": String(t.instance),
              title: t.detail,
            },
            `${t.operator} ${t.kind} #${t.instance}`,
          ),
        ]),
      );
    });
    const heading = `${title} · ${list.length} task instance${list.length === 1 ? "" : "s"} of ${pipelines.length} pipeline${pipelines.length === 1 ? "" : "s"}`;
    return el(
      "div",
      { class: "worker-tasks", "data-testid": "worker-tasks", "data-worker": worker },
      el("h3", {}, heading),
      ...(status ? [status] : []),
      list.length === 0 ? el("p", { class: "muted" }, "No task instances.") : el("ul", {}, ...items),
    );
  }

  return poll(async () => {
    let c: Cluster;
    let details: PipelineDetail[];
    try {
      const [cluster, p] = await Promise.all([api.cluster(), api.pipelines()]);
      c = cluster;
      // A pipeline dropped between the two calls is a 404: skip it.
      const all = await Promise.all(p.pipelines.map((x) => api.pipeline(x.name).catch(() => null)));
      details = all.filter((d): d is PipelineDetail => d !== null);
    } catch (e) {
      message.textContent = `Cannot read the cluster: ${errorText(e)} (showing the last answer).`;
      return;
    }
    message.textContent = "";
    const now = Date.now();
    const single = singleProcess(c);

    // Workers listed before and not now are lost; listed again, they are back.
    const listed = new Map(c.workers.map((w) => [w.id, w]));
    for (const [id, w] of seen) if (!listed.has(id) && !lost.has(id)) lost.set(id, { last: w, since: now });
    // And the ones the master remembers, lost before this page opened.
    for (const l of c.lost_workers ?? []) {
      if (listed.has(l.id) || lost.has(l.id)) continue;
      const last: ClusterWorker = { id: l.id, health: "lost", slots: l.slots, heartbeat_age_ms: null, data_address: l.data_address, used_slots: 0, labels: l.labels };
      lost.set(l.id, { last, since: l.lost_at_ms });
    }
    for (const id of listed.keys()) lost.delete(id);
    for (const id of samples.keys()) if (!listed.has(id)) samples.delete(id);
    seen = listed;

    // Task instances by the worker REST names ("local" in the playground is its one worker).
    const local = single && c.workers.length === 1 ? c.workers[0].id : null;
    const byWorker = new Map<string, Task[]>();
    const elsewhere = new Map<string, Task[]>();
    for (const d of details) {
      for (const t of d.tasks) {
        const id = t.worker === LOCAL_WORKER && local !== null ? local : t.worker;
        const op = d.dag.operators.find((o) => o.id === t.operator);
        const task = { pipeline: d.pipeline.name, operator: t.operator, instance: t.instance, kind: t.kind, detail: op?.detail ?? "" };
        const target = id !== null && (listed.has(id) || lost.has(id)) ? byWorker : elsewhere;
        const key = id ?? "";
        target.set(key, [...(target.get(key) ?? []), task]);
      }
    }

    const healthy = c.workers.filter((w) => w.health === "healthy" || w.health === "ok").length;
    summary.textContent = single
      ? `Sluice ${c.version}, one process (playground), up ${duration(c.uptime_ms)}.`
      : `Sluice ${c.version}, up ${duration(c.uptime_ms)}: ${c.masters.length} master${c.masters.length === 1 ? "" : "s"}, ${c.workers.length} worker${c.workers.length === 1 ? "" : "s"} listed (${healthy} healthy)${lost.size > 0 ? `, ${lost.size} lost` : ""}; ${details.length} pipeline${details.length === 1 ? "" : "s"}.`;
    masters.replaceChildren(mastersTable(c));
    note.hidden = !single;
    note.textContent = single
      ? "Single process (sluice playground): the master and one in-process worker run every task here; there are no worker processes, labels or data plane. Run sluice master and sluice worker for a cluster."
      : "";

    legend.textContent = single
      ? "Health: ok (its metrics sampler ticked in the last 5 s), stale (it did not), starting. Slots: the cores its tasks share (tasks are async, so more tasks than slots is normal)."
      : "Health: healthy (heartbeats arrive), late (none for two intervals), draining (stopping; its tasks move), lost (no longer listed by the master: declared dead or gone). Slots used: by this worker's tasks, of its --slots. CPU share and data-plane rates are over the last five seconds.";
    const head = single
      ? ["worker", "health", "slots", "task instances", "heartbeat"]
      : ["worker", "data address", "health", "slots used", "task instances", "labels", "heartbeat", "RSS", "CPU time · share", "data sent", "data received", "credit wait"];
    const rows = [
      ...c.workers.map((w) => workerRow(w, byWorker.get(w.id)?.length ?? 0, now, single)),
      ...[...lost.values()].sort((a, b) => a.last.id.localeCompare(b.last.id)).map((l) => workerRow(l.last, 0, now, single, l.since)),
    ];
    workers.replaceChildren(
      rows.length === 0 ? el("p", { class: "muted" }, "No worker is registered: start one with sluice worker --masters <this master's control address>.") : table("workers", head, rows),
    );

    const sections = [
      ...c.workers.map((w) => taskList(w.id, w.id, byWorker.get(w.id) ?? [], null)),
      ...[...lost.values()].map((l) =>
        taskList(
          l.last.id,
          `${l.last.id} (lost)`,
          byWorker.get(l.last.id) ?? [],
          el("p", { class: "error" }, `Not listed by the master since ${timestamp(l.since)}: its pipelines restart on the other workers.`),
        ),
      ),
      ...[...elsewhere.entries()].map(([id, list]) =>
        taskList(id, id === "" ? "Not placed on a worker" : `${id} (not a listed worker)`, list, null),
      ),
    ];
    tasks.replaceChildren(...sections);
  });
}
