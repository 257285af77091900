//! `client`: the sink of a session's query, feeding its result stream. Only
//! the engine builds it (CREATE SINK cannot name it); the channel was
//! registered in [`crate::data_plane::ClientSinks`] before the pipeline was
//! deployed.

use super::Connector;
use crate::data_plane::Connectors;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_plan::SinkSpec;
use sluice_types::{Error, Result, Watermark};
use std::collections::BTreeMap;
use tokio::sync::mpsc;

pub struct Client;

impl Connector for Client {
    fn name(&self) -> &'static str {
        "client"
    }

    /// Its rows are written as they come, the op column with them.
    fn sink_accepts_changelog(&self, _options: &BTreeMap<String, String>) -> bool {
        true
    }

    fn sink(
        &self,
        connectors: &Connectors,
        _spec: &SinkSpec,
        _schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ClientSink {
            tx: connectors.clients.take(ctx.pipeline),
        }))
    }
}

/// Feeds a session's bounded result channel; a full channel backpressures
/// the pipeline, a closed one (client gone) stops it.
pub struct ClientSink {
    pub tx: Option<mpsc::Sender<RecordBatch>>,
}

#[async_trait]
impl Operator for ClientSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        tx.send(batch).await.map_err(|_| Error::internal("client went away"))
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.tx = None;
        Ok(())
    }
}
