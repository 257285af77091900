//! Session windows: per key, a session is `[first row, last row + gap)`;
//! a row within the gap of one or more sessions merges them. A session is
//! emitted when the low watermark reaches its end.

use super::fixed::finish_batch;
use crate::aggregate::{AggregateInputs, CompiledAggregate, read_inputs};
use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::time::{timestamp_array, timestamps_ms};
use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter};
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
    output_schema: SchemaRef,
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
            output_schema,
        })
    }

    fn new_session(&self, ts: i64) -> Result<Session> {
        Ok(Session {
            start: ts,
            end: ts + self.gap_ms,
            accumulators: self.aggregates.iter().map(|a| a.accumulator()).collect::<Result<_>>()?,
        })
    }

    pub(crate) fn update(&mut self, batch: &RecordBatch, watermark: Watermark) -> Result<u64> {
        let times = timestamps_ms(batch.column(self.time_column))?;
        let (key_rows, arguments) = read_inputs(&self.converter, &self.key_columns, &self.aggregates, batch)?;
        let mut late = 0;
        for (row, ts) in times.iter().enumerate() {
            let Some(ts) = *ts else {
                late += 1;
                continue;
            };
            if ts + self.gap_ms <= watermark.0 {
                late += 1;
                continue;
            }
            let key: &[u8] = key_rows.as_ref().map_or(&[], |k| k.row(row).data());
            let session = self.session_for(key, ts, key_rows.as_ref().map(|k| k.row(row).owned()))?;
            for (acc, args) in session.accumulators.iter_mut().zip(&arguments) {
                let values: Vec<ArrayRef> = args.iter().map(|a| a.slice(row, 1)).collect();
                acc.update_batch(&values).map_err(df_error)?;
            }
        }
        Ok(late)
    }

    /// The session that a row at `ts` joins, merging the sessions it bridges.
    fn session_for(&mut self, key: &[u8], ts: i64, owned: Option<OwnedRow>) -> Result<&mut Session> {
        if !self.keys.contains_key(key) {
            self.keys.insert(
                key.into(),
                KeySessions {
                    key: owned,
                    sessions: Vec::new(),
                },
            );
        }
        let (lo, hi) = (ts, ts + self.gap_ms);
        let entry = self.keys.get_mut(key).expect("inserted above");
        let (mut touching, rest): (Vec<Session>, Vec<Session>) = std::mem::take(&mut entry.sessions)
            .into_iter()
            .partition(|s| s.start <= hi && lo <= s.end);
        entry.sessions = rest;
        let merged = if touching.is_empty() {
            if self.sessions >= self.sessions_max {
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!("window state limit reached: {} open sessions", self.sessions_max),
                ));
            }
            self.sessions += 1;
            self.new_session(ts)?
        } else {
            self.sessions -= touching.len() - 1;
            let mut first = touching.remove(0);
            for other in touching {
                merge_into(&mut first, other)?;
            }
            first.start = first.start.min(lo);
            first.end = first.end.max(hi);
            first
        };
        let entry = self.keys.get_mut(key).expect("inserted above");
        entry.sessions.push(merged);
        Ok(entry.sessions.last_mut().expect("just pushed"))
    }

    /// Emits every session whose end is at or below `watermark`.
    pub(crate) fn fire(&mut self, watermark: Watermark) -> Result<Vec<RecordBatch>> {
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut keys = Vec::new();
        let mut values: Vec<Vec<ScalarValue>> = vec![Vec::new(); self.aggregates.len()];
        self.keys.retain(|_, entry| {
            let (done, open): (Vec<Session>, Vec<Session>) = std::mem::take(&mut entry.sessions)
                .into_iter()
                .partition(|s| s.end <= watermark.0);
            entry.sessions = open;
            for mut s in done {
                starts.push(s.start);
                ends.push(s.end);
                keys.push(entry.key.clone());
                for (i, acc) in s.accumulators.iter_mut().enumerate() {
                    values[i].push(acc.evaluate().unwrap_or(ScalarValue::Null));
                }
            }
            !entry.sessions.is_empty()
        });
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
        let (mut starts, mut ends, mut keys) = (Vec::new(), Vec::new(), Vec::new());
        let mut states: Vec<Vec<ArrayRef>> = Vec::new();
        let fresh: Vec<_> = self.aggregates.iter().collect();
        for entry in self.keys.values_mut() {
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
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// Rebuilds the open sessions from [`Self::snapshot_batch`]'s batch.
    pub(crate) fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let bad = || Error::internal("session snapshot: bad start/end columns");
        let starts = batch.column(0).as_any().downcast_ref::<Int64Array>().ok_or_else(bad)?;
        let ends = batch.column(1).as_any().downcast_ref::<Int64Array>().ok_or_else(bad)?;
        let n_keys = self.key_columns.len();
        let keys = match &self.converter {
            Some(c) => Some(c.convert_columns(&batch.columns()[2..2 + n_keys])?),
            None => None,
        };
        let mut widths = Vec::new();
        for agg in &self.aggregates {
            widths.push(agg.expr.state_fields().map_err(df_error)?.len());
        }
        for row in 0..batch.num_rows() {
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
            let entry = self.keys.entry(key_bytes).or_insert_with(|| KeySessions {
                key: key_row.map(|r| r.owned()),
                sessions: Vec::new(),
            });
            entry.sessions.push(Session {
                start: starts.value(row),
                end: ends.value(row),
                accumulators,
            });
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
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if let Some(batch) = self.snapshot_batch()? {
            match self.key_columns.len() {
                0 => state.put_batch(SESSIONS_KEY, batch),
                n => state.put_keyed(SESSIONS_KEY, vec![batch], (2..2 + n).collect()),
            }
        }
        Ok(state)
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
