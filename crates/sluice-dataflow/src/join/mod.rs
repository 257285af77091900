//! Equi-join of two streams: a symmetric hash join.
//!
//! An outer join (windowed or interval) also remembers, per row of a
//! preserved side, whether it matched; when a watermark expires rows, the
//! preserved ones that never matched are emitted with NULLs for the other
//! side, before the watermark goes on. An outer interval join decides
//! matches by the exact bounds between the two times (`pair_bounds`),
//! which an inner join leaves to the filter after it.
//!
//! Each side keeps the rows it has seen in the batches they arrived in
//! (immutable, shared with the output and with snapshots), numbered in
//! arrival order. A hash table maps each join key to its newest stored row,
//! and every stored row points to the previous row with the same key, so a
//! key's rows form a chain from newest to oldest: no per-key allocation;
//! short keys are kept in the index entry, longer ones are read from the
//! stored batches' row-encoded keys. A batch
//! from one side probes the other side's chains, emits the matches (left
//! columns, then right columns; output gathered with `take` and
//! `interleave`, no per-row copies of values) and is then stored.
//!
//! A side that is stored often and probed rarely — a stream joined to a
//! window's results, like Nexmark q7's bids to each window's highest price
//! — drops its index: inserting tens of millions of rows into a large hash
//! table costs a cache miss or two per row, while a rare probe can read
//! every held row's 2-byte hash tag in order instead (skipping batches whose
//! key range excludes the probing keys). Each side weighs the
//! two by what it lately stored and was probed with and switches when the
//! other way is clearly cheaper (`SideState::choose_strategy`); either way
//! a probe finds the same rows in the same order.
//!
//! Rows expire by time and are freed a step at a time (`expiry.rs`).
//! `state_rows_max` bounds the rows one instance holds over both sides; a
//! batch that would exceed it fails the pipeline with a clear error.
//!
//! The files:
//! - this one: [`JoinState`], both sides, the probe of one side by a batch
//!   of the other, the bound on held rows, and the snapshot's layout;
//! - `side.rs`: one side's store — its stored batches, the key index or
//!   the hash tags scans read, and the choice between the two;
//! - `expiry.rs`: when rows expire (windowed, interval, TTL) and how their
//!   memory is freed; pure bookkeeping;
//! - `operator.rs`: [`JoinOperator`], the [`Operator`](crate::Operator)
//!   around the state: keys, times, output batches, watermarks and timers,
//!   snapshot and restore;
//! - `tag_ring.rs`: the recycled chunks of a scanned side's hash tags.

use crate::checkpoint::incremental::{Held, Increment};
use crate::time::timestamps_ms;
use arrow::array::{ArrayRef, BooleanArray, Int64Array};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::Rows;
use hashbrown::DefaultHashBuilder;
use sluice_types::{Error, Result, SqlCode};
use std::hash::BuildHasher;
use std::sync::Arc;

mod expiry;
mod operator;
mod side;
mod tag_ring;

pub use expiry::FREE_ROWS_STEP;
pub use operator::{JoinOperator, OUTPUT_BATCH_ROWS_MAX};
pub use side::STORED_BATCH_ROWS_MAX;
use side::{Entry, SideState};

/// A join instance would hold more than `rows_max` rows.
pub(crate) fn rows_limit_reached(rows_max: usize) -> Error {
    Error::user(
        SqlCode::ConfigurationLimitExceeded,
        format!(
            "join state limit reached: {rows_max} rows held (join_state_rows_max); use a window, a shorter join_state_ttl, or more parallelism"
        ),
    )
}

/// Names of the sides in a snapshot's keys.
const SIDE_NAMES: [&str; 2] = ["left", "right"];

