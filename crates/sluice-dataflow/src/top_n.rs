//! Top-N and deduplication (`ROW_NUMBER() OVER (PARTITION BY … ORDER BY
//! …) AS rn … WHERE rn <= N`) over an append-only input.
//!
//! Per partition the operator keeps its first `limit` rows in the order,
//! each as row-encoded bytes with its order key encoded so that bytes
//! compare as the ORDER BY does (Arrow's row format with the keys' sort
//! options) and its arrival number, which breaks ties (the row that came
//! first ranks first). A row that would rank after a full list's last is
//! dropped without touching the list. A batch's rows are taken by order
//! key alone; those still in a list at its end are then row-encoded whole
//! (most rows offered to a top-1 are dropped). At the end of a batch
//! each partition it changed compares its list with the list before,
//! position by position: a position whose row changed emits `-U` (the row
//! it held, with its number) and `+U` (the new row), a new position `+I`.
//! Lists never shrink (the input only adds rows).
//!
//! Over a changelog (`TopNSpec::op_column`) a top row may be taken back,
//! and the next row must then move up: each partition keeps every row it
//! holds (ordered by order key, then row bytes, with their copies), at
//! most `partitions_max` rows an instance, and its list is the first
//! `limit` of them. The diff is the same; a list that shrinks emits `-D`.
//!
//! With partition columns, checkpoints are incremental
//! ([`crate::checkpoint::ledger`]): a checkpoint writes the rows of the
//! partitions changed since the previous one (a list that took a row, a
//! held row added or taken back, a partition expired or restored) and
//! references the batches earlier ones wrote, with a liveness bit a row.
//! A list's partition keeps where its rows were written
//! ([`Place`]) and whether it changed since, so the operator holds no
//! copy of its keys for that (a dedup over millions of pairs held one a
//! pair, more memory than the pairs' lists at q18's). Without partition
//! columns, the one partition is written whole.

