//! OVER aggregates (`count/sum/avg/min/max(x) OVER (PARTITION BY p ORDER
//! BY ts ROWS BETWEEN n PRECEDING AND CURRENT ROW)`, or `RANGE BETWEEN
//! INTERVAL … PRECEDING AND CURRENT ROW`) over an append-only input, in
//! event-time order, as Flink's event-time OVER aggregates.
//!
//! A row waits (in its input batch, which is kept until its last waiting
//! row goes) until the low watermark passes its time: then no row of an earlier time
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
//! A frame keeps of its rows only their times and what each aggregate needs
//! of their arguments ([`frame`]): `count`, integer `sum`/`avg`/`min`/`max`
//! cost O(1) a row (running sums, a monotone deque), float sums O(frame),
//! in frame order; the released rows go out gathered from their batches
//! (no per-row encoding). An unbounded frame keeps only running values.
//! `rows_max` bounds the rows one instance holds, waiting or in frames;
//! past it the pipeline fails.

use crate::checkpoint::TaskState;
use crate::operator::{Operator, OperatorContext};
use crate::project::df_error;
use crate::time::timestamps_ms;
use crate::window::fixed::finish_batch;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array, UInt64Array};
use arrow::compute::{interleave, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use frame::{Agg, ArgKind, Builder, Column, Frame, Function, Value};
use hashbrown::{HashMap, HashSet};
use sluice_plan::{OverAggSpec, OverFrame};
use sluice_types::{Error, Result, SqlCode, Watermark};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Snapshot layout: every row waiting for the watermark (the input's
/// columns), its arrival number and `true` (older snapshots also held the
/// frames' rows here, with `false`; they are still read), keyed by the
/// partition columns.
const ROWS_KEY: &str = "rows";
/// A bounded frame's rows: per row its partition's key columns, its time
/// (ms), its arrival number and per aggregate the argument the frame keeps
/// ([`Builder::snapshot`]); keyed by the key columns.
const FRAMES_KEY: &str = "frames";
/// An unbounded frame's running values: per partition its key columns,
/// then per aggregate its count and running value; keyed by the key
/// columns.
const RUNNING_KEY: &str = "running";

/// Rows of kept input batches beyond 4 times the rows waiting after which
/// the batches at least half released are cut down to their waiting rows.
const COMPACT_ROWS_MIN: usize = 1 << 16;

/// A row waiting for the watermark: row `row` of retained batch `slot`.
struct Waiting {
    time: i64,
    seq: u64,
    slot: u64,
    row: u32,
}

/// An input batch some of whose rows wait for the watermark, with its
/// aggregates' argument columns as the frames read them.
struct Retained {
    batch: RecordBatch,
    columns: Vec<Column>,
    /// Its rows still waiting (at 0 the batch goes).
    waiting: usize,
}

#[derive(Default)]
struct Partition {
    waiting: Vec<Waiting>,
    frame: Frame,
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
    aggs: Vec<Agg>,
    partition: Option<RowConverter>,
    partitions: HashMap<Box<[u8]>, Partition>,
    /// Input batches with rows waiting, by slot.
    batches: HashMap<u64, Retained>,
    next_slot: u64,
    /// Rows waiting (in `batches`), and the rows of those batches.
    waiting: usize,
    retained_rows: usize,
    held: usize,
    next_seq: u64,
    output_schema: SchemaRef,
}

impl OverAggregateOperator {
    pub fn new(spec: &OverAggSpec, output_schema: SchemaRef) -> Result<Self> {
        let aggs = spec
            .aggregates
            .iter()
            .enumerate()
            .map(|(a, call)| {
                let function = Function::of(&call.function)?;
                let out = output_schema.field(spec.output_columns + a).data_type().clone();
                let arg = call.arg.map(|c| spec.input_schema.field(c).data_type());
                Ok(Agg {
                    name: call.function.clone(),
                    function,
                    kind: ArgKind::of(function, arg, &out),
                    arg: call.arg,
                    out,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(OverAggregateOperator {
            spec: spec.clone(),
            aggs,
            partition: partition_converter(spec)?,
            partitions: HashMap::new(),
            batches: HashMap::new(),
            next_slot: 0,
            waiting: 0,
            retained_rows: 0,
            held: 0,
            next_seq: 0,
            output_schema,
        })
    }

    /// Rows held (waiting or in frames).
    pub fn held(&self) -> usize {
        self.held
    }

    fn limit_error(&self) -> Error {
        Error::user(
            SqlCode::ConfigurationLimitExceeded,
            format!(
                "OVER aggregate state limit reached: {} rows held in one instance (waiting for the \
                 watermark or in frames); use a shorter frame or more parallelism",
                self.spec.rows_max
            ),
        )
    }

    /// Holds the rows of `batch` at or after `low` until the watermark
    /// passes them (the rest are late: returns how many).
    fn hold(&mut self, batch: &RecordBatch, low: i64) -> Result<usize> {
        self.hold_rows(batch, low, None)
    }

    /// [`Self::hold`], the rows' arrival numbers given (`seqs`: restore)
    /// or the next ones. The batch itself is kept, not its rows, until the
    /// last of them is released.
    fn hold_rows(&mut self, batch: &RecordBatch, low: i64, seqs: Option<&UInt64Array>) -> Result<usize> {
        let times = timestamps_ms(batch.column(self.spec.time_column))?;
        let keys = partition_keys(self.partition.as_ref(), &self.spec, batch)?;
        let columns = Column::prepare_all(&self.aggs, batch.columns())?;
        let now_ms = sluice_types::now_ms();
        let slot = self.next_slot;
        let (mut late, mut waiting) = (0, 0);
        let mut limit = Ok(());
        for (i, time) in times.iter().enumerate() {
            let time = time.unwrap_or(i64::MIN);
            if time < low {
                late += 1;
                continue;
            }
            if self.held >= self.spec.rows_max {
                limit = Err(self.limit_error());
                break;
            }
            let seq = seqs.map_or(self.next_seq, |s| s.value(i));
            self.next_seq = self.next_seq.max(seq + 1);
            let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(i).data());
            // (A key is boxed only for a new partition.)
            if !self.partitions.contains_key(key) {
                self.partitions.insert(key.into(), Partition::default());
            }
            let partition = self.partitions.get_mut(key).expect("inserted above");
            partition.touched_ms = now_ms;
            partition.waiting.push(Waiting {
                time,
                seq,
                slot,
                row: i as u32,
            });
            self.held += 1;
            waiting += 1;
        }
        if waiting > 0 {
            self.next_slot += 1;
            self.waiting += waiting;
            self.retained_rows += batch.num_rows();
            self.batches.insert(
                slot,
                Retained {
                    batch: batch.clone(),
                    columns,
                    waiting,
                },
            );
        }
        limit.map(|()| late)
    }

    /// Releases every waiting row older than `watermark`, in time order per
    /// partition: the output rows with their aggregates, as one batch.
    pub fn release(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        let frame = self.spec.frame;
        let bounded = !matches!(frame, OverFrame::Unbounded { .. });
        // A ROWS frame takes rows one by one; a RANGE frame the peers (rows
        // of one time) together.
        let peers = matches!(frame, OverFrame::Range { .. } | OverFrame::Unbounded { peers: true });
        let Self {
            spec,
            aggs,
            partitions,
            batches,
            held,
            ..
        } = self;
        let mut results: Vec<Builder> = aggs
            .iter()
            .map(|a| match bounded {
                true => Builder::results(a),
                false => Builder::Scalars(Vec::new()),
            })
            .collect();
        // Each output row: (slot, row) of its input row.
        let mut released: Vec<(u64, u32)> = Vec::new();
        let mut emptied = Vec::new();
        for (key, p) in partitions.iter_mut() {
            if p.waiting.iter().any(|h| h.time < watermark) {
                p.waiting.sort_unstable_by_key(|h| (h.time, h.seq));
                let due = p.waiting.partition_point(|h| h.time < watermark);
                let due: Vec<Waiting> = p.waiting.drain(..due).collect();
                let mut i = 0;
                while i < due.len() {
                    let mut j = i + 1;
                    if peers {
                        while j < due.len() && due[j].time == due[i].time {
                            j += 1;
                        }
                    }
                    let group = &due[i..j];
                    i = j;
                    let time = group[0].time;
                    released.extend(group.iter().map(|h| (h.slot, h.row)));
                    if !bounded {
                        // Running values: the rows themselves go.
                        if p.running.is_empty() {
                            p.running = vec![Running::default(); aggs.len()];
                            *held += 1;
                        }
                        for h in group {
                            let args = row_args(spec, &batches[&h.slot].batch, h.row as usize)?;
                            for (a, agg) in aggs.iter().enumerate() {
                                p.running[a].add(&agg.name, &agg.out, &args[a])?;
                            }
                        }
                        *held -= group.len();
                        for (a, agg) in aggs.iter().enumerate() {
                            let value = p.running[a].value(&agg.name, &agg.out)?;
                            results[a].push_n(Value::Scalar(value), group.len());
                        }
                        continue;
                    }
                    for h in group {
                        p.frame
                            .push(aggs, &batches[&h.slot].columns, h.row as usize, h.time, h.seq)?;
                    }
                    match frame {
                        OverFrame::Rows { preceding } => {
                            while p.frame.len() as u64 > preceding.saturating_add(1) {
                                p.frame.pop_front();
                                *held -= 1;
                            }
                        }
                        OverFrame::Range { preceding_ms } => {
                            while p
                                .frame
                                .front_time()
                                .is_some_and(|t| t < time.saturating_sub(preceding_ms))
                            {
                                p.frame.pop_front();
                                *held -= 1;
                            }
                        }
                        OverFrame::Unbounded { .. } => unreachable!("handled above"),
                    }
                    for (a, agg) in aggs.iter().enumerate() {
                        results[a].push_n(p.frame.value(a, agg)?, group.len());
                    }
                }
            }
            // A RANGE frame's rows older than any row still to come are
            // no longer needed.
            if let OverFrame::Range { preceding_ms } = frame {
                while p
                    .frame
                    .front_time()
                    .is_some_and(|t| t < watermark.saturating_sub(preceding_ms))
                {
                    p.frame.pop_front();
                    *held -= 1;
                }
            }
            if p.waiting.is_empty() && p.frame.is_empty() && p.running.is_empty() {
                emptied.push(key.clone());
            }
        }
        for key in emptied {
            partitions.remove(&key);
        }
        if released.is_empty() {
            return Ok(None);
        }
        let mut columns = gather(batches, &released, spec.output_columns)?;
        for (builder, agg) in results.into_iter().zip(aggs.iter()) {
            columns.push(builder.finish(Some(&agg.out))?);
        }
        for (slot, _) in &released {
            let retained = batches.get_mut(slot).expect("a released row's batch");
            retained.waiting -= 1;
            if retained.waiting == 0 {
                batches.remove(slot);
            }
        }
        self.waiting -= released.len();
        let out = finish_batch(&self.output_schema, columns)?;
        // Batches most of whose rows went keep only those still waiting
        // once the batches kept hold 4 times the rows waiting: a row far
        // ahead of the watermark must not pin its whole batch. (Each
        // compaction reads every waiting row, so it runs only after the
        // kept rows grew by three times those waiting.)
        self.retained_rows = self.batches.values().map(|r| r.batch.num_rows()).sum();
        if self.retained_rows > COMPACT_ROWS_MIN + 4 * self.waiting {
            let sparse: HashSet<u64> = self
                .batches
                .iter()
                .filter(|(_, r)| r.waiting * 2 <= r.batch.num_rows())
                .map(|(slot, _)| *slot)
                .collect();
            self.compact(&sparse)?;
        }
        Ok(Some(out))
    }

    /// Replaces each batch of `slots` by its rows still waiting.
    fn compact(&mut self, slots: &HashSet<u64>) -> Result<()> {
        let mut rows: HashMap<u64, Vec<u32>> = HashMap::new();
        for p in self.partitions.values() {
            for h in p.waiting.iter().filter(|h| slots.contains(&h.slot)) {
                rows.entry(h.slot).or_default().push(h.row);
            }
        }
        for (slot, kept) in rows.iter_mut() {
            kept.sort_unstable();
            let retained = self.batches.get_mut(slot).expect("a waiting row's batch");
            let take = UInt32Array::from(kept.clone());
            retained.batch = take_record_batch(&retained.batch, &take)?;
            retained.columns = Column::prepare_all(&self.aggs, retained.batch.columns())?;
        }
        for p in self.partitions.values_mut() {
            for h in p.waiting.iter_mut() {
                if let Some(kept) = rows.get(&h.slot) {
                    h.row = kept.binary_search(&h.row).expect("a kept row") as u32;
                }
            }
        }
        self.retained_rows = self.batches.values().map(|r| r.batch.num_rows()).sum();
        Ok(())
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

    /// Every waiting row, its arrival number and `true`, as one batch.
    fn waiting_batch(&self) -> Result<Option<RecordBatch>> {
        let waiting: Vec<&Waiting> = self.partitions.values().flat_map(|p| p.waiting.iter()).collect();
        if waiting.is_empty() {
            return Ok(None);
        }
        let rows: Vec<(u64, u32)> = waiting.iter().map(|h| (h.slot, h.row)).collect();
        let mut columns = gather(&self.batches, &rows, self.spec.input_schema.fields().len())?;
        columns.push(Arc::new(UInt64Array::from_iter_values(waiting.iter().map(|h| h.seq))));
        columns.push(Arc::new(BooleanArray::from(vec![true; waiting.len()])));
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

    /// Every bounded frame's rows, as one batch (see [`FRAMES_KEY`]).
    fn frames_batch(&self) -> Result<Option<RecordBatch>> {
        let parts: Vec<(&[u8], &Partition)> = self
            .partitions
            .iter()
            .filter(|(_, p)| !p.frame.is_empty())
            .map(|(k, p)| (k.as_ref(), p))
            .collect();
        if parts.is_empty() {
            return Ok(None);
        }
        let (mut fields, mut columns) = self.key_columns(&parts, |p| p.frame.len())?;
        let rows = || parts.iter().flat_map(|(_, p)| p.frame.rows());
        columns.push(Arc::new(arrow::array::Int64Array::from_iter_values(
            rows().map(|r| r.0),
        )));
        columns.push(Arc::new(UInt64Array::from_iter_values(rows().map(|r| r.1))));
        fields.push(Field::new("__time", DataType::Int64, false));
        fields.push(Field::new("__seq", DataType::UInt64, false));
        for (a, agg) in self.aggs.iter().enumerate() {
            let mut args = Builder::snapshot(agg.kind);
            for (_, p) in &parts {
                p.frame.snapshot_args(a, &mut args);
            }
            let array = args.finish(None)?;
            fields.push(Field::new(format!("__arg{a}"), array.data_type().clone(), true));
            columns.push(array);
        }
        Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
    }

    /// A snapshot's partition key columns and their fields: each of
    /// `parts`' keys `times(partition)` times (none without PARTITION BY).
    fn key_columns(
        &self,
        parts: &[(&[u8], &Partition)],
        times: impl Fn(&Partition) -> usize,
    ) -> Result<(Vec<Field>, Vec<ArrayRef>)> {
        let Some(c) = &self.partition else {
            return Ok((Vec::new(), Vec::new()));
        };
        let parser = c.parser();
        let keys = parts
            .iter()
            .flat_map(|(k, p)| std::iter::repeat_n(parser.parse(k), times(p)));
        let fields = self
            .spec
            .partition_columns
            .iter()
            .enumerate()
            .map(|(j, col)| {
                let ty = self.spec.input_schema.field(*col).data_type().clone();
                Field::new(format!("__key{j}"), ty, true)
            })
            .collect();
        Ok((fields, c.convert_rows(keys)?))
    }

    /// The type a running value is kept in: Float64 for `avg`, else the
    /// result's.
    fn running_type(&self, a: usize) -> DataType {
        match self.aggs[a].function {
            Function::Avg => DataType::Float64,
            _ => self.aggs[a].out.clone(),
        }
    }

    /// Every partition's running values, as one batch (see [`RUNNING_KEY`]).
    fn running_batch(&self) -> Result<Option<RecordBatch>> {
        let parts: Vec<(&[u8], &Partition)> = self
            .partitions
            .iter()
            .filter(|(_, p)| !p.running.is_empty())
            .map(|(k, p)| (k.as_ref(), p))
            .collect();
        if parts.is_empty() {
            return Ok(None);
        }
        let (mut fields, mut columns) = self.key_columns(&parts, |_| 1)?;
        for a in 0..self.aggs.len() {
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
        if batch.num_columns() != k + 2 * self.aggs.len() {
            return Err(bad());
        }
        let keys = match &self.partition {
            Some(c) => Some(c.convert_columns(&batch.columns()[..k])?),
            None => None,
        };
        for r in 0..batch.num_rows() {
            let mut running = Vec::with_capacity(self.aggs.len());
            for a in 0..self.aggs.len() {
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

    /// Takes a snapshot's rows again (maybe of several old instances: their
    /// partitions are disjoint): the waiting rows of [`ROWS_KEY`] wait
    /// again; frame rows — [`FRAMES_KEY`]'s, and those an older snapshot
    /// kept in [`ROWS_KEY`] — rejoin their frames in time and arrival
    /// order.
    fn restore_batches(&mut self, rows: Option<RecordBatch>, frames: Option<RecordBatch>) -> Result<()> {
        let bad = || Error::internal("OVER aggregate snapshot: bad columns");
        // Frame rows of each source: (keys, times, seqs, argument columns).
        let mut sources = Vec::new();
        if let Some(batch) = rows {
            let n = batch.num_columns();
            if n < 2 {
                return Err(bad());
            }
            let seqs = batch
                .column(n - 2)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(bad)?
                .clone();
            let is_waiting: BooleanArray = batch
                .column(n - 1)
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(bad)?
                .iter()
                .map(|w| Some(w.unwrap_or(true)))
                .collect();
            let input = batch.project(&(0..n - 2).collect::<Vec<_>>())?;
            let input = RecordBatch::try_new(self.spec.input_schema.clone(), input.columns().to_vec())?;
            let in_frames = arrow::compute::not(&is_waiting)?;
            let waiting_rows = arrow::compute::filter_record_batch(&input, &is_waiting)?;
            let waiting_seqs = arrow::compute::filter(&seqs, &is_waiting)?;
            self.hold_rows(&waiting_rows, i64::MIN, Some(waiting_seqs.as_primitive()))?;
            if in_frames.true_count() > 0 {
                let old = arrow::compute::filter_record_batch(&input, &in_frames)?;
                let seqs = arrow::compute::filter(&seqs, &in_frames)?;
                let times = timestamps_ms(old.column(self.spec.time_column))?
                    .into_iter()
                    .map(|t| t.unwrap_or(i64::MIN))
                    .collect();
                let keys = partition_keys(self.partition.as_ref(), &self.spec, &old)?;
                let columns = Column::prepare_all(&self.aggs, old.columns())?;
                sources.push((keys, times, seqs.as_primitive::<UInt64Type>().clone(), columns));
            }
        }
        if let Some(batch) = frames {
            let k = self.spec.partition_columns.len();
            if batch.num_columns() != k + 2 + self.aggs.len() {
                return Err(bad());
            }
            let keys = match &self.partition {
                Some(c) => Some(c.convert_columns(&batch.columns()[..k])?),
                None => None,
            };
            let times = batch
                .column(k)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .ok_or_else(bad)?;
            let seqs = batch
                .column(k + 1)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(bad)?;
            let columns = self
                .aggs
                .iter()
                .enumerate()
                .map(|(a, agg)| Column::prepare(agg.kind, Some(batch.column(k + 2 + a))))
                .collect::<Result<Vec<_>>>()?;
            sources.push((keys, times.values().to_vec(), seqs.clone(), columns));
        }
        // By partition, then time and arrival: the order rows joined frames.
        let mut order: Vec<(&[u8], i64, u64, usize, usize)> = Vec::new();
        for (s, (keys, times, seqs, _)) in sources.iter().enumerate() {
            for (r, time) in times.iter().enumerate() {
                let key: &[u8] = keys.as_ref().map_or(&[], |k| k.row(r).data());
                order.push((key, *time, seqs.value(r), s, r));
            }
        }
        order.sort_unstable();
        let now_ms = sluice_types::now_ms();
        for (key, time, seq, s, r) in order {
            if self.held >= self.spec.rows_max {
                return Err(self.limit_error());
            }
            if !self.partitions.contains_key(key) {
                self.partitions.insert(key.into(), Partition::default());
            }
            let partition = self.partitions.get_mut(key).expect("inserted above");
            partition.touched_ms = now_ms;
            partition.frame.push(&self.aggs, &sources[s].3, r, time, seq)?;
            self.next_seq = self.next_seq.max(seq + 1);
            self.held += 1;
        }
        Ok(())
    }
}

/// The first `n` columns of rows `(slot, row)` of retained batches, in
/// that order.
fn gather(batches: &HashMap<u64, Retained>, rows: &[(u64, u32)], n: usize) -> Result<Vec<ArrayRef>> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut sources: Vec<&RecordBatch> = Vec::new();
    let indices: Vec<(usize, usize)> = rows
        .iter()
        .map(|(slot, row)| {
            let at = *index.entry(*slot).or_insert_with(|| {
                sources.push(&batches[slot].batch);
                sources.len() - 1
            });
            (at, *row as usize)
        })
        .collect();
    (0..n)
        .map(|c| {
            let arrays: Vec<&dyn Array> = sources.iter().map(|b| b.column(c).as_ref()).collect();
            Ok(interleave(&arrays, &indices)?)
        })
        .collect()
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
        let late = self.hold(&batch, ctx.watermark.0)?;
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
        if let Some(batch) = self.waiting_batch()? {
            state.put_rows(ROWS_KEY, batch, self.spec.partition_columns.clone());
        }
        if let Some(batch) = self.frames_batch()? {
            let keys = (0..self.spec.partition_columns.len()).collect();
            state.put_rows(FRAMES_KEY, batch, keys);
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
        let rows = TaskState::restored_rows(checkpoint.clone(), ROWS_KEY)?;
        let frames = TaskState::restored_rows(checkpoint, FRAMES_KEY)?;
        self.restore_batches(rows, frames)
    }
}

mod changelog;
mod frame;
pub use changelog::OverChangelogOperator;

#[cfg(test)]
mod tests;
