//! The [`ConnectorFactory`] of this process: builds readers and sink
//! operators by connector name.

use crate::fs_sink::{FileStore, FileSystem, FsSinkSettings, RollingSink};
use crate::kafka::{KafkaReader, KafkaSink, KafkaSourceConfig};
use crate::memory::{IdleReader, MemoryLogs, MemoryReader};
use crate::nexmark_source::{NexmarkReader, nexmark_config};
use crate::options::{SOURCE_COMMON, check_known, idle_timeout_ms, sink_options, source_options};
use crate::sinks::{BlackholeSink, ClientSink, MemorySink};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::{ConnectorFactory, InstanceContext};
use sluice_dataflow::source::SourceReader;
use sluice_plan::{SinkSpec, SourceSpec};
use sluice_types::{Error, PipelineId, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Checks the options of a source connector (unknown keys list the known ones).
pub fn validate_source(connector: &str, options: &BTreeMap<String, String>) -> Result<()> {
    check_known(
        &format!("connector '{connector}'"),
        options,
        source_options(connector)?,
        SOURCE_COMMON,
    )?;
    if connector == "nexmark" {
        nexmark_config(options)?;
    }
    if connector == "datagen" {
        crate::datagen::DatagenConfig::check_options(options)?;
    }
    if connector == "kafka" {
        KafkaSourceConfig::parse("stream", options)?;
    }
    if connector == "memory"
        && let Some(mode) = options.get("scan.startup.mode")
        && mode != "earliest"
        && mode != "latest"
    {
        return Err(Error::invalid_option(format!(
            "'scan.startup.mode' = '{mode}' is not supported by the memory connector; use 'earliest' or 'latest'"
        )));
    }
    idle_timeout_ms(options)?;
    sluice_plan::AlignmentSetting::from_options(options).map_err(Error::invalid_option)?;
    Ok(())
}

/// Validates a sink's options.
pub fn validate_sink(connector: &str, options: &BTreeMap<String, String>) -> Result<()> {
    check_known(
        &format!("sink connector '{connector}'"),
        options,
        sink_options(connector)?,
        crate::options::SINK_COMMON,
    )?;
    crate::options::checkpoint_interval(options)?;
    if let Some(dir) = options.get("checkpoint.dir") {
        crate::state_store::split_hdfs_location(dir)?;
    }
    Ok(())
}

/// Checks a sink's options that name columns of the query's output
/// (Kafka key and timestamp columns, file partition column).
pub fn validate_sink_output(connector: &str, options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<()> {
    match connector {
        "kafka" => crate::kafka::check_sink(options, schema),
        "hdfs" => FsSinkSettings::parse(FileSystem::Hdfs, options, schema).map(|_| ()),
        "file" => FsSinkSettings::parse(FileSystem::Local, options, schema).map(|_| ()),
        _ => Ok(()),
    }
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
    fn take(&self, pipeline: PipelineId) -> Option<mpsc::Sender<RecordBatch>> {
        self.channels.lock().expect("client sinks lock").remove(&pipeline)
    }
    /// Drops the channel of a query that did not deploy.
    pub fn forget(&self, pipeline: PipelineId) {
        self.take(pipeline);
    }
}

/// Every connector of this process.
#[derive(Debug, Default, Clone)]
pub struct Connectors {
    pub memory: Arc<MemoryLogs>,
    pub clients: Arc<ClientSinks>,
}

impl ConnectorFactory for Connectors {
    fn source(&self, spec: &SourceSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        match spec.connector.as_str() {
            "memory" => {
                if ctx.instance > 0 {
                    return Ok(Box::new(IdleReader));
                }
                let log = self.memory.get_or_create(&spec.stream, &spec.options)?;
                let latest = spec.options.get("scan.startup.mode").is_some_and(|m| m == "latest");
                Ok(Box::new(MemoryReader::new(log, latest)))
            }
            "nexmark" => {
                let options = nexmark_config(&spec.options)?;
                Ok(Box::new(NexmarkReader::new(
                    &options,
                    ctx.instance,
                    ctx.parallelism,
                    &spec.unread,
                )))
            }
            "datagen" => {
                let config = crate::datagen::DatagenConfig::new(&spec.options, schema)?;
                Ok(Box::new(crate::datagen::DatagenReader::new(
                    config,
                    ctx.instance,
                    ctx.parallelism,
                )))
            }
            "kafka" => {
                let config = KafkaSourceConfig::parse(&spec.stream, &spec.options)?;
                Ok(Box::new(KafkaReader::start(config, schema, ctx)?))
            }
            other => Err(Error::unsupported(format!("unknown source connector '{other}'"))),
        }
    }

    fn sink(&self, spec: &SinkSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn Operator>> {
        match spec.connector.as_str() {
            "client" => Ok(Box::new(ClientSink {
                tx: self.clients.take(ctx.pipeline),
            })),
            "memory" => {
                let stream = spec
                    .options
                    .get("stream")
                    .ok_or_else(|| Error::internal("memory sink without stream"))?;
                Ok(Box::new(MemorySink {
                    log: self.memory.get_or_create(stream, &spec.options)?,
                }))
            }
            "file" => Ok(Box::new(fs_sink(FileSystem::Local, &spec.options, schema, ctx)?)),
            "blackhole" => Ok(Box::new(BlackholeSink {
                latency: crate::latency_probe::LatencyRecorder::from_options(&spec.options, schema)?,
            })),
            "kafka" => Ok(Box::new(KafkaSink::open(&spec.options, schema, ctx)?)),
            "hdfs" => Ok(Box::new(fs_sink(FileSystem::Hdfs, &spec.options, schema, ctx)?)),
            other => Err(Error::unsupported(format!("unknown sink connector '{other}'"))),
        }
    }
}

/// A file-system sink on HDFS or a local directory.
fn fs_sink(
    fs: FileSystem,
    options: &BTreeMap<String, String>,
    schema: &SchemaRef,
    ctx: &InstanceContext,
) -> Result<RollingSink> {
    let settings = FsSinkSettings::parse(fs, options, schema)?;
    let store: Arc<dyn FileStore> = match fs {
        FileSystem::Hdfs => Arc::new(crate::hdfs::HdfsStore::connect(&settings.url)?),
        FileSystem::Local => Arc::new(crate::local_files::LocalStore::open(&settings.path)?),
    };
    RollingSink::open(store, settings, options, schema, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn unknown_option_lists_the_known_ones() {
        let mut o = BTreeMap::new();
        o.insert("tabel".to_string(), "bid".to_string());
        let e = validate_source("nexmark", &o).unwrap_err().to_string();
        assert!(
            e.contains("'tabel'") && e.contains("events.max") && e.contains("table"),
            "{e}"
        );
    }
}
