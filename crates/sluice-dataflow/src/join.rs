//! Inner equi-join of two streams: a symmetric hash join.
//!
//! Each side keeps the rows it has seen, indexed by the row-encoded join
//! key; a batch from one side probes the other side's index, emits the
//! matches (left columns, then right columns) and is then stored. Rows live
//! in the batches they arrived in (shared, reference-counted by live rows);
//! output is gathered with `take` (probing side) and `interleave` (stored
//! side), no per-row copies of values.
//!
//! State is freed by time ([`JoinState::expire`], pure bookkeeping):
//! - a *windowed* join (the keys pair both sides' event-time columns, e.g.
//!   both `window_end`s) frees the rows of a time once the low watermark has
//!   passed it, and drops rows that arrive behind the watermark (late);
//! - otherwise rows expire `state_ttl_ms` after their event time (measured
//!   against the low watermark) or, when a side has no event time, after
//!   their arrival in processing time (checked on a timer).
//!
//! `state_rows_max` bounds the rows one instance holds over both sides; a
//! batch that would exceed it fails the pipeline with a clear error.

use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::time::timestamps_ms;
use arrow::array::builder::BooleanBufferBuilder;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use arrow::compute::{interleave, take};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::common::HashMap;
use sluice_plan::{JoinSide, JoinSpec};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Names of the sides in a snapshot's keys.
const SIDE_NAMES: [&str; 2] = ["left", "right"];

/// Rows gathered into one output batch at most.
pub const OUTPUT_BATCH_ROWS_MAX: usize = 8192;

/// One stored row: where it lives and its time (event or arrival).
#[derive(Debug, Clone, Copy)]
struct Entry {
    time_ms: i64,
    batch: u64,
    row: u32,
}

/// A batch as it arrived (immutable, shared with the output and with
/// snapshots), which of its rows are live, and every row's time.
struct StoredBatch {
    batch: RecordBatch,
    /// Row times (arrival order), kept for snapshots.
    times: Int64Array,
    /// Live rows: set when stored, cleared when the row expires.
    live: BooleanBufferBuilder,
    live_rows: usize,
}

/// One side's stored batches by id (ids grow by one per batch, batches
/// expire roughly in arrival order): a deque from the oldest live id.
#[derive(Default)]
struct StoredBatches {
    first_id: u64,
    slots: VecDeque<Option<StoredBatch>>,
    count: usize,
}

impl StoredBatches {
    /// Live stored batches.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.count
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn next_id(&self) -> u64 {
        self.first_id + self.slots.len() as u64
    }

    fn push(&mut self, batch: StoredBatch) -> u64 {
        let id = self.next_id();
        self.slots.push_back(Some(batch));
        self.count += 1;
        id
    }

    fn get(&self, id: u64) -> Option<&StoredBatch> {
        let at = usize::try_from(id.checked_sub(self.first_id)?).ok()?;
        self.slots.get(at)?.as_ref()
    }

