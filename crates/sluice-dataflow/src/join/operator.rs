//! The join operator: the [`Operator`] around [`JoinState`] — row-encoded
//! keys and row times of each input batch, the output gathered from the
//! matches, expiry driven by watermarks (or a processing-time timer), and
//! snapshot and restore of both sides.

use super::expiry::{self, FREE_ROWS_STEP};
use super::side::{Entry, STORED_BATCH_ROWS_MAX, SideState};
use super::{JoinState, SIDE_NAMES, SNAPSHOT_MATCHED, SNAPSHOT_TIME, event_times};
use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::project::NarrowPredicate;
use arrow::array::{Array, ArrayRef, AsArray, UInt32Array, new_null_array};
use arrow::compute::{interleave, take};
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use async_trait::async_trait;
use datafusion::common::HashMap;
use sluice_plan::{JoinSide, JoinSpec};
use sluice_types::{Error, Result, Watermark};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A snapshot's boolean column as bools (`None`: not boolean).
fn booleans(column: &ArrayRef) -> Option<Vec<bool>> {
    Some(column.as_boolean_opt()?.values().iter().collect())
}

/// Where unmatched rows of a side come from: rows of an input batch (a
/// NULL key), or stored rows expiring.
enum Padded<'a> {
    Rows(&'a RecordBatch, &'a [u32]),
    Stored(&'a [Entry]),
}

/// Rows gathered into one output batch at most.
pub const OUTPUT_BATCH_ROWS_MAX: usize = 8192;

