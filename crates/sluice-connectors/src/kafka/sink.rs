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
//!
//! If recovery has to fall back to a checkpoint older than the committed
//! marker (the newer ones are corrupt or lost), the committed records of
//! the newer checkpoints are read back and replayed rows equal to them are
//! dropped (see [`super::replay`]).

use super::replay::{AFTER_HEADER, ReplayFilter, TXN_HEADER, end_offsets, read_committed_since};
use super::{Reporting, client_config, properties};
use crate::format::{RecordFormat, change_ops, encode_rows};
use arrow::array::{Array, RecordBatch, TimestampMillisecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
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
    /// `format = 'debezium-json'`: each row in Debezium's envelope.
    debezium: bool,
    /// `format = 'upsert-json'`: the latest row per key, deletes as
    /// tombstones (Flink's upsert-kafka).
    upsert: bool,
    /// The rows are a changelog (their first column is the op).
    changelog: bool,
    key: Option<KeySpec>,
    timestamp_column: Option<usize>,
    unflushed: bool,
    /// Exactly-once: the transaction state.
    txn: Option<Transactions>,
}

/// Rows one transaction may hold (they are kept for the checkpoint);
/// `'sink.transaction.max-rows'` may lower it.
pub const TRANSACTION_ROWS_MAX: usize = 1_000_000;
/// Checkpoints' worth of rows the replay filter may hold after falling
/// back past committed checkpoints (× the transaction bound).
const REPLAY_EPOCHS_MAX: u64 = sluice_dataflow::checkpoint::coordinator::CHECKPOINTS_RETAINED_DEFAULT as u64;
/// How long a transactional call to the broker may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);
const MARKER_KEY: &str = "kafka.transaction";
/// Checkpoint keys: the `after` header of the stored transaction's rows,
/// the topic's end offsets at the barrier (where records written after
/// the checkpoint start, at the earliest), the replay filter's rest.
const MARKER_AFTER_KEY: &str = "kafka.transaction.after";
const END_OFFSETS_KEY: &str = "kafka.end_offsets";
const REPLAY_KEY: &str = "kafka.replay_filter";

/// Admits `rows` more rows into a transaction holding `pending` rows, at
/// most `max` in all; the error names the bound and the remedy.
pub fn admit_rows(pending: usize, rows: usize, max: usize) -> Result<usize> {
    let total = pending.saturating_add(rows);
    if total > max {
        return Err(Error::user(
            sluice_types::SqlCode::ConfigurationLimitExceeded,
            format!(
                "a Kafka transaction would hold more than {max} rows ('sink.transaction.max-rows'); lower 'checkpoint.interval'"
            ),
        ));
    }
    Ok(total)
}

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
    /// The last checkpoint committed or restored: the `after` header of
    /// the records written now.
    after: u64,
    /// Bound on `pending_rows`.
    rows_max: usize,
    /// Client properties (bootstrap, security) for reading back.
    client: BTreeMap<String, String>,
    /// Records committed after the restored checkpoint that the replay
    /// will produce again (empty normally).
    replay: ReplayFilter,
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

/// The sink format that writes a changelog: each row in Debezium's JSON
/// envelope.
pub const DEBEZIUM_JSON: &str = "debezium-json";

/// The sink format that writes a changelog as upserts: each `+I`/`+U` row
/// as the JSON value of its key, each `-D` as a tombstone (the key with a
/// null value), `-U` not at all (the `+U` after it overwrites the key),
/// as Flink's upsert-kafka connector writes a table with a primary key.
pub const UPSERT_JSON: &str = "upsert-json";

/// Whether a sink with `options` takes a changelog: in Debezium's format,
/// or as upserts.
pub fn accepts_changelog(options: &BTreeMap<String, String>) -> bool {
    options
        .get("format")
        .is_some_and(|f| f.eq_ignore_ascii_case(DEBEZIUM_JSON) || f.eq_ignore_ascii_case(UPSERT_JSON))
}

/// An upsert sink's changelog without its `-U` rows (the `+U` that
/// follows each overwrites the key).
pub fn upsert_rows(batch: &RecordBatch) -> Result<RecordBatch> {
    let keep: Vec<bool> = change_ops(batch)?
        .iter()
        .map(|op| *op != sluice_plan::ChangeOp::UpdateBefore)
        .collect();
    Ok(arrow::compute::filter_record_batch(
        batch,
        &arrow::array::BooleanArray::from(keep),
    )?)
}

