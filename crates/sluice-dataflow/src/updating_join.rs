//! A join whose result updates: a regular (unbounded) equi-join with a
//! changelog on either side (the result of an aggregate without a window,
//! a top-N), or a regular outer join of any inputs. Flink's and
//! RisingWave's regular join: the output is a changelog too.
//!
//! Per join key each side keeps its rows as a multiset (row-encoded bytes
//! with their multiplicity). A row from one side:
//!
//! - added (`+I`, `+U`): emits itself joined with every row the other side
//!   holds for its key, with its own op; then it is held;
//! - retracted (`-U`, `-D`): is taken out of its side (a retraction of a
//!   row not held — dropped by `join_state_ttl` — is ignored) and emits the
//!   same pairs with its op, taking them back.
//!
//! An outer join's preserved side also appears without a match: a row of
//! it whose key has no row on the other side is emitted with NULLs for
//! that side (with the row's op). When the first row of a key arrives on
//! the other side, the padded rows it now matches are retracted (`-D`)
//! before the pairs; when the last one leaves, the pairs are retracted and
//! the padded rows come back (`+I`). A NULL key matches nothing: such rows
//! pass padded on a preserved side and are dropped otherwise.
//!
//! State is bounded by `state_rows_max` (rows held over both sides, counted
//! with their multiplicity: reaching it fails the pipeline with a clear
//! error) and, when set, `state_ttl_ms` of processing time per key: a key
//! no row reached for that long is dropped without retracting anything
//! (as Flink's state TTL).
//!
//! Checkpoints are incremental per side
//! ([`crate::checkpoint::ledger::ChangedKeys`]): a checkpoint writes the
//! rows a side holds for each join key whose rows on that side changed
//! since the previous one, and references the batches earlier ones wrote,
//! with a liveness bit a row. A key keeps where each side's rows were
//! written, and forgets it when that side's rows go.

use crate::checkpoint::TaskState;
use crate::checkpoint::ledger::{ChangedKeys, Place, live_rows};
use crate::operator::{Operator, OperatorContext};
use crate::window::fixed::finish_batch;
use arrow::array::{Array, ArrayRef, StringArray, UInt32Array, UInt64Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use hashbrown::HashMap;
use sluice_plan::{ChangeOp, JoinSide, JoinSpec};
use sluice_types::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot entries: each side's held rows (its columns without the op)
/// and their multiplicity (then, written incrementally, a liveness
/// column), keyed by the side's join keys.
const SIDE_NAMES: [&str; 2] = ["left_rows", "right_rows"];

/// One join key's rows on both sides.
#[derive(Default)]
struct KeyRows {
    /// Per side: row bytes → multiplicity.
    rows: [HashMap<Box<[u8]>, u64>; 2],
    /// Per side: the multiplicities' sum.
    held: [u64; 2],
    /// When a row last reached the key (processing time, ms).
    touched_ms: i64,
    /// Per side: where a checkpoint wrote its rows (while they are the
    /// key's).
    written: [Option<Place>; 2],
}

/// The value of `key` in `map`, inserted as the default when absent.
fn slot<'a, V: Default>(map: &'a mut HashMap<Box<[u8]>, V>, key: &[u8]) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.into(), V::default());
    }
    map.get_mut(key).expect("inserted above")
}

/// An output row: its op and each side's row bytes (`None`: NULLs).
type Change = (ChangeOp, Option<Box<[u8]>>, Option<Box<[u8]>>);

/// The operator; see the module documentation.
pub struct UpdatingJoinOperator {
    sides: [JoinSide; 2],
    /// Inputs `0..left_inputs` are the left side's channels.
    left_inputs: usize,
    preserved: [bool; 2],
    /// Per side: the columns a held row keeps (every column but the op).
    data_columns: [Vec<usize>; 2],
    keys: [RowConverter; 2],
    rows: [RowConverter; 2],
    state: HashMap<Box<[u8]>, KeyRows>,
    /// Rows held over both sides, with multiplicity.
    held: usize,
    /// Per side: distinct rows held (what a checkpoint writes), and the
    /// keys whose rows changed since the last checkpoint.
    distinct: [usize; 2],
    changed: [ChangedKeys; 2],
    rows_max: usize,
    state_ttl_ms: Option<i64>,
    output_schema: SchemaRef,
}

