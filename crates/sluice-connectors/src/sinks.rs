//! Sinks: `client` (a session's result stream), `memory` (a derived
//! stream's log), `blackhole` (the file-system sinks are in
//! [`crate::fs_sink`]).

use crate::latency_probe::LatencyRecorder;
use crate::memory::MemoryLog;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_types::{Error, Result, Watermark};
use std::sync::Arc;
use tokio::sync::mpsc;

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

/// Appends to a derived stream's memory log, watermarks included.
pub struct MemorySink {
    pub log: Arc<MemoryLog>,
}

#[async_trait]
impl Operator for MemorySink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.log.append(vec![batch]).map(|_| ())
    }
    async fn process_watermark(&mut self, w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.log.append_watermark(w);
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.log.append_end();
        Ok(())
    }
}

/// Discards rows (counted as the task's rows in). With `'latency.column'`
/// it hands every batch to a [`LatencyRecorder`] (the benchmark's probe,
/// see [`crate::latency_probe`]), which writes its report when the input
/// ends.
pub struct BlackholeSink {
    pub latency: Option<LatencyRecorder>,
}

#[async_trait]
impl Operator for BlackholeSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(l) = &mut self.latency {
            l.record(&batch)?;
        }
        Ok(())
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(l) = &self.latency {
            l.write()?;
        }
        Ok(())
    }
}
