//! The aggregate without a window (`SELECT k, count(*) FROM s GROUP BY k`):
//! its result changes with every row, so it emits a changelog.
//!
//! Each group keeps one DataFusion `Accumulator` per aggregate (evaluated
//! after every batch that touches the group, which a `GroupsAccumulator`
//! cannot do without draining every group) and its number of rows. A batch
//! is grouped once: its rows are sorted by group (and, over a changelog,
//! added rows before retracted ones), each argument column is taken once
//! in that order, and each group's accumulators update (or retract) from
//! zero-copy slices. At the end of the batch every group it changed emits
//! `-U old, +U new`, `+I new` for a group that had no rows, or `-D old`
//! for one left with none (then dropped); a group whose values did not
//! change emits nothing. The batch is the unit of emission: the adaptive
//! batching of the channels makes it small when idle (low latency) and
//! large when busy (one update per group for many rows, as Flink's
//! mini-batch).
//!
//! What a group emitted last is what its accumulators evaluate to, at
//! every barrier (emission ends each batch), so a snapshot stores only the
//! keys, row counts and the accumulators' states.
//!
//! With GROUP BY keys, checkpoints are incremental
//! ([`crate::checkpoint::ledger`]): a checkpoint writes the groups changed
//! since the previous one (and restored ones), as one batch, and references
//! the batches earlier checkpoints wrote, with a liveness bit a row: a
//! group's row lives in the batch that wrote it last, and a deleted group's
//! in none; when the rows held pass twice the live groups (plus a slack),
//! every group is written again.
//!
//! When every aggregate is a `count`, `sum` or `avg` of integers or doubles,
//! or (over an append-only input) a `min`, `max` or integer `count(DISTINCT
//! …)` ([`columnar`]), the groups' states are columns instead of
//! accumulators, and a batch is one pass per aggregate over its rows, with
//! no sort; its changelog is the same.

use crate::aggregate::{AggregateInputs, CompiledAggregate, read_inputs};
use crate::checkpoint::TaskState;
use crate::checkpoint::incremental::snapshot_rows;
use crate::checkpoint::ledger::{Batches, Place};
use crate::neighbours::NeighbourHash;
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::window::fixed::finish_batch;
use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, StringArray, UInt32Array};
use arrow::compute::kernels::cmp::not_distinct;
use arrow::compute::{concat, filter_record_batch, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows};
use async_trait::async_trait;
use datafusion::logical_expr::Accumulator;
use datafusion::scalar::ScalarValue;
use hashbrown::{HashMap, HashTable};
use sluice_plan::{ChangeOp, GroupAggSpec};
use sluice_types::{Error, Result, SqlCode};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;

mod columnar;
use columnar::{Columnar, Columns};

/// Snapshot layout: a row per group: `key columns…, rows (Int64),
/// accumulator state columns…`, keyed by the key columns; with keys, then
/// `live (Boolean)`, written incrementally (a batch per checkpoint, dead
/// rows in the batches after a group was written again or deleted).
/// Checkpoints before incremental ones wrote one batch without `live`.
const GROUPS_KEY: &str = "groups";

/// One group: its key (row-encoded; empty without keys), its rows (added
/// minus retracted) and an accumulator per aggregate.
struct Group {
    key: Box<[u8]>,
    rows: i64,
    /// When a row last reached it (processing time, ms): for `state_ttl`.
    touched_ms: i64,
    accumulators: Vec<Box<dyn Accumulator>>,
}

/// GROUP BY without a window.
pub struct GroupAggregateOperator {
    key_columns: Vec<usize>,
    op_column: Option<usize>,
    converter: Option<RowConverter>,
    aggregates: Vec<CompiledAggregate>,
    /// Row-encoded key → group: (the key's hash, the group), the key kept
    /// once, in its group (a map by key held every key twice and hashed a
    /// new one twice).
    index: HashTable<(u64, u32)>,
    /// Neighbouring integer ids to neighbouring slots ([`crate::neighbours`]).
    hasher: NeighbourHash,
    /// Groups by number; a deleted group's slot is free for the next new one.
    groups: Vec<Option<Group>>,
    free: Vec<u32>,
    groups_max: usize,
    state_ttl_ms: Option<i64>,
    /// Processing time of the batch being applied.
    now_ms: i64,
    output_schema: SchemaRef,
    /// Every aggregate's state as columns (then groups have no
    /// accumulators), when all of them have that form.
    columnar: Option<Columns>,
    /// Per group slot, the number of the batch that last touched it.
    stamps: Vec<u64>,
    batches: u64,
    /// Per group slot: whether its group changed since a checkpoint
    /// last wrote it.
    dirty: Vec<bool>,
    /// What checkpoints wrote of the groups, and per group slot where
    /// its group's row is (12 bytes a slot; a map by slot was about three
    /// times that).
    written: Batches,
    places: Vec<Option<Place>>,
}

