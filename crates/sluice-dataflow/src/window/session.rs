//! Session windows: per key, a session is `[first row, last row + gap)`;
//! a row within the gap of one or more sessions merges them. A session is
//! emitted when the low watermark reaches its end.
//!
//! With keys, checkpoints are incremental
//! ([`crate::checkpoint::ledger::ChangedKeys`]): a checkpoint writes the
//! open sessions of the keys whose sessions changed since the previous one
//! (rows came, sessions merged or fired), and references the rows earlier
//! checkpoints wrote of the others; a key keeps where its sessions were
//! written.

use super::fixed::finish_batch;
use crate::aggregate::{AggregateInputs, CompiledAggregate, read_inputs};
use crate::checkpoint::TaskState;
use crate::checkpoint::incremental::snapshot_rows;
use crate::checkpoint::ledger::{ChangedKeys, Place};
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::time::{timestamp_array, timestamps_ms};
use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, UInt32Array};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter, Rows};
use async_trait::async_trait;
use datafusion::logical_expr::Accumulator;
use datafusion::scalar::ScalarValue;
use sluice_plan::WindowAggSpec;
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

struct Session {
    start: i64,
    /// Exclusive: last row's time + gap.
    end: i64,
    accumulators: Vec<Box<dyn Accumulator>>,
}

struct KeySessions {
    key: Option<OwnedRow>,
    sessions: Vec<Session>,
    /// Where a checkpoint wrote its sessions (while they are its own).
    written: Option<Place>,
}

/// SESSION aggregate.
pub struct SessionWindowOperator {
    gap_ms: i64,
    time_column: usize,
    time_type: DataType,
    key_columns: Vec<usize>,
    converter: Option<RowConverter>,
    aggregates: Vec<CompiledAggregate>,
    keys: HashMap<Box<[u8]>, KeySessions>,
    sessions: usize,
    sessions_max: usize,
    /// At most the earliest end of an open session (`i64::MAX`: none): a
    /// watermark below it fires nothing, and no key is visited.
    min_end: i64,
    output_schema: SchemaRef,
    /// With keys: the keys whose sessions changed since a checkpoint last
    /// wrote them (kept once a first checkpoint was written: with
    /// checkpoints off the marks held every key ever seen), and what
    /// checkpoints wrote.
    changed: ChangedKeys,
}

/// One key's rows of a batch, and what [`SessionWindowOperator::update_key`] reads with them.
struct KeyRun<'a> {
    /// Row indices, in arrival order.
    rows: &'a [u32],
    times: &'a [Option<i64>],
    /// Each aggregate's argument columns.
    arguments: &'a [Vec<ArrayRef>],
    watermark: Watermark,
}

/// Applies the rows in `pending` to the session `current` (one
/// accumulator call per aggregate over the rows taken together).
fn flush(
    entry: &mut KeySessions,
    current: &mut Option<usize>,
    pending: &mut Vec<u32>,
    arguments: &[Vec<ArrayRef>],
) -> Result<()> {
    let Some(index) = current.take() else {
        return Ok(());
    };
    if pending.is_empty() {
        return Ok(());
    }
    let contiguous = pending.last().copied() == Some(pending[0] + pending.len() as u32 - 1);
    let indices = (!contiguous).then(|| UInt32Array::from(std::mem::take(pending)));
    let session = &mut entry.sessions[index];
    for (acc, args) in session.accumulators.iter_mut().zip(arguments) {
        let values: Vec<ArrayRef> = match &indices {
            None => args
                .iter()
                .map(|a| a.slice(pending[0] as usize, pending.len()))
                .collect(),
            Some(indices) => args
                .iter()
                .map(|a| arrow::compute::take(a.as_ref(), indices, None))
                .collect::<Result<_, _>>()?,
        };
        acc.update_batch(&values).map_err(df_error)?;
    }
    pending.clear();
    Ok(())
}

