//! Tumbling and hopping windows: one group table per open pane, updated
//! incrementally; a window is emitted and dropped when the low watermark
//! reaches its end.
//!
//! A hopping window shares slices ("panes") with its neighbours, as Flink's
//! window TVFs do (a tumbling window is a window of one pane, its own): a
//! row is counted once, in the pane of `gcd(slide, size)`
//! that holds its time, and a window is the merge of its panes' partial
//! aggregates (DataFusion's `state`/`merge_batch`, as between the phases of
//! a parallel aggregate) when the watermark passes its end. A row in a
//! 10-s window every 2 s is aggregated once instead of five times, and the
//! panes hold a key once per pane instead of once per window. A pane goes
//! when the last window over it fires.
//!
//! A pane is read by draining its group table into arrays (a [`Part`]: its
//! keys and accumulator states) once, when the first window over it fires
//! or a checkpoint reads it; the windows after read the arrays, and a late
//! row for the pane starts a new table beside them, drained in turn. A
//! window of one pane takes its pane's live table when it fires and merges
//! the parts into it, so a tumbling window no checkpoint read fires its
//! table as it is.
//!
//! Checkpoints of panes are incremental
//! ([`crate::checkpoint::incremental`]): a part never changes once drained,
//! so a checkpoint drains the live tables, writes the parts drained since
//! the previous one in full and references the older ones in the
//! checkpoint that wrote them. A part is written once while it lives, not
//! once per window over it at every checkpoint. What has fired is not
//! stored: it is every window the task's low watermark (stored with every
//! snapshot, equal across a keyed operator's instances at a barrier) has
//! passed. A tumbling window is written as the rows' groups since the
//! previous checkpoint, not whole; a key with rows on both sides of a
//! checkpoint is held (and counted against the bound) once per part.