/// The operator around [`JoinState`].
pub struct JoinOperator {
    spec: JoinSpec,
    output_schema: SchemaRef,
    /// Inputs `0..left_inputs` are the left side's channels.
    left_inputs: usize,
    converters: [RowConverter; 2],
    pub(super) state: JoinState,
    /// Event-time TTL needs both sides' event time; else processing time.
    processing_time: bool,
    /// An inner join's conditions beyond its keys ([`JoinSpec::filter`]).
    filter: Option<NarrowPredicate>,
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
        let event_time_bound = spec.windowed || spec.interval_ms.is_some();
        let processing_time =
            !event_time_bound && (spec.left.time_column.is_none() || spec.right.time_column.is_none());
        if event_time_bound && (spec.left.time_column.is_none() || spec.right.time_column.is_none()) {
            return Err(Error::internal("windowed or interval join without event time"));
        }
        let filter = match &spec.filter {
            Some(_) if !spec.kind.is_inner() => {
                return Err(Error::internal(
                    "an outer join with conditions beyond its keys and times",
                ));
            }
            Some(sql) => Some(NarrowPredicate::compile(sql, &output_schema)?),
            None => None,
        };
        Ok(JoinOperator {
            spec: spec.clone(),
            output_schema,
            left_inputs,
            converters: [l, r],
            state: {
                let preserved = spec.kind.preserved();
                if preserved.iter().any(|p| *p) && !event_time_bound {
                    return Err(Error::internal(
                        "an outer join that is neither windowed nor an interval join",
                    ));
                }
                let pair_bounds = spec.interval_ms.filter(|_| !spec.kind.is_inner());
                let mut state = JoinState::outer(spec.state_rows_max, preserved, pair_bounds);
                for side in &mut state.sides {
                    side.snapshot_times = processing_time;
                }
                state
            },
            processing_time,
            filter,
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
    /// (An old checkpoint's gathered rows may exceed a stored batch: sliced.)
    /// (`matched`: whether each row matched, on an outer join's preserved
    /// side; empty otherwise.)
    fn restore_rows(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        times: &[i64],
        live: &[bool],
        matched: &[bool],
    ) -> Result<()> {
        let mut at = 0;
        while at < batch.num_rows() {
            let n = STORED_BATCH_ROWS_MAX.min(batch.num_rows() - at);
            let slice = batch.slice(at, n);
            let (keys, null) = self.keys(side, &slice)?;
            let store: Vec<bool> = live[at..at + n].iter().zip(&null).map(|(l, n)| *l && !n).collect();
            let hashes = self.state.hashes(&keys, &store);
            let matched = matched.get(at..at + n).map(<[bool]>::to_vec).unwrap_or_default();
            self.state
                .store(side, &slice, keys, hashes, times[at..at + n].to_vec(), &store, matched)?;
            at += n;
        }
        Ok(())
    }

    /// Rows of `side` without a match, with NULLs for the other side's
    /// columns: `rows` of `batch` when given, else stored `entries`.
    fn padded(&self, side: usize, from: Padded<'_>) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let own = self.side(side).output_columns;
        let other = self.side(1 - side).output_columns;
        let offset = if side == 0 { own } else { 0 };
        let null_columns = |n: usize| -> Vec<ArrayRef> {
            (0..other)
                .map(|c| new_null_array(self.output_schema.field(offset + c).data_type(), n))
                .collect()
        };
        let mut push = |columns: Vec<ArrayRef>, n: usize| -> Result<()> {
            let nulls = null_columns(n);
            let columns = if side == 0 {
                columns.into_iter().chain(nulls).collect()
            } else {
                nulls.into_iter().chain(columns).collect()
            };
            out.push(RecordBatch::try_new(self.output_schema.clone(), columns)?);
            Ok(())
        };
        match from {
            Padded::Rows(batch, rows) => {
                if rows.is_empty() {
                    return Ok(out);
                }
                let rows = UInt32Array::from_iter_values(rows.iter().copied());
                let columns = (0..own)
                    .map(|c| take(batch.column(c), &rows, None))
                    .collect::<std::result::Result<_, _>>()?;
                push(columns, rows.len())?;
            }
            Padded::Stored(entries) => {
                let stored = &self.state.sides[side];
                for chunk in entries.chunks(OUTPUT_BATCH_ROWS_MAX) {
                    let (batches, indices) = stored_rows(stored, chunk.iter().copied())?;
                    let mut columns = Vec::with_capacity(own);
                    for c in 0..own {
                        let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
                        columns.push(interleave(&arrays, &indices)?);
                    }
                    push(columns, chunk.len())?;
                }
            }
        }
        Ok(out)
    }

    /// Probes with and stores one batch of at most
    /// [`STORED_BATCH_ROWS_MAX`] rows from `input`.
    async fn process_slice(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let side = usize::from(input >= self.left_inputs);
        // Rows a watermark or the timer expired: freed a step at a time.
        self.state.free(FREE_ROWS_STEP);
        let (keys, null) = self.keys(side, &batch)?;
        let times: Vec<i64> = match (self.processing_time, self.side(side).time_column) {
            (false, Some(c)) => event_times(batch.column(c))?,
            _ => vec![Self::now_ms(); batch.num_rows()],
        };
        let low = ctx.watermark.0;
        // Rows with a null key never match and are not stored.
        let store: Vec<bool> = if self.spec.windowed || self.spec.interval_ms.is_some() {
            // Behind the watermark: the other side's rows it could match may
            // be gone (as in a window, late rows are dropped and counted).
            let late = times.iter().filter(|t| **t < low).count();
            ctx.metrics.late_rows_dropped.fetch_add(late as u64, Ordering::Relaxed);
            times.iter().zip(&null).map(|(t, n)| *t >= low && !n).collect()
        } else {
            null.iter().map(|n| !n).collect()
        };
        // A preserved row with a NULL key can never match: out at once.
        if self.state.preserved[side] {
            let rows: Vec<u32> = (0..batch.num_rows() as u32).filter(|r| null[*r as usize]).collect();
            for out in self.padded(side, Padded::Rows(&batch, &rows))? {
                ctx.emit(out).await?;
            }
        }
        let matches = self.state.probe_and_store(side, &batch, keys, times, &store)?;
        ctx.metrics
            .state_groups
            .store(self.state.rows() as u64, Ordering::Relaxed);
        for out in self.gather(side, &batch, &matches)? {
            ctx.emit(out).await?;
        }
        Ok(())
    }

    /// Output batches for the matches of a batch from `side`: with a
    /// filter, those of the pairs it passes (the columns it reads gathered
    /// first, kept for the passing pairs, the rest gathered for those only).
    fn gather(&self, side: usize, batch: &RecordBatch, matches: &[(u32, Entry)]) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let width = self.output_schema.fields().len();
        let (read, rest): (&[usize], Vec<usize>) = match &self.filter {
            Some(f) => (&f.columns, (0..width).filter(|c| !f.columns.contains(c)).collect()),
            None => (&[], (0..width).collect()),
        };
        for chunk in matches.chunks(OUTPUT_BATCH_ROWS_MAX) {
            let mut pairs = Pairs::of(&self.state.sides[1 - side], chunk)?;
            let mut read_columns = Vec::new();
            if let Some(filter) = &self.filter {
                read_columns = self.gather_columns(side, batch, &pairs, read)?;
                let mask = filter.mask(&read_columns, chunk.len())?;
                let passing = mask.true_count();
                if passing == 0 {
                    continue;
                }
                if passing < chunk.len() {
                    read_columns = read_columns
                        .iter()
                        .map(|c| arrow::compute::filter(c.as_ref(), &mask))
                        .collect::<std::result::Result<_, _>>()?;
                    pairs = pairs.select(mask.values().set_indices(), passing);
                }
            }
            let rest_columns = self.gather_columns(side, batch, &pairs, &rest)?;
            // Both in output order: merged by column number.
            let mut columns = Vec::with_capacity(width);
            let (mut from_read, mut from_rest) = (read_columns.into_iter(), rest_columns.into_iter());
            for c in 0..width {
                let next = if read.contains(&c) {
                    from_read.next()
                } else {
                    from_rest.next()
                };
                columns.push(next.ok_or_else(|| Error::internal("join: a gathered column is missing"))?);
            }
            out.push(RecordBatch::try_new(self.output_schema.clone(), columns)?);
        }
        Ok(out)
    }

    /// The output columns `columns` (ascending) of `pairs` of a batch from
    /// `side`.
    fn gather_columns(
        &self,
        side: usize,
        batch: &RecordBatch,
        pairs: &Pairs<'_>,
        columns: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        let left_columns = self.spec.left.output_columns;
        columns
            .iter()
            .map(|&c| {
                // The column's side, and its index among that side's.
                let (from, i) = if c < left_columns {
                    (0, c)
                } else {
                    (1, c - left_columns)
                };
                Ok(if from == side {
                    take(batch.column(i), &pairs.probe_rows, None)?
                } else {
                    let arrays: Vec<&dyn Array> = pairs.batches.iter().map(|b| b.column(i).as_ref()).collect();
                    interleave(&arrays, &pairs.stored_rows)?
                })
            })
            .collect()
    }
}

/// The stored batches of `stored` that `entries` are rows of, and each
/// entry as (its batch's place among them, its row): what `interleave`
/// gathers them by.
type StoredRows<'a> = (Vec<&'a RecordBatch>, Vec<(usize, usize)>);