impl SessionWindowOperator {
    pub fn new(spec: &WindowAggSpec, gap_ms: i64, output_schema: SchemaRef) -> Result<Self> {
        let AggregateInputs {
            converter,
            aggregates,
            key_columns,
        } = AggregateInputs::new(spec)?;
        Ok(SessionWindowOperator {
            gap_ms,
            time_column: spec.time_column,
            time_type: spec.input_schema.field(spec.time_column).data_type().clone(),
            key_columns,
            converter,
            aggregates,
            keys: HashMap::new(),
            sessions: 0,
            sessions_max: spec.groups_max,
            min_end: i64::MAX,
            output_schema,
            changed: ChangedKeys::default(),
        })
    }

    /// Applies a batch's rows. Rows are taken key by key (in arrival order
    /// within a key, which alone decides a key's sessions), and each run of
    /// a key's rows that lands in one session updates its accumulators in
    /// one call over the rows taken together: Nexmark's hot bidders put
    /// most of a batch in a few sessions, and an accumulator call per row
    /// cost more than everything else the operator did.
    pub(crate) fn update(&mut self, batch: &RecordBatch, watermark: Watermark) -> Result<u64> {
        let times = timestamps_ms(batch.column(self.time_column))?;
        let (key_rows, arguments) = read_inputs(&self.converter, &self.key_columns, &self.aggregates, batch)?;
        let mut order: Vec<u32> = (0..batch.num_rows() as u32).collect();
        if let Some(keys) = &key_rows {
            // Stable: a key's rows stay in arrival order.
            order.sort_by(|a, b| keys.row(*a as usize).cmp(&keys.row(*b as usize)));
        }
        let mut late = 0;
        let mut i = 0;
        while i < order.len() {
            let j = match &key_rows {
                Some(keys) => {
                    let key = keys.row(order[i] as usize);
                    i + order[i..].iter().take_while(|r| keys.row(**r as usize) == key).count()
                }
                None => order.len(),
            };
            let run = KeyRun {
                rows: &order[i..j],
                times: &times,
                arguments: &arguments,
                watermark,
            };
            late += self.update_key(key_rows.as_ref(), run)?;
            i = j;
        }
        Ok(late)
    }

    /// One key's rows of a batch; the late ones counted, not applied.
    fn update_key(&mut self, key_rows: Option<&Rows>, run: KeyRun<'_>) -> Result<u64> {
        let key: &[u8] = key_rows.map_or(&[], |k| k.row(run.rows[0] as usize).data());
        // Changed, or it may be (a refused row leaves the ones before it
        // applied): the next checkpoint writes it.
        if key_rows.is_some() {
            self.changed.mark(key);
        }
        if !self.keys.contains_key(key) {
            let owned = key_rows.map(|k| k.row(run.rows[0] as usize).owned());
            self.keys.insert(
                key.into(),
                KeySessions {
                    key: owned,
                    sessions: Vec::new(),
                    written: None,
                },
            );
        }
        let entry = self.keys.get_mut(key).expect("inserted above");
        let mut late = 0;
        // The session the rows in `pending` joined (an index into
        // entry.sessions), applied before the sessions change shape.
        let mut current: Option<usize> = None;
        let mut pending: Vec<u32> = Vec::new();
        for &row in run.rows {
            let ts = match run.times[row as usize] {
                Some(ts) if ts + self.gap_ms > run.watermark.0 => ts,
                _ => {
                    late += 1;
                    continue;
                }
            };
            let (lo, hi) = (ts, ts + self.gap_ms);
            let touches = |s: &Session| s.start <= hi && lo <= s.end;
            let first = entry.sessions.iter().position(touches);
            let more = first.is_some_and(|f| entry.sessions[f + 1..].iter().any(touches));
            let target = match first {
                Some(f) if !more => f,
                Some(f) => {
                    // The row bridges sessions: they merge into the first.
                    flush(entry, &mut current, &mut pending, run.arguments)?;
                    let mut k = entry.sessions.len();
                    while k > f + 1 {
                        k -= 1;
                        if touches(&entry.sessions[k]) {
                            let other = entry.sessions.remove(k);
                            merge_into(&mut entry.sessions[f], other)?;
                            self.sessions -= 1;
                        }
                    }
                    f
                }
                None => {
                    if self.sessions >= self.sessions_max {
                        return Err(Error::user(
                            SqlCode::ConfigurationLimitExceeded,
                            format!("window state limit reached: {} open sessions", self.sessions_max),
                        ));
                    }
                    flush(entry, &mut current, &mut pending, run.arguments)?;
                    self.sessions += 1;
                    entry.sessions.push(Session {
                        start: ts,
                        end: hi,
                        accumulators: self.aggregates.iter().map(|a| a.accumulator()).collect::<Result<_>>()?,
                    });
                    entry.sessions.len() - 1
                }
            };
            if current != Some(target) {
                flush(entry, &mut current, &mut pending, run.arguments)?;
                current = Some(target);
            }
            let session = &mut entry.sessions[target];
            session.start = session.start.min(lo);
            session.end = session.end.max(hi);
            // Ends only grow: the bound stays a lower bound.
            self.min_end = self.min_end.min(session.end);
            pending.push(row);
        }
        flush(entry, &mut current, &mut pending, run.arguments)?;
        if entry.sessions.is_empty() {
            // Every row was late: no key without sessions is kept.
            let written = entry.written;
            self.keys.remove(key);
            self.changed.forget(written);
        }
        Ok(late)
    }

