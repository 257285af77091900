//! Shared vocabulary of Sluice: the error type every crate returns, the
//! identifiers that name pipelines, operators and task instances, and the
//! event-time helpers (watermarks, timestamps) the planner and runtime agree on.
//!
//! The crate is deliberately small and has no async or SQL in it; anything
//! here may be used by every other crate.

mod error;
mod ids;
pub mod limits;
mod time;

pub use error::{Error, ObjectKind, Result, SqlCode};
pub use ids::{EdgeId, InstanceId, OperatorId, OperatorUid, PipelineId, TaskId, WorkerId};
pub use time::{Watermark, now_ms, parse_duration_ms, ts_ms_to_string};
