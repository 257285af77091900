//! Top-N and deduplication (`ROW_NUMBER() OVER (PARTITION BY … ORDER BY
//! …) AS rn … WHERE rn <= N`) over an append-only input.
//!
//! Per partition the operator keeps its first `limit` rows in the order,
//! each as row-encoded bytes with its order key encoded so that bytes
//! compare as the ORDER BY does (Arrow's row format with the keys' sort
//! options) and its arrival number, which breaks ties (the row that came
//! first ranks first). A row that would rank after a full list's last is
//! dropped without touching the list. At the end of a batch each partition
//! it changed compares its list with the list before, position by
//! position: a position whose row changed emits `-U` (the row it held,
//! with its number) and `+U` (the new row), a new position `+I`. Lists
//! never shrink (the input only adds rows).

use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::window::fixed::finish_batch;
use arrow::array::{ArrayRef, StringArray, UInt64Array};
use arrow::compute::{SortOptions, sort_to_indices, take_record_batch};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use hashbrown::{HashMap, HashSet};
use sluice_plan::{ChangeOp, TopNSpec};
use sluice_types::{Error, Result, SqlCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot layout: one batch of every kept row (the input's columns) and
/// its arrival number, keyed by the partition columns.
const ROWS_KEY: &str = "rows";

#[derive(Clone)]
struct Entry {
    order: Box<[u8]>,
    seq: u64,
    row: Box<[u8]>,
}

/// A partition's list, and when a row last reached it (processing time,
/// ms: for `state_ttl`).
struct Partition {
    touched_ms: i64,
    list: Vec<Entry>,
}

/// `ROW_NUMBER() … <= N` per partition.
pub struct TopNOperator {
    partition_columns: Vec<usize>,
    order_columns: Vec<usize>,
    limit: usize,
    partitions_max: usize,
    partition: Option<RowConverter>,
    order: RowConverter,
    rows: RowConverter,
    partitions: HashMap<Box<[u8]>, Partition>,
    state_ttl_ms: Option<i64>,
    /// Processing time of the batch being applied.
    now_ms: i64,
    next_seq: u64,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
}

/// A changelog row: the op, the row's bytes, its number.
type Change = (ChangeOp, Box<[u8]>, u64);

impl TopNOperator {
    pub fn new(spec: &TopNSpec, output_schema: SchemaRef) -> Result<Self> {
        if spec.limit == 0 {
            return Err(Error::internal("a top-N of 0 rows"));
        }
        let field = |c: usize| spec.input_schema.field(c).data_type().clone();
        let partition = if spec.partition_columns.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                spec.partition_columns
                    .iter()
                    .map(|c| SortField::new(field(*c)))
                    .collect(),
            )?)
        };
        let order = RowConverter::new(
            spec.order
                .iter()
                .map(|k| {
                    let options = SortOptions {
                        descending: k.descending,
                        nulls_first: k.nulls_first,
                    };
                    SortField::new_with_options(field(k.column), options)
                })
                .collect(),
        )?;
        let rows = RowConverter::new(
            spec.input_schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(TopNOperator {
            partition_columns: spec.partition_columns.clone(),
            order_columns: spec.order.iter().map(|k| k.column).collect(),
            limit: spec.limit,
            partitions_max: spec.partitions_max,
            partition,
            order,
            rows,
            partitions: HashMap::new(),
            state_ttl_ms: spec.state_ttl_ms,
            now_ms: sluice_types::now_ms(),
            next_seq: 0,
            input_schema: spec.input_schema.clone(),
            output_schema,
        })
    }

    fn columns(batch: &RecordBatch, columns: &[usize]) -> Vec<ArrayRef> {
        columns.iter().map(|c| batch.column(*c).clone()).collect()
    }

    /// Offers `entry` to the list of `key`. `before` gets the list as it was, the first time a batch changes it.
    fn offer(
        &mut self,
        key: &[u8],
        entry: Entry,
        before: &mut Vec<(Box<[u8]>, Vec<Entry>)>,
        touched: &mut HashSet<Box<[u8]>>,
    ) -> Result<()> {
        let limit = self.limit;
        if !self.partitions.contains_key(key) {
            if self.partitions.len() >= self.partitions_max {
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!(
                        "top-N state limit reached: {} partitions in one instance (SET aggregate_groups_max)",
                        self.partitions_max
                    ),
                ));
            }
            let list = Vec::with_capacity(limit.min(16));
            let touched_ms = self.now_ms;
            self.partitions.insert(key.into(), Partition { touched_ms, list });
        }
        let partition = self.partitions.get_mut(key).expect("inserted above");
        partition.touched_ms = self.now_ms;
        let list = &mut partition.list;
        if list.len() == limit && list.last().is_some_and(|last| entry.order >= last.order) {
            return Ok(());
        }
        if touched.insert(key.into()) {
            before.push((key.into(), list.clone()));
        }
        let at = list.partition_point(|e| e.order <= entry.order);
        list.insert(at, entry);
        list.truncate(limit);
        Ok(())
    }

    /// Adds a batch's rows; returns the changelog of the lists it changed.
    pub fn update(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let keys = match &self.partition {
            Some(c) => Some(c.convert_columns(&Self::columns(batch, &self.partition_columns))?),
            None => None,
        };
        let orders = self.order.convert_columns(&Self::columns(batch, &self.order_columns))?;
        let rows = self.rows.convert_columns(batch.columns())?;
        self.now_ms = sluice_types::now_ms();
        let mut before = Vec::new();
        let mut touched = HashSet::new();
        for i in 0..batch.num_rows() {
            let entry = Entry {
                order: orders.row(i).data().into(),
                seq: self.next_seq,
                row: rows.row(i).data().into(),
            };
            self.next_seq += 1;
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            self.offer(key, entry, &mut before, &mut touched)?;
        }
        let mut changes: Vec<Change> = Vec::new();
        for (key, old) in before {
            let new = &self.partitions[&key].list;
            for position in 0..new.len().max(old.len()) {
                let rn = position as u64 + 1;
                match (old.get(position), new.get(position)) {
                    (Some(o), Some(n)) if o.seq == n.seq => {}
                    (Some(o), Some(n)) => {
                        changes.push((ChangeOp::UpdateBefore, o.row.clone(), rn));
                        changes.push((ChangeOp::UpdateAfter, n.row.clone(), rn));
                    }
                    (None, Some(n)) => changes.push((ChangeOp::Insert, n.row.clone(), rn)),
                    (Some(o), None) => changes.push((ChangeOp::Delete, o.row.clone(), rn)),
                    (None, None) => {}
                }
            }
        }
        self.changes_batch(changes).map(Some)
    }

    /// `state_ttl`: deletes (`-D` of each row) every partition no row
    /// reached since `now_ms` minus the TTL, freeing its state.
    pub fn expire(&mut self, now_ms: i64) -> Result<Option<RecordBatch>> {
        let Some(ttl) = self.state_ttl_ms else {
            return Ok(None);
        };
        let cutoff = now_ms.saturating_sub(ttl);
        let idle: Vec<Box<[u8]>> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.touched_ms < cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        let mut changes: Vec<Change> = Vec::new();
        for key in idle {
            if let Some(p) = self.partitions.remove(&key) {
                for (position, e) in p.list.into_iter().enumerate() {
                    changes.push((ChangeOp::Delete, e.row, position as u64 + 1));
                }
            }
        }
        self.changes_batch(changes).map(Some)
    }

    fn changes_batch(&self, changes: Vec<Change>) -> Result<RecordBatch> {
        if changes.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let ops = StringArray::from_iter_values(changes.iter().map(|(op, _, _)| op.as_str()));
        let parser = self.rows.parser();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(ops)];
        columns.extend(
            self.rows
                .convert_rows(changes.iter().map(|(_, row, _)| parser.parse(row)))?,
        );
        columns.push(Arc::new(UInt64Array::from_iter_values(
            changes.iter().map(|(_, _, rn)| *rn),
        )));
        finish_batch(&self.output_schema, columns)
    }

    /// Every kept row with its arrival number, as one batch.
    fn snapshot_batch(&self) -> Result<Option<RecordBatch>> {
        let entries: Vec<&Entry> = self.partitions.values().flat_map(|p| &p.list).collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let parser = self.rows.parser();
        let mut columns = self.rows.convert_rows(entries.iter().map(|e| parser.parse(&e.row)))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(entries.iter().map(|e| e.seq))));
        let mut fields: Vec<Field> = self
            .input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new("__seq", arrow::datatypes::DataType::UInt64, false));
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// Rebuilds the lists from [`Self::snapshot_batch`]'s rows (maybe of
    /// several old instances: their partitions are disjoint), in arrival
    /// order.
    fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let seq_column = batch.num_columns() - 1;
        let by_seq = sort_to_indices(batch.column(seq_column), None, None)?;
        let batch = take_record_batch(batch, &by_seq)?;
        let seqs = batch
            .column(seq_column)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| Error::internal("top-N snapshot: bad arrival column"))?
            .clone();
        let input = batch.project(&(0..seq_column).collect::<Vec<_>>())?;
        let input = RecordBatch::try_new(self.input_schema.clone(), input.columns().to_vec())?;
        let keys = match &self.partition {
            Some(c) => Some(c.convert_columns(&Self::columns(&input, &self.partition_columns))?),
            None => None,
        };
        let orders = self
            .order
            .convert_columns(&Self::columns(&input, &self.order_columns))?;
        let rows = self.rows.convert_columns(input.columns())?;
        // Restored partitions count as just reached (`state_ttl`).
        self.now_ms = sluice_types::now_ms();
        let (mut before, mut touched) = (Vec::new(), HashSet::new());
        for i in 0..input.num_rows() {
            let entry = Entry {
                order: orders.row(i).data().into(),
                seq: seqs.value(i),
                row: rows.row(i).data().into(),
            };
            self.next_seq = self.next_seq.max(entry.seq + 1);
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            self.offer(key, entry, &mut before, &mut touched)?;
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for TopNOperator {
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if let Some(batch) = self.snapshot_batch()? {
            state.put_rows(ROWS_KEY, batch, self.partition_columns.clone());
        }
        Ok(state)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if let Some(batch) = TaskState::restored_rows(checkpoint, ROWS_KEY)? {
            self.restore_batch(&batch)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.update(&batch)?;
        ctx.metrics
            .state_groups
            .store(self.partitions.len() as u64, Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }

    fn timer_interval(&self) -> Option<std::time::Duration> {
        self.state_ttl_ms.map(crate::group_aggregate::ttl_sweep_interval)
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.expire(sluice_types::now_ms())?;
        ctx.metrics
            .state_groups
            .store(self.partitions.len() as u64, Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }
}

#[cfg(test)]
mod tests;
