// The dashboard's Workers page in a real headless Chromium (Debian's
// `chromium`, through playwright-core). Run by tests/dashboard_cluster.rs:
//
//   node tests/dashboard/workers.mjs <http-url> <screenshot-dir> cluster
//   node tests/dashboard/workers.mjs <http-url> <screenshot-dir> playground
//
// Every expectation comes from the REST API, fetched here independently of
// the page (/api/v1/cluster and /api/v1/pipelines/<name>), or from what the
// test set up; none from the page itself.
//
// cluster: a master and two workers run pipelines spread over both. The
// page lists the master and both workers (address, health as a word in a
// colour, used/total slots, labels, RSS, CPU time, data-plane bytes), each
// pipeline's task instances under the worker REST says runs them, each
// linking to its pipeline, whose instance rows name the same workers. Then
// the script prints "workers: kill" and waits for "killed <id>" on stdin
// (the test kill -9s that worker); the open page, not reloaded, must show
// the worker lost, in another colour, and every task under the survivor.
//
// playground: one process; the page says so and lists every task under its
// one worker.
//
// Prints "workers: N passed, 0 failed" and exits 0, or the failure and exits 1.

import { checks, getJsonFrom, launchChromium } from "./browser.mjs";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [base, shots, mode] = process.argv.slice(2);
if (!base || !shots || !["cluster", "playground"].includes(mode)) {
  console.error("usage: workers.mjs <http-url> <screenshot-dir> cluster|playground");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
const WAIT_MS = 30_000;
const { check, passed } = checks();
const getJson = (path) => getJsonFrom(base, path);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Retries `probe` (returning [ok, detail]) until ok or `ms` pass, then
 * checks the last answer: the page polls once a second, so it may lag the
 * REST answer by a poll.
 */
async function eventually(what, probe, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await probe();
    if (last[0] || Date.now() > deadline) break;
    await sleep(250);
  }
  check(last[0], `${what}${last[0] ? "" : ` (last: ${last[1]})`}`);
}

/** Every pipeline's task instances by worker id, from REST: worker → sorted keys. */
async function restTasks() {
  const { pipelines } = await getJson("/api/v1/pipelines");
  const byWorker = new Map();
  const kinds = new Map();
  const states = new Map();
  for (const p of pipelines) {
    const d = await getJson(`/api/v1/pipelines/${encodeURIComponent(p.name)}`);
    states.set(p.name, d.pipeline.state);
    for (const t of d.tasks) {
      const key = `${p.name}/${t.operator}/${t.instance}`;
      kinds.set(key, t.kind);
      byWorker.set(t.worker, [...(byWorker.get(t.worker) ?? []), key].sort());
    }
  }
  return { byWorker, kinds, states, names: pipelines.map((p) => p.name) };
}

/** The masters table as the user sees it. */
async function pageMasters(page) {
  return page.locator("[data-testid=master-row]").evaluateAll((rows) =>
    rows.map((r) => ({
      id: r.querySelector("[data-testid=id]").textContent,
      address: r.querySelector("[data-testid=address]").textContent,
      role: r.querySelector("[data-testid=role]").textContent,
      health: r.querySelector("[data-testid=health]").textContent,
    })),
  );
}

/** The workers table as the user sees it (texts, and the health badge's colour). */
async function pageWorkers(page) {
  return page.locator("[data-testid=worker-row]").evaluateAll((rows) =>
    rows.map((r) => {
      const text = (id) => r.querySelector(`[data-testid=${id}]`)?.textContent ?? null;
      const badge = r.querySelector("[data-testid=health]");
      return {
        id: text("id"),
        address: text("address"),
        health: badge.textContent,
        colour: getComputedStyle(badge).backgroundColor,
        slots: text("slots"),
        instances: text("instances"),
        labels: text("labels"),
        heartbeat: text("heartbeat"),
        rss: text("rss"),
        cpu: text("cpu"),
        sent: text("data-sent"),
        received: text("data-received"),
      };
    }),
  );
}