/// Both sides' state and the rules that free it; no I/O.
pub struct JoinState {
    sides: [SideState; 2],
    rows_max: usize,
    /// Per side: rows older than this have expired (the latest expiry's
    /// cutoff; an interval join's sides expire at different times).
    cutoffs: [i64; 2],
    hasher: DefaultHashBuilder,
    /// An outer join's preserved sides: their rows remember whether they
    /// matched, and those that never did are emitted with NULLs for the
    /// other side as they expire ([`Self::unmatched`]).
    preserved: [bool; 2],
    /// An outer interval join's exact condition on the two times, `[v, u]`:
    /// a pair matches when `-u <= right.t - left.t <= v` (an inner join
    /// checks it after the join, as a filter; an outer one must know which
    /// rows found a match).
    pair_bounds: Option<[i64; 2]>,
}

/// The probe of one batch: (probing row, stored entry) pairs.
type Matches = Vec<(u32, Entry)>;

impl JoinState {
    pub fn new(rows_max: usize) -> Self {
        JoinState {
            sides: [SideState::default(), SideState::default()],
            rows_max,
            cutoffs: [i64::MIN; 2],
            hasher: DefaultHashBuilder::default(),
            preserved: [false; 2],
            pair_bounds: None,
        }
    }

    /// An outer join's state: `preserved` sides, pairs within `pair_bounds`.
    pub fn outer(rows_max: usize, preserved: [bool; 2], pair_bounds: Option<[i64; 2]>) -> Self {
        JoinState {
            preserved,
            pair_bounds,
            ..JoinState::new(rows_max)
        }
    }

    /// The rows of preserved `side` that expire between cutoffs `from` and
    /// `to` (`from <= time < to`) without having matched, in arrival order.
    fn unmatched(&self, side: usize, from: i64, to: i64) -> Vec<Entry> {
        let state = &self.sides[side];
        let mut out = Vec::new();
        if !self.preserved[side] || to <= from {
            return out;
        }
        for (at, b) in state.batches.iter().enumerate() {
            if b.max_time < from || b.min_time >= to {
                continue;
            }
            let first = if at == 0 { state.freed } else { 0 };
            for r in first..b.batch.num_rows() {
                let t = b.times.value(r);
                if b.stored.value(r) && !b.matched[r] && t >= from && t < to {
                    out.push(Entry {
                        batch: b.number,
                        row: r as u32,
                    });
                }
            }
        }
        out
    }

    /// Rows held over both sides.
    pub fn rows(&self) -> usize {
        self.sides[0].rows + self.sides[1].rows
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
        times: Vec<i64>,
        store: &[bool],
    ) -> Result<Matches> {
        let hashes = self.hashes(&keys, store);
        let other = &mut self.sides[1 - side];
        let mut matches = Vec::new();
        // (Built only when there is something to probe: q7's bids find the
        // other side empty but for a moment each window.)
        let probing: Vec<(u64, u32)> = match other.rows {
            0 => Vec::new(),
            _ => (0..batch.num_rows())
                .filter(|r| store[*r])
                .map(|r| (hashes[r], r as u32))
                .collect(),
        };
        if !probing.is_empty() {
            // One pass over the held rows (a few times dearer per row with
            // many probing keys: a search per row).
            let per_row = if probing.len() == 1 { 1 } else { 4 };
            other.scanned_lately = other.scanned_lately.saturating_add(per_row * other.rows as u64);
            other.choose_strategy(&self.hasher);
            let cutoff = self.cutoffs[1 - side];
            if other.indexed {
                for (hash, r) in &probing {
                    other.probe(keys.row(*r as usize).data(), *hash, cutoff, *r, &mut matches);
                }
            } else {
                let started = std::time::Instant::now();
                other.scan(&keys, &probing, cutoff, &mut matches);
                tracing::debug!(rows = other.rows, keys = probing.len(), took = ?started.elapsed(), "join scan");
            }
        }
        if let Some([v, u]) = self.pair_bounds {
            let other = &self.sides[1 - side];
            matches.retain(|(r, e)| {
                let stored = other.batch(e.batch).map_or(i64::MIN, |b| b.times.value(e.row as usize));
                let probing = times[*r as usize];
                let d = if side == 0 { stored - probing } else { probing - stored };
                -u <= d && d <= v
            });
        }
        if self.preserved[1 - side] {
            let other = &mut self.sides[1 - side];
            for (_, e) in &matches {
                if let Some(b) = other.batch_mut(e.batch) {
                    b.matched[e.row as usize] = true;
                }
            }
        }
        let matched = if self.preserved[side] {
            let mut m = vec![false; batch.num_rows()];
            for (r, _) in &matches {
                m[*r as usize] = true;
            }
            m
        } else {
            Vec::new()
        };
        self.store(side, batch, keys, hashes, times, store, matched)?;
        Ok(matches)
    }

