// The login form, shown when the server asks for credentials (a 401; see
// auth.ts): a SQL user's name and password, or an API token. The
// credential is tried with one request before it is kept; a wrong one
// leaves nothing behind (its fields are cleared).

import { api } from "../api";
import { basic, bearer, signIn, type LoginReason } from "../auth";
import { el } from "../format";
import type { Page } from "../poll";

const REASONS: Record<LoginReason, string> = {
  required: "This server asks who you are: sign in with a SQL user's password or an API token.",
  "signed-out": "Signed out. Sign in again to see the dashboard.",
  rejected: "The server no longer accepts that credential (password changed, token dropped or user gone): sign in again.",
};

export function loginPage(root: HTMLElement, reason: LoginReason): Page {
  let disposed = false;
  const input = (attrs: Record<string, string>) => el("input", { spellcheck: "false", autocapitalize: "off", ...attrs }) as HTMLInputElement;
  const user = input({ name: "username", autocomplete: "username", "data-testid": "login-user" });
  const password = input({ type: "password", name: "password", autocomplete: "current-password", "data-testid": "login-password" });
  const token = input({ type: "password", name: "token", autocomplete: "off", "data-testid": "login-token" });
  const field = (label: string, control: HTMLInputElement) => el("label", { class: "field" }, el("span", {}, label), control);
  const passwordFields = el("div", {}, field("User", user), field("Password", password));
  const tokenFields = el("div", {}, field("Token", token), el("p", { class: "muted" }, "A token from CREATE TOKEN (sluice_…)."));
  tokenFields.hidden = true;

  const mode = (value: string, text: string, checked: boolean) => {
    const radio = el("input", { type: "radio", name: "mode", value, "data-testid": `login-mode-${value}` }) as HTMLInputElement;
    radio.checked = checked;
    radio.addEventListener("change", () => {
      const tokens = value === "token";
      tokenFields.hidden = !tokens;
      passwordFields.hidden = tokens;
      error.textContent = "";
      (tokens ? token : user).focus();
    });
    return el("label", { class: "mode" }, radio, ` ${text}`);
  };
  const submit = el("button", { type: "submit", "data-testid": "login-submit" }, "Sign in");
  const error = el("p", { class: "error", role: "alert", "data-testid": "login-error" });
  // Never submitted by the browser (no action, no GET with a password in
  // the URL): the handler below prevents it and sends one API request.
  const form = el(
    "form",
    { class: "card login", method: "post", "data-testid": "login" },
    el("h2", {}, "Sign in"),
    el("p", { class: "muted", "data-testid": "login-reason" }, REASONS[reason]),
    el("div", { class: "modes" }, mode("password", "User and password", true), mode("token", "Token", false)),
    passwordFields,
    tokenFields,
    el("div", { class: "actions" }, submit),
    error,
    el("p", { class: "muted small" }, "Kept in this tab's memory only: a reload or a new tab asks again."),
  );

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const tokens = !tokenFields.hidden;
    if (tokens ? token.value.trim() === "" : user.value.trim() === "") {
      error.textContent = tokens ? "Enter a token." : "Enter a user name.";
      return;
    }
    const candidate = tokens ? bearer(token.value) : basic(user.value.trim(), password.value);
    submit.disabled = true;
    error.textContent = "";
    try {
      const status = await api.accepts(candidate);
      if (disposed) return;
      // 403 too: the server knows who it is; what it may see is the pages' business.
      if (status < 300 || status === 403) {
        signIn(candidate);
        return;
      }
      error.textContent =
        status === 401 ? (tokens ? "That token is not valid." : "Wrong user name or password.") : `The server answered ${status}; try again.`;
    } catch (e) {
      error.textContent = `Cannot reach the server: ${String(e)}`;
    } finally {
      submit.disabled = false;
    }
    password.value = "";
    token.value = "";
    (tokens ? token : password).focus();
  });

  root.append(form);
  user.focus();
  return {
    dispose() {
      disposed = true;
      password.value = "";
      token.value = "";
    },
  };
}
