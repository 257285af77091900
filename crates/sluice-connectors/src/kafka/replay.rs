//! Exactly-once after falling back past committed checkpoints.
//!
//! When recovery restores checkpoint `r` but the sink's commit marker says
//! checkpoint `c > r` already committed (the newer checkpoints were
//! corrupt or lost), replaying the sources from `r` produces the rows of
//! the committed transactions `r+1 ..= c` again. Every record the sink
//! writes under exactly-once carries two headers: [`TXN_HEADER`] (the
//! instance's transactional id) and [`AFTER_HEADER`] (the id of the last
//! checkpoint this instance had committed or restored when it wrote the
//! record). At restore the sink reads back (read_committed) this
//! instance's records written after `r` — from the topic offsets stored in
//! checkpoint `r`, a lower bound for them — into a [`ReplayFilter`], a
//! bounded multiset of `(key, value)`; replayed rows that match are
//! dropped until it is used up. This is exact because a replay's output is
//! deterministic per (window, key) (see docs/architecture.md for the
//! assumption and its limits).

use super::client_config;
use arrow::array::{Array, BinaryArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use sluice_types::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Header naming the sink instance's transactional id.
pub const TXN_HEADER: &str = "sluice.txn";
/// Header with the id of the checkpoint the record was written after.
pub const AFTER_HEADER: &str = "sluice.after";
/// How long reading back the committed records may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(200);

/// Client context of the read-back consumer: reaching a partition's end
/// is how reading back finishes, not an error to log.
struct Quiet;

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_)) {
            tracing::warn!(%error, reason, "Kafka read-back");
        }
    }
}

impl ConsumerContext for Quiet {}

/// One record as the sink wrote it.
pub type RecordBytes = (Option<Vec<u8>>, Vec<u8>);

/// A bounded multiset of records already committed: replayed rows equal
/// to one of them are dropped (once per occurrence).
#[derive(Debug, Default, Clone)]
pub struct ReplayFilter {
    counts: HashMap<RecordBytes, u64>,
    remaining: u64,
}

impl ReplayFilter {
    /// Adds records; fails when the filter would hold more than `max`.
    pub fn extend(&mut self, records: impl IntoIterator<Item = RecordBytes>, max: u64) -> Result<()> {
        for r in records {
            if self.remaining >= max {
                return Err(too_many(max));
            }
            *self.counts.entry(r).or_insert(0) += 1;
            self.remaining += 1;
        }
        Ok(())
    }

    /// Rows still expected from the replay.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// True when `record` was committed before (and uses up one
    /// occurrence): the replayed row must not be written again.
    pub fn take(&mut self, key: Option<&[u8]>, value: &[u8]) -> bool {
        if self.remaining == 0 {
            return false;
        }
        let k = (key.map(<[u8]>::to_vec), value.to_vec());
        match self.counts.get_mut(&k) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&k);
                }
                self.remaining -= 1;
                true
            }
            None => false,
        }
    }

    /// The remaining records as a batch (key nullable, value), one row per
    /// occurrence, for the checkpoint.
    pub fn to_batch(&self) -> Result<RecordBatch> {
        let mut keys: Vec<Option<&[u8]>> = Vec::new();
        let mut values: Vec<&[u8]> = Vec::new();
        for ((k, v), n) in &self.counts {
            for _ in 0..*n {
                keys.push(k.as_deref());
                values.push(v);
            }
        }
        Ok(RecordBatch::try_new(
            batch_schema(),
            vec![Arc::new(BinaryArray::from(keys)), Arc::new(BinaryArray::from(values))],
        )?)
    }

    /// Reads back a batch written by [`ReplayFilter::to_batch`].
    pub fn from_batch(batch: &RecordBatch, max: u64) -> Result<Self> {
        let bad = || Error::internal("corrupt task state: the Kafka sink's replay filter");
        let keys = batch.column(0).as_any().downcast_ref::<BinaryArray>().ok_or_else(bad)?;
        let values = batch.column(1).as_any().downcast_ref::<BinaryArray>().ok_or_else(bad)?;
        let mut f = ReplayFilter::default();
        f.extend(
            (0..batch.num_rows()).map(|i| {
                let k = keys.is_valid(i).then(|| keys.value(i).to_vec());
                (k, values.value(i).to_vec())
            }),
            max,
        )?;
        Ok(f)
    }
}

fn batch_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, false),
    ]))
}

fn too_many(max: u64) -> Error {
    Error::user(
        sluice_types::SqlCode::ConfigurationLimitExceeded,
        format!(
            "cannot restore the Kafka sink exactly once: more than {max} rows were committed after the restored checkpoint (the newer checkpoints are missing or corrupt); lower 'checkpoint.interval' or restore by hand"
        ),
    )
}

/// The partitions of `topic` and their high watermarks (the offset the
/// next record will get, at least).
pub fn end_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<BTreeMap<i32, i64>> {
    let kafka = |e: KafkaError| Error::external(format!("Kafka: reading the end offsets of {topic}: {e}"));
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(kafka)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut ends = BTreeMap::new();
    for p in partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, timeout).map_err(kafka)?;
        ends.insert(p, high);
    }
    Ok(ends)
}

