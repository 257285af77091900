//! Sluice's SQL: statements beyond Postgres, and the streaming planner.
//!
//! - [`statement`]: parses a query string into [`SluiceStatement`]s —
//!   Sluice's own (`CREATE STREAM … WATERMARK …`, `CREATE SINK … AS`,
//!   `SHOW PIPELINES`, `EXPLAIN PIPELINE`, …) on sqlparser's parser, and
//!   everything else as sqlparser's own AST;
//! - [`security_statement`]: `CREATE USER`, `GRANT`, `REVOKE`, `CREATE
//!   TOKEN`, `SET SESSION AUTHORIZATION` and their kin;
//! - [`window_tvf`]: `TUMBLE` / `HOP` / `SESSION` table functions (and
//!   Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(c), …))` spelling);
//! - [`hidden`]: connector metadata columns left out of `SELECT *`;
//! - [`views`]: a materialized view a pipeline reads, written out as its
//!   query;
//! - [`planner`]: binds a query with DataFusion (names, types, functions)
//!   and turns the logical plan into a [`PhysicalDag`](sluice_plan::PhysicalDag);
//! - [`complexity`]: the length, depth and plan-size limits every
//!   statement is held to before anything recurses over it;
//! - [`errors`]: DataFusion and parser errors as Sluice errors with the
//!   right SQLSTATE.
//!
//! The crate knows nothing of the wire protocol or of the runtime.

pub mod complexity;
pub mod create;
pub mod errors;
pub mod hidden;
pub mod names;
pub mod planner;
pub mod security_statement;
pub mod statement;
pub mod types;
pub mod views;
pub mod window_tvf;

pub use planner::{PlannedQuery, Planner, PlannerSettings};
pub use statement::{SluiceStatement, parse_statements};
