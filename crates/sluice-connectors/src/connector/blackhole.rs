//! `blackhole`: a sink that discards rows (counted as its task's rows in).
//!
//! Its `latency.*` options are for the benchmark only, not a product
//! feature: with `'latency.column'` every discarded batch goes to the
//! benchmark's end-to-end latency recorder ([`crate::latency_probe`]),
//! which writes its report to `'latency.file'` when the input ends.
//! `sluice-bench`'s latency runs create such a sink over pgwire; the
//! recorder lives in this crate because the sink runs inside the server.

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::latency_probe::LatencyRecorder;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_plan::SinkSpec;
use sluice_types::{Result, Watermark};
use std::collections::BTreeMap;

pub struct Blackhole;

static SINK_OPTIONS: OptionSet = OptionSet::keys(&[
    option(
        "latency.column",
        "benchmark only: the event-time column whose lag behind the wall clock is measured",
    ),
    option(
        "latency.window",
        "benchmark only: a row's time is rounded up to the end of its window of this length",
    ),
    option(
        "latency.warmup",
        "benchmark only: rows this long after the first are not measured (default 2s)",
    ),
    option(
        "latency.file",
        "benchmark only: where the latency report (JSON) is written at the end of input",
    ),
]);

impl Connector for Blackhole {
    fn name(&self) -> &'static str {
        "blackhole"
    }

    /// Its rows are written as they come, the op column with them.
    fn sink_accepts_changelog(&self, _options: &BTreeMap<String, String>) -> bool {
        true
    }

    fn sink_options(&self) -> Option<&'static OptionSet> {
        Some(&SINK_OPTIONS)
    }

    fn sink(
        &self,
        _connectors: &Connectors,
        spec: &SinkSpec,
        schema: &SchemaRef,
        _ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        Ok(Box::new(BlackholeSink {
            bench_latency: LatencyRecorder::from_options(&spec.options, schema)?,
        }))
    }
}

/// Discards rows. With `'latency.column'` it hands every batch to the
/// benchmark's [`LatencyRecorder`], which writes its report when the input
/// ends.
pub struct BlackholeSink {
    /// Benchmark only (see the module doc).
    pub bench_latency: Option<LatencyRecorder>,
}

#[async_trait]
impl Operator for BlackholeSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(l) = &mut self.bench_latency {
            l.record(&batch)?;
        }
        Ok(())
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(l) = &self.bench_latency {
            l.write()?;
        }
        Ok(())
    }
}
