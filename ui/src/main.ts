// The Sluice dashboard: a small single-page app over the REST API.
// Routes: / (overview), /pipelines/:name, /workers, /sql. Pages poll the API once a
// second, so everything updates without a manual refresh.

import "./style.css";
import { overviewPage } from "./pages/overview";
import { pipelinePage } from "./pages/pipeline";
import { sqlPage } from "./pages/sql";
import { workersPage } from "./pages/workers";
import { el } from "./format";
import type { Page } from "./poll";

const main = el("main");
let current: Page | null = null;

function nav(): HTMLElement {
  const link = (href: string, text: string) => {
    const a = el("a", { href, "data-nav": "" }, text);
    const here = href === "/" ? location.pathname === "/" : location.pathname.startsWith(href);
    if (here) a.classList.add("active");
    return a;
  };
  return el("header", {}, el("span", { class: "brand" }, "Sluice"), link("/", "Overview"), link("/workers", "Workers"), link("/sql", "SQL"));
}

function render(): void {
  current?.dispose();
  main.replaceChildren();
  const path = location.pathname;
  document.querySelector("header")?.replaceWith(nav());
  const pipeline = path.match(/^\/pipelines\/([^/]+)$/);
  if (pipeline) current = pipelinePage(main, decodeURIComponent(pipeline[1]));
  else if (path === "/sql") current = sqlPage(main);
  else if (path === "/workers") current = workersPage(main);
  else current = overviewPage(main);
}

document.addEventListener("click", (event) => {
  const a = (event.target as HTMLElement).closest("a");
  if (!a || a.origin !== location.origin || a.target || event.ctrlKey || event.metaKey) return;
  if (a.pathname.startsWith("/api/") || a.pathname === "/metrics") return;
  event.preventDefault();
  history.pushState(null, "", a.pathname);
  render();
});
window.addEventListener("popstate", render);

document.getElementById("app")!.replaceChildren(nav(), main);
render();
