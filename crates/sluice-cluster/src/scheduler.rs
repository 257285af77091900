//! Handing pipelines to workers.

use crate::worker::Worker;
use futures::future::BoxFuture;
use sluice_connectors::views::PublishedView;
use sluice_dataflow::deploy::{CheckpointPlan, PipelineRuntime};
use sluice_plan::PhysicalDag;
use sluice_types::{OperatorId, PipelineId, Result};
use std::sync::Arc;

/// Places a pipeline's tasks on workers and starts them.
pub trait Scheduler: Send + Sync {
    fn deploy(&self, id: PipelineId, dag: &PhysicalDag) -> Result<Arc<PipelineRuntime>>;
    /// Deploys with checkpoints, restoring every task from `plan`.
    fn deploy_checkpointed(
        &self,
        id: PipelineId,
        dag: &PhysicalDag,
        plan: CheckpointPlan,
    ) -> Result<Arc<PipelineRuntime>>;
    fn stop(&self, id: PipelineId);
    /// Frees what the workers hold for a dropped stream (a memory stream's
    /// log). Called after the catalog forgot the stream.
    fn release_stream(&self, stream: &str);
    /// Appends an INSERT's `rows` to memory stream `stream`'s log (created
    /// with `options`) where it lives in another process (with a master
    /// quorum: on a worker); how many. `None` when it lives in this
    /// process: append there.
    fn append_memory<'a>(
        &'a self,
        stream: &'a str,
        options: &'a std::collections::BTreeMap<String, String>,
        rows: &'a [arrow::record_batch::RecordBatch],
    ) -> BoxFuture<'a, Result<Option<u64>>> {
        let _ = (stream, options, rows);
        Box::pin(async { Ok(None) })
    }
    /// Materialized view `name`'s rows (pipeline `id`, whose sink is
    /// operator `sink`) when its sink runs in another process: as that
    /// process last published them. `None` when the sink runs in this
    /// process (its rows are in this process's `Views`), or nowhere here.
    fn worker_view<'a>(
        &'a self,
        id: PipelineId,
        sink: OperatorId,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PublishedView>>> {
        let _ = (id, sink, name);
        Box::pin(async { Ok(None) })
    }
}

/// Everything on the one local worker (the playground).
pub struct LocalScheduler {
    pub worker: Arc<Worker>,
}

impl Scheduler for LocalScheduler {
    fn deploy(&self, id: PipelineId, dag: &PhysicalDag) -> Result<Arc<PipelineRuntime>> {
        self.worker.run(id, dag, None)
    }
    fn deploy_checkpointed(
        &self,
        id: PipelineId,
        dag: &PhysicalDag,
        plan: CheckpointPlan,
    ) -> Result<Arc<PipelineRuntime>> {
        self.worker.run(id, dag, Some(plan))
    }
    fn stop(&self, id: PipelineId) {
        self.worker.stop(id)
    }
    fn release_stream(&self, stream: &str) {
        self.worker.connectors.memory.remove(stream);
    }
}
