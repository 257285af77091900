//! The [`ConnectorFactory`] of this process: builds readers and sink
//! operators by looking their connector up in the [`crate::registry`].

use crate::memory::MemoryLogs;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::{ConnectorFactory, InstanceContext};
use sluice_dataflow::source::SourceReader;
use sluice_plan::{SinkSpec, SourceSpec};
use sluice_types::{PipelineId, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Checks the options of a source connector (CREATE STREAM; unknown keys
/// list the known ones). See [`crate::registry::validate_source`].
pub fn validate_source(connector: &str, options: &BTreeMap<String, String>) -> Result<()> {
    crate::registry::validate_source(connector, options).map(|_| ())
}

/// Validates a sink's options (CREATE SINK).
pub fn validate_sink(connector: &str, options: &BTreeMap<String, String>) -> Result<()> {
    crate::registry::validate_sink(connector, options).map(|_| ())
}

/// Checks a sink's options that name columns of the query's output
/// (Kafka key and timestamp columns, file partition column).
pub fn validate_sink_output(connector: &str, options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<()> {
    crate::registry::validate_sink_output(connector, options, schema)
}

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

/// What the connectors of this process share: memory logs and the result
/// channels of session queries.
#[derive(Debug, Default, Clone)]
pub struct Connectors {
    pub memory: Arc<MemoryLogs>,
    pub clients: Arc<ClientSinks>,
}

impl ConnectorFactory for Connectors {
    fn source(&self, spec: &SourceSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        crate::registry::find(&spec.connector)?.source(self, spec, schema, ctx)
    }

    fn sink(&self, spec: &SinkSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn Operator>> {
        crate::registry::find(&spec.connector)?.sink(self, spec, schema, ctx)
    }
}
