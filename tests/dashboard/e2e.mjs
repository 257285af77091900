// Drives the Sluice dashboard in a real headless Chromium (Debian's
// `chromium`, through playwright-core). Run by tests/dashboard.rs against a
// live server that already runs pipeline <name> (and <altered>):
//
//   node tests/dashboard/e2e.mjs <http-url> <pipeline-name> <screenshot-dir> [<altered> <alter-statement>]
//
// Checks, with expectations from the REST API (not from the page): the
// pipeline is listed; its page draws one node per DAG operator; the rates
// shown become > 0 and the counters move; clicking a node lists one row per
// instance and draws charts; the SQL page draws a plan and previews rows.
// The playground trusts its clients: no login form, no sign-out.
// With <altered>, a windowed count filtered above its window, and an
// <alter-statement> changing only that filter: its open page shows version
// 1, then, after the ALTER is posted to /api/v1/sql, version 2 with its
// diff (each operator's change named and coloured) and the DAG outlined.
// Prints "e2e: N passed, 0 failed" and exits 0, or the failure and exits 1.

import { checks, getJsonFrom, launchChromium } from "./browser.mjs";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const [base, name, shots, altered, alterStatement] = process.argv.slice(2);
if (!base || !name || !shots || (altered && !alterStatement)) {
  console.error("usage: e2e.mjs <http-url> <pipeline-name> <screenshot-dir> [<altered> <alter-statement>]");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
const WAIT_MS = 30_000;
const { check, passed } = checks();
const getJson = (path) => getJsonFrom(base, path);

async function postSql(sql) {
  const response = await fetch(new URL("/api/v1/sql", base), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ sql }),
  });
  if (!response.ok) throw new Error(`POST /api/v1/sql ${sql}: ${response.status} ${await response.text()}`);
  return response.json();
}

/** A computed style property of the first element `locator` matches. */
async function styleOf(locator, property) {
  return locator.first().evaluate((e, p) => getComputedStyle(e).getPropertyValue(p), property);
}

// The altered pipeline: source → pre-projection → window_aggregate →
// project (the filter above the window) → sink. The ALTER changes only the
// filter, so the source, the pre-projection and the window (whose whole
// upstream is unchanged) are kept, and the filter and the sink below it are
// replaced, the sink's state (same connector and options) moving over.
const ALTERED_DIFF = [
  { kind: "source", change: "kept", state: "kept" },
  { kind: "project", change: "kept", state: "none" },
  { kind: "window_aggregate", change: "kept", state: "kept" },
  { kind: "project", change: "replaced", state: "none" },
  { kind: "sink", change: "replaced", state: "moved" },
];

