// What the dashboard scripts (e2e.mjs, workers.mjs) share: headless Chromium,
// Debian's /usr/bin/chromium (CHROMIUM overrides) driven by
// playwright-core, in a throw-away profile.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/// Launches the browser; `close()` of the result also removes its profile.
export async function launchChromium(viewport) {
  const userDataDir = mkdtempSync(join(tmpdir(), "sluice-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    viewport,
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
  return {
    context,
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/// Counted checks: `check(condition, what)` throws on a failed one and
/// counts the rest (`passed()`).
export function checks() {
  let count = 0;
  return {
    check(condition, what) {
      if (!condition) throw new Error(`check failed: ${what}`);
      count += 1;
      console.log(`ok - ${what}`);
    },
    passed: () => count,
  };
}

/// `GET path` of the server at `base`, as JSON (throws unless 2xx).
export async function getJsonFrom(base, path) {
  const response = await fetch(new URL(path, base));
  if (!response.ok) throw new Error(`GET ${path}: ${response.status}`);
  return response.json();
}
