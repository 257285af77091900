// Who the dashboard calls the REST API as.
//
// With `--auth trust` (the playground) every call is answered and nothing
// here is ever used: no login form, no sign-out. With `--auth
// scram-sha-256` a call without valid credentials is 401; the dashboard then
// asks for a SQL user's name and password, or an API token (CREATE TOKEN),
// and sends it as the Authorization header of every call (api.ts).
//
// The credential lives in this module's memory only: never in
// localStorage, sessionStorage, a cookie or a URL. A reload or a new tab
// asks again, and signing out forgets it. The server checks a password on
// every call (there is no session to steal), and the browser's own HTTP
// auth cache is kept out of it: requests go with `credentials: "omit"` and
// marked as a script's, so the server challenges them without `Basic` and
// the browser opens no login dialog of its own (http_auth.rs).

/** A credential the user gave. */
export interface Credential {
  /** The Authorization header's value. */
  readonly authorization: string;
  /** Who it signs in as, for the header: the user's name, or "a token". */
  readonly who: string;
}

/** Why the login form is shown. */
export type LoginReason = "required" | "signed-out" | "rejected";

let held: Credential | null = null;
/** Set once the server asked for credentials and none is held. */
let asking: LoginReason | null = null;
const listeners: (() => void)[] = [];

function changed(): void {
  for (const listener of listeners) listener();
}

/** Calls `listener` whenever the user signs in or out, or must sign in. */
export function onAuthChange(listener: () => void): void {
  listeners.push(listener);
}

/** The credential calls go with (null: none, as with trust). */
export function credential(): Credential | null {
  return held;
}

/** Why the dashboard must ask for a credential now, or null. */
export function loginReason(): LoginReason | null {
  return held === null ? asking : null;
}

/** Base64 of `text`'s UTF-8 bytes (btoa alone takes only Latin-1). */
function base64(text: string): string {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** HTTP Basic with a SQL user's name and password. */
export function basic(user: string, password: string): Credential {
  return { authorization: `Basic ${base64(`${user}:${password}`)}`, who: user };
}

/** A bearer token from CREATE TOKEN. */
export function bearer(token: string): Credential {
  return { authorization: `Bearer ${token.trim()}`, who: "a token" };
}

/** Keeps `c` (accepted by the server) for every call from now on. */
export function signIn(c: Credential): void {
  held = c;
  asking = null;
  changed();
}

/** Forgets the credential and asks again. */
export function signOut(): void {
  held = null;
  asking = "signed-out";
  changed();
}

/**
 * A call made with `sent` was answered 401. When `sent` is what is held
 * (or nothing is, and nothing was sent), it is forgotten and the form
 * shown; a late answer to a call made with an older credential, or a
 * login attempt's, changes nothing.
 */
export function rejected(sent: Credential | null): void {
  if (sent !== held) return;
  const reason: LoginReason = sent === null ? "required" : "rejected";
  if (held === null && asking !== null) return;
  held = null;
  asking = reason;
  changed();
}
