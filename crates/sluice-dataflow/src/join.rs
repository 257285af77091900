//! Inner equi-join of two streams: a symmetric hash join.
//!
//! Each side keeps the rows it has seen in the batches they arrived in
//! (immutable, shared with the output and with snapshots), numbered in
//! arrival order. A hash table maps each join key to its newest stored row,
//! and every stored row points to the previous row with the same key, so a
//! key's rows form a chain from newest to oldest: no per-key allocation, and
//! the key bytes are read from the stored batches' row-encoded keys. A batch
//! from one side probes the other side's chains, emits the matches (left
//! columns, then right columns; output gathered with `take` and
//! `interleave`, no per-row copies of values) and is then stored.
//!
//! State is freed by time ([`JoinState::expire`], pure bookkeeping):
//! - a *windowed* join (the keys pair both sides' event-time columns, e.g.
//!   both `window_end`s) frees the rows of a time once the low watermark has
//!   passed it, and drops rows that arrive behind the watermark (late);
//! - otherwise rows expire `state_ttl_ms` after their event time (measured
//!   against the low watermark) or, when a side has no event time, after
//!   their arrival in processing time (checked on a timer).
//!
//! Expired rows never match (a probe skips rows older than the cutoff).
//! Memory is freed in arrival order: the oldest stored rows go while they
//! are expired, so a row that arrived out of time order is held until the
//! rows that arrived before it have expired too — held at most as long as the
//! side's disorder, and counted in `rows()` until then.
//!
//! `state_rows_max` bounds the rows one instance holds over both sides; a
//! batch that would exceed it fails the pipeline with a clear error.

use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::time::timestamps_ms;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{interleave, take};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use async_trait::async_trait;
use datafusion::common::HashMap;
use hashbrown::{DefaultHashBuilder, HashTable};
use sluice_plan::{JoinSide, JoinSpec};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Names of the sides in a snapshot's keys.
const SIDE_NAMES: [&str; 2] = ["left", "right"];

/// Rows gathered into one output batch at most.
pub const OUTPUT_BATCH_ROWS_MAX: usize = 8192;

/// A stored row's number on its side: arrival order, never reused.
type Seq = u64;

/// "No previous row with this key."
const NO_ROW: Seq = Seq::MAX;

/// One matched stored row: its batch (by the batch's first row number) and
/// its row in that batch.
#[derive(Debug, Clone, Copy)]
struct Entry {
    batch: Seq,
    row: u32,
}

/// A batch as it arrived (immutable, shared with the output and with
/// snapshots) and, per row, what the index needs.
struct StoredBatch {
    /// Number of the batch's first row.
    first: Seq,
    batch: RecordBatch,
    /// Row-encoded join keys (compared on lookups).
    keys: Rows,
    /// Row times (event or arrival), kept for expiry and snapshots.
    times: Int64Array,
    /// Rows that were stored (a row with a null key or that arrived late
    /// is not).
    stored: BooleanBuffer,
    /// Hash of each stored row's key.
    hashes: Vec<u64>,
    /// The previous stored row with the same key, or [`NO_ROW`].
    prev: Vec<Seq>,
    /// The earliest time of a stored row.
    min_time: i64,
}

/// Shards of a side's key index: a table grows (rehashing everything it
/// holds, at once) one shard at a time, so the pause is 1/256 of the index.
const INDEX_SHARDS: usize = 256;

/// The shard of a key's hash: bits 32..40 (hashbrown picks buckets from the
/// low bits and tags from the top 7, so both stay spread within a shard).
fn shard(hash: u64) -> usize {
    (hash >> 32) as usize % INDEX_SHARDS
}

/// A key's newest stored row.
struct Head {
    hash: u64,
    newest: Seq,
}

/// One side's rows: stored batches in arrival order and the key index.
struct SideState {
    /// Key → newest stored row, in [`INDEX_SHARDS`] shards.
    index: Vec<HashTable<Head>>,
    batches: VecDeque<StoredBatch>,
    /// Rows of the front batch already freed.
    freed: usize,
    /// Number of the next row stored.
    next: Seq,
    /// Stored rows held (freed ones excluded).
    rows: usize,
}