use super::assign::tumble_start;
use crate::aggregate::{AggregateInputs, CompiledAggregate, read_inputs};
use crate::checkpoint::incremental::{Held, Increment, snapshot_rows};
use crate::checkpoint::{LOW_WATERMARK_KEY, TaskState};
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::time::{timestamp_array, timestamps_ms};
use arrow::array::{Array, ArrayRef, Int64Array, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{cast, concat_batches, take, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use hashbrown::HashMap;
use sluice_plan::{WindowAggSpec, WindowKind};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The groups of one open window.
struct WindowGroups {
    /// Key → group: DataFusion's group table for the key columns' types (a
    /// single integer key is kept as the integers and a table of their
    /// group ids, not row-encoded and boxed per group). `None`: a window
    /// without keys, one group (0) whose rows skip the lookup.
    keys: Option<Box<dyn GroupValues>>,
    /// Its groups (in `keys` and the accumulators).
    len: usize,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

/// A drained group table: its groups' keys and accumulator states, a row
/// per group (a key at most once in a part drained from a table; one pane's
/// parts may repeat a key, and so may a pane's part restored from a
/// checkpoint: merging adds them up).
struct Part {
    len: usize,
    keys: Vec<ArrayRef>,
    states: Vec<ArrayRef>,
    /// The checkpoint that wrote it in full and its number there (`None`:
    /// not written since it was drained or restored).
    written: Option<(u64, u64)>,
}

impl Part {
    fn new(len: usize, keys: Vec<ArrayRef>, states: Vec<ArrayRef>) -> Self {
        Part {
            len,
            keys,
            states,
            written: None,
        }
    }
}

/// TUMBLE / HOP aggregate.
pub struct FixedWindowOperator {
    window: WindowKind,
    size_ms: i64,
    time_column: usize,
    time_type: DataType,
    key_columns: Vec<usize>,
    /// The key columns' fields (none without keys).
    key_schema: Option<SchemaRef>,
    aggregates: Vec<CompiledAggregate>,
    /// The panes' live tables by pane start.
    windows: BTreeMap<i64, WindowGroups>,
    /// The panes' length: `gcd(slide, size)` for HOP, the size for
    /// TUMBLE (and a HOP whose slide is its size: a window is one pane).
    /// Rows go to panes; a window is merged from its panes when it fires.
    pane_ms: i64,
    /// The panes' drained tables by pane start (a pane is its parts here
    /// and its live table in `windows`, either or both).
    frozen: BTreeMap<i64, Vec<Part>>,
    /// Windows restored from a checkpoint of the layout before panes (open
    /// windows, [`WINDOWS_KEY`]), by start; each is merged with the panes
    /// over it (rows since the restore) when it fires.
    restored: BTreeMap<i64, Part>,
    /// Every window up to this start has fired (windows fire in start
    /// order; after a watermark, every window it passed counts).
    fired_until: Option<i64>,
    /// Windows a batch's watermark found due before they were fired (a
    /// batch seen before its watermark's `fire`), emitted first.
    pending: Vec<RecordBatch>,
    /// Groups held: the windows' (or panes' and restored windows').
    groups: usize,
    /// The number the next part a checkpoint writes gets.
    next_part: u64,
    groups_max: usize,
    output_schema: SchemaRef,
}

impl FixedWindowOperator {
    pub fn new(spec: &WindowAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let (size_ms, pane_ms) = match spec.window {
            WindowKind::Tumble { size_ms } => (size_ms, size_ms),
            WindowKind::Hop { size_ms, .. } => (size_ms, spec.window.pane_ms().unwrap_or(size_ms)),
            WindowKind::Session { .. } => return Err(Error::internal("session window in fixed operator")),
        };
        let AggregateInputs {
            aggregates,
            key_columns,
            ..
        } = AggregateInputs::new(spec)?;
        let key_schema = (!key_columns.is_empty()).then(|| {
            let fields: Vec<Field> = key_columns
                .iter()
                .map(|c| spec.input_schema.field(*c).clone())
                .collect();
            Arc::new(Schema::new(fields))
        });
        Ok(FixedWindowOperator {
            window: spec.window,
            size_ms,
            time_column: spec.time_column,
            time_type: spec.input_schema.field(spec.time_column).data_type().clone(),
            key_columns,
            key_schema,
            aggregates,
            windows: BTreeMap::new(),
            pane_ms,
            frozen: BTreeMap::new(),
            restored: BTreeMap::new(),
            fired_until: None,
            pending: Vec::new(),
            groups: 0,
            next_part: 0,
            groups_max: spec.groups_max,
            output_schema,
        })
    }

    /// Rows of the batch per window start (in start order), skipping
    /// windows already fired. Returns the assignment and the number of
    /// late rows. A batch's rows fall in a few windows: a row in the
    /// window added last skips the lookup.
    fn assign(&self, times: &[Option<i64>], watermark: Watermark) -> (Vec<(i64, Vec<u32>)>, u64) {
        let mut per_window: Vec<(i64, Vec<u32>)> = Vec::new();
        let mut position: HashMap<i64, usize> = HashMap::new();
        let mut late = 0;
        for (row, ts) in times.iter().enumerate() {
            let Some(ts) = *ts else {
                late += 1;
                continue;
            };
            // Its pane, while the last window over the row is open (windows
            // before it that fired already miss it; with a slide above the
            // size, a row between windows is in none).
            let last = ts - ts.rem_euclid(self.slide_ms());
            if last + self.size_ms > ts && last + self.size_ms > watermark.0 {
                window_rows(&mut per_window, &mut position, tumble_start(ts, self.pane_ms)).push(row as u32);
            } else {
                late += 1;
            }
        }
        per_window.sort_unstable_by_key(|(start, _)| *start);
        (per_window, late)
    }

    fn new_window(&self) -> Result<WindowGroups> {
        let keys = match &self.key_schema {
            Some(schema) => Some(new_group_values(schema.clone(), &GroupOrdering::None).map_err(df_error)?),
            None => None,
        };
        Ok(WindowGroups {
            keys,
            len: 0,
            accumulators: self
                .aggregates
                .iter()
                .map(|a| a.groups_accumulator())
                .collect::<Result<_>>()?,
        })
    }

    /// Adds a batch's rows to their panes; returns the late rows.
    pub fn update(&mut self, batch: &RecordBatch, watermark: Watermark) -> Result<u64> {
        // A row goes to a pane, not to windows: the windows the watermark
        // has passed must have fired before it comes, or they would count
        // it (windows it passed miss a row).
        while let Some(due) = self.fire_one(watermark)? {
            self.pending.push(due);
        }
        let times = timestamps_ms(batch.column(self.time_column))?;
        let (per_window, late) = self.assign(&times, watermark);
        if per_window.is_empty() {
            return Ok(late);
        }
        let (_, arguments) = read_inputs(&None, &self.key_columns, &self.aggregates, batch)?;
        let key_arrays: Vec<ArrayRef> = self.key_columns.iter().map(|c| batch.column(*c).clone()).collect();
        for (start, rows) in per_window {
            if !self.windows.contains_key(&start) {
                let w = self.new_window()?;
                self.windows.insert(start, w);
            }
            let window = self.windows.get_mut(&start).expect("inserted above");
            let whole = rows.len() == batch.num_rows();
            let indices = UInt32Array::from(rows);
            let mut group_indices = Vec::with_capacity(indices.len());
            let before = window.len;
            match window.keys.as_mut() {
                None => {
                    // One group per window: no key to look up per row.
                    window.len = 1;
                    group_indices.resize(indices.len(), 0);
                }
                Some(keys) => {
                    let columns: Vec<ArrayRef> = if whole {
                        key_arrays.clone()
                    } else {
                        key_arrays
                            .iter()
                            .map(|a| take(a, &indices, None))
                            .collect::<Result<_, _>>()?
                    };
                    keys.intern(&columns, &mut group_indices).map_err(df_error)?;
                    window.len = keys.len();
                }
            }
            if self.groups + (window.len - before) > self.groups_max {
                // The batch's new groups go again (a table of its first
                // `before` replaces it), so the state stays what it was. A
                // fresh table: DataFusion's multi-column one keeps its hash
                // map through `emit(All)` (55.2), so interning into it again
                // would look up groups it no longer has.
                if let Some(keys) = window.keys.as_mut() {
                    let emitted = keys.emit(EmitTo::All).map_err(df_error)?;
                    let kept: Vec<ArrayRef> = emitted.iter().map(|a| a.slice(0, before)).collect();
                    let schema = self.key_schema.clone().expect("a keyed window has a key schema");
                    *keys = new_group_values(schema, &GroupOrdering::None).map_err(df_error)?;
                    keys.intern(&kept, &mut group_indices).map_err(df_error)?;
                    // Put back in their order but for colliding hashes: the
                    // accumulators follow the ids the keys got.
                    if group_indices.iter().enumerate().any(|(i, g)| i != *g) {
                        regroup(&mut window.accumulators, &self.aggregates, &group_indices, before)?;
                    }
                }
                window.len = before;
                if before == 0 {
                    self.windows.remove(&start);
                }
                return Err(groups_limit(self.groups_max));
            }
            self.groups += window.len - before;
            let total_groups = window.len;
            for (acc, args) in window.accumulators.iter_mut().zip(&arguments) {
                let values: Vec<ArrayRef> = if whole {
                    args.clone()
                } else {
                    args.iter().map(|a| take(a, &indices, None)).collect::<Result<_, _>>()?
                };
                acc.update_batch(&values, &group_indices, None, total_groups)
                    .map_err(df_error)?;
            }
        }
        Ok(late)
    }

    /// [`regroup`]s window `start`'s accumulators (tests).
    #[cfg(test)]
    pub(super) fn regroup_window(&mut self, start: i64, ids: &[usize]) -> Result<()> {
        let window = self.windows.get_mut(&start).expect("an open window");
        regroup(&mut window.accumulators, &self.aggregates, ids, window.len).map(|_| ())
    }

    /// Emits and drops every window whose end is at or below `watermark`.
    pub fn fire(&mut self, watermark: Watermark) -> Result<Vec<RecordBatch>> {
        let mut out = std::mem::take(&mut self.pending);
        while let Some(batch) = self.fire_one(watermark)? {
            out.push(batch);
        }
        Ok(out)
    }

    /// Emits and drops the first window whose end is at or below
    /// `watermark`, if any (one at a time, so a watermark that closes many
    /// windows — the end of a bounded input — holds one's rows at once):
    /// merged from its panes (and its restored part); then the panes no
    /// open window covers go. With none due, every window the watermark
    /// passed counts as fired.
    pub fn fire_one(&mut self, watermark: Watermark) -> Result<Option<RecordBatch>> {
        while let Some(start) = self.next_window() {
            if start.saturating_add(self.size_ms) > watermark.0 {
                break;
            }
            let window = self.merge_window(start)?;
            self.fired_until = Some(start);
            // Panes are frozen up to the window's end: the first frozen one
            // is the first pane.
            while let Some((&pane, _)) = self.frozen.first_key_value() {
                if self.last_window_over(pane) > start {
                    break;
                }
                let (_, parts) = self.frozen.pop_first().expect("checked non-empty");
                self.groups -= parts.iter().map(|p| p.len).sum::<usize>();
            }
            if window.len > 0 {
                return self.emit_window(start, window).map(Some);
            }
        }
        // Every window the watermark passed has fired now (or held
        // nothing): rows that come later miss them.
        if let Some(passed) = self.passed_by(watermark) {
            self.fired_until = Some(self.fired_until.map_or(passed, |f| f.max(passed)));
        }
        Ok(None)
    }

    /// The start of the last window `watermark` has passed (its end at or
    /// below it), if any.
    fn passed_by(&self, watermark: Watermark) -> Option<i64> {
        let slide = self.slide_ms();
        let passed = watermark.0.checked_sub(self.size_ms)?;
        Some(passed - passed.rem_euclid(slide))
    }

    /// The windows' slide (a tumbling window's is its size).
    fn slide_ms(&self) -> i64 {
        match self.window {
            WindowKind::Hop { slide_ms, .. } => slide_ms,
            _ => self.size_ms,
        }
    }

    /// The start of the last window over the pane starting at `pane`.
    fn last_window_over(&self, pane: i64) -> i64 {
        pane - pane.rem_euclid(self.slide_ms())
    }

    /// The first window not fired yet that holds anything.
    fn next_window(&self) -> Option<i64> {
        let slide = self.slide_ms();
        let pane_ms = self.pane_ms;
        let first_pane = match (self.windows.keys().next(), self.frozen.keys().next()) {
            (Some(&a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b).copied(),
        };
        let from_panes = first_pane.map(|pane| {
            // The first window over the pane: the first start ≥ its end - size.
            let first = pane + pane_ms - self.size_ms;
            let first = first + (slide - first.rem_euclid(slide)) % slide;
            match self.fired_until {
                Some(fired) => first.max(fired + slide),
                None => first,
            }
        });
        let restored = self.restored.keys().next().copied();
        match (from_panes, restored) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Window `start`'s groups, to fire: its restored part (taken) and the
    /// panes in it, merged into a fresh group table. The panes' live tables
    /// are drained into parts first (they stay with the panes) — but a
    /// window of one pane (TUMBLE) takes its pane's live table and merges
    /// the parts into it: without checkpoints, a tumbling window fires its
    /// table as it is.
    fn merge_window(&mut self, start: i64) -> Result<WindowGroups> {
        let end = start.saturating_add(self.size_ms);
        let live = if self.pane_ms == self.size_ms {
            self.windows.remove(&start).inspect(|t| self.groups -= t.len)
        } else {
            self.freeze(start..end)?;
            None
        };
        let mut merged = match live {
            Some(table) => table,
            None => self.new_window()?,
        };
        let restored = self.restored.remove(&start).inspect(|p| self.groups -= p.len);
        let panes = self.frozen.range(start..end).flat_map(|(_, parts)| parts);
        for part in restored.iter().chain(panes) {
            let mut ids = Vec::with_capacity(part.len);
            match merged.keys.as_mut() {
                Some(table) => {
                    table.intern(&part.keys, &mut ids).map_err(df_error)?;
                    merged.len = table.len();
                }
                None => {
                    ids.resize(part.len, 0);
                    merged.len = 1;
                }
            }
            let mut col = 0;
            for (acc, agg) in merged.accumulators.iter_mut().zip(&self.aggregates) {
                let width = agg.expr.state_fields().map_err(df_error)?.len();
                acc.merge_batch(&part.states[col..col + width], &ids, merged.len)
                    .map_err(df_error)?;
                col += width;
            }
        }
        Ok(merged)
    }

    /// Drains the live tables of the panes starting in `range` into parts
    /// (the table goes; a row that comes later for the pane starts another).
    fn freeze(&mut self, range: std::ops::Range<i64>) -> Result<()> {
        let starts: Vec<i64> = self.windows.range(range).map(|(&s, _)| s).collect();
        for pane in starts {
            let table = self.windows.remove(&pane).expect("listed");
            if let Some(part) = drain(table)? {
                self.frozen.entry(pane).or_default().push(part);
            }
        }
        Ok(())
    }

    fn emit_window(&self, start: i64, mut window: WindowGroups) -> Result<RecordBatch> {
        let n = window.len;
        let mut columns = vec![
            timestamp_array(&vec![start; n], &self.time_type)?,
            timestamp_array(&vec![start + self.size_ms; n], &self.time_type)?,
        ];
        if let Some(keys) = window.keys.as_mut() {
            columns.extend(keys.emit(EmitTo::All).map_err(df_error)?);
        }
        for mut acc in window.accumulators {
            columns.push(acc.evaluate(EmitTo::All).map_err(df_error)?);
        }
        finish_batch(&self.output_schema, columns)
    }
}

/// A table's groups as a [`Part`] (the table goes); `None` when it has no
/// group.
fn drain(mut table: WindowGroups) -> Result<Option<Part>> {
    if table.len == 0 {
        return Ok(None);
    }
    let keys = match table.keys.as_mut() {
        Some(keys) => keys.emit(EmitTo::All).map_err(df_error)?,
        None => Vec::new(),
    };
    let mut states = Vec::new();
    for acc in table.accumulators.iter_mut() {
        states.extend(acc.state(EmitTo::All).map_err(df_error)?);
    }
    Ok(Some(Part::new(table.len, keys, states)))
}

/// Rebuilds `accumulators` (of `n` groups) with group `i` as `ids[i]`;
/// returns their states as they were (in the old group order).
fn regroup(
    accumulators: &mut [Box<dyn GroupsAccumulator>],
    aggregates: &[CompiledAggregate],
    ids: &[usize],
    n: usize,
) -> Result<Vec<ArrayRef>> {
    let mut states = Vec::new();
    for (acc, agg) in accumulators.iter_mut().zip(aggregates) {
        let state = acc.state(EmitTo::All).map_err(df_error)?;
        let mut fresh = agg.groups_accumulator()?;
        fresh.merge_batch(&state, ids, n).map_err(df_error)?;
        *acc = fresh;
        states.extend(state);
    }
    Ok(states)
}

fn groups_limit(groups_max: usize) -> Error {
    Error::user(
        SqlCode::ConfigurationLimitExceeded,
        format!("window state limit reached: {groups_max} open groups"),
    )
}

/// The rows of window `start` in `per_window` (added when new). Rows in
/// time order mostly fall in the window added last, checked first;
/// `position` finds the others.
fn window_rows<'a>(
    per_window: &'a mut Vec<(i64, Vec<u32>)>,
    position: &mut HashMap<i64, usize>,
    start: i64,
) -> &'a mut Vec<u32> {
    let at = match per_window.last() {
        Some((last, _)) if *last == start => per_window.len() - 1,
        _ => *position.entry(start).or_insert_with(|| {
            per_window.push((start, Vec::new()));
            per_window.len() - 1
        }),
    };
    &mut per_window[at].1
}

/// Builds an output batch, casting columns whose types differ from the schema.
pub(crate) fn finish_batch(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c)
            } else {
                cast(&c, f.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Snapshot layout of open windows, as checkpoints before panes wrote them
/// (every window of a TUMBLE, or of a HOP with panes, merged from them);
/// written now for the windows restored from such a checkpoint and not
/// fired yet: one batch, a row per (window, group):
/// `window_start Int64, key columns…, accumulator state columns…`; keyed
/// by the key columns (stored per key group) when the window has keys.
pub(crate) const WINDOWS_KEY: &str = "windows";

/// Snapshot layout of panes: a row per group of each part,
/// `pane_start Int64, key columns…, accumulator state columns…, live
/// Boolean` (always true: the incremental format's liveness column, see
/// [`crate::checkpoint::incremental`]); keyed by the key columns and
/// written incrementally, a batch per part; without keys, one batch of
/// every part, whole.
pub(crate) const PANES_KEY: &str = "panes";

/// One part's groups as snapshot rows: `start` (a window's or a pane's),
/// the keys (as `key_schema` types), the states and, with `live`, an
/// all-true liveness column.
fn part_batch(start: i64, part: &Part, key_schema: Option<&SchemaRef>, live: bool) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![start; part.len]))];
    for (i, k) in part.keys.iter().enumerate() {
        let want = key_schema.map(|s| s.field(i).data_type());
        columns.push(match want {
            Some(t) if t != k.data_type() => cast(k, t)?,
            _ => k.clone(),
        });
    }
    columns.extend(part.states.iter().cloned());
    snapshot_rows(columns, live)
}

