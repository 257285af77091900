//! Sources and sinks, and the [`Connectors`] factory the runtime asks for
//! them by connector name.
//!
//! - [`memory`]: in-memory append-only logs — what `INSERT INTO` appends to
//!   and what a derived stream's pipeline writes (with its watermarks);
//! - [`datagen`]: rows generated from Flink-style `fields.*` options
//!   (sequences, random numbers and strings), bounded or paced;
//! - [`nexmark`]: the standard Nexmark generator (person / auction / bid);
//! - [`kafka`]: Kafka source (per-partition readers, startup modes incl.
//!   replay from a timestamp, error policies) and sink, on `rdkafka`;
//! - [`fs_sink`]: the `hdfs` and `file` sinks — rolling files ([`rolling`])
//!   in Parquet, JSON lines or CSV, visible only when complete, committed
//!   in two phases with checkpoints — on HDFS ([`hdfs`], `hdfs-native`) or
//!   a local directory ([`local_files`]);
//! - [`format`]: record formats (json / csv / raw) of message connectors;
//! - [`sinks`]: the `client` sink that feeds a session's result stream,
//!   `memory`, `blackhole`;
//! - [`latency_probe`]: the benchmark's end-to-end latency recorder that a
//!   `blackhole` sink with `'latency.column'` feeds (not a product feature);
//! - [`options`]: the options each connector accepts, so unknown options are
//!   rejected with the list of known ones;
//! - [`state_store`]: where checkpoints go (`'checkpoint.dir'`: a local
//!   directory or HDFS).

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
pub mod rolling;
pub mod sinks;
pub mod state_store;

pub use factory::{ClientSinks, Connectors};
pub use memory::{MemoryLog, MemoryLogs};
