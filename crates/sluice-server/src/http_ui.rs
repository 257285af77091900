//! The dashboard's files, built from `ui/` by `build.rs` and embedded in
//! the binary, so `sluice playground` alone serves the dashboard. Every GET
//! path that is not an API route, `/metrics` or `/health` is the dashboard:
//! a built file when one has that path, otherwise `index.html` (the
//! single-page app routes on the client). `/api/…` paths never fall back.

use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "map" => "application/json",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn serve(path: &'static str, bytes: &'static [u8]) -> Response {
    // Vite puts content hashes in the names under /assets: those never change.
    let cache = if path.starts_with("/assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, content_type(path)),
            (header::CACHE_CONTROL, cache),
        ],
        bytes,
    )
        .into_response()
}

/// True for paths the dashboard must never answer.
fn is_api_path(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/") || path == "/metrics" || path == "/health"
}

/// The router's fallback: dashboard files, the SPA's index, or a JSON 404/405.
pub async fn fallback(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    if is_api_path(path) {
        return crate::http_views::error(StatusCode::NOT_FOUND, "no such endpoint");
    }
    if method != Method::GET && method != Method::HEAD {
        return crate::http_views::error(StatusCode::METHOD_NOT_ALLOWED, "the dashboard only answers GET");
    }
    let wanted = if path == "/" { "/index.html" } else { path };
    if let Some((p, bytes)) = UI_ASSETS.iter().find(|(p, _)| *p == wanted) {
        return serve(p, bytes);
    }
    // A missing file (a name with an extension) is a 404; anything else is a
    // client-side route of the single-page app.
    let last = path.rsplit('/').next().unwrap_or_default();
    if last.contains('.') {
        return crate::http_views::error(StatusCode::NOT_FOUND, "no such file");
    }
    match UI_ASSETS.iter().find(|(p, _)| *p == "/index.html") {
        Some((p, bytes)) => serve(p, bytes),
        None => crate::http_views::error(StatusCode::NOT_FOUND, "the dashboard is not built into this binary"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_embedded_and_api_paths_never_fall_back() {
        assert!(UI_ASSETS.iter().any(|(p, b)| *p == "/index.html" && !b.is_empty()));
        assert!(is_api_path("/api/v1/nope") && is_api_path("/metrics") && !is_api_path("/pipelines/x"));
        assert_eq!(content_type("/assets/index-abc.js"), "text/javascript; charset=utf-8");
    }
}