/// Each row of `batch` in Debezium's JSON envelope, as Flink's
/// `debezium-json` format writes it: an added row (`+I`, `+U`, or any row
/// of an append-only input) as `{"before":null,"after":{…},"op":"c"}`, a
/// retracted one (`-U`, `-D`) as `{"before":{…},"after":null,"op":"d"}` —
/// an update is a delete and a create. With `changelog`, the first column
/// is the op and is not written.
pub fn debezium_rows(batch: &RecordBatch, changelog: bool) -> Result<Vec<Vec<u8>>> {
    let (ops, data) = if changelog {
        (
            Some(change_ops(batch)?),
            batch.project(&(1..batch.num_columns()).collect::<Vec<_>>())?,
        )
    } else {
        (None, batch.clone())
    };
    let rows = encode_rows(RecordFormat::Json, &data)?;
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| {
            let retracts = ops.as_ref().is_some_and(|ops| ops[i].retracts());
            let (before, after, op): (&[u8], &[u8], &str) = if retracts {
                (&row, b"null", "d")
            } else {
                (b"null", &row, "c")
            };
            let mut out = Vec::with_capacity(row.len() + 40);
            out.extend_from_slice(b"{\"before\":");
            out.extend_from_slice(before);
            out.extend_from_slice(b",\"after\":");
            out.extend_from_slice(after);
            out.extend_from_slice(format!(",\"op\":\"{op}\"}}").as_bytes());
            Ok(out)
        })
        .collect()
}

struct Settings {
    topic: String,
    format: RecordFormat,
    debezium: bool,
    upsert: bool,
    key: Option<KeySpec>,
    timestamp_column: Option<usize>,
    properties: BTreeMap<String, String>,
    exactly_once: bool,
    transactional_prefix: Option<String>,
    rows_max: usize,
}

impl Settings {
    fn parse(options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<Self> {
        let topic = options
            .get("topic")
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| Error::invalid_option("the Kafka sink needs a 'topic' option"))?
            .clone();
        let (format, debezium, upsert) = match options.get("format").map(String::as_str) {
            Some(f) if f.eq_ignore_ascii_case(DEBEZIUM_JSON) => (RecordFormat::Json, true, false),
            Some(f) if f.eq_ignore_ascii_case(UPSERT_JSON) => (RecordFormat::Json, false, true),
            f => (
                RecordFormat::parse(f.unwrap_or("json")).map_err(|_| {
                    Error::invalid_option(format!(
                        "format '{}' is not supported by the Kafka sink; use json, csv, raw, {DEBEZIUM_JSON} or \
                         {UPSERT_JSON}",
                        f.unwrap_or_default()
                    ))
                })?,
                false,
                false,
            ),
        };
        if upsert && !options.contains_key("key") {
            return Err(Error::invalid_option(format!(
                "format '{UPSERT_JSON}' needs a 'key' option: the columns that identify a row of the result \
                 (its GROUP BY columns, or a top-N's partition columns and rank), as Flink's upsert-kafka needs \
                 a PRIMARY KEY"
            )));
        }
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
        let rows_max = match crate::options::u64_option(options, "sink.transaction.max-rows")? {
            None => TRANSACTION_ROWS_MAX,
            Some(n) if (1..=TRANSACTION_ROWS_MAX as u64).contains(&n) => n as usize,
            Some(n) => {
                return Err(Error::invalid_option(format!(
                    "option 'sink.transaction.max-rows' must be between 1 and {TRANSACTION_ROWS_MAX}, got {n}"
                )));
            }
        };
        if options.contains_key("sink.transaction.max-rows") && !exactly_once {
            return Err(Error::invalid_option(
                "'sink.transaction.max-rows' needs 'sink.delivery-guarantee' = 'exactly-once'",
            ));
        }
        Ok(Settings {
            rows_max,
            topic,
            format,
            debezium,
            upsert,
            key,
            timestamp_column,
            properties,
            exactly_once,
            transactional_prefix,
        })
    }
}

impl KafkaSink {
    /// A sink instance; `changelog`: its rows lead with their op column.
    pub fn open(
        options: &BTreeMap<String, String>,
        schema: &SchemaRef,
        ctx: &InstanceContext,
        changelog: bool,
    ) -> Result<Self> {
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
            let client = marker_props.clone();
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
                after: 0,
                rows_max: s.rows_max,
                client,
                replay: ReplayFilter::default(),
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
            debezium: s.debezium,
            upsert: s.upsert,
            changelog,
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
        t.after = t.after.max(checkpoint_id);
        Ok(())
    }
}