    /// Emits every session whose end is at or below `watermark`.
    pub(crate) fn fire(&mut self, watermark: Watermark) -> Result<Vec<RecordBatch>> {
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut keys = Vec::new();
        let mut values: Vec<Vec<ScalarValue>> = vec![Vec::new(); self.aggregates.len()];
        if watermark.0 < self.min_end {
            // No session ends this early: nothing to scan.
            return Ok(Vec::new());
        }
        let mut min_end = i64::MAX;
        let changed = &mut self.changed;
        self.keys.retain(|key, entry| {
            let before = starts.len();
            for mut s in entry.sessions.extract_if(.., |s| s.end <= watermark.0) {
                starts.push(s.start);
                ends.push(s.end);
                keys.push(entry.key.clone());
                for (i, acc) in s.accumulators.iter_mut().enumerate() {
                    values[i].push(acc.evaluate().unwrap_or(ScalarValue::Null));
                }
            }
            min_end = entry.sessions.iter().map(|s| s.end).fold(min_end, i64::min);
            if entry.sessions.is_empty() {
                changed.forget(entry.written);
                return false;
            }
            if starts.len() > before {
                changed.mark(key);
            }
            true
        });
        self.min_end = min_end;
        if starts.is_empty() {
            return Ok(Vec::new());
        }
        self.sessions -= starts.len();
        let mut columns = vec![
            timestamp_array(&starts, &self.time_type)?,
            timestamp_array(&ends, &self.time_type)?,
        ];
        if let Some(c) = &self.converter {
            columns.extend(c.convert_rows(keys.iter().map(|k| k.as_ref().expect("keyed").row()))?);
        }
        for (i, column) in values.into_iter().enumerate() {
            let data_type = self.output_schema.field(columns.len()).data_type().clone();
            let _ = i;
            let column = column.into_iter().map(|v| {
                if v.is_null() {
                    ScalarValue::try_from(&data_type).unwrap_or(v)
                } else {
                    v
                }
            });
            columns.push(ScalarValue::iter_to_array(column).map_err(df_error)?);
        }
        finish_batch(&self.output_schema, columns).map(|b| vec![b])
    }
}

/// Snapshot layout: one batch, a row per open session:
/// `start Int64, end Int64, key columns…, accumulator state columns…`;
/// keyed by the key columns (stored per key group) when the window has keys.
pub(crate) const SESSIONS_KEY: &str = "sessions";

