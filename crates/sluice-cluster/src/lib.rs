//! The cluster layer: the master (catalog, pipelines, scheduling) and the
//! worker (running pipelines' tasks under supervision).
//!
//! - [`catalog`]: streams and pipelines, persisted in the data directory so a
//!   restarted server finds what was declared before;
//! - [`command`]: the catalog commands statements turn into, the unit a
//!   master quorum replicates;
//! - [`security`]: roles, privileges on streams, owners of streams and
//!   pipelines, API tokens (changed by catalog commands like the rest);
//! - [`worker`]: deploys physical DAGs through the runtime and keeps their
//!   handles;
//! - [`scheduler`]: how the master hands a DAG to workers — the
//!   [`Scheduler`](scheduler::Scheduler) trait, with the single-worker
//!   [`LocalScheduler`](scheduler::LocalScheduler) the playground uses;
//! - [`supervisor`]: restarts a checkpointed pipeline from its newest
//!   checkpoint after a failure, with backoff, up to a bound;
//! - [`master`]: the entry point for the SQL engine: applies catalog
//!   commands, runs pipelines and session queries, and reports status for
//!   `SHOW PIPELINES`. It holds no data-plane object (memory logs, result
//!   channels): those belong to the worker's connectors.
//!
//! Even in one process the master talks to its worker only through the
//! scheduler interface, so a networked scheduler can take its place.

pub mod catalog;
pub mod command;
pub mod master;
pub mod scheduler;
pub mod security;
pub mod status;
pub mod supervisor;
pub mod worker;

pub use command::{Applied, CatalogCommand};
pub use master::Master;