/// A batch encoded as records.
struct Encoded {
    values: Vec<Vec<u8>>,
    keys: Option<Vec<Vec<u8>>>,
    timestamps: Option<TimestampMillisecondArray>,
    /// Rows written as tombstones (an upsert sink's deletes: no value).
    tombstones: Option<Vec<bool>>,
}

impl KafkaSink {
    /// The topic's end offsets now (a lower bound for the offsets of
    /// records written from now on).
    async fn end_offsets(&self) -> Result<BTreeMap<i32, i64>> {
        let t = self.txn.as_ref().expect("exactly-once");
        let (marker, topic) = (t.marker.clone(), self.topic.clone());
        tokio::task::spawn_blocking(move || end_offsets(&marker, &topic, TXN_TIMEOUT))
            .await
            .map_err(|e| Error::internal(format!("Kafka end offsets: {e}")))?
    }

    /// After falling back to checkpoint `restored` although checkpoint
    /// `committed` > `restored` is committed: reads back this instance's
    /// records committed after `restored` into the replay filter.
    async fn read_back(&mut self, restored: u64, committed: u64, state: &TaskState) -> Result<()> {
        let t = self.txn.as_ref().expect("exactly-once");
        let start: BTreeMap<i32, i64> = state.json(END_OFFSETS_KEY)?.unwrap_or_default();
        let max = (t.rows_max as u64).saturating_mul(REPLAY_EPOCHS_MAX);
        let room = max.saturating_sub(t.replay.remaining());
        let (client, topic, id) = (t.client.clone(), self.topic.clone(), t.id.clone());
        let records = tokio::task::spawn_blocking(move || {
            read_committed_since(&client, &topic, &id, restored, &start, room.max(1))
        })
        .await
        .map_err(|e| Error::internal(format!("Kafka read-back: {e}")))??;
        tracing::warn!(
            topic = %self.topic,
            restored,
            committed,
            rows = records.len(),
            "restored checkpoint {restored} is older than the committed checkpoint {committed}; dropping the {} replayed rows committed since",
            records.len()
        );
        let t = self.txn.as_mut().expect("exactly-once");
        t.replay.extend(records, max)
    }

    /// (An upsert sink's changelog comes without its `-U` rows:
    /// [`upsert_rows`] in `process_batch`.)
    fn encode(&self, batch: &RecordBatch) -> Result<Encoded> {
        let mut tombstones = None;
        let values = if self.debezium {
            debezium_rows(batch, self.changelog)?
        } else if self.upsert && self.changelog {
            let deletes: Vec<bool> = change_ops(batch)?
                .iter()
                .map(|op| *op == sluice_plan::ChangeOp::Delete)
                .collect();
            let data = batch.project(&(1..batch.num_columns()).collect::<Vec<_>>())?;
            let mut values = encode_rows(RecordFormat::Json, &data)?;
            for (value, delete) in values.iter_mut().zip(&deletes) {
                if *delete {
                    value.clear();
                }
            }
            tombstones = Some(deletes);
            values
        } else {
            encode_rows(self.format, batch)?
        };
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
        Ok(Encoded {
            values,
            keys,
            timestamps,
            tombstones,
        })
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
        if t.open {
            // Pre-commit: every record of the transaction is at the broker.
            self.flush().await?;
        }
        // Records written after this checkpoint get offsets at or after
        // these (the sink writes nothing until the checkpoint commits).
        state.put_json(END_OFFSETS_KEY, &self.end_offsets().await?)?;
        let t = self.txn.as_mut().expect("checked");
        if !t.replay.is_empty() {
            state.put_batch(REPLAY_KEY, t.replay.to_batch()?);
        }
        if !t.open {
            return Ok(state);
        }
        t.precommitted = Some(checkpoint_id);
        if let Some(first) = t.pending.first() {
            let rows = arrow::compute::concat_batches(&first.schema(), &t.pending)?;
            state.put_batch(MARKER_KEY, rows);
            state.put_bytes(MARKER_AFTER_KEY, t.after.to_le_bytes().to_vec());
        }
        Ok(state)
    }

