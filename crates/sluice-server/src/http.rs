//! The HTTP front end (axum): health, the REST API under `/api/v1`,
//! Prometheus text at `/metrics`, and the dashboard (every other GET path;
//! see [`crate::http_ui`]). JSON views are built in [`crate::http_views`]
//! from the catalog, live counters and the sampler's history.

use crate::engine::Engine;
use crate::http_auth::Caller;
use crate::http_views::error;
use crate::http_views::{dag_view, history_view, instance_views, pipeline_summary, stream_view, version_view};
use crate::metrics_history::MetricsHistory;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::json;
use sluice_cluster::CatalogCommand;
use sluice_cluster::worker::Worker;
use sluice_types::{ObjectKind, now_ms};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The largest request body accepted: the longest statement
/// (`sluice_types::limits::STATEMENT_BYTES_MAX`) plus room for its JSON
/// wrapping and escapes; a larger body is `413` before it is parsed.
pub const HTTP_BODY_BYTES_MAX: usize = sluice_types::limits::STATEMENT_BYTES_MAX + (64 << 10);

/// A worker whose heartbeat is older than this is reported unhealthy.
pub const HEARTBEAT_STALE_MS: i64 = 5_000;

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct HttpState {
    pub engine: Arc<Engine>,
    pub history: Arc<MetricsHistory>,
    /// The local worker (the playground runs one).
    pub worker: Arc<Worker>,
    /// A cluster master's workers (None in the playground).
    pub cluster: Option<Arc<sluice_cluster::control::Cluster>>,
}

type St = State<HttpState>;

/// The router of the HTTP server.
pub fn router(state: HttpState) -> Router {
    let protected = Router::new()
        .route("/api/v1/pipelines", get(pipelines))
        .route("/api/v1/pipelines/{name}", get(pipeline).delete(drop_pipeline))
        .route("/api/v1/pipelines/{name}/history", get(pipeline_history))
        .route("/api/v1/pipelines/{name}/pause", post(pause))
        .route("/api/v1/pipelines/{name}/resume", post(resume))
        .route("/api/v1/streams", get(streams))
        .route("/api/v1/streams/{name}", get(stream))
        .route("/api/v1/cluster", get(cluster))
        .route("/api/v1/sql", post(sql))
        .route("/api/v1/sql/stream", get(sql_stream).post(sql_stream_post))
        .route("/api/v1/explain", post(explain))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            state.engine.clone(),
            crate::http_auth::require_caller,
        ));
    Router::new()
        .route("/health", get(health))
        .merge(protected)
        .layer(axum::extract::DefaultBodyLimit::max(HTTP_BODY_BYTES_MAX))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(crate::http_ui::fallback)
        .with_state(state)
}

async fn health(State(s): St) -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_ms": now_ms() - s.engine.started_ms,
    }))
}

async fn pipelines(State(s): St) -> Json<serde_json::Value> {
    let now = now_ms();
    let list: Vec<serde_json::Value> = s
        .engine
        .master
        .pipelines()
        .iter()
        .map(|info| {
            let def = s.engine.master.pipeline(&info.name);
            let history = s.history.pipeline(&info.name);
            pipeline_summary(info, def.as_ref(), history.as_ref(), now)
        })
        .collect();
    Json(json!({ "pipelines": list }))
}

fn pipeline_not_found(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &sluice_types::Error::not_found(ObjectKind::Pipeline, name).to_string(),
    )
}

async fn pipeline(State(s): St, Path(name): Path<String>) -> Response {
    let master = &s.engine.master;
    let (Some(info), Some(def)) = (
        master.pipelines().into_iter().find(|p| p.name == name),
        master.pipeline(&name),
    ) else {
        return pipeline_not_found(&name);
    };
    let now = now_ms();
    let history = s.history.pipeline(&name);
    let tasks = master
        .runtime(&name)
        .map(|r| instance_views(&r, history.as_ref(), now))
        .unwrap_or_default();
    let errors: Vec<_> = history
        .as_ref()
        .map(|h| h.errors.iter().rev().cloned().collect())
        .unwrap_or_default();
    let versions: Vec<serde_json::Value> = def.versions().iter().map(version_view).collect();
    Json(json!({
        "pipeline": pipeline_summary(&info, Some(&def), history.as_ref(), now),
        "dag": dag_view(&def.dag, Some(&tasks), now),
        "tasks": tasks,
        "errors": errors,
        "versions": versions,
    }))
    .into_response()
}