/// Snapshot rows by their start (column 0, a window's or a pane's).
fn rows_by_start(batch: &RecordBatch) -> Result<BTreeMap<i64, Vec<u32>>> {
    let starts = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| Error::internal("window snapshot: bad start column"))?;
    let mut out: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    for row in 0..batch.num_rows() {
        out.entry(starts.value(row)).or_default().push(row as u32);
    }
    Ok(out)
}

/// The rows of entry `key` of a restored state as one batch (none when
/// absent).
fn entry_rows(state: &TaskState, key: &str) -> Result<Option<RecordBatch>> {
    let batches = state.rows(key);
    match batches.first() {
        Some(first) => Ok(Some(concat_batches(&first.schema(), &batches)?)),
        None => Ok(None),
    }
}

impl FixedWindowOperator {
    /// The restored windows not fired yet as one batch ([`WINDOWS_KEY`]).
    pub(crate) fn snapshot_batch(&self) -> Result<Option<RecordBatch>> {
        let mut batches = Vec::new();
        for (start, part) in &self.restored {
            batches.push(part_batch(*start, part, self.key_schema.as_ref(), false)?);
        }
        if batches.is_empty() {
            return Ok(None);
        }
        Ok(Some(concat_batches(&batches[0].schema(), &batches)?))
    }

