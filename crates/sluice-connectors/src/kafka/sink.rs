//! The Kafka sink: one record per row (json or csv), the key from named
//! columns, the record timestamp from a column (e.g. `window_end`).
//!
//! Delivery is at least once: the idempotent producer retries inside
//! librdkafka, a record that fails for good fails the pipeline, and
//! [`KafkaSink::flush`] waits until the broker acknowledged every record
//! sent so far. `flush` is the seam for two-phase commit: with checkpoints
//! it becomes the pre-commit of a Kafka transaction, and committing the
//! transaction the second phase.

use super::{Reporting, client_config, properties};
use crate::format::{RecordFormat, encode_rows};
use arrow::array::{Array, RecordBatch, TimestampMillisecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use async_trait::async_trait;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::{Operator, OperatorContext};
use sluice_types::{Error, Result, Watermark};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a flush waits for the broker's acknowledgements.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// The Kafka sink instance.
pub struct KafkaSink {
    producer: Arc<ThreadedProducer<Reporting>>,
    topic: String,
    format: RecordFormat,
    key: Option<KeySpec>,
    timestamp_column: Option<usize>,
    unflushed: bool,
}

/// Which columns make the record key, and how they are written.
struct KeySpec {
    columns: Vec<usize>,
    format: RecordFormat,
}

/// Checks a sink's options against its input schema.
pub fn check(options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<()> {
    Settings::parse(options, schema).map(|_| ())
}

struct Settings {
    topic: String,
    format: RecordFormat,
    key: Option<KeySpec>,
    timestamp_column: Option<usize>,
    properties: BTreeMap<String, String>,
}

impl Settings {
    fn parse(options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<Self> {
        let topic = options
            .get("topic")
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| Error::invalid_option("the Kafka sink needs a 'topic' option"))?
            .clone();
        let format = RecordFormat::parse(options.get("format").map(String::as_str).unwrap_or("json"))?;
        format.check_schema(schema)?;
        match options.get("sink.delivery-guarantee").map(String::as_str) {
            None | Some("at-least-once") => {}
            Some("exactly-once") => {
                return Err(Error::unsupported(
                    "'sink.delivery-guarantee' = 'exactly-once' needs checkpoints, which Sluice does not have yet; use 'at-least-once'",
                ));
            }
            Some(other) => {
                return Err(Error::invalid_option(format!(
                    "'sink.delivery-guarantee' = '{other}' is not supported; use 'at-least-once'"
                )));
            }
        }
        let column = |name: &str, what: &str| {
            let name = name.trim().trim_matches('"');
            schema.index_of(name).map_err(|_| {
                let known: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                Error::invalid_option(format!(
                    "{what} column \"{name}\" is not in the query's output ({})",
                    known.join(", ")
                ))
            })
        };
        let key = match options.get("key") {
            None => None,
            Some(list) => {
                let columns = list.split(',').map(|c| column(c, "key")).collect::<Result<Vec<_>>>()?;
                let format = match options.get("key.format").map(String::as_str) {
                    None => format,
                    Some(f) => RecordFormat::parse(f)?,
                };
                if format == RecordFormat::Raw
                    && (columns.len() != 1
                        || !matches!(schema.field(columns[0]).data_type(), DataType::Utf8 | DataType::Binary))
                {
                    return Err(Error::invalid_option(
                        "'key.format' = 'raw' needs exactly one TEXT or BYTEA key column",
                    ));
                }
                Some(KeySpec { columns, format })
            }
        };
        if key.is_none() && options.contains_key("key.format") {
            return Err(Error::invalid_option("'key.format' needs a 'key' option"));
        }
        let timestamp_column = match options.get("timestamp.column") {
            None => None,
            Some(name) => {
                let i = column(name, "timestamp")?;
                if !matches!(schema.field(i).data_type(), DataType::Timestamp(_, _)) {
                    return Err(Error::invalid_option(format!(
                        "timestamp column \"{name}\" must be a TIMESTAMP, not {}",
                        schema.field(i).data_type()
                    )));
                }
                Some(i)
            }
        };
        let mut properties = properties(options, "sink")?;
        // Broker-side retries without duplicates, unless the user says otherwise.
        properties
            .entry("enable.idempotence".into())
            .or_insert_with(|| "true".into());
        Ok(Settings {
            topic,
            format,
            key,
            timestamp_column,
            properties,
        })
    }
}

impl KafkaSink {
    pub fn open(options: &BTreeMap<String, String>, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Self> {
        let s = Settings::parse(options, schema)?;
        let producer: ThreadedProducer<Reporting> = client_config(&s.properties)
            .create_with_context(Reporting::new(ctx.metrics.clone()))
            .map_err(|e| Error::invalid_option(format!("Kafka producer: {e}")))?;
        Ok(KafkaSink {
            producer: Arc::new(producer),
            topic: s.topic,
            format: s.format,
            key: s.key,
            timestamp_column: s.timestamp_column,
            unflushed: false,
        })
    }

    fn check_deliveries(&self) -> Result<()> {
        match self.producer.context().take_delivery_error() {
            Some(e) => Err(Error::external(format!(
                "Kafka: a record to topic {} failed: {e}",
                self.topic
            ))),
            None => Ok(()),
        }
    }

    /// Waits until the broker acknowledged every record sent so far.
    pub async fn flush(&mut self) -> Result<()> {
        if !self.unflushed {
            return Ok(());
        }
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.flush(FLUSH_TIMEOUT))
            .await
            .map_err(|e| Error::internal(format!("Kafka flush: {e}")))?
            .map_err(|e| Error::external(format!("Kafka: flushing topic {}: {e}", self.topic)))?;
        self.unflushed = false;
        self.check_deliveries()
    }
}

#[async_trait]
impl Operator for KafkaSink {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.check_deliveries()?;
        let values = encode_rows(self.format, &batch)?;
        let keys = match &self.key {
            Some(k) => Some(encode_rows(k.format, &batch.project(&k.columns)?)?),
            None => None,
        };
        let timestamps = match self.timestamp_column {
            Some(i) => {
                let ms = cast(batch.column(i), &DataType::Timestamp(TimeUnit::Millisecond, None))?;
                let ms = ms
                    .as_any()
                    .downcast_ref::<TimestampMillisecondArray>()
                    .ok_or_else(|| Error::internal("timestamp column did not cast to milliseconds"))?
                    .clone();
                Some(ms)
            }
            None => None,
        };
        for (row, value) in values.iter().enumerate() {
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic).payload(value.as_slice());
            if let Some(keys) = &keys {
                record = record.key(keys[row].as_slice());
            }
            if let Some(ts) = &timestamps
                && ts.is_valid(row)
            {
                record = record.timestamp(ts.value(row));
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // librdkafka's queue is full (bounded by
                        // queue.buffering.max.*): wait for deliveries.
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((e, _)) => {
                        return Err(Error::external(format!(
                            "Kafka: cannot send to topic {}: {e}",
                            self.topic
                        )));
                    }
                }
            }
        }
        self.unflushed = true;
        Ok(())
    }

    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.check_deliveries()
    }

    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.flush().await
    }
}