/// The changelog rows of one batch, built column by column.
#[derive(Default)]
struct Changes {
    ops: Vec<&'static str>,
    keys: Vec<Box<[u8]>>,
    /// Per aggregate, its value on each row.
    values: Vec<Vec<ScalarValue>>,
}

impl Changes {
    fn push(&mut self, op: ChangeOp, key: &[u8], values: Vec<ScalarValue>) {
        self.ops.push(op.as_str());
        self.keys.push(key.into());
        if self.values.is_empty() {
            self.values = vec![Vec::new(); values.len()];
        }
        for (column, v) in self.values.iter_mut().zip(values) {
            column.push(v);
        }
    }
}

/// A group a batch touches: its number, its values before the batch
/// (none when it showed no row), and where its added and retracted rows
/// are in the sorted order.
struct Touched {
    group: u32,
    before: Option<Vec<ScalarValue>>,
    added: (usize, usize),
    retracted: (usize, usize),
}

impl GroupAggregateOperator {
    pub fn new(spec: &GroupAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let AggregateInputs {
            converter,
            aggregates,
            key_columns,
        } = AggregateInputs::compile(&spec.input_schema, &spec.key_columns, &spec.aggregates)?;
        let op = GroupAggregateOperator {
            key_columns,
            op_column: spec.op_column,
            converter,
            aggregates,
            index: HashTable::new(),
            hasher: NeighbourHash::for_key(&spec.input_schema, &spec.key_columns),
            groups: Vec::new(),
            free: Vec::new(),
            groups_max: spec.groups_max,
            state_ttl_ms: spec.state_ttl_ms,
            now_ms: sluice_types::now_ms(),
            output_schema,
            columnar: None,
            stamps: Vec::new(),
            batches: 0,
            dirty: Vec::new(),
            written: Batches::default(),
            places: Vec::new(),
        };
        // Refuse an aggregate that cannot retract before any row arrives.
        let accumulators = op.accumulators()?;
        let mut op = op;
        op.columnar = op.columnar_form(spec, accumulators)?;
        Ok(op)
    }

    /// The columnar form of every aggregate, or none when one has none
    /// (a `min` or distinct count over a changelog, a decimal sum, a
    /// distinct count of text…).
    fn columnar_form(
        &self,
        spec: &GroupAggSpec,
        mut accumulators: Vec<Box<dyn Accumulator>>,
    ) -> Result<Option<Columns>> {
        let first_value = 1 + self.key_columns.len();
        let mut columns = Vec::new();
        for (a, call) in spec.aggregates.iter().enumerate() {
            let state: Vec<arrow::datatypes::DataType> = accumulators[a]
                .state()
                .map_err(df_error)?
                .iter()
                .map(|v| v.data_type())
                .collect();
            let arg_type = call.args.first().map(|c| spec.input_schema.field(*c).data_type());
            let out_type = self.output_schema.field(first_value + a).data_type();
            match Columnar::of(
                &call.function,
                call.distinct,
                arg_type,
                out_type,
                self.op_column.is_some(),
                &state,
            ) {
                Some(c) => columns.push(c),
                None => return Ok(None),
            }
        }
        Ok(Columns::new(columns))
    }

    /// The same operator without the columnar form: what a test compares
    /// the columnar form with.
    #[cfg(test)]
    pub(crate) fn generic(spec: &GroupAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let mut op = Self::new(spec, output_schema)?;
        op.columnar = None;
        Ok(op)
    }

    #[cfg(test)]
    pub(crate) fn is_columnar(&self) -> bool {
        self.columnar.is_some()
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        (0..self.aggregates.len()).map(|a| self.accumulator(a)).collect()
    }