/// An accumulator's state as one-row arrays (what `merge_batch` takes).
fn state_arrays(acc: &mut Box<dyn Accumulator>) -> Result<Vec<ArrayRef>> {
    acc.state()
        .map_err(df_error)?
        .into_iter()
        .map(|v| v.to_array())
        .collect::<Result<_, _>>()
        .map_err(df_error)
}

impl SessionWindowOperator {
    /// Every open session as one batch (accumulators are drained into
    /// their state and rebuilt from it, so they keep going).
    pub(crate) fn snapshot_batch(&mut self) -> Result<Option<RecordBatch>> {
        let all: Vec<Box<[u8]>> = self.keys.keys().cloned().collect();
        Ok(self.snapshot_rows(&all, false)?.map(|(_, batch)| batch))
    }

    /// The open sessions of `of` (keys held) as one batch, a key's
    /// together, with an all-true `live` column when `liveness`; and each
    /// key's number of sessions.
    fn snapshot_rows(&mut self, of: &[Box<[u8]>], liveness: bool) -> Result<Option<(Vec<u32>, RecordBatch)>> {
        let (mut starts, mut ends, mut keys) = (Vec::new(), Vec::new(), Vec::new());
        let mut states: Vec<Vec<ArrayRef>> = Vec::new();
        let mut counts = Vec::with_capacity(of.len());
        let fresh: Vec<_> = self.aggregates.iter().collect();
        for key in of {
            let entry = self.keys.get_mut(key).expect("a held key");
            counts.push(entry.sessions.len() as u32);
            for session in &mut entry.sessions {
                starts.push(session.start);
                ends.push(session.end);
                keys.push(entry.key.clone());
                let mut row: Vec<ArrayRef> = Vec::new();
                for (acc, agg) in session.accumulators.iter_mut().zip(&fresh) {
                    let state = state_arrays(acc)?;
                    let mut rebuilt = agg.accumulator()?;
                    rebuilt.merge_batch(&state).map_err(df_error)?;
                    *acc = rebuilt;
                    row.extend(state);
                }
                states.push(row);
            }
        }
        if starts.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(starts)), Arc::new(Int64Array::from(ends))];
        if let Some(c) = &self.converter {
            columns.extend(c.convert_rows(keys.iter().map(|k| k.as_ref().expect("keyed").row()))?);
        }
        for i in 0..states[0].len() {
            let parts: Vec<&dyn Array> = states.iter().map(|r| r[i].as_ref()).collect();
            columns.push(arrow::compute::concat(&parts)?);
        }
        Ok(Some((counts, snapshot_rows(columns, liveness)?)))
    }

    /// The operator's snapshot for checkpoint `checkpoint`: without keys,
    /// its sessions whole; with keys, incremental (see the module doc).
    pub(crate) fn snapshot_state(&mut self, checkpoint: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        let n = self.key_columns.len();
        if n == 0 {
            if let Some(batch) = self.snapshot_batch()? {
                state.put_batch(SESSIONS_KEY, batch);
            }
            return Ok(state);
        }
        let mut changed = std::mem::take(&mut self.changed);
        let inc = changed.snapshot(
            checkpoint,
            self.sessions,
            self,
            |op| op.keys.keys().cloned().collect(),
            |op, key| op.keys.get_mut(key).map(|k| &mut k.written),
            |op, keys| {
                let new = op.snapshot_rows(keys, false)?;
                Ok(new.map(|(counts, batch)| (counts, batch.columns().to_vec())))
            },
        );
        self.changed = changed;
        let inc = inc?;
        // The starts, ends, keys and states, then the liveness.
        let live_column = 2 + n + self.state_widths()?.iter().sum::<usize>();
        state.put_incremental(SESSIONS_KEY, (2..2 + n).collect(), live_column, inc)?;
        Ok(state)
    }

    /// The keys held and the changed keys marked (tests).
    #[cfg(test)]
    pub(crate) fn keys_and_marks(&self) -> (usize, usize) {
        (self.keys.len(), self.changed.pending())
    }

    /// Each aggregate's number of state columns.
    fn state_widths(&self) -> Result<Vec<usize>> {
        self.aggregates
            .iter()
            .map(|agg| Ok(agg.expr.state_fields().map_err(df_error)?.len()))
            .collect()
    }

    /// Rebuilds the open sessions from [`Self::snapshot_batch`]'s batch
    /// (the rows its `live` column, when it has one, says live). The keys
    /// restored are written whole by the next checkpoint.
    pub(crate) fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let bad = || Error::internal("session snapshot: bad start/end columns");
        let starts = batch.column(0).as_any().downcast_ref::<Int64Array>().ok_or_else(bad)?;
        let ends = batch.column(1).as_any().downcast_ref::<Int64Array>().ok_or_else(bad)?;
        let n_keys = self.key_columns.len();
        let keys = match &self.converter {
            Some(c) => Some(c.convert_columns(&batch.columns()[2..2 + n_keys])?),
            None => None,
        };
        let widths = self.state_widths()?;
        let width = 2 + n_keys + widths.iter().sum::<usize>();
        let live = match batch.num_columns() {
            n if n == width => None,
            n if n == width + 1 => Some(
                batch
                    .column(width)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::internal("session snapshot: bad liveness column"))?
                    .clone(),
            ),
            n => {
                return Err(Error::internal(format!(
                    "session snapshot: {n} columns, {width} expected"
                )));
            }
        };
        for row in 0..batch.num_rows() {
            if live.as_ref().is_some_and(|l| !l.value(row)) {
                continue;
            }
            let mut accumulators = Vec::new();
            let mut col = 2 + n_keys;
            for (agg, width) in self.aggregates.iter().zip(&widths) {
                let mut acc = agg.accumulator()?;
                let state: Vec<ArrayRef> = batch.columns()[col..col + width]
                    .iter()
                    .map(|c| c.slice(row, 1))
                    .collect();
                acc.merge_batch(&state).map_err(df_error)?;
                accumulators.push(acc);
                col += width;
            }
            let key_row = keys.as_ref().map(|k| k.row(row));
            let key_bytes: Box<[u8]> = key_row.map_or(Box::from(&[][..]), |r| r.data().into());
            if n_keys > 0 {
                self.changed.mark(&key_bytes);
            }
            let entry = self.keys.entry(key_bytes).or_insert_with(|| KeySessions {
                key: key_row.map(|r| r.owned()),
                sessions: Vec::new(),
                written: None,
            });
            entry.sessions.push(Session {
                start: starts.value(row),
                end: ends.value(row),
                accumulators,
            });
            self.min_end = self.min_end.min(ends.value(row));
            self.sessions += 1;
        }
        Ok(())
    }
}