    /// Every pane's parts into `state` under [`PANES_KEY`],
    /// the live tables drained first. Keyed, a part written by an earlier
    /// checkpoint is a reference to it, and the others are written in full
    /// and remembered as written by `checkpoint`.
    fn snapshot_panes(&mut self, checkpoint: u64, state: &mut TaskState) -> Result<()> {
        self.freeze(i64::MIN..i64::MAX)?;
        let keyed = !self.key_columns.is_empty();
        let mut inc = Increment::default();
        let mut live_column = None;
        for (&pane, parts) in self.frozen.iter_mut() {
            for part in parts.iter_mut() {
                live_column = Some(1 + part.keys.len() + part.states.len());
                if let (true, Some((written_in, number))) = (keyed, part.written) {
                    inc.held.push(Held {
                        checkpoint: written_in,
                        number,
                        live: BooleanBuffer::new_set(part.len),
                    });
                    continue;
                }
                let number = self.next_part;
                self.next_part += 1;
                inc.new
                    .push((number, part_batch(pane, part, self.key_schema.as_ref(), true)?));
                if keyed {
                    part.written = Some((checkpoint, number));
                }
            }
        }
        let Some(live_column) = live_column else {
            return Ok(());
        };
        if keyed {
            let key_columns = (1..=self.key_columns.len()).collect();
            return state.put_incremental(PANES_KEY, key_columns, live_column, inc);
        }
        let batches: Vec<RecordBatch> = inc.new.into_iter().map(|(_, b)| b).collect();
        state.put_batch(PANES_KEY, concat_batches(&batches[0].schema(), &batches)?);
        Ok(())
    }