    /// Stores the rows of `batch` marked in `store` on `side` (with whether
    /// each matched, on a preserved side).
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        keys: Rows,
        hashes: Vec<u64>,
        times: Vec<i64>,
        store: &[bool],
        matched: Vec<bool>,
    ) -> Result<()> {
        let count = store.iter().filter(|s| **s).count();
        if count == 0 {
            return Ok(());
        }
        if self.rows() + count > self.rows_max {
            // Expired rows waiting to be freed do not count.
            self.free(usize::MAX);
        }
        if self.rows() + count > self.rows_max {
            return Err(rows_limit_reached(self.rows_max));
        }
        let matched = match (self.preserved[side], matched.is_empty()) {
            (true, true) => vec![false; batch.num_rows()],
            (true, false) => matched,
            (false, _) => Vec::new(),
        };
        let hasher = &self.hasher;
        let state = &mut self.sides[side];
        state.store(batch, keys, hashes, times, store, count, matched)?;
        state.choose_strategy(hasher);
        Ok(())
    }

    /// `side`'s stored batches as they are (shared arrays, no copy of
    /// values), each with two more columns: the rows' times and whether a
    /// row is live. O(stored batches) plus one bit per row; empty when the
    /// side holds nothing.
    fn snapshot_batches(&self, side: usize) -> Result<Vec<RecordBatch>> {
        let state = &self.sides[side];
        let cutoff = self.cutoffs[side];
        state
            .batches
            .iter()
            .enumerate()
            // A batch whose stored rows all expired (waiting to be freed).
            .filter(|(_, b)| b.max_time >= cutoff)
            .map(|(at, b)| {
                let snapshot = if (at == 0 && state.freed > 0) || b.min_time < cutoff {
                    // Some rows expired: mark them dead.
                    let times = state.snapshot_times.then_some(&b.times);
                    snapshot_batch(b.snapshot.schema(), &b.batch, times, state.live(at, cutoff))?
                } else {
                    b.snapshot.clone()
                };
                if !self.preserved[side] {
                    return Ok(snapshot);
                }
                // Whether each row matched, last (an outer join's own column).
                let mut fields: Vec<Arc<Field>> = snapshot.schema().fields().iter().cloned().collect();
                fields.push(Arc::new(Field::new(SNAPSHOT_MATCHED, DataType::Boolean, false)));
                let mut columns = snapshot.columns().to_vec();
                columns.push(Arc::new(BooleanArray::from(b.matched.clone())));
                Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
            })
            .collect()
    }
}

impl JoinState {
    /// `side`'s snapshot for checkpoint `checkpoint`, incremental
    /// ([`crate::checkpoint::incremental`]): the batches stored since the
    /// last snapshot in full, older ones still held as references to the
    /// checkpoint that wrote them with their rows' liveness now. With the
    /// index of the liveness column (`None`: the side never stored a row).
    /// Not for an outer join's preserved side, whose rows' matched flags
    /// change after they are written ([`Self::snapshot_batches`]).
    fn snapshot_increment(&mut self, side: usize, checkpoint: u64) -> Result<(Increment, Option<usize>)> {
        debug_assert!(!self.preserved[side]);
        let cutoff = self.cutoffs[side];
        let state = &mut self.sides[side];
        let mut inc = Increment::default();
        for at in 0..state.batches.len() {
            let b = &state.batches[at];
            if b.max_time < cutoff {
                // Every stored row expired (waiting to be freed).
                continue;
            }
            let partly = (at == 0 && state.freed > 0) || b.min_time < cutoff;
            let live = if partly {
                state.live(at, cutoff)
            } else {
                b.stored.clone()
            };
            match b.written_in {
                Some(written) => {
                    // Batches are written in arrival order: every held
                    // one comes before every new one.
                    debug_assert!(inc.new.is_empty());
                    inc.held.push(Held {
                        checkpoint: written,
                        number: b.number,
                        live,
                    });
                }
                None => {
                    let snapshot = if partly {
                        let times = state.snapshot_times.then_some(&b.times);
                        snapshot_batch(b.snapshot.schema(), &b.batch, times, live)?
                    } else {
                        b.snapshot.clone()
                    };
                    inc.new.push((b.number, snapshot));
                    state.batches[at].written_in = Some(checkpoint);
                }
            }
        }
        let live_column = state
            .snapshot_schema
            .as_ref()
            .and_then(|s| s.index_of(SNAPSHOT_LIVE).ok());
        Ok((inc, live_column))
    }
}