fn merge_into(target: &mut Session, other: Session) -> Result<()> {
    target.start = target.start.min(other.start);
    target.end = target.end.max(other.end);
    for (t, mut o) in target.accumulators.iter_mut().zip(other.accumulators) {
        let state: Vec<ArrayRef> = o
            .state()
            .map_err(df_error)?
            .into_iter()
            .map(|v| v.to_array())
            .collect::<Result<_, _>>()
            .map_err(df_error)?;
        t.merge_batch(&state).map_err(df_error)?;
    }
    Ok(())
}

#[async_trait]
impl Operator for SessionWindowOperator {
    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskState> {
        self.snapshot_state(checkpoint_id)
    }

    /// The restored rows may come from several old instances (a rescale).
    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        for batch in checkpoint.map(|(_, s)| s.rows(SESSIONS_KEY)).unwrap_or_default() {
            self.restore_batch(&batch)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let late = self.update(&batch, ctx.watermark)?;
        ctx.metrics.late_rows_dropped.fetch_add(late, Ordering::Relaxed);
        ctx.metrics.state_groups.store(self.sessions as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        for batch in self.fire(watermark)? {
            ctx.emit(batch).await?;
        }
        ctx.metrics.state_groups.store(self.sessions as u64, Ordering::Relaxed);
        ctx.emit_watermark(watermark).await
    }
}