async function checkAlteredPipeline(page) {
  await page.goto(new URL(`/pipelines/${encodeURIComponent(altered)}`, base).href);
  const v1 = page.locator('[data-testid=version][data-version="1"]');
  await v1.waitFor();
  check(
    (await page.locator("[data-testid=version]").count()) === 1 && (await page.locator("[data-testid=diff-row]").count()) === 0,
    `${altered} shows version 1 only, without a diff`,
  );

  // The ALTER, while the page is open: version 2 appears without a reload.
  const filterBefore = (await getJson(`/api/v1/pipelines/${encodeURIComponent(altered)}`)).dag.operators[3];
  await postSql(alterStatement);
  const filterAfter = (await getJson(`/api/v1/pipelines/${encodeURIComponent(altered)}`)).dag.operators[3];
  const v2 = page.locator('[data-testid=version][data-version="2"]');
  await v2.waitFor();
  check(true, "the open page shows version 2 after ALTER PIPELINE");
  check(
    (await v2.locator("[data-testid=changed-by]").textContent()).startsWith(`ALTER PIPELINE ${altered} AS`),
    "version 2 shows the ALTER statement that made it",
  );
  check(
    (await v1.locator("[data-testid=sql]").textContent()).includes("CREATE SINK") && (await v1.locator("[data-testid=diff]").count()) === 0,
    "version 1 is still listed with its CREATE and no diff",
  );
  const versionTimes = await page.locator("[data-testid=version] h3").allTextContents();
  check(versionTimes.length === 2 && versionTimes.every((t) => /\d{4}-\d\d-\d\d \d\d:\d\d/.test(t)), "both versions show when they started");

  // One diff row per operator, in the DAG's order, each named and coloured.
  const rows = v2.locator("[data-testid=diff-row]");
  const shown = await rows.evaluateAll((trs) =>
    trs.map((tr) => ({
      kind: tr.dataset.kind,
      change: tr.querySelector(".change").textContent,
      state: tr.querySelector("[data-testid=diff-state]").textContent,
      classes: tr.className,
    })),
  );
  check(
    JSON.stringify(shown.map(({ kind, change, state }) => ({ kind, change, state }))) === JSON.stringify(ALTERED_DIFF),
    `version 2's diff reads ${ALTERED_DIFF.map((l) => `${l.kind} ${l.change}`).join(", ")} (got ${JSON.stringify(shown)})`,
  );
  check(shown.every((r) => r.classes.split(" ").includes(`diff-${r.change}`)), "each diff row carries its change's colour class");
  const windowRow = rows.nth(2);
  const filterRow = rows.nth(3);
  check(
    (await windowRow.getAttribute("class")).includes("diff-kept") && (await windowRow.locator(".change").textContent()) === "kept",
    "the window_aggregate row says kept, in diff-kept",
  );
  check(
    (await filterRow.getAttribute("class")).includes("diff-replaced") && (await filterRow.locator(".change").textContent()) === "replaced",
    "the filter's project row says replaced, in diff-replaced",
  );
  check((await rows.nth(4).locator("[data-testid=diff-state]").textContent()) === "moved", "the sink's state moves to its replacement");
  const keptColour = await styleOf(windowRow.locator(".change"), "background-color");
  const replacedColour = await styleOf(filterRow.locator(".change"), "background-color");
  const keptEdge = await styleOf(windowRow.locator("td"), "border-left-color");
  const replacedEdge = await styleOf(filterRow.locator("td"), "border-left-color");
  check(
    keptColour !== replacedColour && keptEdge !== replacedEdge && keptColour !== "rgba(0, 0, 0, 0)",
    `kept and replaced are drawn in distinct colours (${keptColour} / ${replacedColour}, ${keptEdge} / ${replacedEdge})`,
  );

  // The DAG outlines each operator with what the ALTER did to it.
  const windowId = await windowRow.getAttribute("data-operator");
  const filterId = await filterRow.getAttribute("data-operator");
  const windowNode = page.locator(`[data-testid=dag-node][data-operator="${windowId}"]`);
  const filterNode = page.locator(`[data-testid=dag-node][data-operator="${filterId}"]`);
  await page.waitForFunction((id) => document.querySelector(`[data-testid=dag-node][data-operator="${id}"]`)?.dataset.change === "replaced", filterId);
  check(
    (await windowNode.getAttribute("class")).includes("diff-kept") && (await windowNode.locator("[data-testid=node-change]").textContent()) === "kept",
    "the DAG's window node is outlined and labelled kept",
  );
  check(
    (await filterNode.getAttribute("class")).includes("diff-replaced") && (await filterNode.locator("[data-testid=node-change]").textContent()) === "replaced",
    "the DAG's filter node is outlined and labelled replaced",
  );
  const filterTip = await filterNode.locator("title").textContent();
  check(
    filterAfter.detail !== filterBefore.detail && filterTip.includes(filterAfter.detail),
    `the DAG draws the new version's filter (${filterAfter.detail}), not the old one's`,
  );
  const keptStroke = await styleOf(windowNode.locator("rect"), "stroke");
  const replacedStroke = await styleOf(filterNode.locator("rect"), "stroke");
  check(keptStroke !== replacedStroke, `the DAG's kept and replaced outlines differ (${keptStroke} / ${replacedStroke})`);
  await page.screenshot({ path: join(shots, "altered.png"), fullPage: true });
}

