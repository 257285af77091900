//! The Kafka connector on `rdkafka` (librdkafka): a source reading each
//! topic partition in one source instance, and a sink.
//!
//! Options follow Flink's names: `topic`, `'properties.*'` (passed through
//! to librdkafka), `format`, `'scan.startup.mode'`.

pub mod replay;
mod sink;
mod source;

pub use sink::{
    DEBEZIUM_JSON, KafkaSink, TRANSACTION_ROWS_MAX, accepts_changelog, admit_rows, check as check_sink, debezium_rows,
};
pub use source::KafkaReader;

use crate::format::RecordFormat;
use arrow::datatypes::{DataType, Field, TimeUnit};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use sluice_dataflow::metrics::TaskMetrics;
use sluice_types::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The client context of every Kafka client of a task: librdkafka's errors
/// (broker down, …) become the task's reported condition, and a failed
/// delivery is kept for the sink to raise.
pub struct Reporting {
    metrics: Arc<TaskMetrics>,
    troubled: AtomicBool,
    delivery_error: Mutex<Option<String>>,
}

impl Reporting {
    pub fn new(metrics: Arc<TaskMetrics>) -> Self {
        Reporting {
            metrics,
            troubled: AtomicBool::new(false),
            delivery_error: Mutex::new(None),
        }
    }

    /// Whether a condition was reported and not cleared yet.
    pub fn troubled(&self) -> bool {
        self.troubled.load(Ordering::Relaxed)
    }

    pub fn report(&self, condition: String) {
        self.troubled.store(true, Ordering::Relaxed);
        self.metrics.set_condition(Some(condition));
    }

    /// The problem passed (e.g. the broker answers again).
    pub fn clear(&self) {
        if self.troubled.swap(false, Ordering::Relaxed) {
            self.metrics.set_condition(None);
        }
    }

    /// The first delivery that failed for good, if any (taken).
    pub fn take_delivery_error(&self) -> Option<String> {
        self.delivery_error.lock().expect("delivery error lock").take()
    }
}

impl ClientContext for Reporting {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka client error");
        self.report(format!("kafka: {reason}; retrying"));
    }
}

impl ConsumerContext for Reporting {}

impl ProducerContext for Reporting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        match result {
            // Delivered: whatever the client reported has passed.
            Ok(_) => self.clear(),
            Err((error, _)) => {
                let mut e = self.delivery_error.lock().expect("delivery error lock");
                if e.is_none() {
                    *e = Some(error.to_string());
                }
            }
        }
    }
}

/// The record's partition, offset, timestamp and key, as columns every
/// Kafka stream has. They are hidden from `SELECT *` unless declared.
pub fn metadata_fields() -> Vec<Field> {
    let hidden = HashMap::from([(sluice_plan::catalog::HIDDEN_COLUMN.to_string(), "true".to_string())]);
    vec![
        Field::new("_kafka_partition", DataType::Int32, false),
        Field::new("_kafka_offset", DataType::Int64, false),
        Field::new(
            "_kafka_timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        ),
        Field::new("_kafka_key", DataType::Utf8, true),
    ]
    .into_iter()
    .map(|f| f.with_metadata(hidden.clone()))
    .collect()
}

/// Whether a column name is one of the record metadata columns.
pub fn is_metadata_column(name: &str) -> bool {
    matches!(
        name,
        "_kafka_partition" | "_kafka_offset" | "_kafka_timestamp" | "_kafka_key"
    )
}

/// Where a source starts reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupMode {
    Earliest,
    Latest,
    /// The consumer group's committed offsets (else `auto.offset.reset`).
    GroupOffsets,
    /// The first record whose timestamp is at or after this (ms).
    Timestamp(i64),
}

/// What to do with a record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// Drop it, counted in the task's `records_malformed`.
    Skip,
    /// Fail the pipeline, naming the partition and offset.
    Fail,
    /// Write its bytes and the error to this topic, and go on.
    DeadLetter(String),
}

