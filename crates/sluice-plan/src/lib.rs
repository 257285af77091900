//! The dataflow graph the planner hands to the runtime — the only contract
//! between SQL and execution.
//!
//! A [`PhysicalDag`] is a list of [`OperatorSpec`]s (each with a kind, a
//! parallelism and an output schema) in topological order, and the
//! [`EdgeSpec`]s between them, each with a [`Partitioning`] that says how
//! rows of the upstream instances are routed to the downstream instances.
//! Scalar expressions travel as SQL text over a named input schema, so a
//! plan is plain data: it serialises (serde) for the catalog and for
//! shipping to workers, and prints for `EXPLAIN`.
//!
//! Each operator has a stable uid derived from its lineage ([`identity`]);
//! hash-partitioned edges route by a fixed number of key groups per DAG
//! ([`key_groups`]), the unit keyed state is stored and redistributed by.
//!
//! Entry points: [`PhysicalDag`], [`explain::explain_rows`].

pub mod catalog;
pub mod diff;
pub mod explain;
pub mod identity;
pub mod key_groups;
mod spec;

pub use key_groups::{KEY_GROUPS_DEFAULT, KeyGroupRange, KeyGroupRouter, key_group_range};
pub use spec::*;
