//! OVER aggregates (`count/sum/avg/min/max(x) OVER (PARTITION BY p ORDER
//! BY ts ROWS BETWEEN n PRECEDING AND CURRENT ROW)`, or `RANGE BETWEEN
//! INTERVAL … PRECEDING AND CURRENT ROW`) over an append-only input, in
//! event-time order, as Flink's event-time OVER aggregates.
//!
//! A row waits (row-encoded, with its time and its aggregates' arguments)
//! until the low watermark passes its time: then no row of an earlier time
//! can still come, and the rows of its partition released by that
//! watermark are taken in time order (arrival order among equal times).
//! Each joins its partition's frame, the frame drops what falls out of it
//! (all but the last `n + 1` rows, or rows more than the range before),
//! and the row goes out with the aggregates over the frame. In a RANGE
//! frame the rows of one time are peers: all join the frame before any goes
//! out, so they share their aggregates (SQL's CURRENT ROW with peers).
//! Rows behind the watermark when they arrive are late: dropped, counted.
//! The output is append-only and keeps the input's event time. Over a
//! changelog the operator is [`OverChangelogOperator`].
//!
//! The aggregates are computed over the frame for each released row (a
//! frame of `n + 1` rows: O(n) a row). `rows_max` bounds the rows one
//! instance holds, waiting or in frames; past it the pipeline fails.

