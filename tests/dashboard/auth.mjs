// The dashboard's login in a real headless Chromium (Debian's `chromium`,
// through playwright-core), against a server started with `--auth
// scram-sha-256`. Run by tests/dashboard_auth.rs, which created pipeline
// <name> (owned by `sluice`) and a role without privileges:
//
//   SLUICE_E2E_PASSWORD=<sluice's> SLUICE_E2E_VIEWER=<user>:<password> \
//     node tests/dashboard/auth.mjs <http-url> <pipeline-name> <screenshot-dir>
//
// Checks: the dashboard asks for a login and shows no data before one; a
// wrong password is an error and still no data; the right one shows the
// pipeline with the numbers the REST API has; sign-out forgets it and stops
// polling; an API token signs in, and when the token is dropped the open
// dashboard asks again; a reload asks again; a role without privileges sees
// the pipelines but gets "Permission denied" (not the login form) for
// pausing one and for reading a stream; no credential, nor a statement
// typed into the SQL page, is ever in localStorage, sessionStorage, a
// cookie or a URL (the preview posts its statement); every API request is
// marked as a script's; and the browser never raised its own HTTP auth
// dialog (the CDP Fetch domain reports every challenge it would answer;
// an unmarked fetch with the browser's credentials shows that it does).
// Prints "auth: N passed, 0 failed" and exits 0, or the failure and exits 1.

