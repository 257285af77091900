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
        .route("/api/v1/pipelines/{name}", get(pipeline).delete(drop_pipeline))
        .route("/api/v1/pipelines/{name}/pause", axum::routing::post(pause))
        .route("/api/v1/pipelines/{name}/resume", axum::routing::post(resume))
        .route("/api/v1/streams", get(streams))
        .route("/api/v1/cluster", get(cluster))
        .route("/api/v1/sql", axum::routing::post(sql))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
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
    let tasks: Vec<serde_json::Value> = engine
        .master
        .runtime(&name)
        .map(|r| r.metrics.iter().map(|m| task_metrics(m)).collect())
        .unwrap_or_default();
    Json(json!({ "pipeline": info, "dag": dag, "tasks": tasks })).into_response()
}

/// One task instance's counters.
fn task_metrics(m: &sluice_dataflow::metrics::TaskMetrics) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    let watermark = m.watermark_ms.load(Relaxed);
    json!({
        "operator": m.operator.0,
        "instance": m.instance,
        "kind": m.kind,
        "rows_in": m.rows_in.load(Relaxed),
        "rows_out": m.rows_out.load(Relaxed),
        "late_rows_dropped": m.late_rows_dropped.load(Relaxed),
        "queued_rows": m.queued_rows.load(Relaxed),
        "backpressure_us": m.backpressure_us.load(Relaxed),
        "state_groups": m.state_groups.load(Relaxed),
        "watermark_ms": (watermark != i64::MIN).then_some(watermark),
    })
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

async fn cluster(State(engine): State<Arc<Engine>>) -> Json<serde_json::Value> {
    let pipelines = engine.master.pipelines();
    let running = pipelines.iter().filter(|p| p.state == "running").count();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_ms": now_ms() - engine.started_ms,
        "masters": [{ "id": "master-0", "role": "leader", "health": "ok" }],
        "workers": [{ "id": "worker-0", "pipelines_running": running }],
    }))
}

async fn drop_pipeline(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    match engine.master.drop_pipeline(&name, false) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => sluice_error(&e),
    }
}

async fn pause(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    set_paused(&engine, &name, true)
}

async fn resume(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    set_paused(&engine, &name, false)
}

fn set_paused(engine: &Engine, name: &str, paused: bool) -> Response {
    match engine.master.set_paused(name, paused) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => sluice_error(&e),
    }
}

/// The body of `POST /api/v1/sql`.
#[derive(serde::Deserialize)]
struct SqlRequest {
    sql: String,
}

async fn sql(
    State(engine): State<Arc<Engine>>,
    body: Result<Json<SqlRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(request)) = body else {
        return error(StatusCode::BAD_REQUEST, "expected a JSON body {\"sql\": \"…\"}");
    };
    match crate::http_sql::run(&engine, &request.sql).await {
        Ok(results) => Json(json!({ "results": results })).into_response(),
        Err((results, e)) => {
            let mut response = sluice_error(&e);
            if !results.is_empty() {
                let status = response.status();
                let body = json!({ "error": public_message(&e), "sqlstate": e.sqlstate(), "results": results });
                response = (status, Json(body)).into_response();
            }
            response
        }
    }
}

/// A metric's name, help text, and how to read it from a pipeline's status.
type MetricFamily = (
    &'static str,
    &'static str,
    fn(&sluice_cluster::status::PipelineInfo) -> Option<i64>,
);

/// Prometheus text exposition of pipeline counters.
async fn metrics(State(engine): State<Arc<Engine>>) -> Response {
    let mut out = String::new();
    let families: [MetricFamily; 4] = [
        (
            "sluice_pipeline_rows_in_total",
            "Rows read by a pipeline's sources.",
            |p| Some(p.rows_in as i64),
        ),
        (
            "sluice_pipeline_rows_out_total",
            "Rows that reached a pipeline's sink.",
            |p| Some(p.rows_out as i64),
        ),
        (
            "sluice_pipeline_late_rows_dropped_total",
            "Rows dropped as late.",
            |p| Some(p.late_rows_dropped as i64),
        ),
        (
            "sluice_pipeline_watermark_ms",
            "Low watermark at the sink (epoch ms).",
            |p| p.watermark_ms.filter(|w| *w != i64::MAX),
        ),
    ];
    let pipelines = engine.master.pipelines();
    for (name, help, value) in families {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for p in &pipelines {
            if let Some(v) = value(p) {
                let label = p.name.replace('\\', "\\\\").replace('"', "\\\"");
                out.push_str(&format!("{name}{{pipeline=\"{label}\"}} {v}\n"));
            }
        }
    }
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// A Sluice error as JSON with a fitting status; internal details stay inside.
fn sluice_error(e: &sluice_types::Error) -> Response {
    let status = match e {
        sluice_types::Error::User { code, .. } => match code {
            sluice_types::SqlCode::UndefinedTable | sluice_types::SqlCode::UndefinedObject => StatusCode::NOT_FOUND,
            sluice_types::SqlCode::DuplicateObject => StatusCode::CONFLICT,
            _ => StatusCode::BAD_REQUEST,
        },
        sluice_types::Error::External(_) => StatusCode::BAD_GATEWAY,
        sluice_types::Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (
        status,
        Json(json!({ "error": public_message(e), "sqlstate": e.sqlstate() })),
    )
        .into_response()
}

fn public_message(e: &sluice_types::Error) -> String {
    match e {
        sluice_types::Error::Internal(_) => {
            tracing::error!(error = %e, "internal error answering an HTTP request");
            "internal error".to_string()
        }
        other => other.to_string(),
    }
}

/// The OpenAPI description of this API.
async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
        .into_response()
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
