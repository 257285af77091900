//! What the connectors of one process share, apart from the connectors
//! themselves (which only describe and build): memory streams' logs, the
//! result channels of session queries and materialized views' rows. The worker runs tasks with it and
//! the engine reaches it directly (INSERT, session queries); the master
//! never holds it.

use crate::memory::MemoryLogs;
use crate::views::Views;
use arrow::record_batch::RecordBatch;
use sluice_types::PipelineId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Result channels of session queries, registered before their pipeline is
/// deployed and taken by its `client` sink.
#[derive(Debug, Default)]
pub struct ClientSinks {
    channels: Mutex<HashMap<PipelineId, mpsc::Sender<RecordBatch>>>,
}

impl ClientSinks {
    pub fn register(&self, pipeline: PipelineId, tx: mpsc::Sender<RecordBatch>) {
        self.channels.lock().expect("client sinks lock").insert(pipeline, tx);
    }
    pub(crate) fn take(&self, pipeline: PipelineId) -> Option<mpsc::Sender<RecordBatch>> {
        self.channels.lock().expect("client sinks lock").remove(&pipeline)
    }
    /// Drops the channel of a query that did not deploy.
    pub fn forget(&self, pipeline: PipelineId) {
        self.take(pipeline);
    }
}

/// What the connectors of this process share: memory logs, the result
/// channels of session queries and the rows of materialized views.
#[derive(Debug, Default, Clone)]
pub struct Connectors {
    pub memory: Arc<MemoryLogs>,
    pub clients: Arc<ClientSinks>,
    pub views: Arc<Views>,
}
