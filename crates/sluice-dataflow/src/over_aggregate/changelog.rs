//! OVER aggregates over a changelog (`OverAggSpec::op_column`): the input
//! is an updating result — a top-N's winners, an aggregate's groups — so a
//! row may be taken back after it came, and the aggregates of every row
//! whose frame held it change.
//!
//! Each partition keeps every row it holds, sorted by its ORDER BY value
//! then its columns' values (row-encoded: so peers, rows of one ORDER BY
//! value, have one order whatever the arrival order, and the result is a
//! function of the rows held, as a batch engine's over them), copies
//! repeated. A row in or out at position `p` changes the rows whose frame
//! reaches `p`: a ROWS frame of `n` preceding the `n` after it, a RANGE
//! frame the rows up to the range after its time (and its peers), an
//! unbounded frame every later row. Their aggregates are computed before
//! and after the change; the output is the changelog between them: `+I`
//! of a row that came, `-D` of one that went (with the aggregates it had),
//! `-U`/`+U` of a row whose aggregates changed. A change costs
//! O(affected rows × frame); inserting into a partition O(its rows).
//!
//! Every row is kept until it is taken back, at most `rows_max` an instance
//! (`SET aggregate_groups_max`); `SET state_ttl` deletes (`-D` of each row
//! shown) a partition no row reached for that long. A retraction of a row
//! not held (forgotten by the TTL) is ignored.
//!
//! With partition columns, checkpoints are incremental
//! ([`crate::checkpoint::ledger::ChangedKeys`]): a checkpoint writes the
//! rows of the partitions changed since the previous one and references
//! the batches earlier ones wrote, with a liveness bit a row.