use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::time::timestamps_ms;
use crate::window::fixed::finish_batch;
use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use arrow::compute::{sort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use hashbrown::HashMap;
use sluice_plan::{OverAggSpec, OverFrame};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot layout: every held row (the input's columns), its arrival
/// number and whether it still waits for the watermark, keyed by the
/// partition columns.
const ROWS_KEY: &str = "rows";
/// An unbounded frame's running values: per partition its key columns,
/// then per aggregate its count and running value; keyed by the key
/// columns.
const RUNNING_KEY: &str = "running";

/// A row held: waiting for the watermark, or in a frame.
struct Held {
    time: i64,
    seq: u64,
    row: Box<[u8]>,
    args: Vec<ScalarValue>,
}

#[derive(Default)]
struct Partition {
    waiting: Vec<Held>,
    frame: VecDeque<Held>,
    /// An unbounded frame's running aggregates (one per aggregate; empty
    /// until the partition's first row is released).
    running: Vec<Running>,
    /// When a row last reached it (processing time, ms: `state_ttl`).
    touched_ms: i64,
}

/// The converter of a spec's partition keys (none without PARTITION BY).
fn partition_converter(spec: &OverAggSpec) -> Result<Option<RowConverter>> {
    if spec.partition_columns.is_empty() {
        return Ok(None);
    }
    let fields = spec
        .partition_columns
        .iter()
        .map(|c| SortField::new(spec.input_schema.field(*c).data_type().clone()))
        .collect();
    Ok(Some(RowConverter::new(fields)?))
}

/// Each row's partition key, row-encoded (none without PARTITION BY).
fn partition_keys(
    converter: Option<&RowConverter>,
    spec: &OverAggSpec,
    batch: &RecordBatch,
) -> Result<Option<arrow::row::Rows>> {
    let Some(c) = converter else { return Ok(None) };
    let columns: Vec<ArrayRef> = spec
        .partition_columns
        .iter()
        .map(|c| batch.column(*c).clone())
        .collect();
    Ok(Some(c.convert_columns(&columns)?))
}

/// Row `i`'s aggregate arguments (`count(*)`'s: `true`).
fn row_args(spec: &OverAggSpec, batch: &RecordBatch, i: usize) -> Result<Vec<ScalarValue>> {
    spec.aggregates
        .iter()
        .map(|a| match a.arg {
            Some(c) => ScalarValue::try_from_array(batch.column(c), i),
            None => Ok(ScalarValue::Boolean(Some(true))),
        })
        .collect::<datafusion::common::Result<Vec<_>>>()
        .map_err(df_error)
}

/// A numeric argument of the fast paths.
enum Number {
    Int(i64),
    Float(f64),
}

/// One aggregate's running value over an unbounded frame: the non-NULL
/// arguments counted, and their sum (in the result's type; Float64 for
/// `avg`), least or greatest.
#[derive(Clone, Default)]
struct Running {
    count: i64,
    acc: Option<ScalarValue>,
}

impl Running {
    fn add(&mut self, function: &str, out: &DataType, value: &ScalarValue) -> Result<()> {
        // Integers (and, for avg, floats) add without ScalarValue casts and
        // arithmetic, whose array kernels cost far more than the addition;
        // in the same type and order, so to the same value.
        if function == "avg" || (function == "sum" && *out == DataType::Int64) {
            let arg = if function == "avg" {
                float_arg(value).map(|x| x.map(Number::Float))
            } else {
                int_arg(value).map(|x| x.map(Number::Int))
            };
            let next = match (arg, &self.acc) {
                (None, _) => None,
                (Some(None), _) => return Ok(()),
                (Some(Some(Number::Float(x))), None) => Some(Ok(ScalarValue::Float64(Some(x)))),
                (Some(Some(Number::Float(x))), Some(ScalarValue::Float64(Some(a)))) => {
                    Some(Ok(ScalarValue::Float64(Some(a + x))))
                }
                (Some(Some(Number::Int(x))), None) => Some(Ok(ScalarValue::Int64(Some(x)))),
                (Some(Some(Number::Int(x))), Some(ScalarValue::Int64(Some(a)))) => Some({
                    a.checked_add(x).map(|t| ScalarValue::Int64(Some(t))).ok_or_else(|| {
                        Error::user(
                            SqlCode::DataException,
                            format!("OVER sum overflowed: Int64 overflow adding {a} and {x}"),
                        )
                    })
                }),
                _ => None,
            };
            if let Some(next) = next {
                self.acc = Some(next?);
                self.count += 1;
                return Ok(());
            }
        }
        if value.is_null() {
            return Ok(());
        }
        self.count += 1;
        let next = match (function, self.acc.take()) {
            ("count", _) => None,
            ("sum", acc) | ("avg", acc) => {
                let ty = if function == "avg" { &DataType::Float64 } else { out };
                let v = value.cast_to(ty).map_err(df_error)?;
                Some(match acc {
                    None => v,
                    Some(a) => a.add_checked(&v).map_err(|e| {
                        Error::user(
                            SqlCode::DataException,
                            format!("OVER {function} overflowed: {}", e.strip_backtrace()),
                        )
                    })?,
                })
            }
            (_, None) => Some(value.clone()),
            (f, Some(a)) => {
                let ord = value
                    .partial_cmp(&a)
                    .ok_or_else(|| Error::internal("OVER min/max of unlike values"))?;
                let better = if f == "min" { ord.is_lt() } else { ord.is_gt() };
                Some(if better { value.clone() } else { a })
            }
        };
        self.acc = next;
        Ok(())
    }

    fn value(&self, function: &str, out: &DataType) -> Result<ScalarValue> {
        let value = match function {
            "count" => ScalarValue::Int64(Some(self.count)),
            "avg" => match &self.acc {
                Some(ScalarValue::Float64(Some(total))) if self.count > 0 => {
                    ScalarValue::Float64(Some(total / self.count as f64))
                }
                _ => ScalarValue::Null,
            },
            _ => self.acc.clone().unwrap_or(ScalarValue::Null),
        };
        in_type(value, out)
    }
}

/// The operator.
pub struct OverAggregateOperator {
    spec: OverAggSpec,
    partition: Option<RowConverter>,
    rows: RowConverter,
    partitions: HashMap<Box<[u8]>, Partition>,
    held: usize,
    next_seq: u64,
    output_schema: SchemaRef,
}

impl OverAggregateOperator {
    pub fn new(spec: &OverAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let field = |c: usize| SortField::new(spec.input_schema.field(c).data_type().clone());
        let partition = partition_converter(spec)?;
        let rows = RowConverter::new((0..spec.input_schema.fields().len()).map(field).collect())?;
        for a in &spec.aggregates {
            if !matches!(a.function.as_str(), "count" | "sum" | "avg" | "min" | "max") {
                return Err(Error::internal(format!("OVER aggregate {}", a.function)));
            }
        }
        Ok(OverAggregateOperator {
            spec: spec.clone(),
            partition,
            rows,
            partitions: HashMap::new(),
            held: 0,
            next_seq: 0,
            output_schema,
        })
    }

    /// Rows held (waiting or in frames).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Holds the rows of `batch` at or after `low` (the rest are late:
    /// returns how many); `seqs` gives their arrival numbers (restore) or
    /// they get the next ones; `waiting` says which wait for the watermark
    /// (restore) — all, for new rows.
    fn hold(
        &mut self,
        batch: &RecordBatch,
        low: i64,
        seqs: Option<&UInt64Array>,
        waiting: Option<&[bool]>,
    ) -> Result<usize> {
        let times = timestamps_ms(batch.column(self.spec.time_column))?;
        let keys = partition_keys(self.partition.as_ref(), &self.spec, batch)?;
        let rows = self.rows.convert_columns(batch.columns())?;
        let now_ms = sluice_types::now_ms();
        let mut late = 0;
        for i in 0..batch.num_rows() {
            let time = times[i].unwrap_or(i64::MIN);
            let is_waiting = waiting.is_none_or(|w| w[i]);
            if is_waiting && time < low {
                late += 1;
                continue;
            }
            if self.held >= self.spec.rows_max {
                return Err(Error::user(
                    SqlCode::ConfigurationLimitExceeded,
                    format!(
                        "OVER aggregate state limit reached: {} rows held in one instance (waiting for the \
                         watermark or in frames); use a shorter frame or more parallelism",
                        self.spec.rows_max
                    ),
                ));
            }
            let args = row_args(&self.spec, batch, i)?;
            let seq = match seqs {
                Some(s) => s.value(i),
                None => self.next_seq,
            };
            self.next_seq = self.next_seq.max(seq + 1);
            let held = Held {
                time,
                seq,
                row: rows.row(i).data().into(),
                args,
            };
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            // (A key is boxed only for a new partition.)
            if !self.partitions.contains_key(key) {
                self.partitions.insert(key.into(), Partition::default());
            }
            let partition = self.partitions.get_mut(key).expect("inserted above");
            partition.touched_ms = now_ms;
            if is_waiting {
                partition.waiting.push(held);
            } else {
                partition.frame.push_back(held);
            }
            self.held += 1;
        }
        Ok(late)
    }

    /// Releases every waiting row older than `watermark`, in time order per
    /// partition: the output rows with their aggregates, as one batch.
    pub fn release(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        let mut out_rows: Vec<Box<[u8]>> = Vec::new();
        let mut out_aggs: Vec<Vec<ScalarValue>> = vec![Vec::new(); self.spec.aggregates.len()];
        let frame = self.spec.frame;
        let functions: Vec<&str> = self.spec.aggregates.iter().map(|a| a.function.as_str()).collect();
        let types: Vec<DataType> = (0..functions.len())
            .map(|a| {
                self.output_schema
                    .field(self.spec.output_columns + a)
                    .data_type()
                    .clone()
            })
            .collect();
        let mut emptied = Vec::new();
        for (key, p) in self.partitions.iter_mut() {
            if p.waiting.iter().any(|h| h.time < watermark) {
                let (mut due, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(&mut p.waiting)
                    .into_iter()
                    .partition(|h| h.time < watermark);
                p.waiting = waiting;
                due.sort_by_key(|h| (h.time, h.seq));
                let mut due = due.into_iter().peekable();
                while let Some(first) = due.next() {
                    // A ROWS frame takes rows one by one; a RANGE frame the
                    // peers (rows of one time) together.
                    let mut group = vec![first];
                    if matches!(frame, OverFrame::Range { .. } | OverFrame::Unbounded { peers: true }) {
                        while due.peek().is_some_and(|h| h.time == group[0].time) {
                            group.push(due.next().expect("peeked"));
                        }
                    }
                    let time = group[0].time;
                    let rows: Vec<Box<[u8]>> = group.iter().map(|h| h.row.clone()).collect();
                    if let OverFrame::Unbounded { .. } = frame {
                        // Running values: the rows themselves go.
                        if p.running.is_empty() {
                            p.running = vec![Running::default(); functions.len()];
                            self.held += 1;
                        }
                        for h in &group {
                            for (a, function) in functions.iter().enumerate() {
                                p.running[a].add(function, &types[a], &h.args[a])?;
                            }
                        }
                        self.held -= group.len();
                        for (a, function) in functions.iter().enumerate() {
                            let value = p.running[a].value(function, &types[a])?;
                            out_aggs[a].extend(std::iter::repeat_n(value, rows.len()));
                        }
                        out_rows.extend(rows);
                        continue;
                    }
                    p.frame.extend(group);
                    match frame {
                        OverFrame::Rows { preceding } => {
                            while p.frame.len() as u64 > preceding.saturating_add(1) {
                                p.frame.pop_front();
                                self.held -= 1;
                            }
                        }
                        OverFrame::Range { preceding_ms } => {
                            while p
                                .frame
                                .front()
                                .is_some_and(|h| h.time < time.saturating_sub(preceding_ms))
                            {
                                p.frame.pop_front();
                                self.held -= 1;
                            }
                        }
                        OverFrame::Unbounded { .. } => unreachable!("handled above"),
                    }
                    for (a, function) in functions.iter().enumerate() {
                        let value = aggregate(function, &types[a], p.frame.iter().map(|h| &h.args[a]))?;
                        out_aggs[a].extend(std::iter::repeat_n(value, rows.len()));
                    }
                    out_rows.extend(rows);
                }
            }
            // A RANGE frame's rows older than any row still to come are
            // no longer needed.
            if let OverFrame::Range { preceding_ms } = frame {
                while p
                    .frame
                    .front()
                    .is_some_and(|h| h.time < watermark.saturating_sub(preceding_ms))
                {
                    p.frame.pop_front();
                    self.held -= 1;
                }
            }
            if p.waiting.is_empty() && p.frame.is_empty() && p.running.is_empty() {
                emptied.push(key.clone());
            }
        }
        for key in emptied {
            self.partitions.remove(&key);
        }
        if out_rows.is_empty() {
            return Ok(None);
        }
        let parser = self.rows.parser();
        let input = self.rows.convert_rows(out_rows.iter().map(|r| parser.parse(r)))?;
        let mut columns: Vec<ArrayRef> = input.into_iter().take(self.spec.output_columns).collect();
        for values in out_aggs {
            columns.push(ScalarValue::iter_to_array(values).map_err(df_error)?);
        }
        finish_batch(&self.output_schema, columns).map(Some)
    }

    /// `state_ttl`: forgets every partition no row reached since `now_ms`
    /// minus the TTL and in which none waits; returns how many.
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let Some(ttl) = self.spec.state_ttl_ms else {
            return 0;
        };
        let cutoff = now_ms.saturating_sub(ttl);
        let before = self.partitions.len();
        let mut freed = 0;
        self.partitions.retain(|_, p| {
            let idle = p.waiting.is_empty() && p.touched_ms < cutoff;
            if idle {
                freed += p.frame.len() + usize::from(!p.running.is_empty());
            }
            !idle
        });
        self.held -= freed;
        before - self.partitions.len()
    }

    /// Every held row, its arrival number and whether it waits, as one batch.
    fn snapshot_batch(&self) -> Result<Option<RecordBatch>> {
        let held: Vec<(&Held, bool)> = self
            .partitions
            .values()
            .flat_map(|p| {
                p.frame
                    .iter()
                    .map(|h| (h, false))
                    .chain(p.waiting.iter().map(|h| (h, true)))
            })
            .collect();
        if held.is_empty() {
            return Ok(None);
        }
        let parser = self.rows.parser();
        let mut columns = self.rows.convert_rows(held.iter().map(|(h, _)| parser.parse(&h.row)))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(held.iter().map(|(h, _)| h.seq))));
        columns.push(Arc::new(BooleanArray::from_iter(held.iter().map(|(_, w)| Some(*w)))));
        let mut fields: Vec<Field> = self
            .spec
            .input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new("__seq", DataType::UInt64, false));
        fields.push(Field::new("__waiting", DataType::Boolean, false));
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// The type a running value is kept in: Float64 for `avg`, else the
    /// result's.
    fn running_type(&self, a: usize) -> DataType {
        if self.spec.aggregates[a].function == "avg" {
            DataType::Float64
        } else {
            self.output_schema
                .field(self.spec.output_columns + a)
                .data_type()
                .clone()
        }
    }

    /// Every partition's running values, as one batch (see [`RUNNING_KEY`]).
    fn running_batch(&self) -> Result<Option<RecordBatch>> {
        let parts: Vec<(&Box<[u8]>, &Partition)> =
            self.partitions.iter().filter(|(_, p)| !p.running.is_empty()).collect();
        if parts.is_empty() {
            return Ok(None);
        }
        let mut fields = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        if let Some(c) = &self.partition {
            let parser = c.parser();
            columns = c.convert_rows(parts.iter().map(|(k, _)| parser.parse(k)))?;
            for (j, col) in self.spec.partition_columns.iter().enumerate() {
                let f = self.spec.input_schema.field(*col);
                fields.push(Field::new(format!("__key{j}"), f.data_type().clone(), true));
            }
        }
        for a in 0..self.spec.aggregates.len() {
            let ty = self.running_type(a);
            columns.push(Arc::new(arrow::array::Int64Array::from_iter_values(
                parts.iter().map(|(_, p)| p.running[a].count),
            )));
            let accs = parts
                .iter()
                .map(|(_, p)| p.running[a].acc.clone().unwrap_or(ScalarValue::Null).cast_to(&ty))
                .collect::<datafusion::common::Result<Vec<_>>>()
                .map_err(df_error)?;
            columns.push(ScalarValue::iter_to_array(accs).map_err(df_error)?);
            fields.push(Field::new(format!("__count{a}"), DataType::Int64, false));
            fields.push(Field::new(format!("__acc{a}"), ty, true));
        }
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// Takes the running values of [`Self::running_batch`] again.
    fn restore_running(&mut self, batch: &RecordBatch) -> Result<()> {
        let k = self.spec.partition_columns.len();
        let bad = || Error::internal("OVER aggregate snapshot: bad running values");
        if batch.num_columns() != k + 2 * self.spec.aggregates.len() {
            return Err(bad());
        }
        let keys = match &self.partition {
            Some(c) => Some(c.convert_columns(&batch.columns()[..k])?),
            None => None,
        };
        for r in 0..batch.num_rows() {
            let mut running = Vec::with_capacity(self.spec.aggregates.len());
            for a in 0..self.spec.aggregates.len() {
                let count = batch
                    .column(k + 2 * a)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .ok_or_else(bad)?
                    .value(r);
                let acc = ScalarValue::try_from_array(batch.column(k + 2 * a + 1), r).map_err(df_error)?;
                running.push(Running {
                    count,
                    acc: (!acc.is_null()).then_some(acc),
                });
            }
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(r).data());
            let partition = self.partitions.entry(Box::<[u8]>::from(key)).or_default();
            partition.running = running;
            // Restored partitions count as just reached (`state_ttl`).
            partition.touched_ms = sluice_types::now_ms();
            self.held += 1;
        }
        Ok(())
    }

    /// Holds [`Self::snapshot_batch`]'s rows again (maybe of several old
    /// instances: their partitions are disjoint).
    fn restore_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = batch.num_columns();
        let bad = || Error::internal("OVER aggregate snapshot: bad columns");
        if n < 2 {
            return Err(bad());
        }
        let by_seq = sort_to_indices(batch.column(n - 2), None, None)?;
        let batch = take_record_batch(batch, &by_seq)?;
        let seqs = batch
            .column(n - 2)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(bad)?
            .clone();
        let waiting: Vec<bool> = batch
            .column(n - 1)
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(bad)?
            .iter()
            .map(|w| w.unwrap_or(true))
            .collect();
        let input = batch.project(&(0..n - 2).collect::<Vec<_>>())?;
        let input = RecordBatch::try_new(self.spec.input_schema.clone(), input.columns().to_vec())?;
        self.hold(&input, i64::MIN, Some(&seqs), Some(&waiting))?;
        // A frame is in the order its rows were released: by time, then
        // arrival.
        for p in self.partitions.values_mut() {
            p.frame.make_contiguous().sort_by_key(|h| (h.time, h.seq));
        }
        Ok(())
    }
}

