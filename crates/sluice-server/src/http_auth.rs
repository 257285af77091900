//! Who is calling the REST API. With `trust`, every request runs as the
//! bootstrap superuser (the playground, as before). With `scram-sha-256`,
//! every `/api/v1` route and `/metrics` need `Authorization: Basic` with a
//! SQL role's password, or `Authorization: Bearer <token>` with a token
//! from `CREATE TOKEN`; anything else is `401` (after the same delay as a
//! failed pgwire login) with `WWW-Authenticate: Basic`. `/health` and the
//! dashboard's static files stay open. Handlers read the [`Caller`] and
//! run as that role, so the SQL privilege rules apply (`403` when they
//! refuse).
//!
//! A browser answers a `Basic` challenge to a page's own `fetch` with its
//! login dialog, over the dashboard's form (and remembers what was typed
//! there for the whole origin). So a request marked as a script's, with
//! `X-Requested-With: XMLHttpRequest` (the header many servers recognise
//! for this), is challenged with `Bearer` alone: a scheme the server
//! accepts and browsers leave to the page. Every other client (curl, a
//! CLI) gets the standard `Basic` challenge.

use crate::engine::Engine;
use crate::http_views::error;
use crate::security::{AuthMethod, password};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sluice_cluster::security::BOOTSTRAP_SUPERUSER;
use std::sync::Arc;

/// The role a request runs as.
#[derive(Debug, Clone)]
pub struct Caller(pub String);

/// The role `authorization` (an `Authorization` header's value) proves,
/// or `None`.
pub fn authenticate(engine: &Engine, authorization: Option<&str>) -> Option<String> {
    let value = authorization?;
    if let Some(token) = value.strip_prefix("Bearer ") {
        let digest = password::token_digest(token.trim());
        let user = engine
            .master
            .with_security(|s| s.token_by_digest(&digest).map(|t| t.user.clone()))?;
        return crate::security::principal(&engine.master, &user).ok().map(|p| p.name);
    }
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, given) = text.split_once(':')?;
    let verifier = engine
        .master
        .with_security(|s| s.roles.get(user).filter(|r| r.login).and_then(|r| r.verifier.clone()));
    match verifier {
        Some(v) if password::password_matches(&v, given) => Some(user.to_string()),
        _ => None,
    }
}

/// Marks a request as a script's (the dashboard's): see [`challenge`].
pub const SCRIPT_REQUEST_HEADER: &str = "x-requested-with";
/// The value of [`SCRIPT_REQUEST_HEADER`] that marks it.
pub const SCRIPT_REQUEST_VALUE: &str = "XMLHttpRequest";

/// The `WWW-Authenticate` of a `401` for a request with `headers`:
/// `Bearer` for a script's request (no browser login dialog), else
/// `Basic`.
pub fn challenge(headers: &HeaderMap) -> HeaderValue {
    let script = headers
        .get(SCRIPT_REQUEST_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(SCRIPT_REQUEST_VALUE));
    if script {
        HeaderValue::from_static("Bearer realm=\"sluice\"")
    } else {
        HeaderValue::from_static("Basic realm=\"sluice\"")
    }
}

/// The middleware in front of every protected route.
pub async fn require_caller(State(engine): State<Arc<Engine>>, mut request: Request, next: Next) -> Response {
    let caller = match engine.security.auth {
        AuthMethod::Trust => Some(BOOTSTRAP_SUPERUSER.to_string()),
        AuthMethod::ScramSha256 => {
            let header = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            // PBKDF2 is CPU work: off the async workers.
            let engine_for_check = engine.clone();
            let header = header.map(str::to_string);
            tokio::task::spawn_blocking(move || authenticate(&engine_for_check, header.as_deref()))
                .await
                .ok()
                .flatten()
        }
    };
    let Some(caller) = caller else {
        tokio::time::sleep(engine.security.auth_failure_delay).await;
        let mut response = error(
            StatusCode::UNAUTHORIZED,
            "authentication required: HTTP Basic with a SQL role's password, or Bearer with a token",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge(request.headers()));
        return response.into_response();
    };
    request.extensions_mut().insert(Caller(caller));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_request_is_challenged_without_basic() {
        let mut headers = HeaderMap::new();
        assert_eq!(challenge(&headers), "Basic realm=\"sluice\"");
        headers.insert(SCRIPT_REQUEST_HEADER, HeaderValue::from_static("xmlhttprequest"));
        assert_eq!(challenge(&headers), "Bearer realm=\"sluice\"");
        headers.insert(SCRIPT_REQUEST_HEADER, HeaderValue::from_static("something else"));
        assert_eq!(challenge(&headers), "Basic realm=\"sluice\"");
    }
}
