//! The aggregate without a window (`SELECT k, count(*) FROM s GROUP BY k`):
//! its result changes with every row, so it emits a changelog.
//!
//! Each group keeps one DataFusion `Accumulator` per aggregate (evaluated
//! after every batch that touches the group, which a `GroupsAccumulator`
//! cannot do without draining every group). A batch is grouped once: its
//! rows are sorted by group, each argument column is taken once in that
//! order, and each group's accumulators update from a zero-copy slice. At
//! the end of the batch every group it changed emits `-U old, +U new` (or
//! `+I new` for a new group); a group whose values did not change emits
//! nothing. The batch is the unit of emission: the adaptive batching of
//! the channels makes it small when idle (low latency) and large when
//! busy (one update per group for many rows, as Flink's mini-batch).
//!
//! What a group emitted last is what its accumulators evaluate to, at
//! every barrier (emission ends each batch), so a snapshot stores only the
//! keys and the accumulators' states.

use crate::aggregate::{AggregateInputs, CompiledAggregate, read_inputs};
use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::window::fixed::finish_batch;
use arrow::array::{Array, ArrayRef, StringArray, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows};
use async_trait::async_trait;
use datafusion::logical_expr::Accumulator;
use datafusion::scalar::ScalarValue;
use hashbrown::HashMap;
use sluice_plan::{ChangeOp, GroupAggSpec};
use sluice_types::{Error, Result, SqlCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot layout: one batch, a row per group: `key columns…,
/// accumulator state columns…`, keyed by the key columns.
const GROUPS_KEY: &str = "groups";

/// GROUP BY without a window.
pub struct GroupAggregateOperator {
    key_columns: Vec<usize>,
    converter: Option<RowConverter>,
    aggregates: Vec<CompiledAggregate>,
    /// Row-encoded key → group. Without keys there is one group, 0.
    index: HashMap<Box<[u8]>, u32>,
    /// Group → key (row-encoded); none without keys.
    keys: Option<Rows>,
    /// Group → one accumulator per aggregate.
    groups: Vec<Vec<Box<dyn Accumulator>>>,
    groups_max: usize,
    output_schema: SchemaRef,
}

/// The changelog rows of one batch, built column by column.
#[derive(Default)]
struct Changes {
    ops: Vec<&'static str>,
    groups: Vec<u32>,
    /// Per aggregate, its value on each row.
    values: Vec<Vec<ScalarValue>>,
}

impl Changes {
    fn push(&mut self, op: ChangeOp, group: u32, values: Vec<ScalarValue>) {
        self.ops.push(op.as_str());
        self.groups.push(group);
        if self.values.is_empty() {
            self.values = vec![Vec::new(); values.len()];
        }
        for (column, v) in self.values.iter_mut().zip(values) {
            column.push(v);
        }
    }
}

impl GroupAggregateOperator {
    pub fn new(spec: &GroupAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let AggregateInputs {
            converter,
            aggregates,
            key_columns,
        } = AggregateInputs::compile(&spec.input_schema, &spec.key_columns, &spec.aggregates)?;
        let keys = converter.as_ref().map(|c| c.empty_rows(1024, 16 * 1024));
        Ok(GroupAggregateOperator {
            key_columns,
            converter,
            aggregates,
            index: HashMap::new(),
            keys,
            groups: Vec::new(),
            groups_max: spec.groups_max,
            output_schema,
        })
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        self.aggregates.iter().map(|a| a.accumulator()).collect()
    }

    /// The group of `key` (row-encoded), added when new.
    fn group_of(&mut self, key: arrow::row::Row<'_>) -> Result<(u32, bool)> {
        if let Some(g) = self.index.get(key.data()) {
            return Ok((*g, false));
        }
        let g = self.new_group()?;
        self.index.insert(key.data().into(), g);
        if let Some(keys) = self.keys.as_mut() {
            keys.push(key);
        }
        Ok((g, true))
    }

    fn new_group(&mut self) -> Result<u32> {
        if self.groups.len() >= self.groups_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "aggregate state limit reached: {} groups in one instance (SET aggregate_groups_max)",
                    self.groups_max
                ),
            ));
        }
        let accumulators = self.accumulators()?;
        self.groups.push(accumulators);
        Ok(self.groups.len() as u32 - 1)
    }

    fn evaluate(&mut self, group: u32) -> Result<Vec<ScalarValue>> {
        self.groups[group as usize]
            .iter_mut()
            .map(|a| a.evaluate().map_err(df_error))
            .collect()
    }

    /// Adds a batch's rows to their groups; returns the changelog rows of
    /// the groups whose values changed.
    pub fn update(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(None);
        }
        let (key_rows, arguments) = read_inputs(&self.converter, &self.key_columns, &self.aggregates, batch)?;
        // Each row's group, and the groups in the order the batch first
        // touches them (with whether they are new).
        let mut row_groups = Vec::with_capacity(n);
        let mut touched: Vec<(u32, bool)> = Vec::new();
        let mut seen: HashMap<u32, usize> = HashMap::new();
        match &key_rows {
            None => {
                let fresh = self.groups.is_empty();
                if fresh {
                    self.new_group()?;
                }
                row_groups.resize(n, 0u32);
                touched.push((0, fresh));
                seen.insert(0, 0);
            }
            Some(rows) => {
                for row in rows.iter() {
                    let (g, fresh) = self.group_of(row)?;
                    row_groups.push(g);
                    seen.entry(g).or_insert_with(|| {
                        touched.push((g, fresh));
                        touched.len() - 1
                    });
                }
            }
        }
        // Rows sorted by the position of their group in `touched`, so each
        // group's rows are one slice of the taken arguments.
        let mut counts = vec![0usize; touched.len()];
        for g in &row_groups {
            counts[seen[g]] += 1;
        }
        let mut offsets = Vec::with_capacity(touched.len() + 1);
        let mut at = 0;
        offsets.push(0);
        for c in &counts {
            at += c;
            offsets.push(at);
        }
        let arguments: Vec<Vec<ArrayRef>> = if touched.len() == 1 {
            arguments
        } else {
            let mut next = offsets.clone();
            let mut order = vec![0u32; n];
            for (row, g) in row_groups.iter().enumerate() {
                let slot = &mut next[seen[g]];
                order[*slot] = row as u32;
                *slot += 1;
            }
            let order = UInt32Array::from(order);
            arguments
                .iter()
                .map(|args| args.iter().map(|a| take(a, &order, None)).collect::<Result<_, _>>())
                .collect::<Result<_, _>>()?
        };
        let mut changes = Changes::default();
        for (position, (group, fresh)) in touched.into_iter().enumerate() {
            let before = if fresh { None } else { Some(self.evaluate(group)?) };
            let (start, len) = (offsets[position], offsets[position + 1] - offsets[position]);
            for (acc, args) in self.groups[group as usize].iter_mut().zip(&arguments) {
                let values: Vec<ArrayRef> = args.iter().map(|a| a.slice(start, len)).collect();
                acc.update_batch(&values).map_err(df_error)?;
            }
            let after = self.evaluate(group)?;
            match before {
                None => changes.push(ChangeOp::Insert, group, after),
                Some(before) if before == after => {}
                Some(before) => {
                    changes.push(ChangeOp::UpdateBefore, group, before);
                    changes.push(ChangeOp::UpdateAfter, group, after);
                }
            }
        }
        self.changes_batch(changes).map(Some)
    }

    fn changes_batch(&self, changes: Changes) -> Result<RecordBatch> {
        if changes.ops.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from(changes.ops))];
        if let (Some(c), Some(keys)) = (&self.converter, &self.keys) {
            columns.extend(c.convert_rows(changes.groups.iter().map(|g| keys.row(*g as usize)))?);
        }
        for values in changes.values {
            columns.push(ScalarValue::iter_to_array(values).map_err(df_error)?);
        }
        finish_batch(&self.output_schema, columns)
    }

    /// Every group's key and accumulator state as one batch (an
    /// accumulator is rebuilt from the state it gave, so it keeps going).
    fn snapshot_batch(&mut self) -> Result<Option<RecordBatch>> {
        let n = self.groups.len();
        if n == 0 {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        if let (Some(c), Some(keys)) = (&self.converter, &self.keys) {
            columns.extend(c.convert_rows(keys.iter())?);
        }
        for (a, agg) in self.aggregates.iter().enumerate() {
            let width = agg.expr.state_fields().map_err(df_error)?.len();
            let mut states: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(n); width];
            for group in &mut self.groups {
                let state = group[a].state().map_err(df_error)?;
                for (column, v) in states.iter_mut().zip(state) {
                    column.push(v);
                }
            }
            let arrays: Vec<ArrayRef> = states
                .into_iter()
                .map(|s| ScalarValue::iter_to_array(s).map_err(df_error))
                .collect::<Result<_>>()?;
            for (g, group) in self.groups.iter_mut().enumerate() {
                let mut fresh = agg.accumulator()?;
                let row: Vec<ArrayRef> = arrays.iter().map(|s| s.slice(g, 1)).collect();
                fresh.merge_batch(&row).map_err(df_error)?;
                group[a] = fresh;
            }
            columns.extend(arrays);
        }
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// Rebuilds the groups from [`Self::snapshot_batch`]'s rows.
    fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let n_keys = self.key_columns.len();
        let key_rows = match &self.converter {
            Some(c) => Some(c.convert_columns(&batch.columns()[..n_keys])?),
            None => None,
        };
        for row in 0..batch.num_rows() {
            let group = match &key_rows {
                Some(rows) => {
                    let (g, fresh) = self.group_of(rows.row(row))?;
                    if !fresh {
                        return Err(Error::internal("aggregate snapshot holds a key twice"));
                    }
                    g
                }
                None => self.new_group()?,
            };
            let mut col = n_keys;
            for (acc, agg) in self.groups[group as usize].iter_mut().zip(&self.aggregates) {
                let width = agg.expr.state_fields().map_err(df_error)?.len();
                let state: Vec<ArrayRef> = batch.columns()[col..col + width]
                    .iter()
                    .map(|c| c.slice(row, 1))
                    .collect();
                acc.merge_batch(&state).map_err(df_error)?;
                col += width;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for GroupAggregateOperator {
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if let Some(batch) = self.snapshot_batch()? {
            match self.key_columns.len() {
                0 => state.put_batch(GROUPS_KEY, batch),
                n => state.put_keyed(GROUPS_KEY, vec![batch], (0..n).collect()),
            }
        }
        Ok(state)
    }

    /// The restored rows may come from several old instances (a rescale):
    /// their keys are disjoint, so they are one set of groups.
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let batches = checkpoint.map(|(_, s)| s.rows(GROUPS_KEY)).unwrap_or_default();
        if let Some(first) = batches.first() {
            self.restore_batch(&concat_batches(&first.schema(), &batches)?)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.update(&batch)?;
        ctx.metrics
            .state_groups
            .store(self.groups.len() as u64, Ordering::Relaxed);
        match changes {
            Some(changes) if changes.num_rows() > 0 => ctx.emit(changes).await,
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