/// An integer argument as an `i64` (`Some(None)`: NULL), or `None` when
/// the argument is of another type (the unsigned 64-bit one too: it may
/// not fit). Cheaper than `ScalarValue::is_null`, a match over every type.
fn int_arg(v: &ScalarValue) -> Option<Option<i64>> {
    Some(match *v {
        ScalarValue::Int64(x) => x,
        ScalarValue::Int32(x) => x.map(i64::from),
        ScalarValue::Int16(x) => x.map(i64::from),
        ScalarValue::Int8(x) => x.map(i64::from),
        ScalarValue::UInt32(x) => x.map(i64::from),
        ScalarValue::UInt16(x) => x.map(i64::from),
        ScalarValue::UInt8(x) => x.map(i64::from),
        _ => return None,
    })
}

/// An integer or float argument as an `f64`, as a cast to Float64 gives
/// it (`Some(None)`: NULL), or `None` for another type.
fn float_arg(v: &ScalarValue) -> Option<Option<f64>> {
    match *v {
        ScalarValue::Float64(x) => Some(x),
        ScalarValue::Float32(x) => Some(x.map(f64::from)),
        ScalarValue::UInt64(x) => Some(x.map(|x| x as f64)),
        _ => int_arg(v).map(|x| x.map(|x| x as f64)),
    }
}

