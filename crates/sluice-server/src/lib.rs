//! sluice-server: the front ends of a Sluice process.
//!
//! - [`engine`]: statement execution for a session (what to do with SQL),
//!   shared by every front end;
//! - [`pgwire`]: the Postgres wire protocol (simple and extended query,
//!   cursors, COPY out, cancel) on top of the engine;
//! - [`http`]: the REST API and health endpoints (axum);
//! - [`server`]: starting a whole process (master, worker, both front ends).

pub mod engine;
pub mod http;
mod http_sql;
pub mod pgwire;
pub mod server;

pub use server::{ServerConfig, ServerHandle, start};
