//! The Kafka source: one reader per source instance, reading the topic
//! partitions `p` with `index(p) % parallelism == instance` from a
//! dedicated thread (librdkafka's calls block), which decodes records into
//! Arrow batches and hands them to the async source loop over a bounded
//! channel — a paused or backpressured pipeline stops the thread's reads.
//!
//! Partitions are assigned explicitly (no consumer-group rebalancing): the
//! runtime, not the broker, decides which instance reads what, so
//! per-partition watermarks and (later) checkpointed offsets stay exact.

use super::{ErrorPolicy, KafkaSourceConfig, Reporting, StartupMode, client_config, is_metadata_column};
use crate::format::{Decoded, RecordDecoder};
use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sluice_dataflow::checkpoint::TaskState;
use sluice_dataflow::deploy::InstanceContext;
use sluice_dataflow::metrics::TaskMetrics;
use sluice_dataflow::source::{SourceEvent, SourceReader};
use sluice_types::{Error, Result, SqlCode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Decoded batches waiting for the source loop (per instance).
const CHANNEL_BATCHES: usize = 4;
/// How long one poll waits for the first record of a batch.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// Backoff while the broker cannot be reached.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Broker requests (metadata, offsets) give up after this and are retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Looking up where each partition starts is retried for this long, then
/// the source fails: a partition must never start somewhere else instead.
const LOOKUP_DEADLINE: Duration = Duration::from_secs(60);
/// Offsets handed to the pipeline are committed to a named group this often.
const COMMIT_EVERY: Duration = Duration::from_secs(5);
/// Malformed records logged one by one before the log goes quiet.
const MALFORMED_LOGGED: u64 = 10;

/// A source instance's reader (the async side).
pub struct KafkaReader {
    rx: mpsc::Receiver<Result<Positioned>>,
    batch_max: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    /// The reading thread, until the first read (so a restored position
    /// can be handed to it first).
    worker: Option<Worker>,
    /// Next offset per partition after the events returned so far.
    positions: BTreeMap<i32, i64>,
}

/// An event and, for data, the partition's next offset after it.
type Positioned = (SourceEvent, Option<(i32, i64)>);

/// Checkpoint key of the next offsets per partition (JSON object).
const OFFSETS_KEY: &str = "kafka.offsets";

impl KafkaReader {
    /// Starts the reading thread. `schema` is the stream's schema: its
    /// `_kafka_*` columns come from the records' metadata, the others
    /// from the decoded value.
    pub fn start(config: KafkaSourceConfig, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Self> {
        let layout = Layout::new(schema);
        let decoder = RecordDecoder::new(config.format, layout.payload_schema.clone())?;
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        let batch_max = Arc::new(AtomicUsize::new(8192));
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            config,
            schema: schema.clone(),
            layout,
            decoder,
            tx,
            batch_max: batch_max.clone(),
            stop: stop.clone(),
            metrics: ctx.metrics.clone(),
            instance: ctx.instance as usize,
            parallelism: ctx.parallelism.max(1) as usize,
            malformed: 0,
            restored: BTreeMap::new(),
        };
        Ok(KafkaReader {
            rx,
            batch_max,
            stop,
            worker: Some(worker),
            positions: BTreeMap::new(),
        })
    }

    fn spawn(&mut self) -> Result<()> {
        let Some(worker) = self.worker.take() else {
            return Ok(());
        };
        std::thread::Builder::new()
            .name(format!("kafka-{}-{}", worker.config.topic, worker.instance))
            .spawn(move || worker.run())
            .map_err(|e| Error::internal(format!("cannot start the Kafka reader thread: {e}")))?;
        Ok(())
    }
}

impl Drop for KafkaReader {
    fn drop(&mut self) {
        // The thread sees this within one poll (or at its next send).
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[async_trait]
impl SourceReader for KafkaReader {
    fn partitions(&self) -> usize {
        // Known once the topic's metadata arrives (SourceEvent::Partitions).
        1
    }

    async fn next(&mut self, batch_rows_max: usize) -> Result<SourceEvent> {
        self.spawn()?;
        self.batch_max.store(batch_rows_max.max(1), Ordering::Relaxed);
        match self.rx.recv().await {
            Some(Ok((event, position))) => {
                if let Some((partition, offset)) = position {
                    self.positions.insert(partition, offset);
                }
                Ok(event)
            }
            Some(Err(e)) => Err(e),
            // The thread ended cleanly: this instance has no partitions.
            None => std::future::pending().await,
        }
    }

    fn snapshot(&mut self) -> Result<TaskState> {
        let mut state = TaskState::default();
        state.put_json(OFFSETS_KEY, &self.positions)?;
        Ok(state)
    }

    fn restore(&mut self, state: &TaskState) -> Result<()> {
        let positions: BTreeMap<i32, i64> = state.json(OFFSETS_KEY)?.unwrap_or_default();
        if let Some(w) = self.worker.as_mut() {
            w.restored = positions.clone();
        }
        self.positions = positions;
        Ok(())
    }

    /// After a rescale: the positions of every old instance, merged. An
    /// instance's state may also hold positions of partitions it read
    /// before an earlier rescale; offsets only grow, so the highest one
    /// of a partition is its reader's. The worker reads only the
    /// partitions assigned to this instance, from these positions.
    fn restore_rescaled(&mut self, parts: &[TaskState]) -> Result<()> {
        let mut merged: BTreeMap<i32, i64> = BTreeMap::new();
        for part in parts {
            let positions: BTreeMap<i32, i64> = part.json(OFFSETS_KEY)?.unwrap_or_default();
            for (partition, offset) in positions {
                let e = merged.entry(partition).or_insert(offset);
                *e = (*e).max(offset);
            }
        }
        let mut state = TaskState::default();
        state.put_json(OFFSETS_KEY, &merged)?;
        self.restore(&state)
    }
}

/// Where each stream column comes from.
#[derive(Debug, Clone)]
struct Layout {
    payload_schema: SchemaRef,
    /// Per stream column: `Ok(payload column)` or `Err(metadata name)`.
    columns: Vec<std::result::Result<usize, String>>,
}

impl Layout {
    fn new(schema: &Schema) -> Self {
        let mut payload = Vec::new();
        let mut columns = Vec::new();
        for f in schema.fields() {
            if is_metadata_column(f.name()) {
                columns.push(Err(f.name().clone()));
            } else {
                columns.push(Ok(payload.len()));
                payload.push(f.as_ref().clone());
            }
        }
        Layout {
            payload_schema: Arc::new(Schema::new(payload)),
            columns,
        }
    }
}

/// One record as read (owned, so the consumer can go on polling).
struct Record {
    payload: Vec<u8>,
    key: Option<Vec<u8>>,
    offset: i64,
    timestamp: Option<i64>,
}

/// The reading thread.
struct Worker {
    config: KafkaSourceConfig,
    schema: SchemaRef,
    layout: Layout,
    decoder: RecordDecoder,
    tx: mpsc::Sender<Result<Positioned>>,
    batch_max: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    metrics: Arc<TaskMetrics>,
    instance: usize,
    parallelism: usize,
    malformed: u64,
    /// Restored next offsets: these partitions start there, not by the
    /// startup mode.
    restored: BTreeMap<i32, i64>,
}

type Client = BaseConsumer<Reporting>;

impl Worker {
    fn run(mut self) {
        let tx = self.tx.clone();
        if let Err(e) = self.read() {
            let _ = tx.blocking_send(Err(e));
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    fn read(&mut self) -> Result<()> {
        let mut config = client_config(&self.config.properties);
        config.set("enable.auto.commit", "false");
        config.set("enable.partition.eof", "false");
        let consumer: Client = config
            .create_with_context(Reporting::new(self.metrics.clone()))
            .map_err(|e| Error::invalid_option(format!("Kafka consumer: {e}")))?;
        let Some(all) = self.retry(&consumer, "read the topic's partitions", None, |c| {
            topic_partitions(c, &self.config.topic)
        })?
        else {
            return Ok(());
        };
        let mine: Vec<i32> = all
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % self.parallelism == self.instance)
            .map(|(_, p)| p)
            .collect();
        if !self.send(SourceEvent::Partitions(mine.len())) || mine.is_empty() {
            return Ok(());
        }
        let fresh: Vec<i32> = mine
            .iter()
            .filter(|p| !self.restored.contains_key(p))
            .copied()
            .collect();
        let Some(mut start) = self.retry(&consumer, "look up the start offsets", Some(LOOKUP_DEADLINE), |c| {
            if fresh.is_empty() {
                return Ok(TopicPartitionList::new());
            }
            start_offsets(c, &self.config, &fresh)
        })?
        else {
            return Ok(());
        };
        for p in &mine {
            if let Some(o) = self.restored.get(p) {
                start
                    .add_partition_offset(&self.config.topic, *p, Offset::Offset(*o))
                    .map_err(|e| Error::internal(format!("Kafka: {e}")))?;
            }
        }
        consumer
            .assign(&start)
            .map_err(|e| Error::external(format!("Kafka: cannot assign partitions: {e}")))?;
        let dead_letters = match &self.config.policy {
            ErrorPolicy::DeadLetter(topic) => Some(DeadLetters::new(&self.config, topic, &self.metrics)?),
            _ => None,
        };
        self.poll_loop(&consumer, &mine, dead_letters.as_ref())
    }

    fn poll_loop(&mut self, consumer: &Client, mine: &[i32], dead_letters: Option<&DeadLetters>) -> Result<()> {
        let index: BTreeMap<i32, usize> = mine.iter().enumerate().map(|(i, p)| (*p, i)).collect();
        let mut next_offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let mut last_commit = Instant::now();
        let mut last_probe = Instant::now();
        while !self.stopped() {
            let max = self.batch_max.load(Ordering::Relaxed);
            let mut buffers: Vec<Vec<Record>> = (0..mine.len()).map(|_| Vec::new()).collect();
            let mut n = 0;
            let mut wait = POLL_WAIT;
            while n < max {
                match consumer.poll(wait) {
                    None => break,
                    Some(Ok(m)) => {
                        let Some(i) = index.get(&m.partition()) else { continue };
                        buffers[*i].push(Record {
                            payload: m.payload().unwrap_or_default().to_vec(),
                            key: m.key().map(<[u8]>::to_vec),
                            offset: m.offset(),
                            timestamp: m.timestamp().to_millis(),
                        });
                        n += 1;
                        wait = Duration::ZERO;
                    }
                    Some(Err(e)) => {
                        consumer.context().report(format!("kafka: {e}; retrying"));
                        break;
                    }
                }
            }
            if n > 0 {
                consumer.context().clear();
            } else if consumer.context().troubled() && last_probe.elapsed() >= BACKOFF_MAX {
                // No records and an error reported: clear it once the broker answers.
                last_probe = Instant::now();
                if consumer
                    .fetch_metadata(Some(&self.config.topic), REQUEST_TIMEOUT)
                    .is_ok()
                {
                    consumer.context().clear();
                }
            }
            for (i, records) in buffers.into_iter().enumerate() {
                if records.is_empty() {
                    continue;
                }
                let partition = mine[i];
                let next = records.last().map_or(0, |r| r.offset + 1);
                next_offsets.insert(partition, next);
                let batch = self.decode(partition, &records, dead_letters)?;
                // An all-malformed batch still moves the position on.
                if !self.send_at(SourceEvent::Data { partition: i, batch }, Some((partition, next))) {
                    return Ok(());
                }
            }
            if self.config.group_given && last_commit.elapsed() >= COMMIT_EVERY && !next_offsets.is_empty() {
                last_commit = Instant::now();
                let mut tpl = TopicPartitionList::new();
                for (p, o) in &next_offsets {
                    let _ = tpl.add_partition_offset(&self.config.topic, *p, Offset::Offset(*o));
                }
                if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
                    tracing::warn!(topic = %self.config.topic, error = %e, "offset commit failed");
                }
            }
        }
        Ok(())
    }

    /// Decodes one partition's records; bad ones follow the error policy.
    fn decode(
        &mut self,
        partition: i32,
        records: &[Record],
        dead_letters: Option<&DeadLetters>,
    ) -> Result<RecordBatch> {
        let payloads: Vec<&[u8]> = records.iter().map(|r| r.payload.as_slice()).collect();
        let Decoded { batch, good, bad } = self.decoder.decode(&payloads);
        if !bad.is_empty() {
            self.malformed(partition, records, &bad, dead_letters)?;
        }
        let picked: Vec<&Record> = good.iter().map(|i| &records[*i]).collect();
        let columns: Vec<ArrayRef> = self
            .layout
            .columns
            .iter()
            .map(|c| match c {
                Ok(i) => batch.column(*i).clone(),
                Err(name) => metadata_column(name, partition, &picked),
            })
            .collect();
        RecordBatch::try_new(self.schema.clone(), columns).map_err(Error::from)
    }

    fn malformed(
        &mut self,
        partition: i32,
        records: &[Record],
        bad: &[(usize, String)],
        dead_letters: Option<&DeadLetters>,
    ) -> Result<()> {
        let topic = &self.config.topic;
        if self.config.policy == ErrorPolicy::Fail {
            let (i, error) = &bad[0];
            return Err(Error::user(
                SqlCode::DataException,
                format!(
                    "malformed record in topic {topic} partition {partition} offset {}: {error}",
                    records[*i].offset
                ),
            ));
        }
        if let Some(dl) = dead_letters {
            dl.send(topic, partition, records, bad)?;
        }
        for (i, error) in bad {
            self.malformed += 1;
            if self.malformed <= MALFORMED_LOGGED {
                tracing::warn!(topic = %topic, partition, offset = records[*i].offset, %error, "malformed record skipped");
            }
        }
        self.metrics
            .records_malformed
            .fetch_add(bad.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Hands an event to the source loop; false once the reader is gone.
    fn send(&self, event: SourceEvent) -> bool {
        self.send_at(event, None)
    }

    fn send_at(&self, event: SourceEvent, position: Option<(i32, i64)>) -> bool {
        self.tx.blocking_send(Ok((event, position))).is_ok()
    }

    /// Calls `f` until it succeeds (Some) or the reader stops (None), with
    /// backoff, reporting the failure as the task's condition meanwhile.
    /// With a `deadline`, the last failure once it has passed is the
    /// source's error.
    fn retry<T, E: std::fmt::Display>(
        &self,
        consumer: &Client,
        what: &str,
        deadline: Option<Duration>,
        mut f: impl FnMut(&Client) -> std::result::Result<T, E>,
    ) -> Result<Option<T>> {
        let started = Instant::now();
        let mut backoff = BACKOFF_MIN;
        let mut attempts = 0;
        loop {
            attempts += 1;
            if self.stopped() {
                return Ok(None);
            }
            match f(consumer) {
                Ok(v) => {
                    consumer.context().clear();
                    return Ok(Some(v));
                }
                Err(e) => {
                    let topic = &self.config.topic;
                    if deadline.is_some_and(|d| started.elapsed() + backoff >= d) {
                        return Err(Error::external(format!(
                            "Kafka: cannot {what} of topic {topic} ({attempts} attempts in {:.0?}): {e}",
                            started.elapsed()
                        )));
                    }
                    tracing::warn!(topic = %topic, error = %e, "kafka: cannot {what}; retrying");
                    consumer
                        .context()
                        .report(format!("kafka: cannot {what} of topic {topic}: {e}; retrying"));
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}

fn metadata_column(name: &str, partition: i32, records: &[&Record]) -> ArrayRef {
    match name {
        "_kafka_partition" => Arc::new(Int32Array::from(vec![partition; records.len()])),
        "_kafka_offset" => Arc::new(Int64Array::from_iter_values(records.iter().map(|r| r.offset))),
        "_kafka_timestamp" => Arc::new(TimestampMillisecondArray::from_iter(
            records.iter().map(|r| r.timestamp),
        )),
        _ => Arc::new(StringArray::from_iter(
            records
                .iter()
                .map(|r| r.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned())),
        )),
    }
}

/// The topic's partition ids, sorted; an error while it does not exist.
fn topic_partitions(consumer: &Client, topic: &str) -> KafkaResult<Vec<i32>> {
    let metadata = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT)?;
    let t = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or(rdkafka::error::KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
        ))?;
    if let Some(e) = t.error() {
        return Err(rdkafka::error::KafkaError::MetadataFetch(e.into()));
    }
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if ids.is_empty() {
        return Err(rdkafka::error::KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
        ));
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Where each of `partitions` starts, by the startup mode; an error (to
/// retry) unless every partition's start is known.
///
/// librdkafka's lookups succeed as a whole even when a partition could not
/// be looked up: the partition's element carries the error, and its
/// offset is whatever was there (the timestamp itself when its leader was
/// unknown; -1, read as "the end", from an error answer that librdkafka
/// then retried successfully — it keeps the first answer). Such an offset
/// handed to `assign` starts the partition at its end, or — the timestamp
/// being out of range — wherever `auto.offset.reset` says, its beginning
/// with `earliest`. So every element's error is checked.
fn start_offsets(
    consumer: &Client,
    config: &KafkaSourceConfig,
    partitions: &[i32],
) -> std::result::Result<TopicPartitionList, String> {
    let topic = &config.topic;
    let with = |offset: Offset| -> KafkaResult<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition_offset(topic, *p, offset)?;
        }
        Ok(tpl)
    };
    let kafka = |e: rdkafka::error::KafkaError| e.to_string();
    match config.startup {
        StartupMode::Earliest => with(Offset::Beginning).map_err(kafka),
        StartupMode::Latest => with(Offset::End).map_err(kafka),
        StartupMode::Timestamp(ms) => {
            // Flink's rule: the first record at or after `ms`, else the
            // partition's end as of the lookup. The ends are read first,
            // so a record written in between is found by the lookup.
            let mut watermarks = BTreeMap::new();
            for &p in partitions {
                let w = consumer
                    .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
                    .map_err(|e| format!("partition {p}: reading its end offset: {e}"))?;
                watermarks.insert(p, w);
            }
            let found = consumer
                .offsets_for_times(with(Offset::Offset(ms)).map_err(kafka)?, REQUEST_TIMEOUT)
                .map_err(|e| format!("offsets for time {ms}: {e}"))?;
            let mut tpl = TopicPartitionList::new();
            for &p in partitions {
                let e = found
                    .find_partition(topic, p)
                    .ok_or_else(|| format!("partition {p}: missing from the offsets for time {ms}"))?;
                let start = match timestamp_start(p, e.offset(), e.error(), watermarks[&p])? {
                    TimestampStart::At(o) => o,
                    TimestampStart::IfBelowEnd(o) => {
                        // A record written after the ends were read: it
                        // must be below the end now.
                        let (_, high) = consumer
                            .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
                            .map_err(|e| format!("partition {p}: reading its end offset: {e}"))?;
                        if o >= high {
                            return Err(format!(
                                "partition {p}: offsets for time {ms} answered offset {o}, past its end ({high})"
                            ));
                        }
                        o
                    }
                };
                tpl.add_partition_offset(topic, p, Offset::Offset(start))
                    .map_err(kafka)?;
            }
            Ok(tpl)
        }
        StartupMode::GroupOffsets => {
            let committed = consumer
                .committed_offsets(with(Offset::Invalid).map_err(kafka)?, REQUEST_TIMEOUT)
                .map_err(kafka)?;
            let reset = match config.properties.get("auto.offset.reset").map(String::as_str) {
                Some("latest" | "largest" | "end") => Offset::End,
                _ => Offset::Beginning,
            };
            let mut tpl = TopicPartitionList::new();
            for e in committed.elements() {
                // An error is not "no committed offset" (that is -1
                // without an error): it must not send the partition to
                // `reset`.
                e.error()
                    .map_err(|err| format!("partition {}: committed offset: {err}", e.partition()))?;
                let offset = match e.offset() {
                    Offset::Offset(o) => Offset::Offset(o),
                    _ => reset,
                };
                tpl.add_partition_offset(topic, e.partition(), offset).map_err(kafka)?;
            }
            Ok(tpl)
        }
    }
}

/// Where a partition starts in `timestamp` mode.
#[derive(Debug, PartialEq, Eq)]
enum TimestampStart {
    At(i64),
    /// At this offset, found past the end read before the lookup: valid
    /// only if it is below the partition's end now.
    IfBelowEnd(i64),
}

/// A partition's start from its offsets-for-times answer (`offset`,
/// `error`) and its `(low, high)` watermarks read before the lookup; an
/// error for any answer that is not a found record or "none" (the end).
fn timestamp_start(
    partition: i32,
    offset: Offset,
    error: KafkaResult<()>,
    (low, high): (i64, i64),
) -> std::result::Result<TimestampStart, String> {
    if let Err(e) = error {
        return Err(format!("partition {partition}: {e}"));
    }
    match offset {
        // No record at or after the time (yet): the end as it was.
        Offset::End => Ok(TimestampStart::At(high)),
        Offset::Offset(o) if o >= low && o < high => Ok(TimestampStart::At(o)),
        Offset::Offset(o) if o >= high => Ok(TimestampStart::IfBelowEnd(o)),
        other => Err(format!(
            "partition {partition}: unexpected offsets-for-times answer {other:?} (offsets {low}..{high})"
        )),
    }
}

/// The dead-letter topic's producer: the record's bytes (and key) with the
/// error and its origin in headers.
struct DeadLetters {
    producer: BaseProducer<Reporting>,
    topic: String,
}

impl DeadLetters {
    fn new(config: &KafkaSourceConfig, topic: &str, metrics: &Arc<TaskMetrics>) -> Result<Self> {
        let mut properties = config.properties.clone();
        properties.remove("group.id");
        properties.remove("auto.offset.reset");
        let producer = client_config(&properties)
            .create_with_context(Reporting::new(metrics.clone()))
            .map_err(|e| Error::invalid_option(format!("Kafka dead-letter producer: {e}")))?;
        Ok(DeadLetters {
            producer,
            topic: topic.to_string(),
        })
    }

    /// Sends the bad records and waits until the broker has them: a record
    /// counted as dead-lettered is never lost.
    fn send(&self, source_topic: &str, partition: i32, records: &[Record], bad: &[(usize, String)]) -> Result<()> {
        for (i, error) in bad {
            let r = &records[*i];
            let (partition_text, offset_text) = (partition.to_string(), r.offset.to_string());
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: "sluice.error",
                    value: Some(error.as_bytes()),
                })
                .insert(Header {
                    key: "sluice.topic",
                    value: Some(source_topic.as_bytes()),
                })
                .insert(Header {
                    key: "sluice.partition",
                    value: Some(partition_text.as_bytes()),
                })
                .insert(Header {
                    key: "sluice.offset",
                    value: Some(offset_text.as_bytes()),
                });
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic)
                .payload(r.payload.as_slice())
                .headers(headers);
            if let Some(k) = &r.key {
                record = record.key(k.as_slice());
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((
                        rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        back,
                    )) => {
                        self.producer.poll(Duration::from_millis(100));
                        record = back;
                    }
                    Err((e, _)) => {
                        return Err(Error::external(format!(
                            "Kafka: cannot dead-letter a record to topic {}: {e}",
                            self.topic
                        )));
                    }
                }
            }
        }
        self.producer
            .flush(Duration::from_secs(60))
            .map_err(|e| Error::external(format!("Kafka: dead-letter topic {}: {e}", self.topic)))?;
        if let Some(e) = self.producer.context().take_delivery_error() {
            return Err(Error::external(format!("Kafka: dead-letter topic {}: {e}", self.topic)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    #[test]
    fn a_found_record_inside_the_partition_is_the_start() {
        assert_eq!(
            timestamp_start(0, Offset::Offset(60), Ok(()), (0, 120)),
            Ok(TimestampStart::At(60))
        );
        assert_eq!(
            timestamp_start(0, Offset::Offset(5), Ok(()), (5, 6)),
            Ok(TimestampStart::At(5))
        );
        // Written after the ends were read: checked against the end again.
        assert_eq!(
            timestamp_start(0, Offset::Offset(120), Ok(()), (0, 120)),
            Ok(TimestampStart::IfBelowEnd(120))
        );
    }

    #[test]
    fn no_record_at_or_after_the_time_starts_at_the_end_read_before() {
        assert_eq!(
            timestamp_start(2, Offset::End, Ok(()), (10, 120)),
            Ok(TimestampStart::At(120))
        );
        assert_eq!(
            timestamp_start(2, Offset::End, Ok(()), (0, 0)),
            Ok(TimestampStart::At(0))
        );
    }

    #[test]
    fn a_partition_that_was_not_looked_up_never_gets_a_start() {
        // What librdkafka leaves in an element it could not look up: the
        // timestamp itself (its leader unknown) or -1 from an error answer.
        let ts = 1_796_241_615_000;
        for (offset, code) in [
            (Offset::Offset(ts), RDKafkaErrorCode::UnknownPartition),
            (Offset::End, RDKafkaErrorCode::LeaderNotAvailable),
            (Offset::Offset(30), RDKafkaErrorCode::RequestTimedOut),
        ] {
            let e = timestamp_start(1, offset, Err(KafkaError::OffsetFetch(code)), (0, 120)).unwrap_err();
            assert!(e.starts_with("partition 1: "), "{e}");
            assert!(e.contains(&code.to_string()), "{e}");
        }
        // The beginning, or anything below the log start, is never an answer.
        for offset in [Offset::Beginning, Offset::Invalid, Offset::Stored, Offset::Offset(3)] {
            let e = timestamp_start(1, offset, Ok(()), (4, 120)).unwrap_err();
            assert!(e.contains("unexpected offsets-for-times answer"), "{offset:?}: {e}");
        }
    }
}
