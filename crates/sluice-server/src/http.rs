//! The HTTP front end (axum): health and the REST API.

use crate::engine::Engine;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use sluice_types::now_ms;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The router of the HTTP server.
pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/api/v1/pipelines", get(pipelines))
        .route("/api/v1/pipelines/{name}", get(pipeline))
        .route("/api/v1/streams", get(streams))
        .fallback(not_found)
        .with_state(engine)
}

async fn health(State(engine): State<Arc<Engine>>) -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_ms": now_ms() - engine.started_ms,
    }))
}

async fn pipelines(State(engine): State<Arc<Engine>>) -> Json<serde_json::Value> {
    Json(json!({ "pipelines": engine.master.pipelines() }))
}

async fn pipeline(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    let Some(info) = engine.master.pipelines().into_iter().find(|p| p.name == name) else {
        return error(StatusCode::NOT_FOUND, &format!("pipeline \"{name}\" does not exist"));
    };
    let dag = engine.master.pipeline(&name).map(|d| d.dag);
    Json(json!({ "pipeline": info, "dag": dag })).into_response()
}

async fn streams(State(engine): State<Arc<Engine>>) -> Json<serde_json::Value> {
    let streams: Vec<serde_json::Value> = engine
        .master
        .streams()
        .into_iter()
        .map(|s| {
            let columns: Vec<serde_json::Value> = s
                .schema
                .fields()
                .iter()
                .map(|f| json!({"name": f.name(), "type": crate::engine::pg_type_name(f.data_type()), "nullable": f.is_nullable()}))
                .collect();
            json!({"name": s.name, "connector": s.connector, "columns": columns, "pipeline": s.pipeline})
        })
        .collect();
    Json(json!({ "streams": streams }))
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// Serves HTTP on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Arc<Engine>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(engine))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
