//! The operator interface: one required method, `process_batch`; the other
//! handlers default to passing control messages through.

use crate::checkpoint::TaskState;
use crate::exchange::Output;
use crate::message::Message;
use crate::metrics::TaskMetrics;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_types::{Error, Result, Watermark};
use std::sync::Arc;
use std::time::Duration;

/// What an operator can do while handling a message.
pub struct OperatorContext<'a> {
    pub(crate) output: &'a mut Output,
    pub metrics: &'a Arc<TaskMetrics>,
    /// The task's current low watermark.
    pub watermark: Watermark,
}

impl OperatorContext<'_> {
    /// Emits rows downstream (waits for credits: backpressure). Fails when
    /// downstream went away or an operator chained into this task fails.
    pub async fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        self.output.send_batch(batch).await
    }

    /// Emits a watermark downstream.
    pub async fn emit_watermark(&mut self, watermark: Watermark) -> Result<()> {
        self.output
            .broadcast(Message::Watermark(watermark))
            .await
            .map_err(Error::from)
    }
}

/// An operator instance, owned by its task.
#[async_trait]
pub trait Operator: Send {
    /// Handles a batch from input `input`.
    async fn process_batch(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()>;

    /// The low watermark advanced to `watermark`. Default: pass it on.
    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        ctx.emit_watermark(watermark).await
    }

    /// How often [`Operator::process_timer`] runs (processing time), if at
    /// all: e.g. a file sink rolling files by age while no rows arrive.
    fn timer_interval(&self) -> Option<Duration> {
        None
    }

    /// Processing-time tick, every [`Operator::timer_interval`].
    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Checkpoint barrier `checkpoint_id` arrived on every input: return
    /// the operator's state (default: none — a stateless operator). Sinks
    /// with two-phase commit pre-commit here. The returned arrays are
    /// encoded and stored off the data path by the coordinator.
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        let _ = checkpoint_id;
        Ok(TaskState::default())
    }

    /// True for two-phase-commit sinks: after a snapshot the task waits for
    /// the checkpoint to complete and calls [`Operator::commit`] before it
    /// takes more input.
    fn commits_on_checkpoint(&self) -> bool {
        false
    }

    /// Checkpoint `checkpoint_id` is complete: make what was pre-committed
    /// at its barrier visible. Must be idempotent.
    async fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Called once before any input when the pipeline checkpoints, with the
    /// checkpoint restored (`None` on a fresh start). Sinks re-commit the
    /// restored checkpoint (idempotently) and discard what later, never
    /// completed checkpoints left behind.
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }

    /// Every input has ended (after the final watermark). Default: nothing to
    /// flush; the task then sends end-of-input downstream.
    async fn process_end_of_input(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
}
