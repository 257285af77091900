// Drives the Sluice dashboard in a real headless Chromium (Debian's
// `chromium`, through playwright-core). Run by tests/dashboard.rs against a
// live server that already runs pipeline <name>:
//
//   node tests/dashboard/e2e.mjs <http-url> <pipeline-name> <screenshot-dir>
//
// Checks, with expectations from the REST API (not from the page): the
// pipeline is listed; its page draws one node per DAG operator; the rates
// shown become > 0 and the counters move; clicking a node lists one row per
// instance and draws charts; the SQL page draws a plan and previews rows.
// Prints "e2e: N passed, 0 failed" and exits 0, or the failure and exits 1.

import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, name, shots] = process.argv.slice(2);
if (!base || !name || !shots) {
  console.error("usage: e2e.mjs <http-url> <pipeline-name> <screenshot-dir>");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
const WAIT_MS = 30_000;
let passed = 0;

function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
  passed += 1;
  console.log(`ok - ${what}`);
}

async function getJson(path) {
  const response = await fetch(new URL(path, base));
  if (!response.ok) throw new Error(`GET ${path}: ${response.status}`);
  return response.json();
}

const userDataDir = mkdtempSync(join(tmpdir(), "sluice-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
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
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(`e2e: ${passed} passed, ${status} failed`);
process.exit(status);