/// Column names a join snapshot adds to a side's stored batches.
const SNAPSHOT_TIME: &str = "__sluice_join_time";
const SNAPSHOT_LIVE: &str = "__sluice_join_live";
/// An outer join's preserved side: whether each row matched.
const SNAPSHOT_MATCHED: &str = "__sluice_join_matched";

/// A row's event time in ms (a null time is the earliest: it expires first).
fn event_times(column: &ArrayRef) -> Result<Vec<i64>> {
    Ok(timestamps_ms(column)?
        .into_iter()
        .map(|t| t.unwrap_or(i64::MIN))
        .collect())
}

/// A stored batch with its rows' times and liveness (shared arrays).
fn snapshot_batch(
    schema: SchemaRef,
    batch: &RecordBatch,
    times: Option<&Int64Array>,
    live: BooleanBuffer,
) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    if let Some(times) = times {
        columns.push(Arc::new(times.clone()));
    }
    columns.push(Arc::new(BooleanArray::new(live, None)));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A join's state from a checkpoint before key groups, in today's form:
/// each side's stored batches marked as keyed by the side's join keys; the
/// oldest form (the live rows gathered into `join.<side>.rows`, their times
/// in `join.<side>.times`) turned into a stored batch with its times, all
/// live, after the side's other batches (the order it was restored in).
pub fn migrate_legacy_state(
    spec: &sluice_plan::JoinSpec,
    mut state: crate::checkpoint::TaskState,
) -> Result<crate::checkpoint::TaskState> {
    for (side, name) in SIDE_NAMES.iter().enumerate() {
        let keys = [&spec.left, &spec.right][side].keys.clone();
        let batches_key = format!("join.{name}.batches");
        let (rows_key, times_key) = (format!("join.{name}.rows"), format!("join.{name}.times"));
        let mut batches = state.rows(&batches_key);
        if let Some(rows) = state.batch(&rows_key).cloned() {
            let times: Vec<i64> = state
                .bytes(&times_key)
                .filter(|b| b.len() == rows.num_rows() * 8)
                .ok_or_else(|| Error::internal(format!("join snapshot: {name} times do not match its rows")))?
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            let schema = snapshot_schema(&rows.schema(), true);
            let live = BooleanBuffer::new_set(rows.num_rows());
            batches.push(snapshot_batch(schema, &rows, Some(&Int64Array::from(times)), live)?);
            state.entries.remove(&rows_key);
            state.entries.remove(&times_key);
        }
        if !batches.is_empty() {
            state.put_keyed(&batches_key, batches, keys);
        }
    }
    Ok(state)
}

/// A side's schema plus the snapshot's time and live columns.
fn snapshot_schema(side: &SchemaRef, with_times: bool) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = side.fields().iter().cloned().collect();
    if with_times {
        fields.push(Arc::new(Field::new(SNAPSHOT_TIME, DataType::Int64, false)));
    }
    fields.push(Arc::new(Field::new(SNAPSHOT_LIVE, DataType::Boolean, false)));
    Arc::new(Schema::new(fields))
}

#[cfg(test)]
mod tests;