fn stored_rows<'a>(stored: &'a SideState, entries: impl Iterator<Item = Entry> + Clone) -> Result<StoredRows<'a>> {
    let mut sources: Vec<u64> = entries.clone().map(|e| e.batch).collect();
    sources.sort_unstable();
    sources.dedup();
    let slot: HashMap<u64, usize> = sources.iter().enumerate().map(|(i, b)| (*b, i)).collect();
    let batches = sources
        .iter()
        .map(|b| stored.batch(*b).map(|s| &s.batch))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::internal("join: a stored row's batch was freed"))?;
    Ok((batches, entries.map(|e| (slot[&e.batch], e.row as usize)).collect()))
}

/// Matched pairs ready to gather: the probing batch's rows, and the other
/// side's stored batches they matched with each pair's (batch, row) in
/// them.
struct Pairs<'a> {
    probe_rows: UInt32Array,
    batches: Vec<&'a RecordBatch>,
    stored_rows: Vec<(usize, usize)>,
}

impl<'a> Pairs<'a> {
    /// The pairs `chunk` of a probe of `stored`.
    fn of(stored: &'a SideState, chunk: &[(u32, Entry)]) -> Result<Self> {
        let (batches, stored_rows) = stored_rows(stored, chunk.iter().map(|(_, e)| *e))?;
        Ok(Pairs {
            probe_rows: UInt32Array::from_iter_values(chunk.iter().map(|(r, _)| *r)),
            batches,
            stored_rows,
        })
    }

    /// The `n` pairs at `positions` (ascending) only.
    fn select(self, positions: impl Iterator<Item = usize>, n: usize) -> Self {
        let mut probe_rows = Vec::with_capacity(n);
        let mut stored_rows = Vec::with_capacity(n);
        let probe = self.probe_rows.values();
        for p in positions {
            probe_rows.push(probe[p]);
            stored_rows.push(self.stored_rows[p]);
        }
        Pairs {
            probe_rows: UInt32Array::from(probe_rows),
            stored_rows,
            batches: self.batches,
        }
    }
}