    async fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        if self.txn.as_ref().is_some_and(|t| t.precommitted == Some(checkpoint_id)) {
            self.commit_open(checkpoint_id).await?;
        }
        if let Some(t) = self.txn.as_mut() {
            t.after = t.after.max(checkpoint_id);
        }
        Ok(())
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if self.txn.is_none() {
            return Ok(());
        }
        self.init_transactions().await?;
        let committed = self.committed_marker().await?;
        let (id, state) = checkpoint.unwrap_or_default();
        let t = self.txn.as_mut().expect("checked");
        if let Some(b) = state.batch(REPLAY_KEY) {
            let max = (t.rows_max as u64).saturating_mul(REPLAY_EPOCHS_MAX);
            t.replay = ReplayFilter::from_batch(b, max)?;
        }
        if committed > id && id > 0 {
            self.read_back(id, committed, &state).await?;
        } else if committed > id {
            // No checkpoint to go on from: the sources start by their
            // startup mode, so what they replay is not known.
            tracing::error!(
                topic = %self.topic,
                committed,
                "no checkpoint could be restored although checkpoint {committed} committed; output after it may repeat"
            );
        }
        let Some(rows) = state.batch(MARKER_KEY).cloned() else {
            self.txn.as_mut().expect("checked").after = id;
            return Ok(());
        };
        if committed >= id {
            self.txn.as_mut().expect("checked").after = id;
            return Ok(());
        }
        tracing::info!(topic = %self.topic, checkpoint = id, rows = rows.num_rows(), "re-committing the restored checkpoint's transaction");
        // The rows keep the header they were first written with.
        let after = state
            .bytes(MARKER_AFTER_KEY)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0);
        self.txn.as_mut().expect("checked").after = after;
        self.begin_if_needed().await?;
        let encoded = self.encode(&rows)?;
        self.send_encoded(&encoded, None).await?;
        self.flush().await?;
        self.commit_open(id).await
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        let batch = if self.upsert && self.changelog {
            upsert_rows(&batch)?
        } else {
            batch
        };
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let encoded = self.encode(&batch)?;
        let Some(t) = self.txn.as_mut() else {
            return self.send_encoded(&encoded, None).await;
        };
        // After a fall-back past committed checkpoints: drop replayed rows
        // that were committed before.
        let keep: Option<Vec<bool>> = (!t.replay.is_empty()).then(|| {
            (0..batch.num_rows())
                .map(|i| {
                    let key = encoded.keys.as_ref().map(|k| k[i].as_slice());
                    !t.replay.take(key, &encoded.values[i])
                })
                .collect()
        });
        let batch = match &keep {
            Some(keep) => arrow::compute::filter_record_batch(&batch, &arrow::array::BooleanArray::from(keep.clone()))?,
            None => batch,
        };
        if batch.num_rows() == 0 {
            return Ok(());
        }
        t.pending_rows = admit_rows(t.pending_rows, batch.num_rows(), t.rows_max)?;
        t.pending.push(batch);
        self.begin_if_needed().await?;
        self.send_encoded(&encoded, keep.as_deref()).await
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
    /// Sends the encoded rows (only those marked in `keep`, if given).
    async fn send_encoded(&mut self, rows: &Encoded, keep: Option<&[bool]>) -> Result<()> {
        self.check_deliveries()?;
        let headers = self.txn.as_ref().map(|t| {
            OwnedHeaders::new_with_capacity(2)
                .insert(Header {
                    key: TXN_HEADER,
                    value: Some(t.id.as_bytes()),
                })
                .insert(Header {
                    key: AFTER_HEADER,
                    value: Some(t.after.to_string().as_bytes()),
                })
        });
        for (row, value) in rows.values.iter().enumerate() {
            if keep.is_some_and(|k| !k[row]) {
                continue;
            }
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic);
            // A tombstone has no value at all (not an empty one).
            if !rows.tombstones.as_ref().is_some_and(|t| t[row]) {
                record = record.payload(value.as_slice());
            }
            if let Some(keys) = &rows.keys {
                record = record.key(keys[row].as_slice());
            }
            if let Some(ts) = &rows.timestamps
                && ts.is_valid(row)
            {
                record = record.timestamp(ts.value(row));
            }
            if let Some(h) = &headers {
                record = record.headers(h.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A changelog (op, k, n) of rows `ops`, `keys` and `values`.
    fn changelog(ops: Vec<&str>, keys: Vec<&str>, values: Vec<Option<i64>>) -> RecordBatch {
        use arrow::array::{Int64Array, StringArray};
        use arrow::datatypes::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("op", DataType::Utf8, false),
            Field::new("k", DataType::Utf8, false),
            Field::new("n", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(ops)),
                Arc::new(StringArray::from(keys)),
                Arc::new(Int64Array::from(values)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn upsert_rows_drop_update_befores_and_keep_deletes() {
        use arrow::array::{Int64Array, StringArray};
        let batch = changelog(
            vec!["+I", "-U", "+U", "-D"],
            vec!["a", "a", "a", "b"],
            vec![Some(1), Some(1), Some(2), Some(5)],
        );
        let kept = upsert_rows(&batch).unwrap();
        let ops = kept.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(ops.iter().flatten().collect::<Vec<_>>(), ["+I", "+U", "-D"]);
        let n = kept.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(n.values().to_vec(), [1, 2, 5]);
        let options: BTreeMap<String, String> = [("topic", "t"), ("format", "upsert-json")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let err = Settings::parse(&options, &kept.schema()).err().expect("no key");
        assert!(err.to_string().contains("needs a 'key' option"), "{err}");
        assert!(accepts_changelog(&options));
    }

    #[test]
    fn debezium_rows_write_retractions_as_deletes_without_the_op() {
        let batch = changelog(
            vec!["+I", "-U", "+U", "-D"],
            vec!["a", "a", "a", "b"],
            vec![Some(1), Some(1), Some(2), None],
        );
        let rows: Vec<serde_json::Value> = debezium_rows(&batch, true)
            .unwrap()
            .iter()
            .map(|r| serde_json::from_slice(r).unwrap())
            .collect();
        let want = [
            r#"{"before":null,"after":{"k":"a","n":1},"op":"c"}"#,
            r#"{"before":{"k":"a","n":1},"after":null,"op":"d"}"#,
            r#"{"before":null,"after":{"k":"a","n":2},"op":"c"}"#,
            r#"{"before":{"k":"b"},"after":null,"op":"d"}"#,
        ];
        let want: Vec<serde_json::Value> = want.iter().map(|w| serde_json::from_str(w).unwrap()).collect();
        assert_eq!(rows, want);
        // An append-only input: every row is a create, its columns all written.
        let plain = debezium_rows(&batch, false).unwrap();
        let first: serde_json::Value = serde_json::from_slice(&plain[1]).unwrap();
        assert_eq!(first["op"], "c");
        assert_eq!(first["after"]["op"], "-U");
        assert!(accepts_changelog(
            &[("format".to_string(), "Debezium-JSON".to_string())].into()
        ));
        assert!(!accepts_changelog(&[("format".to_string(), "json".to_string())].into()));
    }

    #[test]
    fn a_transaction_holds_at_most_its_bound() {
        assert_eq!(admit_rows(0, 10, 10).unwrap(), 10, "exactly at the bound is fine");
        assert_eq!(admit_rows(7, 3, 10).unwrap(), 10);
        let e = admit_rows(10, 1, 10).unwrap_err();
        assert!(e.to_string().contains("more than 10 rows"), "{e}");
        assert_eq!(
            e.sqlstate(),
            sluice_types::SqlCode::ConfigurationLimitExceeded.sqlstate()
        );
        assert!(admit_rows(usize::MAX, 1, TRANSACTION_ROWS_MAX).is_err(), "no overflow");
    }

    #[test]
    fn the_row_bound_option_is_checked() {
        use arrow::datatypes::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let opts = |extra: &[(&str, &str)]| -> BTreeMap<String, String> {
            [("topic", "t"), ("properties.bootstrap.servers", "localhost:9092")]
                .iter()
                .chain(extra)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let eo = ("sink.delivery-guarantee", "exactly-once");
        let s = Settings::parse(&opts(&[eo, ("sink.transaction.max-rows", "100")]), &schema).unwrap();
        assert_eq!(s.rows_max, 100);
        assert_eq!(
            Settings::parse(&opts(&[eo]), &schema).unwrap().rows_max,
            TRANSACTION_ROWS_MAX
        );
        for bad in ["0", "-1", "x", "1000001"] {
            let e = Settings::parse(&opts(&[eo, ("sink.transaction.max-rows", bad)]), &schema)
                .err()
                .unwrap();
            assert!(e.to_string().contains("sink.transaction.max-rows"), "{bad}: {e}");
        }
        assert!(Settings::parse(&opts(&[("sink.transaction.max-rows", "5")]), &schema).is_err());
    }
}
