//! `file`: rolling part files in a local directory ([`crate::fs_sink`] on
//! [`crate::local_files`]), as the `hdfs` sink writes them on HDFS.

use super::{Connector, OptionSet};
use crate::data_plane::Connectors;
use crate::fs_sink::{FileStore, FileSystem, FsSinkSettings, RollingSink};
use arrow::datatypes::SchemaRef;
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::InstanceContext;
use sluice_plan::SinkSpec;
use sluice_types::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The options of the file-system sinks, with any connector-specific ones
/// first (`hdfs` adds `url`).
macro_rules! fs_sink_options {
    ($($extra:expr),*) => {
        $crate::connector::OptionSet::keys(&[
            $($extra,)*
            $crate::connector::option("path", "the directory the part files go to (required)"),
            $crate::connector::option(
                "format",
                "'parquet', 'json' (JSON lines) or 'csv' (default: json for file, parquet for hdfs)",
            ),
            $crate::connector::option(
                "rollover.size",
                "a file is finished at this size (default 128MB; also the bound on bytes held)",
            ),
            $crate::connector::option(
                "rollover.interval",
                "a file is finished this long after its first row (default 1min)",
            ),
            $crate::connector::option("partition.by", "a column: rows go into 'col=value' directories"),
            $crate::connector::option(
                "retry.timeout",
                "how long a failing write is retried before the pipeline fails (default 10min)",
            ),
            $crate::connector::option(
                "sink.delivery-guarantee",
                "'at-least-once'; files are committed exactly once whenever the pipeline checkpoints",
            ),
        ])
    };
}

/// A sink of rolling part files on a file system: `file` (a local
/// directory) and `hdfs` are this connector with their own name, file
/// system and options.
pub struct FsSinkConnector {
    pub name: &'static str,
    pub fs: FileSystem,
    pub options: &'static OptionSet,
}

static SINK_OPTIONS: OptionSet = fs_sink_options!();

/// `file`.
pub static FILE: FsSinkConnector = FsSinkConnector {
    name: "file",
    fs: FileSystem::Local,
    options: &SINK_OPTIONS,
};

impl Connector for FsSinkConnector {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Its rows are written as they come, the op column with them.
    fn sink_accepts_changelog(&self, _options: &BTreeMap<String, String>) -> bool {
        true
    }

    fn sink_options(&self) -> Option<&'static OptionSet> {
        Some(self.options)
    }

    /// The partition column must be in the query's output.
    fn check_sink_output(&self, options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<()> {
        FsSinkSettings::parse(self.fs, options, schema).map(|_| ())
    }

    fn sink(
        &self,
        _connectors: &Connectors,
        spec: &SinkSpec,
        schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        Ok(Box::new(open_fs_sink(self.fs, &spec.options, schema, ctx)?))
    }
}

/// A file-system sink on HDFS or a local directory, as `options` say.
fn open_fs_sink(
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