/// Reads `topic` (read_committed) from `start` (per partition; a partition
/// not named starts at its beginning) to its current end and returns the
/// records of transactional id `txn` written after checkpoint `after`
/// (header [`AFTER_HEADER`] ≥ `after`). At most `max` records.
pub fn read_committed_since(
    properties: &BTreeMap<String, String>,
    topic: &str,
    txn: &str,
    after: u64,
    start: &BTreeMap<i32, i64>,
    max: u64,
) -> Result<Vec<RecordBytes>> {
    let kafka = |e: KafkaError| Error::external(format!("Kafka: reading back {topic} for {txn}: {e}"));
    let mut props = properties.clone();
    props.insert("group.id".into(), format!("{txn}-readback"));
    props.insert("isolation.level".into(), "read_committed".into());
    props.insert("enable.auto.commit".into(), "false".into());
    props.insert("enable.partition.eof".into(), "true".into());
    props.insert("auto.offset.reset".into(), "earliest".into());
    let consumer: BaseConsumer<Quiet> = client_config(&props).create_with_context(Quiet).map_err(kafka)?;
    let ends = end_offsets(&consumer, topic, READ_BACK_TIMEOUT)?;
    let mut tpl = TopicPartitionList::new();
    let mut open: BTreeMap<i32, i64> = BTreeMap::new();
    for (&p, &end) in &ends {
        let from = start.get(&p).copied();
        if from.is_some_and(|f| f >= end) || end == 0 {
            continue;
        }
        let offset = from.map_or(Offset::Beginning, Offset::Offset);
        tpl.add_partition_offset(topic, p, offset).map_err(kafka)?;
        open.insert(p, end);
    }
    let mut out = Vec::new();
    if open.is_empty() {
        return Ok(out);
    }
    consumer.assign(&tpl).map_err(kafka)?;
    let deadline = Instant::now() + READ_BACK_TIMEOUT;
    while !open.is_empty() {
        if Instant::now() > deadline {
            return Err(Error::external(format!(
                "Kafka: reading back {topic} for {txn} did not finish within {READ_BACK_TIMEOUT:?} (partitions {:?} unfinished)",
                open.keys().collect::<Vec<_>>()
            )));
        }
        match consumer.poll(POLL) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
            }
            Some(Err(e)) => return Err(kafka(e)),
            Some(Ok(m)) => {
                let p = m.partition();
                if open.get(&p).is_some_and(|end| m.offset() + 1 >= *end) {
                    open.remove(&p);
                }
                let (mut mine, mut since) = (false, None);
                if let Some(h) = m.headers() {
                    for h in h.iter() {
                        match (h.key, h.value) {
                            (TXN_HEADER, Some(v)) => mine = v == txn.as_bytes(),
                            (AFTER_HEADER, Some(v)) => {
                                since = std::str::from_utf8(v).ok().and_then(|s| s.parse::<u64>().ok());
                            }
                            _ => {}
                        }
                    }
                }
                if mine && since.is_some_and(|s| s >= after) {
                    if out.len() as u64 >= max {
                        return Err(too_many(max));
                    }
                    out.push((m.key().map(<[u8]>::to_vec), m.payload().unwrap_or_default().to_vec()));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(k: Option<&str>, v: &str) -> RecordBytes {
        (k.map(|k| k.as_bytes().to_vec()), v.as_bytes().to_vec())
    }

    #[test]
    fn drops_each_committed_occurrence_once() {
        let mut f = ReplayFilter::default();
        f.extend([rec(Some("a"), "1"), rec(Some("a"), "1"), rec(None, "2")], 10)
            .unwrap();
        assert_eq!(f.remaining(), 3);
        assert!(f.take(Some(b"a"), b"1"));
        assert!(!f.take(Some(b"b"), b"1"), "another key is new output");
        assert!(!f.take(Some(b"2"), b"2"), "a key where none was written is new output");
        assert!(f.take(None, b"2"));
        assert!(f.take(Some(b"a"), b"1"));
        assert!(!f.take(Some(b"a"), b"1"), "used up: the same row again is new output");
        assert!(f.is_empty());
    }

    #[test]
    fn is_bounded_and_says_so() {
        let mut f = ReplayFilter::default();
        f.extend((0..3).map(|i| rec(None, &i.to_string())), 3).unwrap();
        let e = f.extend([rec(None, "x")], 3).unwrap_err().to_string();
        assert!(e.contains("more than 3 rows"), "{e}");
        assert_eq!(f.remaining(), 3);
    }

    #[test]
    fn round_trips_through_a_batch() {
        let mut f = ReplayFilter::default();
        f.extend([rec(Some("a"), "1"), rec(Some("a"), "1"), rec(None, "2")], 10)
            .unwrap();
        assert!(f.take(None, b"2"));
        let mut back = ReplayFilter::from_batch(&f.to_batch().unwrap(), 10).unwrap();
        assert_eq!(back.remaining(), 2);
        assert!(back.take(Some(b"a"), b"1") && back.take(Some(b"a"), b"1"));
        assert!(!back.take(None, b"2"));
        assert!(ReplayFilter::from_batch(&f.to_batch().unwrap(), 1).is_err());
    }
}
