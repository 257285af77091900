//! `hdfs`: rolling Parquet / JSON lines / CSV files on HDFS
//! ([`crate::fs_sink`] on [`crate::hdfs`], `hdfs-native`), visible only
//! when complete, committed in two phases with checkpoints.

use super::file::FsSinkConnector;
use super::{OptionSet, option};
use crate::fs_sink::FileSystem;

static SINK_OPTIONS: OptionSet = fs_sink_options!(option("url", "the NameNode: 'hdfs://host:port' (required)"));

/// `hdfs`: the file-system sink on HDFS.
pub static HDFS: FsSinkConnector = FsSinkConnector {
    name: "hdfs",
    fs: FileSystem::Hdfs,
    options: &SINK_OPTIONS,
};