/// The batch holding row `seq` and the row in it; `None` once freed.
fn locate(batches: &VecDeque<StoredBatch>, freed: usize, seq: Seq) -> Option<(&StoredBatch, usize)> {
    let front = batches.front()?;
    if seq < front.first + freed as u64 {
        return None;
    }
    let back = batches.back()?;
    let b = if seq >= back.first {
        back
    } else {
        &batches[batches.partition_point(|b| b.first <= seq) - 1]
    };
    let row = usize::try_from(seq - b.first).ok()?;
    (row < b.batch.num_rows()).then_some((b, row))
}

impl Default for SideState {
    fn default() -> Self {
        SideState {
            index: (0..INDEX_SHARDS).map(|_| HashTable::new()).collect(),
            batches: VecDeque::new(),
            freed: 0,
            next: 0,
            rows: 0,
        }
    }
}

impl SideState {
    /// Keys in the index.
    #[cfg(test)]
    fn keys(&self) -> usize {
        self.index.iter().map(HashTable::len).sum()
    }

    /// The stored batch whose first row is `first`.
    fn batch(&self, first: Seq) -> Option<&StoredBatch> {
        let at = self.batches.partition_point(|b| b.first < first);
        self.batches.get(at).filter(|b| b.first == first)
    }

    /// Appends `key`'s stored rows that have not expired (`time >= cutoff`)
    /// to `out`, oldest first, each paired with `probe_row`.
    fn probe(&self, key: &[u8], hash: u64, cutoff: i64, probe_row: u32, out: &mut Vec<(u32, Entry)>) {
        let (batches, freed) = (&self.batches, self.freed);
        let same_key = |h: &Head| {
            h.hash == hash && locate(batches, freed, h.newest).is_some_and(|(b, r)| b.keys.row(r).data() == key)
        };
        let Some(head) = self.index[shard(hash)].find(hash, same_key) else {
            return;
        };
        let start = out.len();
        let mut seq = head.newest;
        while let Some((b, r)) = locate(batches, freed, seq) {
            if b.times.value(r) >= cutoff {
                out.push((
                    probe_row,
                    Entry {
                        batch: b.first,
                        row: r as u32,
                    },
                ));
            }
            seq = b.prev[r];
        }
        out[start..].reverse();
    }

    /// Stores `batch` (its `stored` rows, with their keys, hashes and times).
    fn store(
        &mut self,
        batch: &RecordBatch,
        keys: Rows,
        hashes: Vec<u64>,
        times: &[i64],
        stored: &[bool],
        count: usize,
    ) {
        let first = self.next;
        let n = batch.num_rows();
        let mut prev = vec![NO_ROW; n];
        let SideState {
            index, batches, freed, ..
        } = self;
        let key_at = |seq: Seq| -> Option<&[u8]> {
            if seq >= first {
                return Some(keys.row((seq - first) as usize).data());
            }
            locate(batches, *freed, seq).map(|(b, r)| b.keys.row(r).data())
        };
        for r in (0..n).filter(|r| stored[*r]) {
            let (hash, seq) = (hashes[r], first + r as u64);
            let key = keys.row(r).data();
            let index = &mut index[shard(hash)];
            match index.find_mut(hash, |h| h.hash == hash && key_at(h.newest) == Some(key)) {
                Some(head) => {
                    prev[r] = head.newest;
                    head.newest = seq;
                }
                None => {
                    index.insert_unique(hash, Head { hash, newest: seq }, |h| h.hash);
                }
            }
        }
        let min_time = (0..n)
            .filter(|r| stored[*r])
            .map(|r| times[r])
            .min()
            .unwrap_or(i64::MAX);
        self.batches.push_back(StoredBatch {
            min_time,
            first,
            batch: batch.clone(),
            keys,
            times: Int64Array::from(times.to_vec()),
            stored: BooleanBuffer::from(stored),
            hashes,
            prev,
        });
        self.next = first + n as u64;
        self.rows += count;
    }

