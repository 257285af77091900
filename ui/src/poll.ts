// Page lifecycle: polling the API while a page is shown, and navigation.

/** A mounted page; `dispose` stops its polling. */
export interface Page {
  dispose(): void;
}

export const POLL_INTERVAL_MS = 1000;

/** Calls `tick` now and then every POLL_INTERVAL_MS until disposed (never overlapping). */
export function poll(tick: () => Promise<void>): Page {
  let stopped = false;
  let timer: number | undefined;
  const run = async () => {
    try {
      await tick();
    } catch (e) {
      console.error(e);
    }
    if (!stopped) timer = window.setTimeout(run, POLL_INTERVAL_MS);
  };
  void run();
  return {
    dispose() {
      stopped = true;
      window.clearTimeout(timer);
    },
  };
}

/** Goes to `path` inside the app (main.ts renders on popstate). */
export function navigate(path: string): void {
  history.pushState(null, "", path);
  window.dispatchEvent(new PopStateEvent("popstate"));
}