impl UpdatingJoinOperator {
    pub fn new(spec: &JoinSpec, output_schema: SchemaRef, left_inputs: usize) -> Result<Self> {
        if spec.filter.is_some() {
            // Its conditions beyond the keys filter the changelog after it.
            return Err(Error::internal("a changelog join with conditions of its own"));
        }
        let sides = [spec.left.clone(), spec.right.clone()];
        let data_columns = sides.clone().map(|s| {
            (0..s.schema.fields().len())
                .filter(|c| Some(*c) != s.op_column)
                .collect::<Vec<_>>()
        });
        let converter = |side: &JoinSide, columns: &[usize]| {
            RowConverter::new(
                columns
                    .iter()
                    .map(|c| SortField::new(side.schema.field(*c).data_type().clone()))
                    .collect(),
            )
        };
        for side in &sides {
            if side
                .op_column
                .is_some_and(|op| side.keys.contains(&op) || op < side.output_columns)
            {
                return Err(Error::internal(
                    "a join side's op column among its keys or output columns",
                ));
            }
        }
        Ok(UpdatingJoinOperator {
            keys: [
                converter(&sides[0], &sides[0].keys)?,
                converter(&sides[1], &sides[1].keys)?,
            ],
            rows: [
                converter(&sides[0], &data_columns[0])?,
                converter(&sides[1], &data_columns[1])?,
            ],
            preserved: spec.kind.preserved(),
            data_columns,
            sides,
            left_inputs,
            state: HashMap::new(),
            held: 0,
            distinct: [0, 0],
            changed: Default::default(),
            rows_max: spec.state_rows_max,
            state_ttl_ms: spec.state_ttl_ms,
            output_schema,
        })
    }

    /// Rows held over both sides (with multiplicity).
    pub fn rows_held(&self) -> usize {
        self.held
    }

    /// Each row's op: a changelog side's op column, else `+I`.
    fn ops(&self, side: usize, batch: &RecordBatch) -> Result<Vec<ChangeOp>> {
        match self.sides[side].op_column {
            Some(c) => crate::group_aggregate::change_ops(batch, c),
            None => Ok(vec![ChangeOp::Insert; batch.num_rows()]),
        }
    }

