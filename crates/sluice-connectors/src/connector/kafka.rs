//! `kafka`: a source reading each topic partition in one source instance,
//! and a sink, on `rdkafka` ([`crate::kafka`]). `'properties.*'` options go
//! to librdkafka as they are; every stream has the record's partition,
//! offset, timestamp and key as hidden metadata columns.

use super::{Connector, OptionSet, option};
use crate::data_plane::Connectors;
use crate::kafka::{KafkaReader, KafkaSink, KafkaSourceConfig, check_sink, metadata_fields};
use arrow::datatypes::{Field, SchemaRef};
use sluice_dataflow::Operator;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::source::SourceReader;
use sluice_plan::{SinkSpec, SourceSpec};
use sluice_types::Result;
use std::collections::BTreeMap;

pub struct Kafka;

const PROPERTIES: &[super::OptionDoc] = &[option(
    "properties.",
    "passed to librdkafka without the prefix; 'properties.bootstrap.servers' is required",
)];

static SOURCE_OPTIONS: OptionSet = OptionSet {
    keys: &[
        option("topic", "the topic to read (required)"),
        option(
            "format",
            "'json' (default), 'csv' or 'raw': how a record's value decodes",
        ),
        option(
            "scan.startup.mode",
            "'earliest' (default), 'latest', 'group-offsets' or 'timestamp'",
        ),
        option(
            "scan.startup.timestamp",
            "with 'timestamp': a time or epoch ms; each partition starts at its first record at or after it",
        ),
        option(
            "format.error.policy",
            "a record that does not decode: 'skip' (default, counted), 'fail' or 'dead_letter'",
        ),
        option("dead_letter.topic", "with 'dead_letter': where undecodable records go"),
    ],
    prefixes: PROPERTIES,
};

static SINK_OPTIONS: OptionSet = OptionSet {
    keys: &[
        option("topic", "the topic to write (required)"),
        option(
            "format",
            "'json' (default), 'csv', 'raw', or 'debezium-json' (each row in Debezium's envelope: takes a changelog)",
        ),
        option("key", "'col[, col…]': the columns of the record key"),
        option("key.format", "the key's format; 'raw': the text of a single key column"),
        option(
            "timestamp.column",
            "the column of the record timestamp (default: the time of sending)",
        ),
        option(
            "sink.delivery-guarantee",
            "'at-least-once' (default) or 'exactly-once' (a transaction per checkpoint)",
        ),
        option(
            "transactional.id.prefix",
            "exactly-once: the prefix of the producers' transactional ids",
        ),
        option(
            "sink.transaction.max-rows",
            "exactly-once: rows one transaction holds (1 to 1 000 000, the default)",
        ),
    ],
    prefixes: PROPERTIES,
};

impl Connector for Kafka {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn source_options(&self) -> Option<&'static OptionSet> {
        Some(&SOURCE_OPTIONS)
    }

    fn sink_options(&self) -> Option<&'static OptionSet> {
        Some(&SINK_OPTIONS)
    }

    fn check_source_options(&self, options: &BTreeMap<String, String>) -> Result<()> {
        KafkaSourceConfig::parse("stream", options).map(|_| ())
    }

    /// Partitions are spread over instances by index: a new parallelism
    /// re-splits them, each going on from its stored offset.
    fn source_rescalable(&self) -> bool {
        true
    }

    /// Start mode `timestamp` at `timestamp`: each partition from its
    /// first record at or after it (Kafka's offsets for times).
    fn rewind_options(&self, spec: &SourceSpec, timestamp: &str) -> Result<BTreeMap<String, String>> {
        let mut rewound = spec.options.clone();
        rewound.insert("scan.startup.mode".into(), "timestamp".into());
        rewound.insert("scan.startup.timestamp".into(), timestamp.to_string());
        KafkaSourceConfig::parse("stream", &rewound)?;
        Ok(rewound)
    }

    fn metadata_columns(&self) -> Vec<Field> {
        metadata_fields()
    }

    /// In Debezium's format: a retracted row is written as a delete.
    fn sink_accepts_changelog(&self, options: &BTreeMap<String, String>) -> bool {
        crate::kafka::accepts_changelog(options)
    }

    /// Key and timestamp columns must be in the query's output.
    fn check_sink_output(&self, options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<()> {
        check_sink(options, schema)
    }

    fn source(
        &self,
        _connectors: &Connectors,
        spec: &SourceSpec,
        schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn SourceReader>> {
        let config = KafkaSourceConfig::parse(&spec.stream, &spec.options)?;
        Ok(Box::new(KafkaReader::start(config, schema, ctx)?))
    }

    fn sink(
        &self,
        _connectors: &Connectors,
        spec: &SinkSpec,
        schema: &SchemaRef,
        ctx: &InstanceContext,
    ) -> Result<Box<dyn Operator>> {
        Ok(Box::new(KafkaSink::open(&spec.options, schema, ctx, spec.changelog)?))
    }
}