use super::{Running, aggregate, partition_converter, partition_keys, row_args};
use crate::checkpoint::TaskState;
use crate::checkpoint::ledger::{ChangedKeys, Place, live_rows};
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::time::timestamps_ms;
use crate::window::fixed::finish_batch;
use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use hashbrown::HashMap;
use sluice_plan::{ChangeOp, OverAggSpec, OverFrame};
use sluice_types::{Error, Result, SqlCode};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot layout: every held row (the input's columns but the op), one
/// row per copy, keyed by the partition columns.
const ROWS_KEY: &str = "changelog_rows";

/// A row held: its ORDER BY value (row-encoded; and in ms for a RANGE
/// interval), its columns (row-encoded), its aggregates' arguments.
#[derive(Clone)]
struct Held {
    order: Box<[u8]>,
    time: i64,
    row: Box<[u8]>,
    args: Vec<ScalarValue>,
}

impl Held {
    fn key(&self) -> (&[u8], &[u8]) {
        (&self.order, &self.row)
    }
}

#[derive(Default)]
struct Partition {
    /// Sorted by (order, row); copies adjacent.
    rows: Vec<Held>,
    /// When a row last reached it (processing time, ms: `state_ttl`).
    touched_ms: i64,
    /// Where a checkpoint wrote its rows (while they are its rows).
    written: Option<Place>,
}

/// A change out: its op, the row, its aggregates.
type Change = (ChangeOp, Box<[u8]>, Vec<ScalarValue>);

/// The operator over a changelog.
pub struct OverChangelogOperator {
    spec: OverAggSpec,
    op_column: usize,
    /// Every input column but the op.
    data_columns: Vec<usize>,
    partition: Option<RowConverter>,
    order: RowConverter,
    rows: RowConverter,
    partitions: HashMap<Box<[u8]>, Partition>,
    held: usize,
    /// With partition columns: the partitions changed since the last
    /// checkpoint, and what earlier ones wrote.
    changed: ChangedKeys,
    frames: Frames,
    /// The input's columns but the op (the snapshot's schema).
    data_schema: SchemaRef,
    output_schema: SchemaRef,
}

impl OverChangelogOperator {
    pub fn new(spec: &OverAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let op_column = spec
            .op_column
            .ok_or_else(|| Error::internal("an OVER aggregate over a changelog without its op column"))?;
        let width = spec.input_schema.fields().len();
        if op_column + 1 != width || spec.time_column >= op_column {
            return Err(Error::internal("an OVER aggregate's op column is not its input's last"));
        }
        let field = |c: usize| SortField::new(spec.input_schema.field(c).data_type().clone());
        let partition = partition_converter(spec)?;
        let data_columns: Vec<usize> = (0..op_column).collect();
        let rows = RowConverter::new(data_columns.iter().map(|c| field(*c)).collect())?;
        let order = RowConverter::new(vec![field(spec.time_column)])?;
        if matches!(spec.frame, OverFrame::Range { .. })
            && !matches!(
                spec.input_schema.field(spec.time_column).data_type(),
                DataType::Timestamp(..)
            )
        {
            return Err(Error::internal("a RANGE interval frame over a non-timestamp column"));
        }
        let functions: Vec<String> = spec.aggregates.iter().map(|a| a.function.clone()).collect();
        for f in &functions {
            if !matches!(f.as_str(), "count" | "sum" | "avg" | "min" | "max") {
                return Err(Error::internal(format!("OVER aggregate {f}")));
            }
        }
        let types = (0..functions.len())
            .map(|a| output_schema.field(1 + spec.output_columns + a).data_type().clone())
            .collect();
        let data_schema = Arc::new(spec.input_schema.project(&data_columns)?);
        Ok(OverChangelogOperator {
            spec: spec.clone(),
            op_column,
            data_columns,
            partition,
            order,
            rows,
            partitions: HashMap::new(),
            held: 0,
            changed: ChangedKeys::default(),
            frames: Frames {
                frame: spec.frame,
                functions,
                types,
            },
            data_schema,
            output_schema,
        })
    }

    /// Rows held (with copies).
    pub fn held(&self) -> usize {
        self.held
    }

    /// The rows of `batch` (the input's columns but the op) as held rows,
    /// with each one's partition key.
    fn read(&self, batch: &RecordBatch) -> Result<Vec<(Box<[u8]>, Held)>> {
        let column = |c: usize| batch.column(c).clone();
        let keys = partition_keys(self.partition.as_ref(), &self.spec, batch)?;
        let orders = self.order.convert_columns(&[column(self.spec.time_column)])?;
        let times = match self.spec.frame {
            OverFrame::Range { .. } => Some(timestamps_ms(batch.column(self.spec.time_column))?),
            _ => None,
        };
        let rows = self
            .rows
            .convert_columns(&self.data_columns.iter().map(|c| column(*c)).collect::<Vec<_>>())?;
        let mut out = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let args = row_args(&self.spec, batch, i)?;
            let key: Box<[u8]> = keys.as_ref().map_or_else(Box::default, |k| k.row(i).data().into());
            out.push((
                key,
                Held {
                    order: orders.row(i).data().into(),
                    time: times.as_ref().map_or(0, |t| t[i].unwrap_or(i64::MIN)),
                    row: rows.row(i).data().into(),
                    args,
                },
            ));
        }
        Ok(out)
    }

    /// Applies a batch of changes; returns the changelog out.
    pub fn update(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let ops = crate::group_aggregate::change_ops(batch, self.op_column)?;
        let now_ms = sluice_types::now_ms();
        let mut changes = Vec::new();
        for ((key, row), op) in self.read(batch)?.into_iter().zip(ops) {
            if op.retracts() {
                self.take_back(&key, &row, now_ms, &mut changes)?;
            } else {
                self.add(key, row, now_ms, &mut changes)?;
            }
        }
        self.changes_batch(changes).map(Some)
    }

    fn add(&mut self, key: Box<[u8]>, row: Held, now_ms: i64, changes: &mut Vec<Change>) -> Result<()> {
        if self.held >= self.spec.rows_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "OVER aggregate state limit reached: {} rows held in one instance over a changelog \
                     (SET aggregate_groups_max)",
                    self.spec.rows_max
                ),
            ));
        }
        if self.partition.is_some() {
            self.changed.mark(&key);
        }
        let p = self.partitions.entry(key).or_default();
        p.touched_ms = now_ms;
        // After its copies.
        let at = p.rows.partition_point(|h| h.key() <= row.key());
        p.rows.insert(at, row);
        self.held += 1;
        let affected = affected(&self.spec.frame, &p.rows, at);
        let after = self.frames.outputs(&p.rows, affected.clone())?;
        let row = p.rows.remove(at);
        let before = self.frames.outputs(&p.rows, affected.start..affected.end - 1)?;
        p.rows.insert(at, row);
        Self::diff(&p.rows, affected.start, at, before, after, true, changes);
        Ok(())
    }

    fn take_back(&mut self, key: &[u8], row: &Held, now_ms: i64, changes: &mut Vec<Change>) -> Result<()> {
        let Some(p) = self.partitions.get_mut(key) else {
            return Ok(());
        };
        p.touched_ms = now_ms;
        if self.partition.is_some() {
            self.changed.mark(key);
        }
        // The last of its copies.
        let end = p.rows.partition_point(|h| h.key() <= row.key());
        if end > 0 && p.rows[end - 1].key() == row.key() {
            let at = end - 1;
            let affected = affected(&self.spec.frame, &p.rows, at);
            let before = self.frames.outputs(&p.rows, affected.clone())?;
            let gone = p.rows.remove(at);
            self.held -= 1;
            let after = self.frames.outputs(&p.rows, affected.start..affected.end - 1)?;
            p.rows.insert(at, gone);
            Self::diff(&p.rows, affected.start, at, before, after, false, changes);
            p.rows.remove(at);
        }
        if p.rows.is_empty() {
            let written = p.written;
            self.partitions.remove(key);
            self.changed.forget(written);
        }
        Ok(())
    }

    /// The changelog of one row in (`came`) or out at `at`: `with` holds
    /// every row (the one at `at` too), `lo` is where the affected rows
    /// start; `with_row` are their aggregates with it, `without` the others'
    /// without it (one fewer: the row at `at` is skipped).
    fn diff(
        rows: &[Held],
        lo: usize,
        at: usize,
        before: Vec<Vec<ScalarValue>>,
        after: Vec<Vec<ScalarValue>>,
        came: bool,
        changes: &mut Vec<Change>,
    ) {
        let (with_row, without) = if came { (after, before) } else { (before, after) };
        let mut without = without.into_iter();
        for (i, aggs) in with_row.into_iter().enumerate() {
            let position = lo + i;
            let row = rows[position].row.clone();
            if position == at {
                let op = if came { ChangeOp::Insert } else { ChangeOp::Delete };
                changes.push((op, row, aggs));
                continue;
            }
            let other = without.next().expect("one fewer row without it");
            let (old, new) = if came { (other, aggs) } else { (aggs, other) };
            if old != new {
                changes.push((ChangeOp::UpdateBefore, row.clone(), old));
                changes.push((ChangeOp::UpdateAfter, row, new));
            }
        }
    }

    /// `state_ttl`: deletes every partition no row reached since `now_ms`
    /// minus the TTL (`-D` of each of its rows), freeing its state.
    pub fn expire(&mut self, now_ms: i64) -> Result<Option<RecordBatch>> {
        let Some(ttl) = self.spec.state_ttl_ms else {
            return Ok(None);
        };
        let cutoff = now_ms.saturating_sub(ttl);
        let mut changes = Vec::new();
        for key in crate::group_aggregate::idle_keys(&self.partitions, cutoff, |p| p.touched_ms) {
            let p = self.partitions.remove(&key).expect("listed above");
            self.changed.forget(p.written);
            let aggs = self.frames.outputs(&p.rows, 0..p.rows.len())?;
            self.held -= p.rows.len();
            for (h, aggs) in p.rows.into_iter().zip(aggs) {
                changes.push((ChangeOp::Delete, h.row, aggs));
            }
        }
        self.changes_batch(changes).map(Some)
    }

    fn changes_batch(&self, changes: Vec<Change>) -> Result<RecordBatch> {
        if changes.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let parser = self.rows.parser();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from_iter_values(
            changes.iter().map(|(op, _, _)| op.as_str()),
        ))];
        columns.extend(
            self.rows
                .convert_rows(changes.iter().map(|(_, row, _)| parser.parse(row)))?
                .into_iter()
                .take(self.spec.output_columns),
        );
        for a in 0..self.frames.functions.len() {
            let values = changes.iter().map(|(_, _, aggs)| aggs[a].clone());
            columns.push(ScalarValue::iter_to_array(values).map_err(df_error)?);
        }
        finish_batch(&self.output_schema, columns)
    }

    /// Every held row of the partitions `keys` (all of them without), one
    /// per copy: its columns, and how many rows each partition has.
    fn snapshot_columns(&self, keys: Option<&[Box<[u8]>]>) -> Result<Option<(Vec<u32>, Vec<ArrayRef>)>> {
        let partitions: Vec<&Partition> = match keys {
            Some(keys) => keys.iter().map(|k| &self.partitions[k]).collect(),
            None => self.partitions.values().collect(),
        };
        if partitions.iter().all(|p| p.rows.is_empty()) {
            return Ok(None);
        }
        let counts = partitions.iter().map(|p| p.rows.len() as u32).collect();
        let parser = self.rows.parser();
        let columns = self.rows.convert_rows(
            partitions
                .into_iter()
                .flat_map(|p| &p.rows)
                .map(|h| parser.parse(&h.row)),
        )?;
        Ok(Some((counts, columns)))
    }

    /// The operator's snapshot for checkpoint `checkpoint`: without
    /// partition columns every held row, with them incremental (see the
    /// module doc).
    pub(crate) fn snapshot_state(&mut self, checkpoint: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if self.partition.is_none() {
            if let Some((_, columns)) = self.snapshot_columns(None)? {
                let fields: Vec<Field> = self
                    .data_schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect();
                state.put_batch(ROWS_KEY, RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?);
            }
            return Ok(state);
        }
        let mut changed = std::mem::take(&mut self.changed);
        let inc = changed.snapshot(
            checkpoint,
            self.held,
            self,
            |op| op.partitions.keys().cloned().collect(),
            |op, k| op.partitions.get_mut(k).map(|p| &mut p.written),
            |op, keys| op.snapshot_columns(Some(keys)),
        );
        self.changed = changed;
        let inc = inc?;
        // The data columns, then the liveness.
        let live_column = self.data_schema.fields().len();
        state.put_incremental(ROWS_KEY, self.spec.partition_columns.clone(), live_column, inc)?;
        Ok(state)
    }

    /// Holds a snapshot's live rows ([`live_rows`]) again (maybe of several
    /// old instances: their partitions are disjoint), emitting nothing.
    /// The partitions restored are written whole by the next checkpoint.
    fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = live_rows(batch, self.data_schema.fields().len(), "OVER aggregate")?;
        let batch = RecordBatch::try_new(self.data_schema.clone(), batch.columns().to_vec())?;
        let now_ms = sluice_types::now_ms();
        for (key, row) in self.read(&batch)? {
            if self.held >= self.spec.rows_max {
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!(
                        "OVER aggregate state limit reached restoring {} rows in one instance over a changelog \
                         (SET aggregate_groups_max)",
                        self.spec.rows_max
                    ),
                ));
            }
            if self.partition.is_some() {
                self.changed.mark(&key);
            }
            let p = self.partitions.entry(key).or_default();
            // Restored partitions count as just reached (`state_ttl`).
            p.touched_ms = now_ms;
            p.rows.push(row);
            self.held += 1;
        }
        for p in self.partitions.values_mut() {
            p.rows.sort_by(|a, b| a.key().cmp(&b.key()));
        }
        Ok(())
    }
}

