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
        "'earliest' (default): read the log from its start; 'latest': from its end; 'timestamp': from the first row at or after 'scan.startup.timestamp' (event time)",
    ),
    option(
        "scan.startup.timestamp",
        "with 'scan.startup.mode' = 'timestamp': '2026-11-30 12:00:00' or epoch ms",
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
            && mode != "timestamp"
        {
            return Err(Error::invalid_option(format!(
                "'scan.startup.mode' = '{mode}' is not supported by the memory connector; use 'earliest', 'latest' or 'timestamp'"
            )));
        }
        start_time_ms(options).map(|_| ())
    }

    /// `'scan.startup.mode' = 'timestamp'` starts by the rows' event time: a
    /// WATERMARK on a declared column.
    fn check_stream(&self, def: &sluice_plan::catalog::StreamDef) -> Result<()> {
        let declared = def
            .event_time
            .as_ref()
            .is_some_and(|e| !def.computed.iter().any(|c| c.column == e.column));
        if start_time_ms(&def.options)?.is_some() && !declared {
            return Err(Error::unsupported(format!(
                "stream {} has no event-time column of its own (a WATERMARK on a declared column): 'scan.startup.mode' = 'timestamp' starts a memory stream by its rows' event time",
                def.name
            )));
        }
        Ok(())
    }

    /// From the first row of the log, in its order, whose event time is at
    /// or after `timestamp`: needs the stream's event-time column.
    fn rewind_options(&self, spec: &SourceSpec, timestamp: &str) -> Result<BTreeMap<String, String>> {
        if spec.watermark.is_none() || !spec.computed.is_empty() {
            return Err(Error::unsupported(format!(
                "stream {} has no event-time column of its own (a WATERMARK on a declared column): a memory stream is rewound by its rows' event time",
                spec.stream
            )));
        }
        let mut rewound = spec.options.clone();
        rewound.insert("scan.startup.mode".into(), "timestamp".into());
        rewound.insert("scan.startup.timestamp".into(), timestamp.to_string());
        self.check_source_options(&rewound)?;
        Ok(rewound)
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
        if let Some(start) = start_time_ms(&spec.options)? {
            let Some(w) = spec.watermark.as_ref().filter(|_| spec.computed.is_empty()) else {
                return Err(Error::unsupported(format!(
                    "stream {} has no event-time column of its own (a WATERMARK on a declared column): 'scan.startup.mode' = 'timestamp' starts a memory stream by its rows' event time",
                    spec.stream
                )));
            };
            return Ok(Box::new(MemoryReader::from_time(log, start, w.column)?));
        }
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

/// `'scan.startup.timestamp'` in ms when the mode is `timestamp`.
fn start_time_ms(options: &BTreeMap<String, String>) -> Result<Option<i64>> {
    if options.get("scan.startup.mode").map(String::as_str) != Some("timestamp") {
        return Ok(None);
    }
    let text = options
        .get("scan.startup.timestamp")
        .ok_or_else(|| Error::invalid_option("'scan.startup.mode' = 'timestamp' needs 'scan.startup.timestamp'"))?;
    crate::kafka::parse_timestamp_ms(text).map(Some)
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