/// A source's settings, checked.
#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    pub topic: String,
    pub format: RecordFormat,
    pub startup: StartupMode,
    pub policy: ErrorPolicy,
    /// librdkafka properties (without the `properties.` prefix).
    pub properties: BTreeMap<String, String>,
    /// Whether the user named a consumer group (then offsets are committed
    /// to it as records are handed to the pipeline).
    pub group_given: bool,
}

fn required<'a>(options: &'a BTreeMap<String, String>, key: &str, what: &str) -> Result<&'a String> {
    options
        .get(key)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| Error::invalid_option(format!("the Kafka {what} needs a '{key}' option")))
}

/// The `'properties.*'` options without their prefix; bootstrap servers required.
pub fn properties(options: &BTreeMap<String, String>, what: &str) -> Result<BTreeMap<String, String>> {
    required(options, "properties.bootstrap.servers", what)?;
    Ok(options
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("properties.").map(|k| (k.to_string(), v.clone())))
        .collect())
}

/// A librdkafka client configuration from properties.
pub fn client_config(properties: &BTreeMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in properties {
        c.set(k, v);
    }
    c
}

impl KafkaSourceConfig {
    pub fn parse(stream: &str, options: &BTreeMap<String, String>) -> Result<Self> {
        let topic = required(options, "topic", "source")?.clone();
        let format = RecordFormat::parse(options.get("format").map(String::as_str).unwrap_or("json"))?;
        let startup = match options
            .get("scan.startup.mode")
            .map(String::as_str)
            .unwrap_or("earliest")
        {
            "earliest" | "earliest-offset" => StartupMode::Earliest,
            "latest" | "latest-offset" => StartupMode::Latest,
            "group-offsets" => StartupMode::GroupOffsets,
            "timestamp" => {
                let text = required(options, "scan.startup.timestamp", "source in 'timestamp' mode")?;
                StartupMode::Timestamp(parse_timestamp_ms(text)?)
            }
            other => {
                return Err(Error::invalid_option(format!(
                    "'scan.startup.mode' = '{other}' is not supported; use earliest, latest, group-offsets or timestamp"
                )));
            }
        };
        if options.contains_key("scan.startup.timestamp") && !matches!(startup, StartupMode::Timestamp(_)) {
            return Err(Error::invalid_option(
                "'scan.startup.timestamp' needs 'scan.startup.mode' = 'timestamp'",
            ));
        }
        let policy = match options.get("format.error.policy").map(String::as_str).unwrap_or("skip") {
            "skip" => ErrorPolicy::Skip,
            "fail" => ErrorPolicy::Fail,
            "dead_letter" | "dead-letter" => ErrorPolicy::DeadLetter(
                required(
                    options,
                    "dead_letter.topic",
                    "source with 'format.error.policy' = 'dead_letter'",
                )?
                .clone(),
            ),
            other => {
                return Err(Error::invalid_option(format!(
                    "'format.error.policy' = '{other}' is not supported; use skip, fail or dead_letter"
                )));
            }
        };
        if options.contains_key("dead_letter.topic") && !matches!(policy, ErrorPolicy::DeadLetter(_)) {
            return Err(Error::invalid_option(
                "'dead_letter.topic' needs 'format.error.policy' = 'dead_letter'",
            ));
        }
        let mut properties = properties(options, "source")?;
        let group_given = properties.contains_key("group.id");
        if !group_given {
            properties.insert("group.id".into(), format!("sluice-{stream}"));
        }
        if startup == StartupMode::GroupOffsets && !group_given {
            return Err(Error::invalid_option(
                "'scan.startup.mode' = 'group-offsets' needs 'properties.group.id'",
            ));
        }
        Ok(KafkaSourceConfig {
            topic,
            format,
            startup,
            policy,
            properties,
            group_given,
        })
    }
}

