//! Event-time window aggregates.
//!
//! Window assignment ([`assign`]) is pure arithmetic; [`fixed`] aggregates
//! tumbling and hopping windows incrementally with DataFusion's
//! `GroupsAccumulator`s, one group table per open window; [`session`]
//! keeps per-key sessions that merge when rows bridge their gaps. Both emit
//! a window's rows once, when the low watermark reaches the window's end,
//! and drop (and count) rows whose windows have all fired already.

pub mod assign;
pub mod fixed;
pub mod session;

use crate::checkpoint::TaskState;
use crate::operator::Operator;
use arrow::datatypes::SchemaRef;
use sluice_plan::{WindowAggSpec, WindowKind};
use sluice_types::Result;

/// Builds the window operator for `spec`, emitting `output_schema`.
pub fn build_window_operator(spec: &WindowAggSpec, output_schema: SchemaRef) -> Result<Box<dyn Operator>> {
    Ok(match spec.window {
        WindowKind::Tumble { .. } | WindowKind::Hop { .. } => {
            Box::new(fixed::FixedWindowOperator::new(spec, output_schema)?)
        }
        WindowKind::Session { gap_ms } => Box::new(session::SessionWindowOperator::new(spec, gap_ms, output_schema)?),
    })
}

/// A window's state from a checkpoint before key groups: a keyed window's
/// rows marked with their key columns (they follow the window start, and
/// for sessions the end), so a restore can split them by key group.
pub fn migrate_legacy_state(spec: &WindowAggSpec, mut state: TaskState) -> Result<TaskState> {
    if spec.key_columns.is_empty() {
        return Ok(state);
    }
    let (key, first) = match spec.window {
        WindowKind::Tumble { .. } | WindowKind::Hop { .. } => (fixed::WINDOWS_KEY, 1),
        WindowKind::Session { .. } => (session::SESSIONS_KEY, 2),
    };
    state.mark_keyed(key, (first..first + spec.key_columns.len()).collect());
    Ok(state)
}

#[cfg(test)]
mod tests;
