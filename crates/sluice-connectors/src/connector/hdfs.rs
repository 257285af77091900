//! `hdfs`: rolling Parquet / JSON lines / CSV files on HDFS
//! ([`crate::fs_sink`] on [`crate::hdfs`], `hdfs-native`), visible only
//! when complete, committed in two phases with checkpoints.

use super::{Connector, OptionSet, option};
use crate::factory::Connectors;
use crate::fs_sink::{FileSystem, FsSinkSettings, open_fs_sink};
use arrow::datatypes::SchemaRef;
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::InstanceContext;
use sluice_plan::SinkSpec;
use sluice_types::Result;
use std::collections::BTreeMap;

pub struct Hdfs;

static SINK_OPTIONS: OptionSet = fs_sink_options!(option("url", "the NameNode: 'hdfs://host:port' (required)"));

impl Connector for Hdfs {
    fn name(&self) -> &'static str {
        "hdfs"
    }

    fn sink_options(&self) -> Option<&'static OptionSet> {
        Some(&SINK_OPTIONS)
    }

    /// The partition column must be in the query's output.
    fn check_sink_output(&self, options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<()> {
        FsSinkSettings::parse(FileSystem::Hdfs, options, schema).map(|_| ())
    }

    fn sink(
        &self,
        _connectors: &Connectors,
        spec: &SinkSpec,
        schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        Ok(Box::new(open_fs_sink(FileSystem::Hdfs, &spec.options, schema, ctx)?))
    }
}