async fn pipeline_history(State(s): St, Path(name): Path<String>) -> Response {
    if s.engine.master.pipeline(&name).is_none() {
        return pipeline_not_found(&name);
    }
    Json(history_view(s.history.pipeline(&name).as_ref())).into_response()
}

async fn streams(State(s): St) -> Json<serde_json::Value> {
    let streams: Vec<serde_json::Value> = s.engine.master.streams().iter().map(stream_view).collect();
    Json(json!({ "streams": streams }))
}

async fn stream(State(s): St, Path(name): Path<String>) -> Response {
    match s.engine.master.stream(&name) {
        Some(def) => Json(stream_view(&def)).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            &sluice_types::Error::not_found(ObjectKind::Stream, &name).to_string(),
        ),
    }
}

async fn cluster(State(s): St) -> Json<serde_json::Value> {
    let now = now_ms();
    let pipelines = s.engine.master.pipelines();
    let running = pipelines.iter().filter(|p| p.state == "running").count();
    let last_tick = s.history.last_tick_ms();
    let heartbeat_age_ms = (last_tick > 0).then(|| (now - last_tick).max(0));
    let worker_health = match heartbeat_age_ms {
        Some(age) if age <= HEARTBEAT_STALE_MS => "ok",
        Some(_) => "stale",
        None => "starting",
    };
    if let Some(cluster) = &s.cluster
        && let Some(node) = cluster.quorum()
    {
        let me = node.status();
        let mut masters = vec![json!({
            "id": me.id,
            "address": cluster.control_address(),
            "role": me.role.to_string(),
            "health": if me.has_quorum { "ok" } else { "no quorum" },
            "term": me.term,
            "leader": me.leader,
            "has_quorum": me.has_quorum,
            "reachable": me.reachable,
            "state_version": me.version.to_string(),
            "state_entries": me.entries,
        })];
        for (id, address) in node.peers() {
            let reachable = me.reachable.contains(id);
            masters.push(json!({
                "id": id,
                "address": address,
                "role": if me.leader.as_deref() == Some(id.as_str()) { "leader" } else if reachable { "follower" } else { "unknown" },
                "health": if reachable { "ok" } else { "unreachable" },
            }));
        }
        return Json(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_ms": now - s.engine.started_ms,
            "started_ms": s.engine.started_ms,
            "masters": masters,
            "workers": cluster.workers(),
            "recorded_workers": cluster.recorded_workers(),
            "lost_workers": cluster.lost_workers(),
            "pipelines_running": running,
        }));
    }
    if let Some(cluster) = &s.cluster {
        return Json(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_ms": now - s.engine.started_ms,
            "started_ms": s.engine.started_ms,
            "masters": [{ "id": cluster.master_id(), "address": cluster.control_address(), "role": "leader", "health": "ok" }],
            "workers": cluster.workers(),
            "lost_workers": cluster.lost_workers(),
            "pipelines_running": running,
        }));
    }
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_ms": now - s.engine.started_ms,
        "started_ms": s.engine.started_ms,
        "masters": [{ "id": "master-0", "role": "leader", "health": "ok" }],
        "workers": [{
            "id": sluice_types::WorkerId::local().0,
            "health": worker_health,
            "slots": s.worker.slots(),
            "tasks": s.worker.tasks_running(),
            "pipelines_running": running,
            "heartbeat_age_ms": heartbeat_age_ms,
        }],
    }))
}

async fn drop_pipeline(State(s): St, Extension(caller): Extension<Caller>, Path(name): Path<String>) -> Response {
    let command = CatalogCommand::DropPipeline {
        name,
        if_exists: false,
        only: None,
    };
    apply_as(&s.engine, &caller, command).await
}

async fn pause(State(s): St, Extension(caller): Extension<Caller>, Path(name): Path<String>) -> Response {
    let command = CatalogCommand::SetPaused { name, paused: true };
    apply_as(&s.engine, &caller, command).await
}

async fn resume(State(s): St, Extension(caller): Extension<Caller>, Path(name): Path<String>) -> Response {
    let command = CatalogCommand::SetPaused { name, paused: false };
    apply_as(&s.engine, &caller, command).await
}

/// Applies `command` for `caller` under the SQL privilege rules.
async fn apply_as(engine: &Engine, caller: &Caller, command: CatalogCommand) -> Response {
    let checked = crate::engine::authorize::who(engine, &caller.0)
        .and_then(|who| crate::engine::authorize::check_command(engine, &who, &command));
    if let Err(e) = checked {
        return sluice_error(&e);
    }
    let command = CatalogCommand::AsRole {
        role: caller.0.clone(),
        command: Box::new(command),
    };
    match engine.master.apply(command).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => sluice_error(&e),
    }
}