const browser = await launchChromium({ width: 1400, height: 1000 });
const context = browser.context;
const pageErrors = [];
let status = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(WAIT_MS);
  page.on("pageerror", (e) => pageErrors.push(String(e)));

  // Overview: the pipeline is listed, with the cluster's health.
  await page.goto(base);
  const row = page.locator(`[data-testid=pipeline-row][data-name="${name}"]`);
  await row.waitFor();
  check((await row.count()) === 1, `overview lists pipeline ${name}`);
  check(
    (await page.locator("[data-testid=login]").count()) === 0 && (await page.locator("[data-testid=sign-out]").count()) === 0,
    "with trust auth (the playground) there is no login form and no sign-out",
  );
  await page.locator("[data-testid=cluster] .health.ok").first().waitFor();
  check(true, "overview shows a healthy cluster");
  await page.waitForFunction(
    (n) => {
      const r = document.querySelector(`[data-testid=pipeline-row][data-name="${n}"] .sparkline polyline`);
      return r && r.getAttribute("points").split(" ").length >= 3;
    },
    name,
  );
  check(true, "overview draws a rate sparkline");
  await page.screenshot({ path: join(shots, "overview.png"), fullPage: true });

  // Pipeline page: one node per operator of the API's DAG.
  const detail = await getJson(`/api/v1/pipelines/${encodeURIComponent(name)}`);
  const operators = detail.dag.operators.length;
  await row.locator("a").click();
  await page.waitForURL(`**/pipelines/${encodeURIComponent(name)}`);
  const nodes = page.locator("[data-testid=dag-node]");
  await page.waitForFunction((n) => document.querySelectorAll("[data-testid=dag-node]").length === n, operators);
  check((await nodes.count()) === operators, `DAG shows ${operators} nodes, as many as the API's operators`);
  const edges = await page.locator(".dag-edge").count();
  check(edges === detail.dag.edges.length, `DAG shows ${edges} edges, as many as the API's edges`);

  // Rates move: every node's shown rate becomes > 0, and the rows-in count grows.
  await page.waitForFunction(() => {
    const all = [...document.querySelectorAll("[data-testid=dag-node]")];
    return all.length > 0 && all.every((n) => Number(n.dataset.rate) > 0);
  });
  check(true, "every node shows a rate > 0 rows/s");
  const rateText = async () => page.locator("[data-testid=dag-node] [data-testid=node-rate]").first().textContent();
  const before = await page.locator(".status-line").textContent();
  await page.waitForFunction((b) => document.querySelector(".status-line").textContent !== b, before);
  check(true, "the pipeline's counters move without a reload");
  check(/\d/.test(await rateText()), "the source node shows its rate as a number");

  // Click the window aggregate (or the first node): instances and charts.
  const target = detail.dag.operators.find((o) => o.kind === "window_aggregate") ?? detail.dag.operators[0];
  await page.locator(`[data-testid=dag-node][data-operator="${target.id}"]`).click();
  await page.waitForFunction(
    (n) => document.querySelectorAll("[data-testid=instance-row]").length === n,
    target.parallelism,
  );
  check(true, `operator ${target.id} lists ${target.parallelism} instances`);
  await page.locator("[data-testid=throughput-chart] canvas").waitFor();
  await page.locator("[data-testid=latency-chart] canvas").waitFor();
  check(true, "throughput and latency charts are drawn");
  check((await page.locator("[data-testid=sql]").first().textContent()).includes("CREATE SINK"), "version history shows the SQL");
  await page.waitForTimeout(2500); // let the charts gather a few more points for the screenshot
  await page.screenshot({ path: join(shots, "pipeline.png"), fullPage: true });

  // SQL page: the plan is drawn before running, then rows arrive live.
  await page.locator("header a", { hasText: "SQL" }).click();
  await page.locator("[data-testid=sql-input]").fill("SELECT auction, price FROM bids WHERE price > 0 LIMIT 5");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=plan] [data-testid=dag-node]").length === 3);
  check(true, "SQL page draws the plan (source, project, sink) before running");
  await page.locator("[data-testid=sql-run]").click();
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=result-row]").length === 5);
  check(true, "SQL page previews the 5 rows of the query");
  await page.screenshot({ path: join(shots, "sql.png"), fullPage: true });

  if (altered) await checkAlteredPipeline(page);

  check(pageErrors.length === 0, `no script errors on the pages (${pageErrors.join("; ")})`);
  console.log(`screenshots: ${shots}`);
} catch (e) {
  status = 1;
  console.error(`FAILED: ${e.message}`);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join("; ")}`);
  try {
    await context.pages()[0]?.screenshot({ path: join(shots, "failure.png"), fullPage: true });
    console.error(`failure screenshot: ${join(shots, "failure.png")}`);
  } catch {}
} finally {
  await browser.close();
}
console.log(`e2e: ${passed()} passed, ${status} failed`);
process.exit(status);