    /// Applies a batch from `side`; returns the changelog it causes.
    pub fn update(&mut self, side: usize, batch: &RecordBatch, now_ms: i64) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let ops = self.ops(side, batch)?;
        let key_arrays: Vec<ArrayRef> = self.sides[side].keys.iter().map(|k| batch.column(*k).clone()).collect();
        let keys = self.keys[side].convert_columns(&key_arrays)?;
        let data: Vec<ArrayRef> = self.data_columns[side]
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        let rows = self.rows[side].convert_columns(&data)?;
        let other = 1 - side;
        let mut changes: Vec<Change> = Vec::new();
        let pair = |op: ChangeOp, mine: &[u8], theirs: Option<&[u8]>| -> Change {
            let (mine, theirs) = (Some(Box::<[u8]>::from(mine)), theirs.map(Box::<[u8]>::from));
            if side == 0 {
                (op, mine, theirs)
            } else {
                (op, theirs, mine)
            }
        };
        // The other side's rows, padded with NULLs for this side.
        let padded_other = |op: ChangeOp, theirs: &[u8]| -> Change {
            let theirs = Some(Box::<[u8]>::from(theirs));
            if side == 0 {
                (op, None, theirs)
            } else {
                (op, theirs, None)
            }
        };
        for (i, op) in ops.iter().copied().enumerate() {
            let row = rows.row(i);
            let row = row.data();
            if key_arrays.iter().any(|a| a.is_null(i)) {
                if self.preserved[side] {
                    changes.push(pair(op, row, None));
                }
                continue;
            }
            let key = keys.row(i);
            let key = key.data();
            if !op.retracts() {
                if self.held >= self.rows_max {
                    return Err(crate::join::rows_limit_reached(self.rows_max));
                }
                let entry = slot(&mut self.state, key);
                entry.touched_ms = now_ms;
                if entry.held[side] == 0 && self.preserved[other] {
                    for (theirs, n) in &entry.rows[other] {
                        for _ in 0..*n {
                            changes.push(padded_other(ChangeOp::Delete, theirs));
                        }
                    }
                }
                for (theirs, n) in &entry.rows[other] {
                    for _ in 0..*n {
                        changes.push(pair(op, row, Some(theirs)));
                    }
                }
                if entry.held[other] == 0 && self.preserved[side] {
                    changes.push(pair(op, row, None));
                }
                let n = slot(&mut entry.rows[side], row);
                if *n == 0 {
                    self.distinct[side] += 1;
                }
                *n += 1;
                entry.held[side] += 1;
                self.held += 1;
                self.changed[side].mark(key);
            } else {
                let Some(entry) = self.state.get_mut(key) else {
                    continue;
                };
                let Some(n) = entry.rows[side].get_mut(row) else {
                    continue;
                };
                *n -= 1;
                if *n == 0 {
                    entry.rows[side].remove(row);
                    self.distinct[side] -= 1;
                }
                entry.held[side] -= 1;
                self.held -= 1;
                self.changed[side].mark(key);
                if entry.held[side] == 0 {
                    self.changed[side].forget(entry.written[side].take());
                }
                entry.touched_ms = now_ms;
                for (theirs, n) in &entry.rows[other] {
                    for _ in 0..*n {
                        changes.push(pair(op, row, Some(theirs)));
                    }
                }
                if entry.held[other] == 0 && self.preserved[side] {
                    changes.push(pair(op, row, None));
                }
                if entry.held[side] == 0 && self.preserved[other] {
                    for (theirs, n) in &entry.rows[other] {
                        for _ in 0..*n {
                            changes.push(padded_other(ChangeOp::Insert, theirs));
                        }
                    }
                }
                if entry.held == [0, 0] {
                    self.state.remove(key);
                }
            }
        }
        self.changes_batch(changes).map(Some)
    }

    /// `join_state_ttl`: drops every key no row reached since `now_ms`
    /// minus the TTL (nothing is retracted).
    pub fn expire(&mut self, now_ms: i64) {
        let Some(ttl) = self.state_ttl_ms else { return };
        let cutoff = now_ms.saturating_sub(ttl);
        for key in crate::group_aggregate::idle_keys(&self.state, cutoff, |k| k.touched_ms) {
            let k = self.state.remove(&key).expect("listed above");
            self.held -= (k.held[0] + k.held[1]) as usize;
            for side in 0..2 {
                if !k.rows[side].is_empty() {
                    self.distinct[side] -= k.rows[side].len();
                }
                self.changed[side].forget(k.written[side]);
            }
        }
    }

    /// Per side, the arrays of the output columns for `rows` (`None`:
    /// NULLs).
    fn output_columns(&self, side: usize, rows: &[Option<&[u8]>]) -> Result<Vec<ArrayRef>> {
        let present: Vec<&[u8]> = rows.iter().flatten().copied().collect();
        let parser = self.rows[side].parser();
        let converted = self.rows[side].convert_rows(present.iter().map(|r| parser.parse(r)))?;
        let mut at = 0u32;
        let indices = UInt32Array::from_iter(rows.iter().map(|r| {
            r.map(|_| {
                at += 1;
                at - 1
            })
        }));
        // Output columns are the side's first columns, all before the op.
        (0..self.sides[side].output_columns)
            .map(|c| Ok(take(converted[c].as_ref(), &indices, None)?))
            .collect()
    }

    fn changes_batch(&self, changes: Vec<Change>) -> Result<RecordBatch> {
        if changes.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let ops = StringArray::from_iter_values(changes.iter().map(|(op, _, _)| op.as_str()));
        let mut columns: Vec<ArrayRef> = vec![Arc::new(ops)];
        let left: Vec<Option<&[u8]>> = changes.iter().map(|(_, l, _)| l.as_deref()).collect();
        let right: Vec<Option<&[u8]>> = changes.iter().map(|(_, _, r)| r.as_deref()).collect();
        columns.extend(self.output_columns(0, &left)?);
        columns.extend(self.output_columns(1, &right)?);
        finish_batch(&self.output_schema, columns)
    }

    /// Side `side`'s held rows of the join keys `keys` with their
    /// multiplicity: its held columns and a count column, and how many
    /// rows each key has (none when empty).
    fn snapshot_columns(&self, side: usize, keys: &[Box<[u8]>]) -> Result<Option<(Vec<u32>, Vec<ArrayRef>)>> {
        let rows: Vec<&HashMap<Box<[u8]>, u64>> = keys.iter().map(|k| &self.state[k].rows[side]).collect();
        let counts: Vec<u32> = rows.iter().map(|r| r.len() as u32).collect();
        let held: Vec<(&[u8], u64)> = rows
            .into_iter()
            .flat_map(|r| r.iter().map(|(r, n)| (r.as_ref(), *n)))
            .collect();
        if held.is_empty() {
            return Ok(None);
        }
        let parser = self.rows[side].parser();
        let mut columns = self.rows[side].convert_rows(held.iter().map(|(r, _)| parser.parse(r)))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(held.iter().map(|(_, n)| *n))));
        Ok(Some((counts, columns)))
    }

    /// Side `side`'s snapshot for checkpoint `checkpoint`, incremental (see
    /// the module doc): the held columns, the count, the liveness.
    fn snapshot_side(&mut self, side: usize, checkpoint: u64, state: &mut TaskState) -> Result<()> {
        let mut changed = std::mem::take(&mut self.changed[side]);
        let inc = changed.snapshot(
            checkpoint,
            self.distinct[side],
            self,
            |op| {
                op.state
                    .iter()
                    .filter(|(_, k)| !k.rows[side].is_empty())
                    .map(|(key, _)| key.clone())
                    .collect()
            },
            |op, key| {
                op.state
                    .get_mut(key)
                    .filter(|k| !k.rows[side].is_empty())
                    .map(|k| &mut k.written[side])
            },
            |op, keys| op.snapshot_columns(side, keys),
        );
        self.changed[side] = changed;
        let inc = inc?;
        let live_column = self.data_columns[side].len() + 1;
        state.put_incremental(SIDE_NAMES[side], self.snapshot_keys(side)?, live_column, inc)
    }

    /// The snapshot's key columns of side `side`: where its keys are among
    /// the held columns.
    fn snapshot_keys(&self, side: usize) -> Result<Vec<usize>> {
        self.sides[side]
            .keys
            .iter()
            .map(|k| {
                self.data_columns[side]
                    .iter()
                    .position(|c| c == k)
                    .ok_or_else(|| Error::internal("a join key is not a held column"))
            })
            .collect()
    }

    /// Holds a side's snapshot rows that live ([`live_rows`]) again (maybe
    /// of several old instances: their keys are disjoint). The keys
    /// restored are written whole by the next checkpoint.
    fn restore_batch(&mut self, side: usize, batch: &RecordBatch, now_ms: i64) -> Result<()> {
        let batch = &live_rows(batch, self.data_columns[side].len() + 1, "updating join")?;
        let count_column = batch.num_columns() - 1;
        let counts = batch
            .column(count_column)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| Error::internal("updating join snapshot: bad count column"))?
            .clone();
        let data: Vec<ArrayRef> = batch.columns()[..count_column].to_vec();
        let key_arrays: Vec<ArrayRef> = self.snapshot_keys(side)?.into_iter().map(|k| data[k].clone()).collect();
        let keys = self.keys[side].convert_columns(&key_arrays)?;
        let rows = self.rows[side].convert_columns(&data)?;
        for i in 0..batch.num_rows() {
            let n = counts.value(i);
            let key = keys.row(i);
            let entry = slot(&mut self.state, key.data());
            entry.touched_ms = now_ms;
            let copies = slot(&mut entry.rows[side], rows.row(i).data());
            if *copies == 0 {
                self.distinct[side] += 1;
            }
            *copies += n;
            entry.held[side] += n;
            self.held += n as usize;
            self.changed[side].mark(key.data());
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for UpdatingJoinOperator {
    async fn process_batch(&mut self, batch: RecordBatch, input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let side = usize::from(input >= self.left_inputs);
        let changes = self.update(side, &batch, sluice_types::now_ms())?;
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }

    fn timer_interval(&self) -> Option<std::time::Duration> {
        self.state_ttl_ms.map(crate::group_aggregate::ttl_sweep_interval)
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.expire(sluice_types::now_ms());
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        for side in 0..2 {
            self.snapshot_side(side, checkpoint_id, &mut state)?;
        }
        Ok(state)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let Some((_, state)) = checkpoint else { return Ok(()) };
        let now = sluice_types::now_ms();
        for (side, name) in SIDE_NAMES.iter().enumerate() {
            for batch in state.rows(name) {
                self.restore_batch(side, &batch, now)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