    /// The operator's snapshot for checkpoint `checkpoint`.
    pub(crate) fn snapshot_state(&mut self, checkpoint: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if let Some(batch) = self.snapshot_batch()? {
            state.put_rows(WINDOWS_KEY, batch, (1..=self.key_columns.len()).collect());
        }
        self.snapshot_panes(checkpoint, &mut state)?;
        Ok(state)
    }

    /// Restores [`Self::snapshot_state`]'s state (references resolved;
    /// after a rescale, rows of several old instances, whose keys are
    /// disjoint). The windows the stored low watermark passed have fired.
    pub(crate) fn restore_state(&mut self, state: &TaskState) -> Result<()> {
        if let Some(batch) = entry_rows(state, WINDOWS_KEY)? {
            self.restore_batch(&batch)?;
        }
        let pane_ms = self.pane_ms;
        if let Some(bytes) = state.bytes(LOW_WATERMARK_KEY) {
            let low = i64::from_le_bytes(
                bytes
                    .try_into()
                    .map_err(|_| Error::internal("window snapshot: bad stored watermark"))?,
            );
            self.fired_until = self.passed_by(Watermark(low));
        }
        let Some(batch) = entry_rows(state, PANES_KEY)? else {
            return Ok(());
        };
        let n_keys = self.key_columns.len();
        let live = batch.num_columns() - 1;
        if live <= n_keys {
            return Err(Error::internal("window snapshot: too few pane columns"));
        }
        for (pane, rows) in rows_by_start(&batch)? {
            if pane.rem_euclid(pane_ms) != 0 {
                return Err(Error::internal(format!(
                    "window snapshot: pane start {pane} is not on this window's panes of {pane_ms} ms"
                )));
            }
            let part = take_record_batch(&batch, &UInt32Array::from(rows))?;
            let keys = self.restored_keys(&part)?;
            let n = part.num_rows();
            self.groups += n;
            let states = part.columns()[1 + n_keys..live].to_vec();
            self.frozen.entry(pane).or_default().push(Part::new(n, keys, states));
        }
        Ok(())
    }

