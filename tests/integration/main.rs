//! End-to-end integration tests: the real `sluice` binary, driven as a user
//! would drive it (tokio-postgres, `psql`, HTTP). Expected results come from
//! independent computations (reference models in Rust, hand computation),
//! never from the engine's own earlier output.

#[path = "../common/mod.rs"]
mod common;

mod alter;
mod auth;
mod catalog;
#[path = "../support/fuzz.rs"]
mod fuzz;
mod fuzz_targets;
mod hdfs;
mod hostile;
mod http_api;
mod http_auth;
mod introspection;
mod kafka;
mod lifecycle;
mod limits;
mod nexmark_queries;
mod protocol;
mod psql;
mod redaction;
mod sessions;
mod support;
mod tls;
mod windows;
mod wire_limits;