/// What computes a row's aggregates over its frame.
struct Frames {
    frame: OverFrame,
    functions: Vec<String>,
    /// The aggregates' result types.
    types: Vec<DataType>,
}

impl Frames {
    /// The aggregates of the rows at `range` of a partition's `rows`.
    fn outputs(&self, rows: &[Held], range: Range<usize>) -> Result<Vec<Vec<ScalarValue>>> {
        let mut out = Vec::with_capacity(range.len());
        if let OverFrame::Unbounded { peers } = self.frame {
            // Running values from the partition's first row.
            let mut running = vec![Running::default(); self.functions.len()];
            let mut added = 0;
            for q in range {
                let end = if peers { peers_end(rows, q) } else { q + 1 };
                while added < end {
                    for (a, f) in self.functions.iter().enumerate() {
                        running[a].add(f, &self.types[a], &rows[added].args[a])?;
                    }
                    added += 1;
                }
                out.push(
                    self.functions
                        .iter()
                        .enumerate()
                        .map(|(a, f)| running[a].value(f, &self.types[a]))
                        .collect::<Result<_>>()?,
                );
            }
            return Ok(out);
        }
        for q in range {
            let frame = match self.frame {
                OverFrame::Rows { preceding } => q.saturating_sub(preceding.min(q as u64) as usize)..q + 1,
                OverFrame::Range { preceding_ms } => {
                    let from = rows[q].time.saturating_sub(preceding_ms);
                    rows.partition_point(|h| h.time < from)..peers_end(rows, q)
                }
                OverFrame::Unbounded { .. } => unreachable!("handled above"),
            };
            let frame = &rows[frame];
            out.push(
                self.functions
                    .iter()
                    .enumerate()
                    .map(|(a, f)| aggregate(f, &self.types[a], frame.iter().map(|h| &h.args[a])))
                    .collect::<Result<_>>()?,
            );
        }
        Ok(out)
    }
}

