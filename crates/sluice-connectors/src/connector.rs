//! The [`Connector`] trait: everything the engine needs to know about one
//! kind of source or sink, in one place.
//!
//! A connector is a unit struct in its own file under `connector/` that
//! implements this trait, listed once in [`crate::registry`]. Nothing else
//! in the workspace matches on connector names: option checks, CREATE
//! STREAM's schema rules, INSERT, the planner's reader count and the
//! runtime's constructors all ask the registry for the connector and call
//! it. A connector may be a source, a sink or both; every method but
//! [`Connector::name`] has a default that fits a connector without that
//! side or rule.

use crate::data_plane::Connectors;
pub use crate::options::{OptionDoc, OptionSet, option};
use arrow::datatypes::{Field, Schema, SchemaRef};
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::source::SourceReader;
use sluice_plan::{SinkSpec, SourceSpec};
use sluice_types::{Error, Result};
use std::collections::BTreeMap;

pub mod blackhole;
pub mod client;
pub mod datagen;
#[macro_use]
pub mod file; // its option list is the HDFS sink's too
pub mod hdfs;
pub mod kafka;
pub mod memory;
pub mod nexmark;
pub mod view;

/// A kind of source and/or sink. Implementations are unit structs listed in
/// [`crate::registry`]; the methods say what the engine asks of them, and
/// when.
pub trait Connector: Send + Sync {
    /// The name `WITH (connector = '…')` uses; unique in the registry.
    fn name(&self) -> &'static str;

    /// The options of a stream of this connector (CREATE STREAM), besides
    /// [`crate::options::SOURCE_COMMON`]; `None` when it is no source.
    fn source_options(&self) -> Option<&'static OptionSet> {
        None
    }

    /// The options of a sink of this connector (CREATE SINK), besides
    /// [`crate::options::SINK_COMMON`]; `None` when CREATE SINK cannot name
    /// it — no sink, or one only the engine builds (`client`, `memory`).
    fn sink_options(&self) -> Option<&'static OptionSet> {
        None
    }

    /// Checks a stream's option values (the keys are known by then).
    fn check_source_options(&self, _options: &BTreeMap<String, String>) -> Result<()> {
        Ok(())
    }

    /// Checks a sink's option values (the keys are known by then).
    fn check_sink_options(&self, _options: &BTreeMap<String, String>) -> Result<()> {
        Ok(())
    }

    /// CREATE STREAM: a schema the connector fixes (the column list may
    /// then be omitted, and must match it if given), e.g. Nexmark's tables.
    fn fixed_schema(&self, _options: &BTreeMap<String, String>) -> Result<Option<SchemaRef>> {
        Ok(None)
    }

    /// CREATE STREAM: columns every stream of this connector has besides the
    /// declared ones, hidden from `SELECT *` (Kafka's `_kafka_*`).
    fn metadata_columns(&self) -> Vec<Field> {
        Vec::new()
    }

    /// CREATE STREAM: checks the whole definition (e.g. that an option
    /// that needs the rows' event time has a WATERMARK to go by).
    fn check_stream(&self, _def: &sluice_plan::catalog::StreamDef) -> Result<()> {
        Ok(())
    }

    /// CREATE STREAM: checks the options against the stream's columns (the
    /// connector produces these: computed columns are left out).
    fn check_stream_schema(&self, _options: &BTreeMap<String, String>, _columns: &Schema) -> Result<()> {
        Ok(())
    }

    /// Whether `INSERT INTO` appends to a stream of this connector (one
    /// written by a pipeline takes none, whatever its connector).
    fn accepts_insert(&self) -> bool {
        false
    }

    /// Whether a source of this connector can change its parallelism while
    /// keeping its positions (`ALTER PIPELINE … SET PARALLELISM`; its
    /// reader implements `SourceReader::restore_rescaled`).
    fn source_rescalable(&self) -> bool {
        false
    }

    /// The options of a stream's source rewound to `timestamp` (`ALTER
    /// PIPELINE … RESET SOURCE … TO TIMESTAMP`): a reader built from them
    /// starts at the first record at or after that time. Default: the
    /// connector cannot rewind (`0A000`).
    fn rewind_options(&self, _spec: &SourceSpec, _timestamp: &str) -> Result<BTreeMap<String, String>> {
        Err(sluice_types::Error::unsupported(format!(
            "a {} source cannot be rewound to a time (Kafka, Nexmark and memory sources can)",
            self.name()
        )))
    }

    /// Whether a sink of this connector with `options` takes an updating
    /// query's changelog: rows whose first column, `op`, says what each
    /// does (`+I`, `-U`, `+U`, `-D`; `SinkSpec::changelog` is set). An
    /// append-only sink (the default) gets such a query refused when it is
    /// planned, naming the operator that makes it updating.
    fn sink_accepts_changelog(&self, _options: &BTreeMap<String, String>) -> bool {
        false
    }

    /// How many source instances can read a stream of it; the planner
    /// gives its source no more (`None`: as many as `SET parallelism`).
    fn source_readers_max(&self) -> Option<usize> {
        None
    }

    /// CREATE SINK: checks the options that name columns of the query's
    /// output, once the query is planned.
    fn check_sink_output(&self, _options: &BTreeMap<String, String>, _schema: &SchemaRef) -> Result<()> {
        Ok(())
    }

    /// The reader of one source instance.
    fn source(
        &self,
        _connectors: &Connectors,
        _spec: &SourceSpec,
        _schema: &SchemaRef,
        _ctx: &InstanceContext,
    ) -> Result<Box<dyn SourceReader>> {
        Err(Error::unsupported(format!(
            "connector '{}' is not a source",
            self.name()
        )))
    }

    /// The sink operator of one sink instance.
    fn sink(
        &self,
        _connectors: &Connectors,
        _spec: &SinkSpec,
        _schema: &SchemaRef,
        _ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        Err(Error::unsupported(format!("connector '{}' is not a sink", self.name())))
    }
}
