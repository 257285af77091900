// The Sluice dashboard: a small single-page app over the REST API.
// Routes: / (overview), /pipelines/:name, /workers, /sql. Pages poll the API once a
// second, so everything updates without a manual refresh. When the server
// asks for credentials (auth.ts), the login form replaces the page until
// the user signs in; the page at the URL is then shown.

import "./style.css";
import { credential, loginReason, onAuthChange, signOut } from "./auth";
import { loginPage } from "./pages/login";
import { overviewPage } from "./pages/overview";
import { pipelinePage } from "./pages/pipeline";
import { sqlPage } from "./pages/sql";
import { workersPage } from "./pages/workers";
import { el } from "./format";
import type { Page } from "./poll";

const main = el("main");
let current: Page | null = null;

function nav(): HTMLElement {
  const brand = el("span", { class: "brand" }, "Sluice");
  if (loginReason() !== null) return el("header", {}, brand);
  const link = (href: string, text: string) => {
    const a = el("a", { href, "data-nav": "" }, text);
    const here = href === "/" ? location.pathname === "/" : location.pathname.startsWith(href);
    if (here) a.classList.add("active");
    return a;
  };
  const header = el("header", {}, brand, link("/", "Overview"), link("/workers", "Workers"), link("/sql", "SQL"));
  // Signed in (never with trust, where no credential is asked for).
  const held = credential();
  if (held !== null) {
    const out = el("button", { class: "sign-out", "data-testid": "sign-out" }, "Sign out");
    out.addEventListener("click", signOut);
    header.append(el("span", { class: "who", "data-testid": "signed-in" }, `signed in as ${held.who}`), out);
  }
  return header;
}

function render(): void {
  current?.dispose();
  main.replaceChildren();
  const path = location.pathname;
  document.querySelector("header")?.replaceWith(nav());
  const reason = loginReason();
  const pipeline = path.match(/^\/pipelines\/([^/]+)$/);
  if (reason !== null) current = loginPage(main, reason);
  else if (pipeline) current = pipelinePage(main, decodeURIComponent(pipeline[1]));
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
onAuthChange(render);

document.getElementById("app")!.replaceChildren(nav(), main);
render();