#[async_trait]
impl Operator for JoinOperator {
    async fn process_batch(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if batch.num_rows() > STORED_BATCH_ROWS_MAX {
            let mut at = 0;
            while at < batch.num_rows() {
                let n = STORED_BATCH_ROWS_MAX.min(batch.num_rows() - at);
                self.process_slice(batch.slice(at, n), input, ctx).await?;
                at += n;
            }
            return Ok(());
        }
        self.process_slice(batch, input, ctx).await
    }

    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if !self.processing_time
            && let Some(cutoffs) = expiry::watermark_cutoffs(&self.spec, watermark)
        {
            // Preserved rows that expire now without a match, before the
            // watermark passes them downstream (so they are not late there).
            for (side, cutoff) in cutoffs.into_iter().enumerate() {
                let entries = self.state.unmatched(side, self.state.cutoffs[side], cutoff);
                if entries.is_empty() {
                    continue;
                }
                for out in self.padded(side, Padded::Stored(&entries))? {
                    ctx.emit(out).await?;
                }
            }
            self.state.advance(cutoffs);
            self.state.free(FREE_ROWS_STEP);
            ctx.metrics
                .state_groups
                .store(self.state.rows() as u64, Ordering::Relaxed);
        }
        ctx.emit_watermark(watermark).await
    }

    /// Both sides' stored batches, shared with the state (zero-copy: the
    /// coordinator encodes them off the task loop), with each row's time
    /// and liveness, so a restored join matches what the original would.
    ///
    /// Incremental ([`crate::checkpoint::incremental`]) but for an outer
    /// join's preserved side: a batch is written once, by the first
    /// checkpoint after it was stored; later ones reference it and say
    /// which of its rows still live.
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            if !self.state.preserved[side] {
                let (inc, live_column) = self.state.snapshot_increment(side, checkpoint_id)?;
                if let Some(live_column) = live_column {
                    let keys = self.side(side).keys.clone();
                    state.put_incremental(&format!("join.{name}.batches"), keys, live_column, inc)?;
                }
                continue;
            }
            let batches = self.state.snapshot_batches(side)?;
            if !batches.is_empty() {
                // Keyed by the side's join keys (a snapshot batch is the
                // side's columns with time and liveness appended).
                state.put_keyed(&format!("join.{name}.batches"), batches, self.side(side).keys.clone());
            }
        }
        Ok(state)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let Some((_, mut state)) = checkpoint else {
            return Ok(());
        };
        // A checkpoint read from its files comes resolved; a snapshot
        // handed over directly may not, and then must reference nothing.
        crate::checkpoint::incremental::resolve(&mut state, &Default::default())?;
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            // From one old instance, or several after a rescale (their keys
            // are disjoint; each one's rows in arrival order).
            for stored in &state.rows(&format!("join.{name}.batches")) {
                let bad = || Error::internal(format!("join snapshot: bad {name} batch"));
                // An outer join's preserved side carries whether each row
                // matched, last: read and set aside.
                let (stored, matched) = match stored.schema().fields().last() {
                    Some(f) if f.name() == SNAPSHOT_MATCHED => {
                        let last = stored.num_columns() - 1;
                        let matched = booleans(stored.column(last)).ok_or_else(bad)?;
                        (stored.project(&(0..last).collect::<Vec<_>>())?, matched)
                    }
                    _ => (stored.clone(), Vec::new()),
                };
                let stored = &stored;
                let last = stored.num_columns().checked_sub(1).ok_or_else(bad)?;
                // Times are stored for arrival times (and by checkpoints
                // from before event times were read back from the batch).
                let stored_times = last > 0 && stored.schema().field(last - 1).name() == SNAPSHOT_TIME;
                let n = if stored_times { last - 1 } else { last };
                let times: Vec<i64> = if stored_times {
                    stored
                        .column(n)
                        .as_primitive_opt::<Int64Type>()
                        .ok_or_else(bad)?
                        .values()
                        .to_vec()
                } else {
                    let c = self.side(side).time_column.filter(|c| *c < n).ok_or_else(bad)?;
                    event_times(stored.column(c))?
                };
                let live = booleans(stored.column(last)).ok_or_else(bad)?;
                let batch = stored.project(&(0..n).collect::<Vec<_>>())?;
                self.restore_rows(side, &batch, &times, &live, &matched)?;
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
            let cutoff = expiry::processing_time_cutoff(ttl, Self::now_ms());
            self.state.advance([cutoff; 2]);
            self.state.free(FREE_ROWS_STEP);
            ctx.metrics
                .state_groups
                .store(self.state.rows() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}
