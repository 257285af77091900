//! The Sluice runtime: a pipeline's [`PhysicalDag`](sluice_plan::PhysicalDag)
//! runs as long-lived actor tasks, one per operator instance, connected by
//! bounded credit-based channels.
//!
//! Concepts:
//! - [`Message`]: what travels on a channel — data batches and the in-band
//!   control messages (watermarks, idleness, barriers, end of input), in order.
//! - [`channel`]: credit-based channels and the [`Transport`](channel::Transport)
//!   that connects task instances by address (in-process today; the network
//!   transport implements the same trait).
//! - [`Operator`]: one required method, `process_batch`; watermark, barrier and
//!   end-of-input handlers default to pass-through.
//! - [`task`]: the actor loop around an operator — input merging, low
//!   watermark = min over inputs (idle inputs excluded), supervision.
//! - [`source`]: the loop around a [`SourceReader`](source::SourceReader),
//!   per-partition watermark generation and idle detection;
//!   [`watermark_alignment`] keeps a source's instances within a bounded
//!   event-time drift (not to be confused with barrier alignment at a
//!   multi-input task, [`checkpoint::barrier_alignment`]).
//! - [`join`]: inner equi-join of two streams (windowed, or with a state TTL).
//! - [`window`]: event-time window aggregates (TUMBLE, HOP, SESSION);
//!   [`group_aggregate`]: the aggregate without a window, whose result
//!   updates (a changelog); [`aggregate`]: what they share; [`top_n`]:
//!   `ROW_NUMBER() … <= N` per partition (top-N, deduplication).
//! - [`checkpoint`]: barriers, aligned snapshots, the coordinator, the
//!   versioned checkpoint format and its stores; recovery from the newest
//!   complete checkpoint.
//! - [`deploy`]: turn a DAG into running tasks ([`deploy::deploy`]), with a
//!   [`PipelineRuntime`](deploy::PipelineRuntime) handle to watch and stop it.
//!
//! The runtime knows nothing of SQL statements or of the cluster: it sees
//! only `sluice-plan` specs and the [`ConnectorFactory`](deploy::ConnectorFactory)
//! that builds sources and sinks.

pub mod aggregate;
pub mod channel;
pub mod checkpoint;
pub mod computed;
pub mod deploy;
pub mod exchange;
pub mod fault;
pub mod group_aggregate;
pub mod join;
pub mod message;
pub mod metrics;
mod neighbours;
pub mod operator;
pub mod over_aggregate;
pub mod part;
pub mod project;
pub mod source;
pub mod task;
pub mod time;
pub mod top_n;
pub mod updating_join;
pub mod watermark_alignment;
pub mod window;

pub use message::Message;
pub use operator::{Operator, OperatorContext};