use crate::checkpoint::TaskState;
use crate::checkpoint::ledger::{Batches, ChangedKeys, Place, SNAPSHOT_KEYS, live_rows};
use crate::neighbours::NeighbourHash;
use crate::operator::{Operator, OperatorContext};
use crate::window::fixed::finish_batch;
use arrow::array::{ArrayRef, StringArray, UInt32Array, UInt64Array};
use arrow::compute::{SortOptions, sort_to_indices, take, take_record_batch};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use async_trait::async_trait;
use hashbrown::{HashMap, HashSet};
use indexmap::IndexMap;
use indexmap::map::raw_entry_v1::{RawEntryApiV1, RawEntryMut};
use sluice_plan::{ChangeOp, TopNSpec};
use sluice_types::{Error, Result, SqlCode};
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot layout: one batch of every kept row (the input's columns) and
/// its arrival number, keyed by the partition columns.
const ROWS_KEY: &str = "rows";
/// Over a changelog: every held row (the input's columns but the op) and
/// its copies, keyed by the partition columns.
const HELD_KEY: &str = "held_rows";
const COUNT_COLUMN: &str = "__count";
/// Encoding buffers larger than this are freed after their batch.
const SCRATCH_KEPT_MAX: usize = 64 << 20;

/// A row after its order key: (order key, row), both row-encoded.
type OrderedRow = (Box<[u8]>, Box<[u8]>);

/// Over a changelog: a partition's rows by (order key, row) with their
/// copies, when a row last reached it, and where a checkpoint wrote them
/// (while they are the partition's).
#[derive(Default)]
struct Held {
    touched_ms: i64,
    rows: BTreeMap<OrderedRow, u64>,
    written: Option<Place>,
}

/// A kept row: its order key and then the row, row-encoded in one
/// allocation, and its arrival number.
struct Entry {
    bytes: Box<[u8]>,
    order_len: u32,
    seq: u64,
}

impl Entry {
    fn new(order: &[u8], row: &[u8], seq: u64) -> Entry {
        let mut bytes = Vec::with_capacity(order.len() + row.len());
        bytes.extend_from_slice(order);
        bytes.extend_from_slice(row);
        Entry {
            bytes: bytes.into_boxed_slice(),
            order_len: order.len() as u32,
            seq,
        }
    }

    fn order(&self) -> &[u8] {
        &self.bytes[..self.order_len as usize]
    }

    fn row(&self) -> &[u8] {
        &self.bytes[self.order_len as usize..]
    }
}

/// A partition's list; when a row last reached it (processing time, ms:
/// for `state_ttl`); the last batch that changed it; whether it changed
/// since the last checkpoint; where a checkpoint wrote its rows (while
/// they are the list's).
struct Partition {
    touched_ms: i64,
    list: Vec<Entry>,
    batch: u64,
    dirty: bool,
    written: Option<Place>,
}

/// Buffers of row-encoded columns, reused batch after batch.
struct Scratch {
    keys: Option<Rows>,
    orders: Rows,
    rows: Rows,
}

/// What applying one batch did to the lists: the partitions it changed
/// (by index, in the order it first changed them) and the entries it
/// pushed out of full lists (with their partition's index, each
/// partition's in descending order: each was its list's last).
#[derive(Default)]
struct Applied {
    number: u64,
    first_seq: u64,
    touched: Vec<usize>,
    evicted: Vec<(usize, Entry)>,
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
    /// The lists by partition key. An `IndexMap`: a batch names the
    /// partitions it changed by index (no key copied or hashed again to
    /// diff them), and the changes since the last checkpoint likewise
    /// (`dirty`; listed again when an expiry moves indices).
    partitions: IndexMap<Box<[u8]>, Partition, NeighbourHash>,
    dirty: Vec<usize>,
    /// With partition columns: the batches checkpoints wrote of the
    /// lists, and whether one was written (until then no change is
    /// noted: the first writes every list).
    written: Batches,
    tracking: bool,
    batches: u64,
    /// Over a changelog: the input's op column, every partition's rows and
    /// how many are held (with copies).
    op_column: Option<usize>,
    held: HashMap<Box<[u8]>, Held>,
    rows_held: usize,
    /// The columns of a row: every input column but the op.
    data_columns: Vec<usize>,
    state_ttl_ms: Option<i64>,
    /// Rows a checkpoint writes: list entries, or over a changelog
    /// distinct held rows (copies are a count).
    stored_rows: usize,
    /// Over a changelog with partition columns: the partitions changed
    /// since the last checkpoint, and what earlier ones wrote.
    changed: ChangedKeys,
    /// Processing time of the batch being applied.
    now_ms: i64,
    next_seq: u64,
    scratch: Option<Scratch>,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
}

/// Over a changelog: a partition's key and its list's rows before a batch.
type ListBefore = (Box<[u8]>, Vec<Box<[u8]>>);

/// A changelog row: the op, the row's bytes, its number.
type Change<'a> = (ChangeOp, &'a [u8], u64);

