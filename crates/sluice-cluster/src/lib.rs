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
//! - [`placement`]: which worker runs each task (spread, pack, labels,
//!   slots);
//! - [`control`]: the master's side of a cluster — workers' sessions, their
//!   registry, and [`ClusterScheduler`](control::ClusterScheduler), which
//!   places deployments on workers and owns them;
//! - [`agent`]: a worker process's side — its session with the master and
//!   the parts of deployments it runs;
//! - [`wire`]: the runtime's events and metrics as control-plane messages;
//! - [`process`]: this process's memory and CPU use;
//! - [`replication`]: the catalog on the master quorum (`--peers`): the
//!   leader's changes held by a majority, followers forwarding DDL to it.
//!
//! The master talks to workers only through the scheduler interface: the
//! playground's [`LocalScheduler`](scheduler::LocalScheduler) runs every
//! task in the process, a cluster's [`ClusterScheduler`](control::ClusterScheduler)
//! sends the same deployment to worker processes.

pub mod agent;
pub mod catalog;
pub mod command;
pub mod control;
pub mod master;
pub mod placement;
pub mod process;
pub mod recorded;
pub mod replication;
pub mod scheduler;
pub mod security;
pub mod session_query;
pub mod status;
pub mod supervisor;
pub mod view_cache;
pub mod wire;
pub mod worker;

pub use command::{Applied, CatalogCommand};
pub use master::Master;