/// `value` as type `out`: itself when it has that type (no cast kernel).
fn in_type(value: ScalarValue, out: &DataType) -> Result<ScalarValue> {
    if value.data_type() == *out {
        return Ok(value);
    }
    value.cast_to(out).map_err(df_error)
}

/// `sum`, `avg`, `min` or `max` of integer (or, for `avg`, float)
/// arguments without going through `ScalarValue` arithmetic or casts,
/// whose array kernels cost far more than the addition: `None` when an
/// argument is of another type (the general path then runs). `sum` adds in
/// `i64` with the same overflow error; `avg` adds the values as `f64` in
/// the frame's order, as the general path does.
fn aggregate_numbers<'a>(
    function: &str,
    out: &DataType,
    values: impl Iterator<Item = &'a ScalarValue> + Clone,
) -> Option<Result<ScalarValue>> {
    let value = match function {
        "sum" if *out == DataType::Int64 => {
            let mut total: Option<i64> = None;
            for v in values {
                let Some(x) = int_arg(v)? else { continue };
                total = Some(match total {
                    None => x,
                    Some(t) => match t.checked_add(x) {
                        Some(t) => t,
                        None => {
                            return Some(Err(Error::user(
                                SqlCode::DataException,
                                format!("OVER sum overflowed: Int64 overflow adding {t} and {x}"),
                            )));
                        }
                    },
                });
            }
            ScalarValue::Int64(total)
        }
        "avg" => {
            let (mut count, mut total) = (0i64, 0f64);
            for v in values {
                let Some(x) = float_arg(v)? else { continue };
                total += x;
                count += 1;
            }
            ScalarValue::Float64((count > 0).then(|| total / count as f64))
        }
        "min" | "max" => {
            let mut best: Option<i64> = None;
            for v in values {
                let Some(x) = int_arg(v)? else { continue };
                best = Some(match best {
                    None => x,
                    Some(b) if function == "min" => b.min(x),
                    Some(b) => b.max(x),
                });
            }
            match best {
                Some(b) => ScalarValue::Int64(Some(b)),
                None => ScalarValue::Null,
            }
        }
        _ => return None,
    };
    Some(in_type(value, out))
}