/// The body of `POST /api/v1/sql`.
#[derive(serde::Deserialize)]
struct SqlRequest {
    sql: String,
}

/// A status and message for a JSON error response.
type BadRequest = (StatusCode, String);

/// The request body, or what was wrong with it (the status from the
/// rejection: 400, 413 or 415).
fn sql_body(body: Result<Json<SqlRequest>, JsonRejection>) -> Result<SqlRequest, BadRequest> {
    match body {
        Ok(Json(request)) => Ok(request),
        Err(rejection) => {
            let status = match rejection.status() {
                StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
                other => other,
            };
            let why = match &rejection {
                JsonRejection::MissingJsonContentType(_) => "expected Content-Type: application/json and",
                _ => "expected",
            };
            Err((status, format!("{why} a JSON body {{\"sql\": \"…\"}}")))
        }
    }
}

async fn sql(
    State(s): St,
    Extension(caller): Extension<Caller>,
    body: Result<Json<SqlRequest>, JsonRejection>,
) -> Response {
    let request = match sql_body(body) {
        Ok(r) => r,
        Err((status, message)) => return error(status, &message),
    };
    match crate::http_sql::run(&s.engine, &caller.0, &request.sql).await {
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

/// The query string of `GET /api/v1/sql/stream`.
#[derive(serde::Deserialize)]
struct StreamQuery {
    sql: String,
}

/// A live preview of a query's rows as server-sent events, the statement
/// in the URL (for EventSource and curl; proxies and access logs may keep
/// a URL, so the dashboard uses the POST form).
async fn sql_stream(
    State(s): St,
    Extension(caller): Extension<Caller>,
    query: Result<axum::extract::Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match query {
        Ok(q) => crate::http_sql::stream(s.engine.clone(), caller.0, q.0.sql).into_response(),
        Err(_) => error(StatusCode::BAD_REQUEST, "expected ?sql=<a query>"),
    }
}

/// `POST /api/v1/sql/stream`: the live preview with the statement in a
/// JSON body (`{"sql": …}`), out of URLs and logs.
async fn sql_stream_post(
    State(s): St,
    Extension(caller): Extension<Caller>,
    body: Result<Json<SqlRequest>, JsonRejection>,
) -> Response {
    match sql_body(body) {
        Ok(request) => crate::http_sql::stream(s.engine.clone(), caller.0, request.sql).into_response(),
        Err((status, message)) => error(status, &message),
    }
}

/// `POST /api/v1/explain`: the DAG a query would run as, without running it.
async fn explain(
    State(s): St,
    Extension(caller): Extension<Caller>,
    body: Result<Json<SqlRequest>, JsonRejection>,
) -> Response {
    let request = match sql_body(body) {
        Ok(r) => r,
        Err((status, message)) => return error(status, &message),
    };
    let session = s.engine.new_session(&caller.0);
    match session.plan_dag(&request.sql).await {
        Ok(dag) => Json(json!({ "dag": dag_view(&dag, None, now_ms()) })).into_response(),
        Err(e) => sluice_error(&e),
    }
}

/// Prometheus text exposition (see `metrics_export`).
async fn metrics(State(s): St) -> Response {
    let out = crate::metrics_export::render(&s.engine.master, s.cluster.as_deref());
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// A Sluice error as JSON with a fitting status; internal details stay inside.
fn sluice_error(e: &sluice_types::Error) -> Response {
    let status = match e {
        sluice_types::Error::User { code, .. } => match code {
            sluice_types::SqlCode::UndefinedTable | sluice_types::SqlCode::UndefinedObject => StatusCode::NOT_FOUND,
            sluice_types::SqlCode::DuplicateObject => StatusCode::CONFLICT,
            sluice_types::SqlCode::InsufficientPrivilege => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_REQUEST,
        },
        sluice_types::Error::External(_) => StatusCode::BAD_GATEWAY,
        sluice_types::Error::Internal(_) | sluice_types::Error::DownstreamClosed => StatusCode::INTERNAL_SERVER_ERROR,
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

async fn method_not_allowed() -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
}

/// Serves HTTP on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let tls = state.engine.tls.as_ref().map(|t| t.https.clone());
    let router = router(state);
    let stop = async move { shutdown.cancelled().await };
    match tls {
        Some(acceptor) => {
            let listener = crate::security::tls::TlsListener::new(listener, acceptor);
            axum::serve(listener, router).with_graceful_shutdown(stop).await
        }
        None => axum::serve(listener, router).with_graceful_shutdown(stop).await,
    }
}