import { checks, launchChromium } from "./browser.mjs";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const [base, name, shots] = process.argv.slice(2);
const password = process.env.SLUICE_E2E_PASSWORD;
const [viewer, viewerPassword] = (process.env.SLUICE_E2E_VIEWER ?? "").split(":");
if (!base || !name || !shots || !password || !viewer || !viewerPassword) {
  console.error("usage: SLUICE_E2E_PASSWORD=… SLUICE_E2E_VIEWER=user:password auth.mjs <http-url> <pipeline-name> <screenshot-dir>");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
const WAIT_MS = 30_000;
const { check, passed } = checks();
const basic = (user, pw) => `Basic ${Buffer.from(`${user}:${pw}`).toString("base64")}`;
const admin = basic("sluice", password);

/** `method path` with `sluice`'s password, as JSON (throws unless 2xx). */
async function rest(method, path, body) {
  const response = await fetch(new URL(path, base), {
    method,
    headers: { authorization: admin, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response.json();
}
const postSql = (sql) => rest("POST", "/api/v1/sql", { sql });

// A token for `sluice`, shown once by CREATE TOKEN.
const created = await postSql("CREATE TOKEN dashboard_e2e");
const token = created.results[0].rows[0][created.results[0].columns.findIndex((c) => c.name === "token")];
if (!token?.startsWith("sluice_")) throw new Error(`CREATE TOKEN gave ${JSON.stringify(created)}`);
// What must never be stored, nor sent in a URL.
const secrets = [password, viewerPassword, token, admin.slice(6), basic(viewer, viewerPassword).slice(6)];

const browser = await launchChromium({ width: 1400, height: 1000 });
const context = browser.context;
const pageErrors = [];
const dialogs = [];
/** Every HTTP auth challenge the browser would have answered with its own dialog. */
const challenges = [];
/** The page's requests to the API: URL and headers. */
const apiRequests = [];
let status = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(WAIT_MS);
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("dialog", (d) => {
    dialogs.push(`${d.type()}: ${d.message()}`);
    void d.dismiss();
  });
  page.on("request", (r) => {
    const url = new URL(r.url());
    // allHeaders: headers() may leave out security-related ones.
    if (url.pathname.startsWith("/api/") || url.pathname === "/metrics") {
      apiRequests.push({ url: r.url(), method: r.method(), body: r.postData() ?? "", headers: r.allHeaders().catch(() => ({})) });
    }
  });
  // The browser's auth challenges: with handleAuthRequests, Chromium asks
  // the CDP client instead of opening its login dialog. Cancelled here, as
  // a user would, and recorded.
  const cdp = await context.newCDPSession(page);
  cdp.on("Fetch.requestPaused", (e) => void cdp.send("Fetch.continueRequest", { requestId: e.requestId }).catch(() => {}));
  cdp.on("Fetch.authRequired", (e) => {
    challenges.push(`${e.authChallenge.scheme} challenge for ${e.request.url}`);
    void cdp
      .send("Fetch.continueWithAuth", { requestId: e.requestId, authChallengeResponse: { response: "CancelAuth" } })
      .catch(() => {});
  });
  await cdp.send("Fetch.enable", { handleAuthRequests: true, patterns: [{ urlPattern: "*" }] });

  const form = page.locator("[data-testid=login]");
  const rows = page.locator("[data-testid=pipeline-row]");
  const signedIn = page.locator("[data-testid=signed-in]");
  const loginError = page.locator("[data-testid=login-error]");
  const reason = page.locator("[data-testid=login-reason]");

  /** Secrets found in the page's storage, cookies or URL. */
  async function stored() {
    const where = await page.evaluate(() => {
      const dump = (s) => Array.from({ length: s.length }, (_, i) => `${s.key(i)}=${s.getItem(s.key(i))}`).join("\n");
      return [dump(localStorage), dump(sessionStorage), document.cookie, location.href].join("\n");
    });
    const cookies = JSON.stringify(await context.cookies());
    return secrets.filter((s) => where.includes(s) || cookies.includes(s));
  }
  async function signInWithPassword(user, pw) {
    await page.locator("[data-testid=login-mode-password]").check();
    await page.locator("[data-testid=login-user]").fill(user);
    await page.locator("[data-testid=login-password]").fill(pw);
    await page.locator("[data-testid=login-submit]").click();
  }

  // 1. Asked before anything is shown.
  await page.goto(base);
  await form.waitFor();
  check((await rows.count()) === 0 && (await signedIn.count()) === 0, "the dashboard shows the login form, no pipelines and no sign-out");
  check(/sign in/i.test(await reason.textContent()), "the form says why it is shown");
  check((await page.locator("header a[data-nav]").count()) === 0, "no navigation while signed out");

  // 2. A wrong password: an error, still no data, the field emptied.
  await signInWithPassword("sluice", `${password}-wrong`);
  await page.waitForFunction(() => /wrong user name or password/i.test(document.querySelector("[data-testid=login-error]")?.textContent ?? ""));
  check(true, "a wrong password says so");
  check((await form.count()) === 1 && (await rows.count()) === 0 && (await signedIn.count()) === 0, "after a wrong password the form stays and no data is shown");
  check((await page.locator("[data-testid=login-password]").inputValue()) === "", "the wrong password is cleared from its field");
  await page.screenshot({ path: join(shots, "auth-login.png"), fullPage: true });

  // 3. The right password: the pipeline, with the numbers the API has.
  const before = apiRequests.length;
  await signInWithPassword("sluice", password);
  const row = page.locator(`[data-testid=pipeline-row][data-name="${name}"]`);
  await row.waitFor();
  check((await form.count()) === 0, "the right password replaces the form with the overview");
  check((await signedIn.textContent()) === "signed in as sluice", "the header says who is signed in");
  await page.waitForFunction((n) => Number(document.querySelector(`[data-testid=pipeline-row][data-name="${n}"]`)?.dataset.rowsOut) > 0, name);
  const shownOut = Number(await row.getAttribute("data-rows-out"));
  const apiOut = (await rest("GET", `/api/v1/pipelines/${encodeURIComponent(name)}`)).pipeline.rows_out;
  check(shownOut > 0 && shownOut <= apiOut, `the overview shows ${name}'s rows out (${shownOut}, the API has ${apiOut} now)`);
  const detail = await rest("GET", `/api/v1/pipelines/${encodeURIComponent(name)}`);
  await row.locator("a").click();
  await page.waitForFunction((n) => document.querySelectorAll("[data-testid=dag-node]").length === n, detail.dag.operators.length);
  check(true, `the pipeline page draws its ${detail.dag.operators.length} operators`);
  const sent = await Promise.all(apiRequests.map((r) => r.headers));
  check(
    sent.length > 0 && sent.every((h) => h["x-requested-with"] === "XMLHttpRequest"),
    `every API request is marked as a script's (${sent.length} requests)`,
  );
  const afterLogin = sent.slice(before);
  check(
    afterLogin.length > 0 && afterLogin.every((h) => h.authorization === admin),
    `every API request from signing in on carries the credential (${afterLogin.length} requests)`,
  );
  check((await stored()).length === 0, "nothing of the password is in localStorage, sessionStorage, cookies or the URL");
  await page.screenshot({ path: join(shots, "auth-signed-in.png"), fullPage: true });

  // 4. Sign out: the credential is forgotten and the polling stops.
  await page.locator("[data-testid=sign-out]").click();
  await form.waitFor();
  check(/signed out/i.test(await reason.textContent()) && (await page.locator("[data-testid=dag-node]").count()) === 0, "sign-out shows the form again, without the pipeline");
  const afterSignOut = apiRequests.length;
  await page.waitForTimeout(2500);
  check(apiRequests.length === afterSignOut, "signed out, the dashboard polls nothing");

  // 5. A token signs in; dropping it makes the open dashboard ask again.
  await page.locator("[data-testid=login-mode-token]").check();
  await page.locator("[data-testid=login-token]").fill(token);
  await page.locator("[data-testid=login-submit]").click();
  await page.locator("[data-testid=dag-node]").first().waitFor();
  check((await signedIn.textContent()) === "signed in as a token", "an API token signs in (the pipeline page comes back)");
  check((await apiRequests.slice(-1)[0].headers).authorization === `Bearer ${token}`, "the token goes as a bearer credential");
  check((await stored()).length === 0, "nothing of the token is stored");
  await postSql("DROP TOKEN dashboard_e2e");
  await form.waitFor();
  check(/no longer accepts/i.test(await reason.textContent()), "a dropped token brings the form back, saying why");

  // 6. A reload asks again.
  await signInWithPassword("sluice", password);
  await page.locator("[data-testid=dag-node]").first().waitFor();
  await page.reload();
  await form.waitFor();
  check((await signedIn.count()) === 0 && (await page.locator("[data-testid=dag-node]").count()) === 0, "a reload asks again: the credential was in memory only");

  // 7. A role without privileges: signed in, refused per view.
  await signInWithPassword(viewer, viewerPassword);
  await page.locator("[data-testid=dag-node]").first().waitFor();
  check((await signedIn.textContent()) === `signed in as ${viewer}`, `${viewer} (no privileges) signs in and sees the pipeline's DAG`);
  await page.locator("button", { hasText: "Pause" }).click();
  const pageError = page.locator("[data-testid=page-error]");
  await page.waitForFunction(() => /permission denied/i.test(document.querySelector("[data-testid=page-error]")?.textContent ?? ""));
  check(true, `pausing ${name} (owned by sluice) shows "${await pageError.textContent()}"`);
  check((await form.count()) === 0 && (await signedIn.count()) === 1, "a 403 keeps the user signed in: no login form");
  const state = (await rest("GET", `/api/v1/pipelines/${encodeURIComponent(name)}`)).pipeline.state;
  check(state === "running", `${name} still runs (${state})`);
  await page.locator("header a", { hasText: "SQL" }).click();
  await page.locator("[data-testid=sql-input]").fill("SELECT * FROM bids LIMIT 1");
  await page.locator("[data-testid=sql-run]").click();
  await page.waitForFunction(() => /permission denied/i.test(document.querySelector("[data-testid=sql-status]")?.textContent ?? ""));
  const sqlStatus = await page.locator("[data-testid=sql-status]").textContent();
  check(sqlStatus.includes("42501"), `reading a stream without SELECT shows "${sqlStatus}"`);
  check((await form.count()) === 0 && (await signedIn.count()) === 1, "still signed in after the refused query");
  // A statement typed into the editor can hold a secret: it is run and
  // explained through request bodies, never a URL, and kept in memory
  // only (the editor has it back after moving between pages).
  const typed = "typed-secret-4711";
  secrets.push(typed);
  const firstPreview = apiRequests.length;
  await page.locator("[data-testid=sql-input]").fill(`CREATE USER sql_probe WITH PASSWORD '${typed}'`);
  await page.locator("[data-testid=sql-run]").click();
  await page.waitForFunction(() => /42501/.test(document.querySelector("[data-testid=sql-status]")?.textContent ?? ""));
  const previews = apiRequests.slice(firstPreview).filter((r) => new URL(r.url).pathname === "/api/v1/sql/stream");
  check(
    previews.length === 1 && previews[0].method === "POST" && previews[0].body.includes(typed),
    `the preview posts the statement in its body (${previews.map((r) => `${r.method} ${r.url}`).join(", ")})`,
  );
  await page.locator("header a", { hasText: "Overview" }).click();
  await rows.first().waitFor();
  await page.locator("header a", { hasText: "SQL" }).click();
  check((await page.locator("[data-testid=sql-input]").inputValue()).includes(typed), "the editor keeps its text between pages (in memory)");
  check((await stored()).length === 0, "nothing of the viewer's password or the typed statement is stored");
  await page.screenshot({ path: join(shots, "auth-denied.png"), fullPage: true });

  // 8. No native dialog, and no secret in any URL the page requested.
  check(dialogs.length === 0, `no browser dialog opened (${dialogs.join("; ")})`);
  check(challenges.length === 0, `the browser never raised its own login dialog (${challenges.join("; ")})`);
  const leaked = apiRequests.filter((r) => secrets.some((s) => r.url.includes(s) || r.url.includes(encodeURIComponent(s))));
  check(leaked.length === 0, `no request URL carries a credential (${leaked.map((r) => r.url).join(", ")})`);
  // Each of the dashboard's two defences alone (http_auth.rs, api.ts): a
  // fetch that lets the browser use its own credentials is not challenged
  // with Basic when marked as a script's (the server's side)...
  const seen = challenges.length;
  const fetchStatus = (headers) =>
    page.evaluate((h) => fetch("/api/v1/cluster", { headers: h, credentials: "same-origin" }).then((r) => r.status), headers);
  const marked = await fetchStatus({ "x-requested-with": "XMLHttpRequest" });
  check(marked === 401 && challenges.length === seen, `a marked fetch is refused (${marked}) without a browser challenge`);
  // ...and unmarked it is, which also shows that the hook sees challenges.
  const unmarked = await fetchStatus({});
  check(
    unmarked === 401 && challenges.slice(seen).some((c) => /^basic challenge/i.test(c)),
    `an unmarked fetch raises the browser's Basic challenge, so the hook sees one (${challenges.slice(seen).join("; ")})`,
  );
  // The dashboard's own fetches omit the browser's credentials: with the
  // same Basic challenge, there is no dialog either.
  const omitted = await page.evaluate(() => fetch("/api/v1/cluster", { credentials: "omit" }).then((r) => r.status));
  check(omitted === 401 && challenges.length === seen + 1, "a fetch without the browser's credentials is not challenged");

  check(pageErrors.length === 0, `no script errors on the pages (${pageErrors.join("; ")})`);
} catch (e) {
  status = 1;
  console.error(`FAILED: ${e.message}`);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join("; ")}`);
  try {
    await context.pages()[0]?.screenshot({ path: join(shots, "auth-failure.png"), fullPage: true });
    console.error(`failure screenshot: ${join(shots, "auth-failure.png")}`);
  } catch {}
} finally {
  await browser.close();
}
console.log(`auth: ${passed()} passed, ${status} failed`);
process.exit(status);
