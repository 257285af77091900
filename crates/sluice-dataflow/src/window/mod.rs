//! Event-time window aggregates.
//!
//! Window assignment ([`assign`]) is pure arithmetic; [`fixed`] aggregates
//! tumbling and hopping windows incrementally with DataFusion's
//! `GroupsAccumulator`s, one group table per open window; [`session`]
//! keeps per-key sessions that merge when rows bridge their gaps. Both emit
//! a window's rows once, when the low watermark reaches the window's end,
//! and drop (and count) rows whose windows have all fired already.

pub mod aggregate;
pub mod assign;
pub mod fixed;
pub mod session;

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

#[cfg(test)]
mod tests;