/** The task instances listed under each worker: worker → sorted keys, and each chip's text and link. */
async function pageTasks(page) {
  const sections = await page.locator("[data-testid=worker-tasks]").evaluateAll((all) =>
    all.map((s) => ({
      worker: s.dataset.worker,
      tasks: [...s.querySelectorAll("[data-testid=task]")].map((t) => ({
        key: `${t.dataset.pipeline}/${t.dataset.operator}/${t.dataset.instance}`,
        text: t.textContent,
        href: t.getAttribute("href"),
      })),
    })),
  );
  const byWorker = new Map(sections.map((s) => [s.worker, s.tasks.map((t) => t.key).sort()]));
  return { byWorker, chips: sections.flatMap((s) => s.tasks) };
}

/** "88.1 MiB" → bytes (the page's binary units). */
function parseBytes(text) {
  const m = /^([\d.]+) (B|KiB|MiB|GiB)$/.exec(text ?? "");
  if (!m) return NaN;
  return Number(m[1]) * 1024 ** ["B", "KiB", "MiB", "GiB"].indexOf(m[2]);
}

/** "rgb(r, g, b)" → [r, g, b]. */
function rgb(colour) {
  return (colour.match(/\d+/g) ?? []).slice(0, 3).map(Number);
}

const labelText = (labels) =>
  Object.entries(labels ?? {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(", ") || "–";

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** Pages' tasks by worker equal REST's, for the workers in `ids`. */
function tasksMatch(pageByWorker, restByWorker, ids) {
  const diffs = ids.filter((id) => !same(pageByWorker.get(id) ?? [], restByWorker.get(id) ?? []));
  return [diffs.length === 0, diffs.map((id) => `${id}: page ${JSON.stringify(pageByWorker.get(id))} REST ${JSON.stringify(restByWorker.get(id))}`).join("; ")];
}

/** Which lines the test writes on stdin (the cluster run's "killed <id>"). */
const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function openWorkers(page) {
  await page.goto(base);
  await page.locator("header a", { hasText: "Workers" }).click();
  await page.waitForURL("**/workers");
  await page.locator("[data-testid=worker-row]").first().waitFor();
  check(true, "the nav's Workers link opens /workers with a workers table");
}

async function clusterRun(page) {
  await openWorkers(page);
  // Set once: still there after the kill means the page was never reloaded.
  await page.evaluate(() => (window.__workersPageLoad = "first"));

  const cluster = await getJson("/api/v1/cluster");
  check(cluster.workers.length === 2, `REST lists the 2 workers the test started (${cluster.workers.map((w) => w.id)})`);
  check(
    cluster.workers.every((w) => w.used_slots > 0),
    `REST says both workers use slots (${cluster.workers.map((w) => `${w.id} ${w.used_slots}/${w.slots}`)})`,
  );

  // Masters: as REST lists them.
  await eventually("the masters table shows REST's masters (id, address, role, health)", async () => {
    const shown = await pageMasters(page);
    const want = cluster.masters.map((m) => ({ id: m.id, address: m.address, role: m.role, health: m.health }));
    return [same(shown, want), `page ${JSON.stringify(shown)} REST ${JSON.stringify(want)}`];
  });

  // Workers: each REST worker's fixed facts, exactly.
  await eventually("the workers table lists both workers with REST's address, health, used/total slots and labels", async () => {
    const rest = (await getJson("/api/v1/cluster")).workers;
    const shown = (await pageWorkers(page)).map((w) => ({ id: w.id, address: w.address, health: w.health, slots: w.slots, labels: w.labels }));
    const want = rest.map((w) => ({ id: w.id, address: w.data_address, health: w.health, slots: `${w.used_slots} / ${w.slots}`, labels: labelText(w.labels) }));
    return [same(shown, want), `page ${JSON.stringify(shown)} REST ${JSON.stringify(want)}`];
  });
  const shownWorkers = await pageWorkers(page);
  check(
    shownWorkers.every((w) => Number(w.slots.split(" / ")[0]) > 0),
    `the page shows used slots > 0 on both workers (${shownWorkers.map((w) => `${w.id} ${w.slots}`)})`,
  );
  check(
    shownWorkers.every((w) => {
      const [r, g, b] = rgb(w.colour);
      return w.health === "healthy" && g > r && g > b;
    }),
    `healthy is drawn green (${shownWorkers.map((w) => `${w.health} ${w.colour}`)})`,
  );
  check(shownWorkers.every((w) => / ago$/.test(w.heartbeat)), "each worker shows its heartbeat age");

  // Process metrics: RSS near REST's; CPU time and data-plane totals between
  // REST's answers before and after reading the page (they only grow).
  await eventually("RSS, CPU time and data-plane bytes agree with REST", async () => {
    const before = new Map((await getJson("/api/v1/cluster")).workers.map((w) => [w.id, w]));
    const shown = await pageWorkers(page);
    const after = new Map((await getJson("/api/v1/cluster")).workers.map((w) => [w.id, w]));
    const bad = [];
    for (const w of shown) {
      const a = before.get(w.id);
      const b = after.get(w.id);
      if (!a || !b) {
        bad.push(`${w.id} not in REST`);
        continue;
      }
      const within = (v, lo, hi) => v >= lo * 0.95 && v <= hi * 1.05 + 1;
      const rss = parseBytes(w.rss);
      if (!(rss > 0.5 * Math.min(a.rss_bytes, b.rss_bytes) && rss < 1.5 * Math.max(a.rss_bytes, b.rss_bytes))) bad.push(`${w.id} RSS ${w.rss} vs ${a.rss_bytes}`);
      const cpu = Number(/^([\d.]+) s$/.exec(w.cpu)?.[1]) * 1e9;
      if (!within(cpu, a.cpu_ns - 5e7, b.cpu_ns + 5e7)) bad.push(`${w.id} CPU ${w.cpu} vs ${a.cpu_ns}..${b.cpu_ns} ns`);
      if (!within(parseBytes(w.sent), a.data_bytes_sent, b.data_bytes_sent)) bad.push(`${w.id} sent ${w.sent} vs ${a.data_bytes_sent}..${b.data_bytes_sent}`);
      if (!within(parseBytes(w.received), a.data_bytes_received, b.data_bytes_received)) bad.push(`${w.id} received ${w.received} vs ${a.data_bytes_received}..${b.data_bytes_received}`);
    }
    return [bad.length === 0, bad.join("; ")];
  });
  const restNow = (await getJson("/api/v1/cluster")).workers;
  const moved = restNow.reduce((n, w) => n + w.data_bytes_sent + w.data_bytes_received, 0);
  const movedShown = (await pageWorkers(page)).reduce((n, w) => n + parseBytes(w.sent) + parseBytes(w.received), 0);
  check(moved > 0 && movedShown > 0, `rows cross the data plane and the page shows it (${movedShown} bytes shown)`);

  // Task instances: under the worker REST names, for every pipeline.
  const ids = cluster.workers.map((w) => w.id);
  let rest = await restTasks();
  check(
    ids.every((id) => (rest.byWorker.get(id) ?? []).length > 0),
    `REST places task instances on both workers (${ids.map((id) => `${id}: ${(rest.byWorker.get(id) ?? []).length}`)})`,
  );
  await eventually("each pipeline's task instances are listed under the worker REST says runs them", async () => {
    rest = await restTasks();
    return tasksMatch((await pageTasks(page)).byWorker, rest.byWorker, ids);
  });
  const { chips } = await pageTasks(page);
  check(
    chips.length > 0 &&
      chips.every((c) => {
        const [p, op, inst] = c.key.split("/");
        return c.text === `${op} ${rest.kinds.get(c.key)} #${inst}` && c.href === `/pipelines/${encodeURIComponent(p)}`;
      }),
    `each task reads "<operator> <kind> #<instance>" with REST's kind and links to its pipeline (${chips.length} tasks)`,
  );
  const counts = await pageWorkers(page);
  check(
    counts.every((w) => Number(w.instances) === (rest.byWorker.get(w.id) ?? []).length),
    `the task-instance column counts REST's instances per worker (${counts.map((w) => `${w.id} ${w.instances}`)})`,
  );
  for (const name of rest.names) {
    check(
      (await page.locator(`[data-testid=worker-pipeline][data-pipeline="${name}"]`).count()) >= 1,
      `pipeline ${name} is listed under a worker`,
    );
  }
  await page.screenshot({ path: join(shots, "workers.png"), fullPage: true });

  // A task's link opens its pipeline; the instance rows name the same workers.
  const target = (rest.byWorker.get(ids[1]) ?? [])[0];
  const [pipeline, operator] = target.split("/");
  await page.locator(`[data-testid=worker-tasks][data-worker="${ids[1]}"] [data-testid=task]`).first().click();
  await page.waitForURL(`**/pipelines/${encodeURIComponent(pipeline)}`);
  await page.locator(`[data-testid=dag-node][data-operator="${operator}"]`).click();
  const detail = await getJson(`/api/v1/pipelines/${encodeURIComponent(pipeline)}`);
  const wantRows = detail.tasks
    .filter((t) => String(t.operator) === operator)
    .sort((a, b) => a.instance - b.instance)
    .map((t) => `${t.instance} ${t.worker}`);
  await eventually(`pipeline ${pipeline}, operator ${operator}: each instance row names REST's worker (${wantRows})`, async () => {
    const shown = await page
      .locator("[data-testid=instance-row]")
      .evaluateAll((rows) => rows.map((r) => `${r.cells[0].textContent} ${r.querySelector("[data-testid=instance-worker]").textContent}`));
    return [same(shown, wantRows), `page ${JSON.stringify(shown)}`];
  });
  await page.screenshot({ path: join(shots, "pipeline-workers.png"), fullPage: true });
  await page.locator("header a", { hasText: "Workers" }).click();
  await page.waitForURL("**/workers");
  await page.locator("[data-testid=worker-row]").first().waitFor();

  // kill -9 one worker (the test does it and names it); the open page follows.
  console.log("workers: kill");
  const reply = await stdinLines.next();
  const killed = /^killed (\S+)$/.exec(reply.value ?? "")?.[1];
  check(killed !== undefined && ids.includes(killed), `the test killed worker ${killed}, one of ${ids}`);
  const survivor = ids.find((id) => id !== killed);
  await eventually(
    `the open page shows ${killed} lost`,
    async () => {
      const row = (await pageWorkers(page)).find((w) => w.id === killed);
      return [row?.health === "lost" && /^lost at /.test(row.heartbeat), JSON.stringify(row)];
    },
    20_000,
  );
  const after = await pageWorkers(page);
  const lostRow = after.find((w) => w.id === killed);
  const liveRow = after.find((w) => w.id === survivor);
  const [r, g] = rgb(lostRow.colour);
  check(
    r > g && lostRow.colour !== liveRow.colour,
    `lost is drawn red, unlike ${survivor}'s ${liveRow.health} (${lostRow.colour} / ${liveRow.colour})`,
  );
  check((await page.evaluate(() => window.__workersPageLoad)) === "first", "the page was not reloaded");
  await eventually(
    `REST moves every task to ${survivor} and the pipelines run again`,
    async () => {
      const c = await getJson("/api/v1/cluster");
      rest = await restTasks();
      const onlySurvivor = [...rest.byWorker.keys()].every((w) => w === survivor);
      const running = [...rest.states.values()].every((s) => s === "running");
      return [c.workers.length === 1 && c.workers[0].id === survivor && onlySurvivor && running, `${JSON.stringify(c.workers.map((w) => w.id))} ${JSON.stringify([...rest.byWorker.keys()])} ${JSON.stringify([...rest.states])}`];
    },
    45_000,
  );
  await eventually(`the open page lists every task under ${survivor} and none under ${killed}`, async () => {
    rest = await restTasks();
    const shown = (await pageTasks(page)).byWorker;
    const [ok, detail] = tasksMatch(shown, rest.byWorker, [survivor, killed]);
    return [ok && shown.has(killed) && (shown.get(killed) ?? []).length === 0, detail || `sections ${JSON.stringify([...shown.keys()])}`];
  });
  await eventually(`${survivor}'s used slots are REST's`, async () => {
    const w = (await getJson("/api/v1/cluster")).workers.find((x) => x.id === survivor);
    const shown = (await pageWorkers(page)).find((x) => x.id === survivor);
    return [shown?.slots === `${w.used_slots} / ${w.slots}`, `page ${shown?.slots} REST ${w.used_slots} / ${w.slots}`];
  });
  await page.screenshot({ path: join(shots, "workers-lost.png"), fullPage: true });
  // A page opened after the kill shows it too: REST remembers lost workers.
  const lostRest = (await getJson("/api/v1/cluster")).lost_workers ?? [];
  check(lostRest.some((l) => l.id === killed && l.why !== ""), `REST lists ${killed} among lost_workers (${JSON.stringify(lostRest)})`);
  await page.reload();
  await eventually(`a reloaded page shows ${killed} lost`, async () => {
    const row = (await pageWorkers(page)).find((w) => w.id === killed);
    return [row?.health === "lost" && /^lost at /.test(row.heartbeat), JSON.stringify(row)];
  });
}

async function playgroundRun(page) {
  await openWorkers(page);
  const cluster = await getJson("/api/v1/cluster");
  check(cluster.workers.length === 1 && cluster.masters.every((m) => m.address === undefined), "REST describes one process (one worker, no master address)");
  const note = page.locator("[data-testid=single-process]");
  check((await note.isVisible()) && (await note.textContent()).includes("Single process"), "the page says everything runs in a single process");
  await eventually("the masters table shows REST's master, in this process", async () => {
    const shown = await pageMasters(page);
    const want = cluster.masters.map((m) => ({ id: m.id, address: "in this process", role: m.role, health: m.health }));
    return [same(shown, want), `page ${JSON.stringify(shown)}`];
  });
  const worker = cluster.workers[0];
  await eventually(`the one worker ${worker.id} is listed with its health and ${worker.slots} slots`, async () => {
    const rest = (await getJson("/api/v1/cluster")).workers[0];
    const shown = (await pageWorkers(page)).map((w) => ({ id: w.id, health: w.health, slots: w.slots }));
    return [same(shown, [{ id: rest.id, health: rest.health, slots: String(rest.slots) }]), `page ${JSON.stringify(shown)}`];
  });
  // Instances say "local"; the page files them under the one worker.
  await eventually(`every pipeline's task instances are listed under ${worker.id}`, async () => {
    const rest = await restTasks();
    const all = [...rest.byWorker.values()].flat().sort();
    const shown = (await pageTasks(page)).byWorker;
    return [all.length > 0 && same(shown.get(worker.id), all) && shown.size === 1, `page ${JSON.stringify([...shown])} REST ${JSON.stringify(all)}`];
  });
  await page.screenshot({ path: join(shots, "workers-playground.png"), fullPage: true });
}

const browser = await launchChromium({ width: 1500, height: 1000 });
const context = browser.context;
const pageErrors = [];
let status = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(WAIT_MS);
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  if (mode === "cluster") await clusterRun(page);
  else await playgroundRun(page);
  check(pageErrors.length === 0, `no script errors on the pages (${pageErrors.join("; ")})`);
  console.log(`screenshots: ${shots}`);
} catch (e) {
  status = 1;
  console.error(`FAILED: ${e.message}`);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join("; ")}`);
  try {
    await context.pages()[0]?.screenshot({ path: join(shots, `failure-${mode}.png`), fullPage: true });
    console.error(`failure screenshot: ${join(shots, `failure-${mode}.png`)}`);
  } catch {}
} finally {
  await browser.close();
}
console.log(`workers: ${passed()} passed, ${status} failed`);
process.exit(status);