    /// Frees the oldest rows while they are expired (`time < cutoff`) or
    /// were never stored; returns how many stored rows were freed.
    fn expire(&mut self, cutoff: i64) -> usize {
        let mut freed_rows = 0;
        let SideState {
            index, batches, freed, ..
        } = self;
        'batches: while let Some(front) = batches.front() {
            while *freed < front.batch.num_rows() {
                let r = *freed;
                if front.stored.value(r) {
                    if front.times.value(r) >= cutoff {
                        break 'batches;
                    }
                    // The key's newest row: the key has no other (older rows
                    // of it were freed first).
                    let seq = front.first + r as u64;
                    let hash = front.hashes[r];
                    if let Ok(head) = index[shard(hash)].find_entry(hash, |h| h.newest == seq) {
                        head.remove();
                    }
                    freed_rows += 1;
                }
                *freed += 1;
            }
            batches.pop_front();
            *freed = 0;
        }
        self.rows -= freed_rows;
        freed_rows
    }

    /// Whether each row of a stored batch is live at `cutoff`.
    fn live(&self, at: usize, cutoff: i64) -> BooleanBuffer {
        let b = &self.batches[at];
        let freed = if at == 0 { self.freed } else { 0 };
        if freed == 0 && b.min_time >= cutoff {
            // Every stored row lives (the common case: all but the oldest).
            return b.stored.clone();
        }
        (0..b.batch.num_rows())
            .map(|r| r >= freed && b.stored.value(r) && b.times.value(r) >= cutoff)
            .collect()
    }
}

/// Both sides' state and the rules that free it; no I/O.
pub struct JoinState {
    sides: [SideState; 2],
    rows_max: usize,
    /// Rows older than this have expired (the latest expiry's cutoff).
    cutoff: i64,
    hasher: DefaultHashBuilder,
}

/// The probe of one batch: (probing row, stored entry) pairs.
type Matches = Vec<(u32, Entry)>;

impl JoinState {
    pub fn new(rows_max: usize) -> Self {
        JoinState {
            sides: [SideState::default(), SideState::default()],
            rows_max,
            cutoff: i64::MIN,
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Rows held over both sides.
    pub fn rows(&self) -> usize {
        self.sides[0].rows + self.sides[1].rows
    }

    /// Expires rows older than `cutoff` on both sides; returns how many
    /// were freed.
    pub fn expire(&mut self, cutoff: i64) -> usize {
        self.cutoff = self.cutoff.max(cutoff);
        self.sides[0].expire(self.cutoff) + self.sides[1].expire(self.cutoff)
    }

    /// The hash of each `store` row's key (0 for the others).
    fn hashes(&self, keys: &Rows, store: &[bool]) -> Vec<u64> {
        store
            .iter()
            .enumerate()
            .map(|(r, s)| {
                if *s {
                    self.hasher.hash_one(keys.row(r).data())
                } else {
                    0
                }
            })
            .collect()
    }

    /// Probes `side`'s opposite with the `store` rows of `batch` (their
    /// row-encoded `keys`), then stores those rows with their times.
    fn probe_and_store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: Rows,
        times: &[i64],
        store: &[bool],
    ) -> Result<Matches> {
        let hashes = self.hashes(&keys, store);
        let other = &self.sides[1 - side];
        let mut matches = Vec::new();
        if other.rows > 0 {
            for r in (0..batch.num_rows()).filter(|r| store[*r]) {
                other.probe(keys.row(r).data(), hashes[r], self.cutoff, r as u32, &mut matches);
            }
        }
        self.store(side, batch, keys, hashes, times, store)?;
        Ok(matches)
    }

    /// Stores the rows of `batch` marked in `store` on `side`.
    fn store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: Rows,
        hashes: Vec<u64>,
        times: &[i64],
        store: &[bool],
    ) -> Result<()> {
        let count = store.iter().filter(|s| **s).count();
        if count == 0 {
            return Ok(());
        }
        if self.rows() + count > self.rows_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "join state limit reached: {} rows held (join_state_rows_max); use a window, a shorter join_state_ttl, or more parallelism",
                    self.rows_max
                ),
            ));
        }
        self.sides[side].store(batch, keys, hashes, times, store, count);
        Ok(())
    }

    /// `side`'s stored batches as they are (shared arrays, no copy of
    /// values), each with two more columns: the rows' times and whether a
    /// row is live. O(stored batches) plus one bit per row; empty when the
    /// side holds nothing.
    fn snapshot_batches(&self, side: usize) -> Result<Vec<RecordBatch>> {
        let state = &self.sides[side];
        let Some(first) = state.batches.front() else {
            return Ok(Vec::new());
        };
        let schema = snapshot_schema(&first.batch.schema());
        state
            .batches
            .iter()
            .enumerate()
            .map(|(at, b)| {
                let mut columns = b.batch.columns().to_vec();
                columns.push(Arc::new(b.times.clone()));
                columns.push(Arc::new(BooleanArray::new(state.live(at, self.cutoff), None)));
                Ok(RecordBatch::try_new(schema.clone(), columns)?)
            })
            .collect()
    }
}