/// `'2026-11-30 12:00:00'`, `'2026-11-30T12:00:00.250Z'`, an RFC 3339 time
/// with an offset, or epoch milliseconds. Times without an offset are UTC.
pub fn parse_timestamp_ms(text: &str) -> Result<i64> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(dt.timestamp_millis());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d",
    ] {
        if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(t, f) {
            return Ok(dt.and_utc().timestamp_millis());
        }
        if let Ok(d) = chrono::NaiveDate::parse_from_str(t, f) {
            return Ok(d.and_hms_opt(0, 0, 0).expect("midnight").and_utc().timestamp_millis());
        }
    }
    Err(Error::invalid_option(format!(
        "'scan.startup.timestamp' = '{text}' is neither a time like '2026-11-30 12:00:00' nor epoch milliseconds"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// librdkafka is compiled from source by its configure script (see the
    /// workspace Cargo.toml), which leaves zlib out without a word when it
    /// finds no zlib headers; a consumer then cannot read gzip-compressed
    /// topics. Snappy and LZ4 are bundled; zstd is not built.
    #[test]
    fn librdkafka_reads_gzip_snappy_and_lz4_topics() {
        let native = ClientConfig::new().create_native_config().unwrap();
        let features = native.get("builtin.features").unwrap();
        for codec in ["gzip", "snappy", "lz4"] {
            assert!(
                features.split(',').any(|f| f == codec),
                "librdkafka was built without {codec}: builtin.features = {features}"
            );
        }
    }

    #[test]
    fn startup_timestamp_forms() {
        assert_eq!(parse_timestamp_ms("1796040000000").unwrap(), 1_796_040_000_000);
        assert_eq!(parse_timestamp_ms("2026-11-30 12:00:00").unwrap(), 1_796_040_000_000);
        assert_eq!(parse_timestamp_ms("2026-11-30T12:00:00.5Z").unwrap(), 1_796_040_000_500);
        assert_eq!(
            parse_timestamp_ms("2026-11-30T13:00:00+01:00").unwrap(),
            1_796_040_000_000
        );
        assert!(parse_timestamp_ms("yesterday").is_err());
    }

    #[test]
    fn source_options_are_checked() {
        let base = [("topic", "t"), ("properties.bootstrap.servers", "localhost:9092")];
        let c = KafkaSourceConfig::parse("s", &opts(&base)).unwrap();
        assert_eq!(c.startup, StartupMode::Earliest);
        assert_eq!(c.properties["group.id"], "sluice-s");
        assert!(!c.group_given);
        let e = KafkaSourceConfig::parse("s", &opts(&[("topic", "t")])).unwrap_err();
        assert!(e.to_string().contains("properties.bootstrap.servers"), "{e}");
        let mut o = opts(&base);
        o.insert("scan.startup.mode".into(), "timestamp".into());
        assert!(
            KafkaSourceConfig::parse("s", &o)
                .unwrap_err()
                .to_string()
                .contains("scan.startup.timestamp")
        );
        o.insert("scan.startup.timestamp".into(), "2026-11-30 12:00:00".into());
        assert_eq!(
            KafkaSourceConfig::parse("s", &o).unwrap().startup,
            StartupMode::Timestamp(1_796_040_000_000)
        );
        let mut o = opts(&base);
        o.insert("format.error.policy".into(), "dead_letter".into());
        assert!(
            KafkaSourceConfig::parse("s", &o)
                .unwrap_err()
                .to_string()
                .contains("dead_letter.topic")
        );
        o.insert("dead_letter.topic".into(), "dlq".into());
        assert_eq!(
            KafkaSourceConfig::parse("s", &o).unwrap().policy,
            ErrorPolicy::DeadLetter("dlq".into())
        );
        let mut o = opts(&base);
        o.insert("scan.startup.mode".into(), "group-offsets".into());
        assert!(KafkaSourceConfig::parse("s", &o).is_err());
        o.insert("properties.group.id".into(), "g".into());
        assert!(KafkaSourceConfig::parse("s", &o).unwrap().group_given);
    }
}