/// `function` over the frame's arguments (NULLs skipped; `count(*)`'s
/// argument is never NULL).
/// The result has type `out` (a NULL too).
fn aggregate<'a>(
    function: &str,
    out: &DataType,
    values: impl Iterator<Item = &'a ScalarValue> + Clone,
) -> Result<ScalarValue> {
    match aggregate_numbers(function, out, values.clone()) {
        Some(value) => value,
        None => aggregate_scalars(function, out, values),
    }
}

/// [`aggregate`] in `ScalarValue` arithmetic, for any argument type.
fn aggregate_scalars<'a>(
    function: &str,
    out: &DataType,
    values: impl Iterator<Item = &'a ScalarValue>,
) -> Result<ScalarValue> {
    let values = values.filter(|v| !v.is_null());
    let value = match function {
        "count" => ScalarValue::Int64(Some(values.count() as i64)),
        // Summed in the result's type (an INT column's sum is a BIGINT).
        "sum" => {
            let cast: Vec<ScalarValue> = values
                .map(|v| v.cast_to(out))
                .collect::<datafusion::common::Result<_>>()
                .map_err(df_error)?;
            sum(cast.iter())?.unwrap_or(ScalarValue::Null)
        }
        "avg" => {
            let mut count = 0i64;
            let mut total = 0f64;
            for v in values {
                let v = v.cast_to(&DataType::Float64).map_err(df_error)?;
                if let ScalarValue::Float64(Some(x)) = v {
                    total += x;
                    count += 1;
                }
            }
            ScalarValue::Float64((count > 0).then(|| total / count as f64))
        }
        "min" | "max" => {
            let mut best: Option<&ScalarValue> = None;
            for v in values {
                let better = match best {
                    None => true,
                    Some(b) => {
                        let ord = v
                            .partial_cmp(b)
                            .ok_or_else(|| Error::internal("OVER min/max of unlike values"))?;
                        if function == "min" { ord.is_lt() } else { ord.is_gt() }
                    }
                };
                if better {
                    best = Some(v);
                }
            }
            best.cloned().unwrap_or(ScalarValue::Null)
        }
        other => return Err(Error::internal(format!("OVER aggregate {other}"))),
    };
    in_type(value, out)
}

