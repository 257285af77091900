//! sluice-server: the front ends of a Sluice process.
//!
//! - [`engine`]: statement execution for a session (what to do with SQL),
//!   shared by every front end;
//! - [`pgwire`]: the Postgres wire protocol (simple and extended query,
//!   cursors, COPY out, cancel) on top of the engine;
//! - [`http`]: the REST API, Prometheus metrics and health endpoints
//!   (axum), with JSON views in `http_views`, SQL in `http_sql`, secret
//!   redaction in [`redact`], and the embedded dashboard in `http_ui`;
//! - [`metrics_history`]: a sampler that keeps bounded rings of task
//!   counters, from which rates (rows/s, backpressure share) are computed;
//! - [`security`]: authentication settings, password verifiers, tokens,
//!   file-root confinement and the first superuser;
//! - [`server`]: starting a process (playground, cluster master, worker);
//! - [`metrics_export`]: `/metrics` in Prometheus text.

pub mod engine;
pub mod http;
mod http_auth;
mod http_sql;
mod http_ui;
mod http_views;
pub mod metrics_export;
pub mod metrics_history;
pub mod pgwire;
pub mod redact;
pub mod security;
pub mod server;

pub use server::{MasterConfig, ServerConfig, ServerHandle, WorkerConfig, run_worker, start, start_master};