    /// Marks a row of batch `id` expired; frees the batch with its last row.
    fn expire_row(&mut self, id: u64, row: u32) {
        let Some(at) = id.checked_sub(self.first_id).and_then(|a| usize::try_from(a).ok()) else {
            return;
        };
        let Some(Some(b)) = self.slots.get_mut(at) else {
            return;
        };
        b.live.set_bit(row as usize, false);
        b.live_rows -= 1;
        if b.live_rows == 0 {
            self.slots[at] = None;
            self.count -= 1;
            while matches!(self.slots.front(), Some(None)) {
                self.slots.pop_front();
                self.first_id += 1;
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = &StoredBatch> {
        self.slots.iter().flatten()
    }
}

/// One side's rows, by key, plus the times at which keys may expire.
#[derive(Default)]
struct SideState {
    /// Entries of a key, sorted by time (appended in arrival order, which
    /// is nearly sorted; a late one is inserted in its place).
    index: HashMap<Box<[u8]>, VecDeque<Entry>>,
    /// Earliest time of a key's entries → keys (a key is listed once, under
    /// the earliest time it had when listed).
    expiry: BTreeMap<i64, Vec<Box<[u8]>>>,
    batches: StoredBatches,
    rows: usize,
}

impl SideState {
    /// Drops entries with `time_ms < cutoff`; returns how many. A key's
    /// entries are kept sorted by time, so this touches only the keys that
    /// have expired entries and only those entries (a key with thousands of
    /// live rows is not rescanned on every watermark).
    fn expire(&mut self, cutoff: i64) -> usize {
        let mut freed = 0;
        while let Some(entry) = self.expiry.first_entry() {
            if *entry.key() >= cutoff {
                break;
            }
            for key in entry.remove() {
                let Some(entries) = self.index.get_mut(&key) else {
                    continue;
                };
                while let Some(e) = entries.front().filter(|e| e.time_ms < cutoff) {
                    self.batches.expire_row(e.batch, e.row);
                    entries.pop_front();
                    freed += 1;
                }
                match entries.front() {
                    None => {
                        self.index.remove(&key);
                    }
                    Some(earliest) => self.expiry.entry(earliest.time_ms).or_default().push(key),
                }
            }
        }
        self.rows -= freed;
        freed
    }
}

/// Both sides' state and the rules that free it; no I/O.
pub struct JoinState {
    sides: [SideState; 2],
    rows_max: usize,
}

/// The probe of one batch: (probing row, stored entry) pairs.
type Matches = Vec<(u32, Entry)>;

impl JoinState {
    pub fn new(rows_max: usize) -> Self {
        JoinState {
            sides: [SideState::default(), SideState::default()],
            rows_max,
        }
    }

    /// Rows held over both sides.
    pub fn rows(&self) -> usize {
        self.sides[0].rows + self.sides[1].rows
    }

    /// Frees rows older than `cutoff` on both sides; returns how many.
    pub fn expire(&mut self, cutoff: i64) -> usize {
        self.sides[0].expire(cutoff) + self.sides[1].expire(cutoff)
    }

    /// Probes `side`'s opposite with `keys` (None = a null key, never
    /// matches), then stores the rows marked in `store` with their times.
    fn probe_and_store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: &[Option<&[u8]>],
        times: &[i64],
        store: &[bool],
    ) -> Result<Matches> {
        let other = &self.sides[1 - side];
        let mut matches = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            if let Some(entries) = key.and_then(|k| other.index.get(k)) {
                matches.extend(entries.iter().map(|e| (row as u32, *e)));
            }
        }
        self.store(side, batch, keys, times, store)?;
        Ok(matches)
    }

    /// Stores the rows of `batch` marked in `store` (and with a key) on `side`.
    fn store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: &[Option<&[u8]>],
        times: &[i64],
        store: &[bool],
    ) -> Result<()> {
        let stored = keys.iter().zip(store).filter(|(k, s)| k.is_some() && **s).count();
        if stored == 0 {
            return Ok(());
        }
        if self.rows() + stored > self.rows_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "join state limit reached: {} rows held (join_state_rows_max); use a window, a shorter join_state_ttl, or more parallelism",
                    self.rows_max
                ),
            ));
        }
        let state = &mut self.sides[side];
        let id = state.batches.next_id();
        let mut live = BooleanBufferBuilder::new(batch.num_rows());
        live.append_n(batch.num_rows(), false);
        for (row, key) in keys.iter().enumerate() {
            let (Some(key), true) = (key, store[row]) else {
                continue;
            };
            live.set_bit(row, true);
            let entry = Entry {
                time_ms: times[row],
                batch: id,
                row: row as u32,
            };
            match state.index.get_mut(*key) {
                Some(entries) => {
                    if entries.back().is_none_or(|last| last.time_ms <= entry.time_ms) {
                        entries.push_back(entry);
                    } else {
                        // Out of order: keep the key sorted. (An entry
                        // earlier than the key's listed time is freed when
                        // that listing comes due, as before: a key is listed
                        // once.)
                        let at = entries.partition_point(|e| e.time_ms <= entry.time_ms);
                        entries.insert(at, entry);
                    }
                }
                None => {
                    state.index.insert((*key).into(), VecDeque::from([entry]));
                    state.expiry.entry(entry.time_ms).or_default().push((*key).into());
                }
            }
        }
        state.batches.push(StoredBatch {
            batch: batch.clone(),
            times: Int64Array::from(times.to_vec()),
            live,
            live_rows: stored,
        });
        state.rows += stored;
        Ok(())
    }

    /// `side`'s stored batches as they are (shared arrays, no copy of
    /// values), each with two more columns: the rows' times and whether a
    /// row is live. O(stored batches) plus a copy of the live bitmaps (one
    /// bit per row); empty when the side holds nothing.
    fn snapshot_batches(&self, side: usize) -> Result<Vec<RecordBatch>> {
        let state = &self.sides[side];
        let Some(first) = state.batches.iter().next() else {
            return Ok(Vec::new());
        };
        let schema = snapshot_schema(&first.batch.schema());
        state
            .batches
            .iter()
            .map(|b| {
                let mut columns = b.batch.columns().to_vec();
                columns.push(Arc::new(b.times.clone()));
                columns.push(Arc::new(BooleanArray::new(b.live.finish_cloned(), None)));
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
    fn keys(&self, side: usize, batch: &RecordBatch) -> Result<(arrow::row::Rows, Vec<bool>)> {
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
        let (rows, null) = self.keys(side, batch)?;
        let keys: Vec<Option<&[u8]>> = (0..batch.num_rows())
            .map(|r| (!null[r]).then(|| rows.row(r).data()))
            .collect();
        self.state.store(side, batch, &keys, times, live)
    }

    /// Output batches for the matches of a batch from `side`.
    fn gather(&self, side: usize, batch: &RecordBatch, matches: &[(u32, Entry)]) -> Result<Vec<RecordBatch>> {
        let stored = &self.state.sides[1 - side].batches;
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
                .map(|b| stored.get(*b).map(|s| &s.batch))
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
        let (rows, null) = self.keys(side, &batch)?;
        let keys: Vec<Option<&[u8]>> = (0..batch.num_rows())
            .map(|r| (!null[r]).then(|| rows.row(r).data()))
            .collect();
        let times: Vec<i64> = match (self.processing_time, self.side(side).time_column) {
            (false, Some(c)) => timestamps_ms(batch.column(c))?
                .into_iter()
                .map(|t| t.unwrap_or(i64::MIN))
                .collect(),
            _ => vec![Self::now_ms(); batch.num_rows()],
        };
        let low = ctx.watermark.0;
        let store: Vec<bool> = if self.spec.windowed {
            // Behind the watermark: the other side's rows of that time are gone.
            let mut late = 0;
            let store = times
                .iter()
                .map(|t| {
                    let ok = *t >= low;
                    late += usize::from(!ok);
                    ok
                })
                .collect();
            ctx.metrics.late_rows_dropped.fetch_add(late as u64, Ordering::Relaxed);
            store
        } else {
            vec![true; batch.num_rows()]
        };
        let keys: Vec<Option<&[u8]>> = keys
            .iter()
            .zip(&store)
            .map(|(k, s)| if *s { *k } else { None })
            .collect();
        let matches = self.state.probe_and_store(side, &batch, &keys, &times, &store)?;
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
