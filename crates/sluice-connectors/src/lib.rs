//! Sources and sinks: the [`Connector`] trait, the [`registry`] of every
//! connector, what the connectors of a process share ([`data_plane`]:
//! memory logs and session result channels, [`Connectors`]), and the
//! [`factory`] through which the runtime asks for readers and sink
//! operators by connector name.
//!
//! A connector is one file under [`connector`] implementing [`Connector`]
//! (its options with a line of doc each, their checks, its schema rules at
//! CREATE STREAM, whether it takes INSERT, how many readers a stream of it
//! supports, its sink's checks against the query's output, and the
//! constructors of its readers and sinks) plus one line in
//! [`registry`]. Nothing else names connectors: the engine, the planner
//! (through its catalog) and the runtime ask the registry.
//!
//! The connectors ([`connector`]): `memory`, `nexmark`, `datagen`, `kafka`
//! (sources); `kafka`, `file`, `hdfs`, `blackhole` (sinks); `memory`,
//! `client` and `view` are also the engine's own sinks (a derived stream's
//! log, a session's result stream, a materialized view's rows). Their machinery:
//!
//! - [`memory`]: in-memory append-only logs — what `INSERT INTO` appends to
//!   and what a derived stream's pipeline writes (with its watermarks);
//! - [`datagen`]: rows generated from Flink-style `fields.*` options
//!   (sequences, random numbers and strings), bounded or paced;
//! - [`nexmark`] and [`nexmark_source`]: the standard Nexmark generator
//!   (person / auction / bid) and its paced reader;
//! - [`kafka`]: Kafka source (per-partition readers, startup modes incl.
//!   replay from a timestamp, error policies) and sink, on `rdkafka`;
//! - [`fs_sink`]: the `hdfs` and `file` sinks — rolling files ([`rolling`])
//!   in Parquet, JSON lines or CSV, visible only when complete, committed
//!   in two phases with checkpoints — on HDFS ([`hdfs`], `hdfs-native`) or
//!   a local directory ([`local_files`]);
//! - [`format`]: record formats (json / csv / raw) of message connectors;
//! - [`latency_probe`]: the benchmark's end-to-end latency recorder that a
//!   `blackhole` sink with `'latency.column'` feeds (benchmark only, not a
//!   product feature);
//! - [`options`]: the options every source or sink takes, and typed access
//!   to option values;
//! - [`views`]: the rows of materialized views as their `view` sinks
//!   last published them (at a checkpoint barrier), read by `SELECT … FROM
//!   view`;
//! - [`state_store`]: where checkpoints go (`'checkpoint.dir'`: a local
//!   directory or HDFS).

pub mod connector;
pub mod data_plane;
pub mod datagen;
pub mod factory;
pub mod format;
pub mod fs_sink;
pub mod hdfs;
pub mod kafka;
pub mod latency_probe;
pub mod local_files;
pub mod memory;
pub mod nexmark;
pub mod nexmark_source;
pub mod options;
pub mod pacing;
pub mod registry;
pub mod rolling;
pub mod state_store;
pub mod views;

pub use connector::{Connector, OptionDoc, OptionSet};
pub use data_plane::{ClientSinks, Connectors};
pub use memory::{MemoryLog, MemoryLogs};