    /// A fresh accumulator of aggregate `a`: one that can retract rows
    /// when the input is a changelog.
    fn accumulator(&self, a: usize) -> Result<Box<dyn Accumulator>> {
        match self.op_column {
            Some(_) => self.aggregates[a].retracting_accumulator(),
            None => self.aggregates[a].accumulator(),
        }
    }

    /// The group of `key` (row-encoded), added when new.
    fn group_of(&mut self, key: &[u8]) -> Result<u32> {
        let hash = self.hasher.hash_one(key);
        let groups = &self.groups;
        let same = |(h, g): &(u64, u32)| *h == hash && groups[*g as usize].as_ref().is_some_and(|x| &*x.key == key);
        if let Some((_, g)) = self.index.find(hash, same) {
            return Ok(*g);
        }
        if self.index.len() >= self.groups_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "aggregate state limit reached: {} groups in one instance (SET aggregate_groups_max)",
                    self.groups_max
                ),
            ));
        }
        let group = Group {
            key: key.into(),
            rows: 0,
            touched_ms: self.now_ms,
            accumulators: match self.columnar {
                Some(_) => Vec::new(),
                None => self.accumulators()?,
            },
        };
        let g = match self.free.pop() {
            Some(g) => {
                self.groups[g as usize] = Some(group);
                g
            }
            None => {
                self.groups.push(Some(group));
                self.stamps.push(0);
                self.dirty.push(false);
                self.places.push(None);
                self.groups.len() as u32 - 1
            }
        };
        if let Some(columns) = &mut self.columnar {
            columns.reset(g);
        }
        self.index.insert_unique(hash, (hash, g), |(h, _)| *h);
        self.dirty[g as usize] = true;
        Ok(g)
    }

    /// The group of row `row` of a batch whose keys are `rows` (none: the
    /// one group), `last` the previous row's and its group: a row with the
    /// same key as the row before it (a stream's rows come in runs of a
    /// key: q15's day) takes its group without hashing. Within a batch no
    /// group goes, so the previous row's group is still its key's.
    fn group_of_row(&mut self, rows: Option<&Rows>, row: usize, last: &mut Option<(usize, u32)>) -> Result<u32> {
        let g = match (rows, *last) {
            (None, Some((_, g))) => g,
            (None, None) => self.group_of(&[])?,
            (Some(rows), Some((r, g))) if rows.row(r).data() == rows.row(row).data() => g,
            (Some(rows), _) => self.group_of(rows.row(row).data())?,
        };
        *last = Some((row, g));
        Ok(g)
    }

    fn group(&mut self, g: u32) -> &mut Group {
        self.groups[g as usize].as_mut().expect("a live group")
    }

    fn evaluate(&mut self, g: u32) -> Result<Vec<ScalarValue>> {
        if let Some(columns) = &self.columnar {
            return columns.scalars(g);
        }
        self.group(g)
            .accumulators
            .iter_mut()
            .map(|a| a.evaluate().map_err(df_error))
            .collect()
    }

    fn delete(&mut self, g: u32) {
        if let Some(group) = self.groups[g as usize].take() {
            let hash = self.hasher.hash_one(&*group.key);
            if let Ok(entry) = self.index.find_entry(hash, |(h, x)| *h == hash && *x == g) {
                entry.remove();
            }
            self.free.push(g);
            if let Some(place) = self.places[g as usize].take() {
                self.written.forget(place);
            }
            self.dirty[g as usize] = false;
        }
    }

    /// Per row, true when it is retracted (`-U`, `-D`) rather than added.
    fn retractions(&self, batch: &RecordBatch) -> Result<Option<Vec<bool>>> {
        let Some(c) = self.op_column else {
            return Ok(None);
        };
        Ok(Some(change_ops(batch, c)?.iter().map(|op| op.retracts()).collect()))
    }

    /// Adds (or retracts) a batch's rows in their groups; returns the
    /// changelog rows of the groups whose values changed.
    pub fn update(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(None);
        }
        self.now_ms = sluice_types::now_ms();
        if self.columnar.is_some() {
            return self.update_columnar(batch).map(Some);
        }
        let retracted = self.retractions(batch)?;
        let (key_rows, arguments) = read_inputs(&self.converter, &self.key_columns, &self.aggregates, batch)?;
        // Each row's slot: 2 × (its group's place in `touched`) + 1 when
        // it is retracted; groups in the order the batch first touches them.
        let mut slots = Vec::with_capacity(n);
        let mut touched: Vec<u32> = Vec::new();
        let mut place: HashMap<u32, usize> = HashMap::new();
        let mut last = None;
        for row in 0..n {
            let g = self.group_of_row(key_rows.as_ref(), row, &mut last)?;
            let at = *place.entry(g).or_insert_with(|| {
                touched.push(g);
                touched.len() - 1
            });
            let back = retracted.as_ref().is_some_and(|r| r[row]);
            slots.push(2 * at + usize::from(back));
        }
        // Rows sorted by slot (a counting sort), so each group's added and
        // retracted rows are two slices of the taken arguments.
        let mut offsets = vec![0usize; 2 * touched.len() + 1];
        for s in &slots {
            offsets[s + 1] += 1;
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let sorted = slots.windows(2).all(|w| w[0] <= w[1]);
        let arguments: Vec<Vec<ArrayRef>> = if sorted {
            arguments
        } else {
            let mut next = offsets.clone();
            let mut order = vec![0u32; n];
            for (row, s) in slots.iter().enumerate() {
                order[next[*s]] = row as u32;
                next[*s] += 1;
            }
            let order = UInt32Array::from(order);
            arguments
                .iter()
                .map(|args| args.iter().map(|a| take(a, &order, None)).collect::<Result<_, _>>())
                .collect::<Result<_, _>>()?
        };
        let mut changes = Changes::default();
        for (at, g) in touched.into_iter().enumerate() {
            let span = |s: usize| (offsets[s], offsets[s + 1] - offsets[s]);
            let shown = self.group(g).rows > 0;
            let touched = Touched {
                group: g,
                before: if shown { Some(self.evaluate(g)?) } else { None },
                added: span(2 * at),
                retracted: span(2 * at + 1),
            };
            self.apply(&touched, &arguments, &mut changes)?;
        }
        self.changes_batch(changes).map(Some)
    }

    /// [`Self::update`] with the states in columns: the groups' values
    /// before and after the batch are read as arrays; a group emits as in
    /// [`Self::apply`], its key taken from the batch row that first touched it.
    fn update_columnar(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let retracted = self.retractions(batch)?;
        let (key_rows, arguments) = read_inputs(&self.converter, &self.key_columns, &self.aggregates, batch)?;
        self.batches += 1;
        let stamp = self.batches;
        let mut groups = Vec::with_capacity(n);
        // Touched groups, the row that first touched each, whether it
        // showed a row before the batch.
        let mut touched: Vec<u32> = Vec::new();
        let mut first_rows: Vec<u32> = Vec::new();
        let mut shown: Vec<bool> = Vec::new();
        let mut last = None;
        for row in 0..n {
            let g = self.group_of_row(key_rows.as_ref(), row, &mut last)?;
            if self.stamps[g as usize] != stamp {
                self.stamps[g as usize] = stamp;
                self.dirty[g as usize] = true;
                touched.push(g);
                first_rows.push(row as u32);
                shown.push(self.group(g).rows > 0);
            }
            groups.push(g);
        }
        let columns = self.columnar.as_mut().expect("columnar");
        let before = columns.values(&touched);
        columns.apply(&groups, retracted.as_deref(), &arguments)?;
        let after = columns.values(&touched);
        for (row, g) in groups.iter().enumerate() {
            let back = retracted.as_ref().is_some_and(|r| r[row]);
            self.group(*g).rows += if back { -1 } else { 1 };
        }
        // Per aggregate, which touched groups kept their value.
        let same = before
            .iter()
            .zip(&after)
            .map(|(b, a)| not_distinct(b, a))
            .collect::<Result<Vec<_>, _>>()?;
        let t = touched.len() as u32;
        let (mut ops, mut key_at, mut value_at) = (Vec::new(), Vec::new(), Vec::new());
        let now_ms = self.now_ms;
        for (i, g) in touched.iter().enumerate() {
            let group = self.group(*g);
            group.touched_ms = now_ms;
            let rows = group.rows;
            let mut emit = |op: ChangeOp, at: u32| {
                ops.push(op.as_str());
                key_at.push(first_rows[i]);
                value_at.push(at);
            };
            let at = i as u32;
            match (shown[i], rows > 0) {
                (false, false) => {}
                (false, true) => emit(ChangeOp::Insert, t + at),
                (true, false) => emit(ChangeOp::Delete, at),
                (true, true) => {
                    if !same.iter().all(|s| s.value(i)) {
                        emit(ChangeOp::UpdateBefore, at);
                        emit(ChangeOp::UpdateAfter, t + at);
                    }
                }
            }
            if rows == 0 {
                self.delete(*g);
            }
        }
        if ops.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let key_at = UInt32Array::from(key_at);
        let value_at = UInt32Array::from(value_at);
        let mut out: Vec<ArrayRef> = vec![Arc::new(StringArray::from(ops))];
        for k in &self.key_columns {
            out.push(take(batch.column(*k), &key_at, None)?);
        }
        for (b, a) in before.iter().zip(&after) {
            out.push(take(&concat(&[b.as_ref(), a.as_ref()])?, &value_at, None)?);
        }
        finish_batch(&self.output_schema, out)
    }

    /// Updates one touched group and records what it emits.
    fn apply(&mut self, t: &Touched, arguments: &[Vec<ArrayRef>], changes: &mut Changes) -> Result<()> {
        let now_ms = self.now_ms;
        self.dirty[t.group as usize] = true;
        let group = self.group(t.group);
        group.touched_ms = now_ms;
        for (acc, args) in group.accumulators.iter_mut().zip(arguments) {
            let slice =
                |(start, len): (usize, usize)| -> Vec<ArrayRef> { args.iter().map(|a| a.slice(start, len)).collect() };
            if t.added.1 > 0 {
                acc.update_batch(&slice(t.added)).map_err(df_error)?;
            }
            if t.retracted.1 > 0 {
                acc.retract_batch(&slice(t.retracted)).map_err(df_error)?;
            }
        }
        group.rows += t.added.1 as i64 - t.retracted.1 as i64;
        let rows = group.rows;
        let key = group.key.clone();
        match (&t.before, rows > 0) {
            (None, false) => {}
            (None, true) => changes.push(ChangeOp::Insert, &key, self.evaluate(t.group)?),
            (Some(before), false) => changes.push(ChangeOp::Delete, &key, before.clone()),
            (Some(before), true) => {
                let after = self.evaluate(t.group)?;
                if *before != after {
                    changes.push(ChangeOp::UpdateBefore, &key, before.clone());
                    changes.push(ChangeOp::UpdateAfter, &key, after);
                }
            }
        }
        // A group with no rows (more were retracted than added, e.g. rows
        // whose additions this instance never saw) holds nothing to keep.
        if rows == 0 {
            self.delete(t.group);
        }
        Ok(())
    }

    /// `state_ttl`: deletes (`-D`) every group no row reached since
    /// `now_ms` minus the TTL, freeing its state.
    pub fn expire(&mut self, now_ms: i64) -> Result<Option<RecordBatch>> {
        let Some(ttl) = self.state_ttl_ms else {
            return Ok(None);
        };
        let cutoff = now_ms.saturating_sub(ttl);
        let idle: Vec<u32> = (0..self.groups.len() as u32)
            .filter(|g| self.groups[*g as usize].as_ref().is_some_and(|x| x.touched_ms < cutoff))
            .collect();
        let mut changes = Changes::default();
        for g in idle {
            if self.group(g).rows > 0 {
                let values = self.evaluate(g)?;
                let key = self.group(g).key.clone();
                changes.push(ChangeOp::Delete, &key, values);
            }
            self.delete(g);
        }
        self.changes_batch(changes).map(Some)
    }

    fn changes_batch(&self, changes: Changes) -> Result<RecordBatch> {
        if changes.ops.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from(changes.ops))];
        if let Some(c) = &self.converter {
            let parser = c.parser();
            columns.extend(c.convert_rows(changes.keys.iter().map(|k| parser.parse(k)))?);
        }
        for values in changes.values {
            columns.push(ScalarValue::iter_to_array(values).map_err(df_error)?);
        }
        finish_batch(&self.output_schema, columns)
    }

    /// How many state columns aggregate `a`'s accumulator has (a sliding
    /// one may keep more than the plain one's `state_fields`).
    fn state_width(&self, a: usize) -> Result<usize> {
        Ok(self.accumulator(a)?.state().map_err(df_error)?.len())
    }

    /// The live group slots.
    fn live_groups(&self) -> Vec<u32> {
        (0..self.groups.len() as u32)
            .filter(|g| self.groups[*g as usize].is_some())
            .collect()
    }

    /// Groups `live`'s keys, rows and accumulator states as one batch (an
    /// accumulator is rebuilt from the state it gave, so it keeps going),
    /// with an all-true `live` column when `liveness`.
    fn snapshot_batch(&mut self, live: &[u32], liveness: bool) -> Result<Option<RecordBatch>> {
        if live.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        if let Some(c) = &self.converter {
            let parser = c.parser();
            let groups = &self.groups;
            let keys = live
                .iter()
                .map(|g| parser.parse(&groups[*g as usize].as_ref().expect("live").key));
            columns.extend(c.convert_rows(keys)?);
        }
        let rows: Int64Array = live
            .iter()
            .map(|g| Some(self.groups[*g as usize].as_ref().expect("live").rows))
            .collect();
        columns.push(Arc::new(rows));
        if let Some(aggregates) = &self.columnar {
            columns.extend(aggregates.state(live));
        }
        for a in 0..self.aggregates.len() {
            if self.columnar.is_some() {
                break;
            }
            let width = self.state_width(a)?;
            let mut states: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(live.len()); width];
            for g in live {
                let state = self.group(*g).accumulators[a].state().map_err(df_error)?;
                for (column, v) in states.iter_mut().zip(state) {
                    column.push(v);
                }
            }
            let arrays: Vec<ArrayRef> = states
                .into_iter()
                .map(|s| ScalarValue::iter_to_array(s).map_err(df_error))
                .collect::<Result<_>>()?;
            for (i, g) in live.iter().enumerate() {
                let mut fresh = self.accumulator(a)?;
                let row: Vec<ArrayRef> = arrays.iter().map(|s| s.slice(i, 1)).collect();
                fresh.merge_batch(&row).map_err(df_error)?;
                self.group(*g).accumulators[a] = fresh;
            }
            columns.extend(arrays);
        }
        snapshot_rows(columns, liveness).map(Some)
    }

    /// The operator's snapshot for checkpoint `checkpoint`: without keys,
    /// its one group whole; with keys, incremental (see the module doc).
    fn snapshot_state(&mut self, checkpoint: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        let n_keys = self.key_columns.len();
        if n_keys == 0 {
            if let Some(batch) = self.snapshot_batch(&self.live_groups(), false)? {
                state.put_rows(GROUPS_KEY, batch, Vec::new());
            }
            return Ok(state);
        }
        let live = self.live_groups();
        if self.written.compact(live.len()) {
            for g in &live {
                self.dirty[*g as usize] = true;
            }
        }
        // Restored groups are new ones: changed.
        let changed: Vec<u32> = live.into_iter().filter(|g| self.dirty[*g as usize]).collect();
        let new = self.snapshot_batch(&changed, true)?;
        for g in &changed {
            self.dirty[*g as usize] = false;
            if let Some(place) = self.places[*g as usize].take() {
                self.written.forget(place);
            }
        }
        let live_column = match &new {
            Some(batch) => batch.num_columns() - 1,
            // The place the batches written hold it at.
            None => {
                n_keys
                    + 1
                    + (0..self.aggregates.len())
                        .map(|a| self.state_width(a))
                        .sum::<Result<usize>>()?
            }
        };
        let (inc, places) = self.written.write(
            checkpoint,
            new.map(|b| (vec![1; changed.len()], b)).into_iter().collect(),
        );
        for (g, place) in changed.iter().zip(places.into_iter().flatten()) {
            self.places[*g as usize] = Some(place);
        }
        state.put_incremental(GROUPS_KEY, (0..n_keys).collect(), live_column, inc)?;
        Ok(state)
    }

    /// Rebuilds the groups from [`Self::snapshot_batch`]'s rows (those
    /// whose `live` column, when there is one, says they live).
    fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let n_keys = self.key_columns.len();
        let widths: Vec<usize> = (0..self.aggregates.len())
            .map(|a| self.state_width(a))
            .collect::<Result<_>>()?;
        let width = n_keys + 1 + widths.iter().sum::<usize>();
        let batch = match batch.num_columns() {
            n if n == width => batch.clone(),
            n if n == width + 1 => {
                let live = batch
                    .column(width)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::internal("aggregate snapshot: bad liveness column"))?;
                let live = filter_record_batch(batch, live)?;
                live.project(&(0..width).collect::<Vec<_>>())?
            }
            n => {
                return Err(Error::internal(format!(
                    "aggregate snapshot: {n} columns, {width} expected"
                )));
            }
        };
        let batch = &batch;
        let key_rows = match &self.converter {
            Some(c) => Some(c.convert_columns(&batch.columns()[..n_keys])?),
            None => None,
        };
        let counts = batch
            .column(n_keys)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::internal("aggregate snapshot: bad rows column"))?;
        for row in 0..batch.num_rows() {
            let before = self.index.len();
            let g = match &key_rows {
                Some(rows) => self.group_of(rows.row(row).data())?,
                None => self.group_of(&[])?,
            };
            if self.index.len() == before {
                return Err(Error::internal("aggregate snapshot holds a key twice"));
            }
            // A restored group counts as just reached (`state_ttl`).
            self.group(g).rows = counts.value(row);
            let mut col = n_keys + 1;
            for (a, width) in widths.iter().enumerate() {
                let state = &batch.columns()[col..col + width];
                col += width;
                if let Some(columns) = &mut self.columnar {
                    columns.merge(a, g, state, row)?;
                    continue;
                }
                let state: Vec<ArrayRef> = state.iter().map(|c| c.slice(row, 1)).collect();
                self.group(g).accumulators[a].merge_batch(&state).map_err(df_error)?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for GroupAggregateOperator {
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        self.snapshot_state(checkpoint_id)
    }

    /// The restored rows may come from several old instances (a rescale):
    /// their keys are disjoint, so they are one set of groups.
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if let Some(batch) = TaskState::restored_rows(checkpoint, GROUPS_KEY)? {
            self.restore_batch(&batch)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.update(&batch)?;
        ctx.metrics
            .state_groups
            .store(self.index.len() as u64, Ordering::Relaxed);
        emit_changes(changes, ctx).await
    }

    /// `state_ttl`: idle groups are looked for every eighth of the TTL
    /// (0.1 s to 1 min).
    fn timer_interval(&self) -> Option<std::time::Duration> {
        self.state_ttl_ms.map(ttl_sweep_interval)
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.expire(sluice_types::now_ms())?;
        ctx.metrics
            .state_groups
            .store(self.index.len() as u64, Ordering::Relaxed);
        emit_changes(changes, ctx).await
    }
}

/// How often an operator with `state_ttl` looks for idle state: an eighth
/// of the TTL, from 0.1 s to 1 min.
/// `state_ttl`: the keys of `map` whose value no row reached (`touched`,
/// processing time ms) since `cutoff`.
pub(crate) fn idle_keys<'a, V: 'a>(
    map: impl IntoIterator<Item = (&'a Box<[u8]>, &'a V)>,
    cutoff: i64,
    touched: impl Fn(&V) -> i64,
) -> Vec<Box<[u8]>> {
    map.into_iter()
        .filter(|(_, v)| touched(v) < cutoff)
        .map(|(k, _)| k.clone())
        .collect()
}

pub(crate) fn ttl_sweep_interval(ttl_ms: i64) -> std::time::Duration {
    std::time::Duration::from_millis((ttl_ms / 8).clamp(100, 60_000) as u64)
}

/// Each row's op, from a changelog's op column `column`.
pub(crate) fn change_ops(batch: &RecordBatch, column: usize) -> Result<Vec<ChangeOp>> {
    let ops = batch
        .column(column)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| Error::internal("a changelog's op column is not text"))?;
    (0..ops.len())
        .map(|i| {
            ChangeOp::parse(ops.value(i))
                .ok_or_else(|| Error::internal(format!("unknown changelog op {:?}", ops.value(i))))
        })
        .collect()
}

/// Emits a changelog batch unless it is empty.
pub(crate) async fn emit_changes(changes: Option<RecordBatch>, ctx: &mut OperatorContext<'_>) -> Result<()> {
    match changes {
        Some(changes) if changes.num_rows() > 0 => ctx.emit(changes).await,
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
