// Headless Chromium for the dashboard scripts (e2e.mjs, workers.mjs):
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
