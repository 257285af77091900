//! The Kafka sink: one record per row (json or csv), the key from named
//! columns, the record timestamp from a column (e.g. `window_end`).
//!
//! Delivery is at least once by default: the idempotent producer retries
//! inside librdkafka, a record that fails for good fails the pipeline, and
//! [`KafkaSink::flush`] waits until the broker acknowledged every record
//! sent so far.
//!
//! With `'sink.delivery-guarantee' = 'exactly-once'` (needs checkpoints)
//! the rows between two barriers go into one Kafka transaction
//! (`transactional.id` = `<prefix>-<instance>`, stable across restarts):
//! pre-commit at the barrier flushes it and stores its rows in the
//! checkpoint; when the checkpoint completes the transaction commits, and
//! with it — atomically — a consumer-group offset of group
//! `<transactional.id>` (topic partition 0, offset = checkpoint id) that
//! records which checkpoint was committed. After a crash, the new producer
//! fences and aborts the old one's open transaction; if the restored
//! checkpoint's marker is not committed, its stored rows are sent again in a
//! new transaction with the marker, so a checkpoint's output is committed
//! exactly once whenever the crash happened.

use super::{Reporting, client_config, properties};
use crate::format::{RecordFormat, encode_rows};
use arrow::array::{Array, RecordBatch, TimestampMillisecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use sluice_dataflow::checkpoint::TaskState;
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
    /// Exactly-once: the transaction state.
    txn: Option<Transactions>,
}

/// Rows one transaction may hold (they are kept for the checkpoint).
pub const TRANSACTION_ROWS_MAX: usize = 1_000_000;
/// How long a transactional call to the broker may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);
const MARKER_KEY: &str = "kafka.transaction";

/// A sink instance's transactions (exactly-once).
struct Transactions {
    id: String,
    /// Reads and writes the commit marker (group = transactional id).
    marker: Arc<BaseConsumer>,
    initialized: bool,
    open: bool,
    /// Rows sent in the open transaction (stored at pre-commit).
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// The checkpoint the open transaction was pre-committed for.
    precommitted: Option<u64>,
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
    exactly_once: bool,
    transactional_prefix: Option<String>,
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
        let exactly_once = match options.get("sink.delivery-guarantee").map(String::as_str) {
            None | Some("at-least-once") => false,
            Some("exactly-once") => {
                if !crate::options::checkpoints_enabled(options)? {
                    return Err(Error::invalid_option(
                        "'sink.delivery-guarantee' = 'exactly-once' needs checkpoints; 'checkpoint.interval' is off",
                    ));
                }
                true
            }
            Some(other) => {
                return Err(Error::invalid_option(format!(
                    "'sink.delivery-guarantee' = '{other}' is not supported; use 'at-least-once' or 'exactly-once'"
                )));
            }
        };
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
        let transactional_prefix = options.get("transactional.id.prefix").cloned();
        Ok(Settings {
            topic,
            format,
            key,
            timestamp_column,
            properties,
            exactly_once,
            transactional_prefix,
        })
    }
}