/// The changelog of a list that was `old` and is `new` (rows with an
/// identity: equal rows with the same number are the same row), position
/// by position: `-U`/`+U` where the row at a position changed, `+I` at a
/// new position, `-D` at one gone.
fn diff_positions<'a>(
    mut old: impl Iterator<Item = (&'a [u8], u64)>,
    mut new: impl Iterator<Item = (&'a [u8], u64)>,
    changes: &mut Vec<Change<'a>>,
) {
    let mut rn = 0;
    loop {
        rn += 1;
        match (old.next(), new.next()) {
            (None, None) => return,
            (Some(o), Some(n)) if o.1 == n.1 && (std::ptr::eq(o.0, n.0) || o.0 == n.0) => {}
            (Some(o), Some(n)) => {
                changes.push((ChangeOp::UpdateBefore, o.0, rn));
                changes.push((ChangeOp::UpdateAfter, n.0, rn));
            }
            (None, Some(n)) => changes.push((ChangeOp::Insert, n.0, rn)),
            (Some(o), None) => changes.push((ChangeOp::Delete, o.0, rn)),
        }
    }
}

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
        let width = spec.input_schema.fields().len();
        if spec.op_column.is_some_and(|c| c + 1 != width) {
            return Err(Error::internal("a top-N's op column is not its input's last"));
        }
        let data_columns: Vec<usize> = (0..width).filter(|c| Some(*c) != spec.op_column).collect();
        let rows = RowConverter::new(data_columns.iter().map(|c| SortField::new(field(*c))).collect())?;
        let input_schema = Arc::new(spec.input_schema.project(&data_columns)?);
        Ok(TopNOperator {
            partition_columns: spec.partition_columns.clone(),
            order_columns: spec.order.iter().map(|k| k.column).collect(),
            limit: spec.limit,
            partitions_max: spec.partitions_max,
            partition,
            order,
            rows,
            partitions: IndexMap::with_hasher(NeighbourHash::for_key(&spec.input_schema, &spec.partition_columns)),
            dirty: Vec::new(),
            written: Batches::default(),
            tracking: false,
            batches: 0,
            op_column: spec.op_column,
            held: HashMap::new(),
            rows_held: 0,
            data_columns,
            state_ttl_ms: spec.state_ttl_ms,
            stored_rows: 0,
            changed: ChangedKeys::default(),
            now_ms: sluice_types::now_ms(),
            next_seq: 0,
            scratch: None,
            input_schema,
            output_schema,
        })
    }

    fn columns(batch: &RecordBatch, columns: &[usize]) -> Vec<ArrayRef> {
        columns.iter().map(|c| batch.column(*c).clone()).collect()
    }

    /// Offers the row `row` with order key `order` and number `seq` to
    /// the list of `key`, noting in `applied` what it changed.
    fn offer(&mut self, key: &[u8], order: &[u8], row: &[u8], seq: u64, applied: &mut Applied) -> Result<()> {
        let limit = self.limit;
        // One hash a row: looked up and, new, inserted with it.
        let hash = self.partitions.hasher().hash_one(key);
        let index = match self.partitions.raw_entry_mut_v1().from_key_hashed_nocheck(hash, key) {
            RawEntryMut::Occupied(entry) => entry.index(),
            RawEntryMut::Vacant(entry) => {
                if entry.index() >= self.partitions_max {
                    return Err(Error::user(
                        SqlCode::ConfigurationLimitExceeded,
                        format!(
                            "top-N state limit reached: {} partitions in one instance (SET aggregate_groups_max)",
                            self.partitions_max
                        ),
                    ));
                }
                let index = entry.index();
                let partition = Partition {
                    touched_ms: self.now_ms,
                    list: Vec::with_capacity(limit.min(16)),
                    batch: 0,
                    dirty: false,
                    written: None,
                };
                entry.insert_hashed_nocheck(hash, key.into(), partition);
                index
            }
        };
        let (_, partition) = self.partitions.get_index_mut(index).expect("looked up above");
        partition.touched_ms = self.now_ms;
        let list = &mut partition.list;
        if list.len() == limit && list.last().is_some_and(|last| order >= last.order()) {
            return Ok(());
        }
        if partition.batch != applied.number {
            partition.batch = applied.number;
            applied.touched.push(index);
        }
        if !partition.dirty && self.tracking {
            partition.dirty = true;
            self.dirty.push(index);
        }
        let at = list.partition_point(|e| e.order() <= order);
        list.insert(at, Entry::new(order, row, seq));
        if list.len() > limit {
            let last = list.pop().expect("longer than the limit");
            applied.evicted.push((index, last));
        } else {
            self.stored_rows += 1;
        }
        Ok(())
    }

    /// A fresh [`Applied`] for the next batch.
    fn start_batch(&mut self) -> Applied {
        self.batches += 1;
        Applied {
            number: self.batches,
            first_seq: self.next_seq,
            ..Applied::default()
        }
    }

    /// Partition `key` changed: the next checkpoint writes it again (or,
    /// gone, forgets its rows).
    fn mark(&mut self, key: &[u8]) {
        if self.partition.is_some() {
            self.changed.mark(key);
        }
    }

    /// Adds a batch's rows; returns the changelog of the lists it changed.
    pub fn update(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        // The row-encoded keys, orders and rows go into buffers kept from
        // the batch before (megabytes a batch: allocated afresh, each
        // batch page-faulted them in again).
        let mut scratch = self.scratch.take().unwrap_or_else(|| Scratch {
            keys: self.partition.as_ref().map(|c| c.empty_rows(0, 0)),
            orders: self.order.empty_rows(0, 0),
            rows: self.rows.empty_rows(0, 0),
        });
        if let (Some(c), Some(keys)) = (&self.partition, &mut scratch.keys) {
            keys.clear();
            c.append(keys, &Self::columns(batch, &self.partition_columns))?;
        }
        scratch.orders.clear();
        self.order
            .append(&mut scratch.orders, &Self::columns(batch, &self.order_columns))?;
        scratch.rows.clear();
        let out = if self.op_column.is_some() {
            self.rows
                .append(&mut scratch.rows, &Self::columns(batch, &self.data_columns))?;
            self.apply_changes(batch, &scratch)
        } else {
            self.apply_appends(batch, &mut scratch)
        };
        // Kept unless an outsized batch grew them (a bound on what idles).
        let size = scratch.rows.size() + scratch.orders.size() + scratch.keys.as_ref().map_or(0, Rows::size);
        if size <= SCRATCH_KEPT_MAX {
            self.scratch = Some(scratch);
        }
        out
    }

    /// Over a changelog: [`Self::update`] with the batch's keys, orders
    /// and rows encoded.
    fn apply_changes(&mut self, batch: &RecordBatch, scratch: &Scratch) -> Result<Option<RecordBatch>> {
        let (keys, orders, rows) = (&scratch.keys, &scratch.orders, &scratch.rows);
        self.now_ms = sluice_types::now_ms();
        let op_column = self
            .op_column
            .ok_or_else(|| Error::internal("a changelog top-N without an op column"))?;
        let mut before = Vec::new();
        let mut touched = HashSet::new();
        let ops = crate::group_aggregate::change_ops(batch, op_column)?;
        for (i, op) in ops.into_iter().enumerate() {
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            if touched.insert(Box::<[u8]>::from(key)) {
                let rows: Vec<Box<[u8]>> = self.top_of_held(key).map(Box::from).collect();
                before.push((Box::<[u8]>::from(key), rows));
            }
            self.change_held(key, orders.row(i).data(), rows.row(i).data(), op.retracts())?;
        }
        self.diff_held(before).map(Some)
    }

    /// Over an append-only input: [`Self::update`] with the batch's keys
    /// and orders encoded. The lists take the rows by order key alone;
    /// only the rows still in a list at the end of the batch are then
    /// row-encoded whole (a top-1 over many rows a partition keeps few of
    /// them: most of q9's joined rows, with their strings, were encoded
    /// and dropped). A row's number is the batch's first plus its
    /// position, so a kept entry names its row.
    fn apply_appends(&mut self, batch: &RecordBatch, scratch: &mut Scratch) -> Result<Option<RecordBatch>> {
        self.now_ms = sluice_types::now_ms();
        let n = batch.num_rows();
        let mut applied = self.start_batch();
        let first_seq = applied.first_seq;
        // A row past the partition limit fails the batch; the rows taken
        // before it still get their bytes below (no entry is left empty).
        let mut failed = None;
        for i in 0..n {
            let key: &[u8] = scratch.keys.as_ref().map_or(&[], |k| k.row(i).data());
            let seq = first_seq + i as u64;
            if let Err(e) = self.offer(key, scratch.orders.row(i).data(), &[], seq, &mut applied) {
                failed = Some(e);
                break;
            }
        }
        self.next_seq = first_seq + n as u64;
        // The entries the batch added and kept: (partition, position in
        // its list, row of the batch).
        let mut kept: Vec<(usize, usize, u32)> = Vec::new();
        for &index in &applied.touched {
            for (at, entry) in self.partitions[index].list.iter().enumerate() {
                if entry.seq >= first_seq {
                    kept.push((index, at, (entry.seq - first_seq) as u32));
                }
            }
        }
        let data = Self::columns(batch, &self.data_columns);
        // Most rows kept: encoding them all costs less than picking them.
        let all = kept.len() * 2 > n;
        if all {
            self.rows.append(&mut scratch.rows, &data)?;
        } else if !kept.is_empty() {
            let at = UInt32Array::from_iter_values(kept.iter().map(|(_, _, row)| *row));
            let picked = data
                .iter()
                .map(|column| take(column.as_ref(), &at, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            self.rows.append(&mut scratch.rows, &picked)?;
        }
        for (k, (index, at, row)) in kept.iter().enumerate() {
            let encoded = scratch.rows.row(if all { *row as usize } else { k });
            let entry = &mut self.partitions[*index].list[*at];
            *entry = Entry::new(entry.order(), encoded.data(), entry.seq);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        self.diff_applied(applied).map(Some)
    }

    /// The changelog of the lists a batch changed. A list before the batch
    /// is the rows older than it still there, then those it pushed out,
    /// ascending (each was greater than every row left).
    fn diff_applied(&self, applied: Applied) -> Result<RecordBatch> {
        let Applied {
            first_seq,
            touched,
            mut evicted,
            ..
        } = applied;
        evicted.retain(|(_, e)| e.seq < first_seq);
        evicted.sort_by_key(|(index, _)| *index);
        let mut changes = Vec::new();
        for index in touched {
            let list = &self.partitions[index].list;
            let from = evicted.partition_point(|(i, _)| *i < index);
            let to = evicted.partition_point(|(i, _)| *i <= index);
            let old = list
                .iter()
                .filter(|e| e.seq < first_seq)
                .chain(evicted[from..to].iter().rev().map(|(_, e)| e));
            diff_positions(
                old.map(|e| (e.row(), e.seq)),
                list.iter().map(|e| (e.row(), e.seq)),
                &mut changes,
            );
        }
        self.changes_batch(&changes)
    }

    /// Over a changelog: the first `limit` rows `key` holds, copies
    /// repeated.
    fn top_of_held(&self, key: &[u8]) -> impl Iterator<Item = &[u8]> {
        self.held
            .get(key)
            .into_iter()
            .flat_map(|held| held.rows.iter())
            .flat_map(|((_, row), n)| std::iter::repeat_n(row.as_ref(), *n as usize))
            .take(self.limit)
    }

    /// Over a changelog: adds a row to `key`, or takes one copy back (a
    /// row not held — dropped by `state_ttl` — is ignored).
    fn change_held(&mut self, key: &[u8], order: &[u8], row: &[u8], retract: bool) -> Result<()> {
        let entry = (Box::<[u8]>::from(order), Box::<[u8]>::from(row));
        if retract {
            let Some(held) = self.held.get_mut(key) else {
                return Ok(());
            };
            if let Some(n) = held.rows.get_mut(&entry) {
                *n -= 1;
                if *n == 0 {
                    held.rows.remove(&entry);
                    self.stored_rows -= 1;
                }
                self.rows_held -= 1;
            }
            held.touched_ms = self.now_ms;
            if held.rows.is_empty() {
                let written = held.written;
                self.held.remove(key);
                self.changed.forget(written);
            }
            self.mark(key);
            return Ok(());
        }
        if self.rows_held >= self.partitions_max {
            return Err(Error::user(
                SqlCode::ConfigurationLimitExceeded,
                format!(
                    "top-N state limit reached: {} rows held in one instance over a changelog (SET aggregate_groups_max)",
                    self.partitions_max
                ),
            ));
        }
        if !self.held.contains_key(key) {
            self.held.insert(key.into(), Held::default());
        }
        let held = self.held.get_mut(key).expect("inserted above");
        held.touched_ms = self.now_ms;
        let copies = held.rows.entry(entry).or_insert(0);
        if *copies == 0 {
            self.stored_rows += 1;
        }
        *copies += 1;
        self.rows_held += 1;
        self.mark(key);
        Ok(())
    }

    /// Over a changelog: the changelog between each touched partition's
    /// list before and now.
    fn diff_held(&self, before: Vec<ListBefore>) -> Result<RecordBatch> {
        let mut changes: Vec<Change> = Vec::new();
        for (key, old) in &before {
            diff_positions(
                old.iter().map(|r| (r.as_ref(), 0)),
                self.top_of_held(key).map(|r| (r, 0)),
                &mut changes,
            );
        }
        self.changes_batch(&changes)
    }

    /// `state_ttl`: deletes (`-D` of each row) every partition no row
    /// reached since `now_ms` minus the TTL, freeing its state.
    pub fn expire(&mut self, now_ms: i64) -> Result<Option<RecordBatch>> {
        let Some(ttl) = self.state_ttl_ms else {
            return Ok(None);
        };
        let cutoff = now_ms.saturating_sub(ttl);
        // Deleted rows: (row, its number).
        let mut gone: Vec<(Box<[u8]>, u64)> = Vec::new();
        for key in crate::group_aggregate::idle_keys(&self.held, cutoff, |h| h.touched_ms) {
            gone.extend((1..).zip(self.top_of_held(&key)).map(|(rn, row)| (Box::from(row), rn)));
            if let Some(h) = self.held.remove(&key) {
                self.rows_held -= h.rows.values().sum::<u64>() as usize;
                self.stored_rows -= h.rows.len();
                self.changed.forget(h.written);
            }
        }
        let mut removed = false;
        for key in crate::group_aggregate::idle_keys(&self.partitions, cutoff, |p| p.touched_ms) {
            if let Some(p) = self.partitions.swap_remove(&key) {
                removed = true;
                if let Some(place) = p.written {
                    self.written.forget(place);
                }
                self.stored_rows -= p.list.len();
                gone.extend((1..).zip(p.list).map(|(rn, e)| (Box::from(e.row()), rn)));
            }
        }
        if removed {
            // Removing moved the last partitions into the gaps: the changed
            // ones are listed again by their indices now.
            self.dirty = (self.partitions.values().enumerate())
                .filter(|(_, p)| p.dirty)
                .map(|(index, _)| index)
                .collect();
        }
        let changes: Vec<Change> = gone
            .iter()
            .map(|(row, rn)| (ChangeOp::Delete, row.as_ref(), *rn))
            .collect();
        self.changes_batch(&changes).map(Some)
    }

    fn changes_batch(&self, changes: &[Change]) -> Result<RecordBatch> {
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

    /// What the state metric shows: partitions, or over a changelog the
    /// rows held.
    fn held_count(&self) -> u64 {
        if self.op_column.is_some() {
            self.rows_held as u64
        } else {
            self.partitions.len() as u64
        }
    }

    /// Every kept row of the partitions at `indices` (all of them
    /// without) with its arrival number, as one batch, and how many rows
    /// each has.
    fn snapshot_batch(&self, indices: Option<&[usize]>) -> Result<Option<(Vec<u32>, RecordBatch)>> {
        let lists: Vec<&Vec<Entry>> = match indices {
            Some(indices) => indices.iter().map(|i| &self.partitions[*i].list).collect(),
            None => self.partitions.values().map(|p| &p.list).collect(),
        };
        let counts = lists.iter().map(|l| l.len() as u32).collect();
        let entries: Vec<&Entry> = lists.into_iter().flatten().collect();
        let rows: Vec<&[u8]> = entries.iter().map(|e| e.row()).collect();
        let batch = self.numbered_rows(&rows, "__seq", entries.iter().map(|e| e.seq))?;
        Ok(batch.map(|b| (counts, b)))
    }

    /// `rows` (row-encoded, the input's columns but the op) with a last
    /// column `name` of `numbers`, as one batch (none without rows).
    fn numbered_rows(
        &self,
        rows: &[&[u8]],
        name: &str,
        numbers: impl Iterator<Item = u64>,
    ) -> Result<Option<RecordBatch>> {
        if rows.is_empty() {
            return Ok(None);
        }
        let parser = self.rows.parser();
        let mut columns = self.rows.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(numbers)));
        let mut fields: Vec<Field> = self
            .input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(name, arrow::datatypes::DataType::UInt64, false));
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// A [`Self::numbered_rows`] batch read back (its live rows, which
    /// [`live_rows`] keeps): its numbers, and per row its partition key,
    /// order key and row, row-encoded.
    fn read_numbered(&self, batch: &RecordBatch) -> Result<(UInt64Array, Option<Rows>, Rows, Rows)> {
        let last = batch.num_columns() - 1;
        let numbers = batch
            .column(last)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| Error::internal("top-N snapshot: bad number column"))?
            .clone();
        let input = RecordBatch::try_new(self.input_schema.clone(), batch.columns()[..last].to_vec())?;
        let keys = match &self.partition {
            Some(c) => Some(c.convert_columns(&Self::columns(&input, &self.partition_columns))?),
            None => None,
        };
        let orders = self
            .order
            .convert_columns(&Self::columns(&input, &self.order_columns))?;
        let rows = self.rows.convert_columns(input.columns())?;
        Ok((numbers, keys, orders, rows))
    }

    /// Over a changelog: every held row of the partitions `keys` (all of
    /// them without) with its copies, as one batch, and how many rows each
    /// has.
    fn snapshot_held(&self, keys: Option<&[Box<[u8]>]>) -> Result<Option<(Vec<u32>, RecordBatch)>> {
        let partitions: Vec<&Held> = match keys {
            Some(keys) => keys.iter().map(|k| &self.held[k]).collect(),
            None => self.held.values().collect(),
        };
        let counts = partitions.iter().map(|h| h.rows.len() as u32).collect();
        let held: Vec<(&[u8], u64)> = partitions
            .into_iter()
            .flat_map(|h| h.rows.iter().map(|((_, row), n)| (row.as_ref(), *n)))
            .collect();
        let rows: Vec<&[u8]> = held.iter().map(|(r, _)| *r).collect();
        let batch = self.numbered_rows(&rows, COUNT_COLUMN, held.iter().map(|(_, n)| *n))?;
        Ok(batch.map(|b| (counts, b)))
    }

    /// The operator's snapshot for checkpoint `checkpoint`: without
    /// partition columns its rows whole, with them incremental (see the
    /// module doc).
    pub(crate) fn snapshot_state(&mut self, checkpoint: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        let key = if self.op_column.is_some() { HELD_KEY } else { ROWS_KEY };
        if self.partition.is_none() {
            let whole = if self.op_column.is_some() {
                self.snapshot_held(None)?
            } else {
                self.snapshot_batch(None)?
            };
            if let Some((_, batch)) = whole {
                state.put_batch(key, batch);
            }
            return Ok(state);
        }
        let inc = if self.op_column.is_some() {
            let mut changed = std::mem::take(&mut self.changed);
            let inc = changed.snapshot(
                checkpoint,
                self.stored_rows,
                self,
                |op| op.held.keys().cloned().collect(),
                |op, k| op.held.get_mut(k).map(|h| &mut h.written),
                |op, keys| {
                    let new = op.snapshot_held(Some(keys))?;
                    Ok(new.map(|(counts, batch)| (counts, batch.columns().to_vec())))
                },
            );
            self.changed = changed;
            inc?
        } else {
            self.write_lists(checkpoint)?
        };
        // The data columns, the number, then the liveness.
        let live_column = self.input_schema.fields().len() + 1;
        state.put_incremental(key, self.partition_columns.clone(), live_column, inc)?;
        Ok(state)
    }

    /// With partition columns, over an append-only input: a checkpoint's
    /// lists — those changed since the last one (their earlier rows
    /// dead), or every list at the first and after a compaction — in
    /// batches of [`SNAPSHOT_KEYS`] partitions, each list's place kept in
    /// its partition.
    fn write_lists(&mut self, checkpoint: u64) -> Result<crate::checkpoint::incremental::Increment> {
        let every = self.written.compact(self.stored_rows) || !self.tracking;
        self.tracking = true;
        let indices: Vec<usize> = if every {
            // Every place given before is void now; each is replaced below.
            self.dirty.clear();
            for p in self.partitions.values_mut() {
                p.dirty = false;
            }
            (0..self.partitions.len()).collect()
        } else {
            let dirty = std::mem::take(&mut self.dirty);
            for &index in &dirty {
                let p = &mut self.partitions[index];
                p.dirty = false;
                if let Some(place) = p.written.take() {
                    self.written.forget(place);
                }
            }
            dirty
        };
        let mut new = Vec::with_capacity(indices.len().div_ceil(SNAPSHOT_KEYS));
        let mut written = Vec::with_capacity(new.capacity());
        for chunk in indices.chunks(SNAPSHOT_KEYS) {
            if let Some((counts, batch)) = self.snapshot_batch(Some(chunk))? {
                let batch = crate::checkpoint::incremental::snapshot_rows(batch.columns().to_vec(), true)?;
                new.push((counts, batch));
                written.push(chunk);
            }
        }
        let (inc, places) = self.written.write(checkpoint, new);
        for (chunk, places) in written.into_iter().zip(places) {
            for (&index, place) in chunk.iter().zip(places) {
                self.partitions[index].written = Some(place);
            }
        }
        Ok(inc)
    }

    /// Over a changelog: holds [`Self::snapshot_held`]'s rows again.
    fn restore_held(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = &live_rows(batch, self.input_schema.fields().len() + 1, "top-N")?;
        let (counts, keys, orders, rows) = self.read_numbered(batch)?;
        self.now_ms = sluice_types::now_ms();
        for i in 0..batch.num_rows() {
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            for _ in 0..counts.value(i) {
                self.change_held(key, orders.row(i).data(), rows.row(i).data(), false)?;
            }
        }
        Ok(())
    }

    /// Rebuilds the lists from [`Self::snapshot_batch`]'s rows (maybe of
    /// several old instances: their partitions are disjoint), in arrival
    /// order.
    fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = live_rows(batch, self.input_schema.fields().len() + 1, "top-N")?;
        let by_seq = sort_to_indices(batch.column(batch.num_columns() - 1), None, None)?;
        let batch = take_record_batch(&batch, &by_seq)?;
        let (seqs, keys, orders, rows) = self.read_numbered(&batch)?;
        // Restored partitions count as just reached (`state_ttl`).
        self.now_ms = sluice_types::now_ms();
        let mut applied = self.start_batch();
        for i in 0..batch.num_rows() {
            let seq = seqs.value(i);
            self.next_seq = self.next_seq.max(seq + 1);
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            self.offer(key, orders.row(i).data(), rows.row(i).data(), seq, &mut applied)?;
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for TopNOperator {
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        self.snapshot_state(checkpoint_id)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        let Some((_, state)) = checkpoint else { return Ok(()) };
        let concat = |batches: Vec<RecordBatch>| -> Result<Option<RecordBatch>> {
            match batches.first() {
                Some(first) => Ok(Some(arrow::compute::concat_batches(&first.schema(), &batches)?)),
                None => Ok(None),
            }
        };
        if let Some(batch) = concat(state.rows(ROWS_KEY))? {
            self.restore_batch(&batch)?;
        }
        if let Some(batch) = concat(state.rows(HELD_KEY))? {
            self.restore_held(&batch)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.update(&batch)?;
        ctx.metrics.state_groups.store(self.held_count(), Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }

    fn timer_interval(&self) -> Option<std::time::Duration> {
        self.state_ttl_ms.map(crate::group_aggregate::ttl_sweep_interval)
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let changes = self.expire(sluice_types::now_ms())?;
        ctx.metrics.state_groups.store(self.held_count(), Ordering::Relaxed);
        crate::group_aggregate::emit_changes(changes, ctx).await
    }
}

#[cfg(test)]
mod tests;
