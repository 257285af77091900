//! `memory`: a stream held in this process's memory log — what `INSERT
//! INTO` appends to, and (as a sink only the engine builds) what a derived
//! stream's pipeline writes, watermarks included. The log is in
//! [`crate::memory`].

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::memory::{IdleReader, MemoryLog, MemoryReader};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::source::SourceReader;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_plan::{SinkSpec, SourceSpec};
use sluice_types::{Error, Result, Watermark};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct Memory;

static SOURCE_OPTIONS: OptionSet = OptionSet::keys(&[
    option(
        "scan.startup.mode",
        "'earliest' (default): read the log from its start; 'latest': from its end",
    ),
    option(
        "memory.rows.max",
        "rows the log holds (default 10 000 000); an INSERT past it is rejected whole",
    ),
]);

impl Connector for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn source_options(&self) -> Option<&'static OptionSet> {
        Some(&SOURCE_OPTIONS)
    }

    fn check_source_options(&self, options: &BTreeMap<String, String>) -> Result<()> {
        if let Some(mode) = options.get("scan.startup.mode")
            && mode != "earliest"
            && mode != "latest"
        {
            return Err(Error::invalid_option(format!(
                "'scan.startup.mode' = '{mode}' is not supported by the memory connector; use 'earliest' or 'latest'"
            )));
        }
        Ok(())
    }

    fn accepts_insert(&self) -> bool {
        true
    }

    /// A log has one partition.
    fn source_readers_max(&self) -> Option<usize> {
        Some(1)
    }

    fn source(
        &self,
        connectors: &Connectors,
        spec: &SourceSpec,
        _schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn SourceReader>> {
        if ctx.instance > 0 {
            return Ok(Box::new(IdleReader));
        }
        let log = connectors.memory.get_or_create(&spec.stream, &spec.options)?;
        let latest = spec.options.get("scan.startup.mode").is_some_and(|m| m == "latest");
        Ok(Box::new(MemoryReader::new(log, latest)))
    }

    /// A derived stream's pipeline: its sink's `stream` option names the log.
    fn sink(
        &self,
        connectors: &Connectors,
        spec: &SinkSpec,
        _schema: &SchemaRef,
        _ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        let stream = spec
            .options
            .get("stream")
            .ok_or_else(|| Error::internal("memory sink without stream"))?;
        Ok(Box::new(MemorySink {
            log: connectors.memory.get_or_create(stream, &spec.options)?,
        }))
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