    /// The key columns of snapshot rows (after the start), as the keys' types.
    fn restored_keys(&self, part: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let n_keys = self.key_columns.len();
        Ok(part.columns()[1..1 + n_keys]
            .iter()
            .zip(self.key_schema.iter().flat_map(|s| s.fields().iter()))
            .map(|(c, f)| cast(c, f.data_type()))
            .collect::<Result<_, _>>()?)
    }

    /// Restores [`Self::snapshot_batch`]'s batch (or a checkpoint's open
    /// windows from before panes): each window kept as read, merged with
    /// its panes when it fires.
    pub(crate) fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let n_keys = self.key_columns.len();
        for (start, rows) in rows_by_start(batch)? {
            let part = take_record_batch(batch, &UInt32Array::from(rows))?;
            let n = part.num_rows();
            let keys = self.restored_keys(&part)?;
            self.groups += n;
            let states = part.columns()[1 + n_keys..].to_vec();
            self.restored.insert(start, Part::new(n, keys, states));
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for FixedWindowOperator {
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        self.snapshot_state(checkpoint_id)
    }

    /// The restored rows may come from several old instances (a rescale):
    /// their keys are disjoint, so they are one set of open windows.
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        match checkpoint {
            Some((_, state)) => self.restore_state(&state),
            None => Ok(()),
        }
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let late = self.update(&batch, ctx.watermark)?;
        for due in std::mem::take(&mut self.pending) {
            ctx.emit(due).await?;
        }
        ctx.metrics.late_rows_dropped.fetch_add(late, Ordering::Relaxed);
        ctx.metrics.state_groups.store(self.groups as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        for batch in std::mem::take(&mut self.pending) {
            ctx.emit(batch).await?;
        }
        while let Some(batch) = self.fire_one(watermark)? {
            ctx.emit(batch).await?;
        }
        ctx.metrics.state_groups.store(self.groups as u64, Ordering::Relaxed);
        ctx.emit_watermark(watermark).await
    }
}