impl KafkaSink {
    pub fn open(options: &BTreeMap<String, String>, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Self> {
        let s = Settings::parse(options, schema)?;
        let mut properties = s.properties.clone();
        let txn = if s.exactly_once {
            let prefix = s
                .transactional_prefix
                .clone()
                .unwrap_or_else(|| format!("sluice-{}-p{}", s.topic, ctx.pipeline.0));
            let id = format!("{prefix}-{}", ctx.instance);
            properties.insert("transactional.id".into(), id.clone());
            let mut marker_props = s.properties.clone();
            marker_props.retain(|k, _| {
                k.starts_with("bootstrap") || k.starts_with("security") || k.starts_with("sasl") || k.starts_with("ssl")
            });
            marker_props.insert("group.id".into(), id.clone());
            marker_props.insert("isolation.level".into(), "read_committed".into());
            marker_props.insert("enable.auto.commit".into(), "false".into());
            let marker: BaseConsumer = client_config(&marker_props)
                .create()
                .map_err(|e| Error::invalid_option(format!("Kafka marker consumer: {e}")))?;
            Some(Transactions {
                id,
                marker: Arc::new(marker),
                initialized: false,
                open: false,
                pending: Vec::new(),
                pending_rows: 0,
                precommitted: None,
            })
        } else {
            None
        };
        let producer: ThreadedProducer<Reporting> = client_config(&properties)
            .create_with_context(Reporting::new(ctx.metrics.clone()))
            .map_err(|e| Error::invalid_option(format!("Kafka producer: {e}")))?;
        Ok(KafkaSink {
            txn,
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

impl KafkaSink {
    /// Runs a blocking transactional call on the producer.
    async fn txn_call<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce(&ThreadedProducer<Reporting>) -> rdkafka::error::KafkaResult<T> + Send + 'static,
    ) -> Result<T> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || f(&producer))
            .await
            .map_err(|e| Error::internal(format!("Kafka {what}: {e}")))?
            .map_err(|e| Error::external(format!("Kafka: {what} on topic {}: {e}", self.topic)))
    }

    /// Fences earlier producers of this transactional id (aborting their
    /// open transaction), once.
    async fn init_transactions(&mut self) -> Result<()> {
        let Some(t) = &self.txn else { return Ok(()) };
        if t.initialized {
            return Ok(());
        }
        self.txn_call("init transactions", |p| p.init_transactions(TXN_TIMEOUT))
            .await?;
        self.txn.as_mut().expect("checked").initialized = true;
        Ok(())
    }

    async fn begin_if_needed(&mut self) -> Result<()> {
        self.init_transactions().await?;
        let Some(t) = &self.txn else { return Ok(()) };
        if t.open {
            return Ok(());
        }
        self.txn_call("begin transaction", |p| p.begin_transaction()).await?;
        self.txn.as_mut().expect("checked").open = true;
        Ok(())
    }

    /// The last checkpoint whose transaction committed (0: none).
    async fn committed_marker(&self) -> Result<u64> {
        let t = self.txn.as_ref().expect("exactly-once");
        let (marker, topic) = (t.marker.clone(), self.topic.clone());
        let offsets = tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&topic, 0);
            marker.committed_offsets(tpl, TXN_TIMEOUT)
        })
        .await
        .map_err(|e| Error::internal(format!("Kafka marker: {e}")))?
        .map_err(|e| Error::external(format!("Kafka: reading the commit marker of {}: {e}", t.id)))?;
        Ok(offsets
            .elements()
            .first()
            .and_then(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(o as u64),
                _ => None,
            })
            .unwrap_or(0))
    }

    /// Commits the open transaction with the marker of `checkpoint_id`.
    async fn commit_open(&mut self, checkpoint_id: u64) -> Result<()> {
        let t = self.txn.as_ref().expect("exactly-once");
        if !t.open {
            return Ok(());
        }
        let metadata = t
            .marker
            .group_metadata()
            .ok_or_else(|| Error::internal("Kafka marker consumer has no group metadata"))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(checkpoint_id as i64))
            .map_err(|e| Error::internal(e.to_string()))?;
        self.txn_call("commit the checkpoint marker", move |p| {
            p.send_offsets_to_transaction(&tpl, &metadata, TXN_TIMEOUT)
        })
        .await?;
        self.txn_call("commit transaction", |p| p.commit_transaction(TXN_TIMEOUT))
            .await?;
        let t = self.txn.as_mut().expect("exactly-once");
        t.open = false;
        t.pending.clear();
        t.pending_rows = 0;
        t.precommitted = None;
        Ok(())
    }
}

#[async_trait]
impl Operator for KafkaSink {
    fn commits_on_checkpoint(&self) -> bool {
        self.txn.is_some()
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        let Some(t) = &self.txn else { return Ok(state) };
        if !t.open {
            return Ok(state);
        }
        // Pre-commit: every record of the transaction is at the broker.
        self.flush().await?;
        let t = self.txn.as_mut().expect("checked");
        t.precommitted = Some(checkpoint_id);
        if let Some(first) = t.pending.first() {
            let rows = arrow::compute::concat_batches(&first.schema(), &t.pending)?;
            state.put_batch(MARKER_KEY, rows);
        }
        Ok(state)
    }

    async fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        if self.txn.as_ref().is_some_and(|t| t.precommitted == Some(checkpoint_id)) {
            self.commit_open(checkpoint_id).await?;
        }
        Ok(())
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if self.txn.is_none() {
            return Ok(());
        }
        self.init_transactions().await?;
        let Some((id, state)) = checkpoint else { return Ok(()) };
        let Some(rows) = state.batch(MARKER_KEY).cloned() else {
            return Ok(());
        };
        let committed = self.committed_marker().await?;
        if committed >= id {
            return Ok(());
        }
        tracing::info!(topic = %self.topic, checkpoint = id, rows = rows.num_rows(), "re-committing the restored checkpoint's transaction");
        self.begin_if_needed().await?;
        self.send_batch(&rows).await?;
        self.flush().await?;
        self.commit_open(id).await
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.txn.is_some() {
            self.begin_if_needed().await?;
            let t = self.txn.as_mut().expect("checked");
            t.pending_rows += batch.num_rows();
            if t.pending_rows > TRANSACTION_ROWS_MAX {
                return Err(Error::user(
                    sluice_types::SqlCode::ConfigurationLimitExceeded,
                    format!(
                        "a Kafka transaction would hold more than {TRANSACTION_ROWS_MAX} rows; lower 'checkpoint.interval'"
                    ),
                ));
            }
            t.pending.push(batch.clone());
        }
        self.send_batch(&batch).await
    }

    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.check_deliveries()
    }

    async fn process_end_of_input(&mut self, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.flush().await?;
        if self.txn.as_ref().is_some_and(|t| t.open) {
            // A bounded input ended: what came after the last checkpoint is
            // committed now (no replay can follow a clean end).
            let marker = self.committed_marker().await?;
            self.commit_open(marker).await?;
        }
        Ok(())
    }
}

impl KafkaSink {
    async fn send_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        self.check_deliveries()?;
        let values = encode_rows(self.format, batch)?;
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
}