/// Column names a join snapshot adds to a side's stored batches.
const SNAPSHOT_TIME: &str = "__sluice_join_time";
const SNAPSHOT_LIVE: &str = "__sluice_join_live";

/// A side's schema plus the snapshot's time and live columns.
fn snapshot_schema(side: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = side.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(SNAPSHOT_TIME, DataType::Int64, false)));
    fields.push(Arc::new(Field::new(SNAPSHOT_LIVE, DataType::Boolean, false)));
    Arc::new(Schema::new(fields))
}

/// The operator around [`JoinState`].
pub struct JoinOperator {
    spec: JoinSpec,
    output_schema: SchemaRef,
    /// Inputs `0..left_inputs` are the left side's channels.
    left_inputs: usize,
    converters: [RowConverter; 2],
    state: JoinState,
    /// Event-time TTL needs both sides' event time; else processing time.
    processing_time: bool,
}

impl JoinOperator {
    pub fn new(spec: &JoinSpec, output_schema: SchemaRef, left_inputs: usize) -> Result<Self> {
        let converter = |side: &JoinSide| {
            RowConverter::new(
                side.keys
                    .iter()
                    .map(|k| SortField::new(side.schema.field(*k).data_type().clone()))
                    .collect(),
            )
        };
        let (l, r) = (converter(&spec.left)?, converter(&spec.right)?);
        let processing_time = !spec.windowed && (spec.left.time_column.is_none() || spec.right.time_column.is_none());
        if spec.windowed && processing_time {
            return Err(Error::internal("windowed join without event time"));
        }
        Ok(JoinOperator {
            spec: spec.clone(),
            output_schema,
            left_inputs,
            converters: [l, r],
            state: JoinState::new(spec.state_rows_max),
            processing_time,
        })
    }

    fn side(&self, side: usize) -> &JoinSide {
        if side == 0 { &self.spec.left } else { &self.spec.right }
    }

    /// The row-encoded join keys of `batch` from `side` (`None` for a null key).
    fn keys(&self, side: usize, batch: &RecordBatch) -> Result<(Rows, Vec<bool>)> {
        let key_arrays: Vec<ArrayRef> = self.side(side).keys.iter().map(|k| batch.column(*k).clone()).collect();
        let rows = self.converters[side].convert_columns(&key_arrays)?;
        let null = (0..batch.num_rows())
            .map(|r| key_arrays.iter().any(|a| a.is_null(r)))
            .collect();
        Ok((rows, null))
    }

    fn now_ms() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// Stores the rows of `batch` marked in `live` with their times (restore).
    fn restore_rows(&mut self, side: usize, batch: &RecordBatch, times: &[i64], live: &[bool]) -> Result<()> {
        let (keys, null) = self.keys(side, batch)?;
        let store: Vec<bool> = live.iter().zip(&null).map(|(l, n)| *l && !n).collect();
        let hashes = self.state.hashes(&keys, &store);
        self.state.store(side, batch, keys, hashes, times, &store)
    }

    /// Output batches for the matches of a batch from `side`.
    fn gather(&self, side: usize, batch: &RecordBatch, matches: &[(u32, Entry)]) -> Result<Vec<RecordBatch>> {
        let stored = &self.state.sides[1 - side];
        let mut out = Vec::new();
        for chunk in matches.chunks(OUTPUT_BATCH_ROWS_MAX) {
            let probe_rows = UInt32Array::from_iter_values(chunk.iter().map(|(r, _)| *r));
            let probe: Vec<ArrayRef> = (0..self.side(side).output_columns)
                .map(|c| take(batch.column(c), &probe_rows, None))
                .collect::<std::result::Result<_, _>>()?;
            let mut sources: Vec<u64> = chunk.iter().map(|(_, e)| e.batch).collect();
            sources.sort_unstable();
            sources.dedup();
            let slot: HashMap<u64, usize> = sources.iter().enumerate().map(|(i, b)| (*b, i)).collect();
            let indices: Vec<(usize, usize)> = chunk.iter().map(|(_, e)| (slot[&e.batch], e.row as usize)).collect();
            let batches = sources
                .iter()
                .map(|b| stored.batch(*b).map(|s| &s.batch))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::internal("join: a match refers to a freed batch"))?;
            let mut other = Vec::new();
            for c in 0..self.side(1 - side).output_columns {
                let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
                other.push(interleave(&arrays, &indices)?);
            }
            let columns = if side == 0 {
                probe.into_iter().chain(other).collect()
            } else {
                other.into_iter().chain(probe).collect()
            };
            out.push(RecordBatch::try_new(self.output_schema.clone(), columns)?);
        }
        Ok(out)
    }
}