fn sum<'a>(mut values: impl Iterator<Item = &'a ScalarValue>) -> Result<Option<ScalarValue>> {
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let mut total = first.clone();
    for v in values {
        total = total.add_checked(v).map_err(|e| {
            Error::user(
                SqlCode::DataException,
                format!("OVER sum overflowed: {}", e.strip_backtrace()),
            )
        })?;
    }
    Ok(Some(total))
}

#[async_trait]
impl Operator for OverAggregateOperator {
    async fn process_batch(&mut self, batch: RecordBatch, _input: usize, ctx: &mut OperatorContext<'_>) -> Result<()> {
        let late = self.hold(&batch, ctx.watermark.0, None, None)?;
        ctx.metrics.late_rows_dropped.fetch_add(late as u64, Ordering::Relaxed);
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: Watermark, ctx: &mut OperatorContext<'_>) -> Result<()> {
        if let Some(out) = self.release(watermark.0)? {
            ctx.emit(out).await?;
        }
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        ctx.emit_watermark(watermark).await
    }

    fn timer_interval(&self) -> Option<std::time::Duration> {
        self.spec.state_ttl_ms.map(crate::group_aggregate::ttl_sweep_interval)
    }

    async fn process_timer(&mut self, ctx: &mut OperatorContext<'_>) -> Result<()> {
        self.expire(sluice_types::now_ms());
        ctx.metrics.state_groups.store(self.held as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<TaskState> {
        let mut state = TaskState::default();
        if let Some(batch) = self.snapshot_batch()? {
            state.put_rows(ROWS_KEY, batch, self.spec.partition_columns.clone());
        }
        if let Some(batch) = self.running_batch()? {
            let keys = (0..self.spec.partition_columns.len()).collect();
            state.put_rows(RUNNING_KEY, batch, keys);
        }
        Ok(state)
    }

    async fn restore(&mut self, checkpoint: Option<(u64, TaskState)>) -> Result<()> {
        if let Some(batch) = TaskState::restored_rows(checkpoint.clone(), RUNNING_KEY)? {
            self.restore_running(&batch)?;
        }
        if let Some(batch) = TaskState::restored_rows(checkpoint, ROWS_KEY)? {
            self.restore_batch(&batch)?;
        }
        Ok(())
    }
}

mod changelog;
pub use changelog::OverChangelogOperator;

#[cfg(test)]
mod tests;