/// The end of the peers of the row at `q` (rows of its ORDER BY value).
fn peers_end(rows: &[Held], q: usize) -> usize {
    q + 1 + rows[q + 1..].partition_point(|h| h.order == rows[q].order)
}

/// The rows of `rows` whose frame holds the row at `at` (it among them).
fn affected(frame: &OverFrame, rows: &[Held], at: usize) -> Range<usize> {
    let first_peer = rows[..at].partition_point(|h| h.order < rows[at].order);
    match *frame {
        OverFrame::Rows { preceding } => at..rows.len().min(at.saturating_add(preceding as usize).saturating_add(1)),
        OverFrame::Range { preceding_ms } => {
            let until = rows[at].time.saturating_add(preceding_ms);
            first_peer..at + 1 + rows[at + 1..].partition_point(|h| h.time <= until)
        }
        OverFrame::Unbounded { peers: false } => at..rows.len(),
        OverFrame::Unbounded { peers: true } => first_peer..rows.len(),
    }
}

#[async_trait]
impl Operator for OverChangelogOperator {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.update(&batch)?;
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }

    fn timer_interval(&self) -> Option<std::time::Duration> {
        self.spec.state_ttl_ms.map(crate::group_aggregate::ttl_sweep_interval)
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.expire(sluice_types::now_ms())?;
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        self.snapshot_state(checkpoint_id)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if let Some(batch) = TaskState::restored_rows(checkpoint, ROWS_KEY)? {
            self.restore_batch(&batch)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