#[async_trait]
impl Operator for JoinOperator {
    async fn process_batch(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let side = usize::from(input >= self.left_inputs);
        let (keys, null) = self.keys(side, &batch)?;
        let times: Vec<i64> = match (self.processing_time, self.side(side).time_column) {
            (false, Some(c)) => timestamps_ms(batch.column(c))?
                .into_iter()
                .map(|t| t.unwrap_or(i64::MIN))
                .collect(),
            _ => vec![Self::now_ms(); batch.num_rows()],
        };
        let low = ctx.watermark.0;
        // Rows with a null key never match and are not stored.
        let store: Vec<bool> = if self.spec.windowed {
            // Behind the watermark: the other side's rows of that time are gone.
            let late = times.iter().filter(|t| **t < low).count();
            ctx.metrics.late_rows_dropped.fetch_add(late as u64, Ordering::Relaxed);
            times.iter().zip(&null).map(|(t, n)| *t >= low && !n).collect()
        } else {
            null.iter().map(|n| !n).collect()
        };
        let matches = self.state.probe_and_store(side, &batch, keys, &times, &store)?;
        ctx.metrics
            .state_groups
            .store(self.state.rows() as u64, Ordering::Relaxed);
        for out in self.gather(side, &batch, &matches)? {
            ctx.emit(out).await?;
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if !self.processing_time {
            let cutoff = match (self.spec.windowed, self.spec.state_ttl_ms) {
                (true, _) => Some(watermark.0),
                (false, Some(ttl)) => Some(watermark.0.saturating_sub(ttl)),
                (false, None) => None,
            };
            if let Some(cutoff) = cutoff {
                self.state.expire(cutoff);
                ctx.metrics
                    .state_groups
                    .store(self.state.rows() as u64, Ordering::Relaxed);
            }
        }
        ctx.emit_watermark(watermark).await
    }

    /// Both sides' stored batches, shared with the state (zero-copy: the
    /// coordinator encodes them off the task loop), with each row's time
    /// and liveness, so a restored join matches what the original would.
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            let batches = self.state.snapshot_batches(side)?;
            if !batches.is_empty() {
                state.put_batches(&format!("join.{name}.batches"), batches);
            }
        }
        Ok(state)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let Some((_, state)) = checkpoint else {
            return Ok(());
        };
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            for stored in state.batches(&format!("join.{name}.batches")).unwrap_or_default() {
                let bad = || Error::internal(format!("join snapshot: bad {name} batch"));
                let n = stored.num_columns().checked_sub(2).ok_or_else(bad)?;
                let times: Vec<i64> = stored
                    .column(n)
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(bad)?
                    .values()
                    .to_vec();
                let live: Vec<bool> = stored
                    .column(n + 1)
                    .as_boolean_opt()
                    .ok_or_else(bad)?
                    .values()
                    .iter()
                    .collect();
                let batch = stored.project(&(0..n).collect::<Vec<_>>())?;
                self.restore_rows(side, &batch, &times, &live)?;
            }
            // Checkpoints taken before stored batches were snapshotted whole:
            // the live rows gathered into one batch, the times beside it.
            if let Some(batch) = state.batch(&format!("join.{name}.rows")) {
                let times: Vec<i64> = state
                    .bytes(&format!("join.{name}.times"))
                    .filter(|b| b.len() == batch.num_rows() * 8)
                    .ok_or_else(|| Error::internal(format!("join snapshot: {name} times do not match its rows")))?
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                self.restore_rows(side, batch, &times, &vec![true; batch.num_rows()])?;
            }
        }
        Ok(())
    }

    fn timer_interval(&self) -> Option<Duration> {
        let ttl = self.spec.state_ttl_ms.filter(|_| self.processing_time)?;
        Some(Duration::from_millis((ttl / 4).clamp(10, 1000) as u64))
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(ttl) = self.spec.state_ttl_ms {
            self.state.expire(Self::now_ms().saturating_sub(ttl));
            ctx.metrics
                .state_groups
                .store(self.state.rows() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "join_tests.rs"]
mod tests;
