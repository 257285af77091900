//! A bounded OVER frame (`ROWS n PRECEDING` or `RANGE r PRECEDING`) of
//! the append-only operator: its rows' times and arrival numbers and, per
//! aggregate, only what that aggregate needs of their arguments — not the
//! rows themselves (a row goes out when it is released; the frame keeps
//! it only as an argument of the rows after it).
//!
//! A row in and a row out cost O(1) for `count`, integer `sum` and `avg`
//! (a running count and an exact 128-bit running sum, so `avg` is that sum
//! over the count) and integer `min`/`max` (a monotone deque of the
//! frame's candidates). Float `sum`/`avg` add the frame's values in frame
//! order at each row (O(frame), as a batch engine adds them; a running
//! float sum that subtracts would drift from it), and every other type
//! goes through `ScalarValue` ([`super::aggregate_scalars`]).

use super::{aggregate_scalars, df_error};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::ScalarValue;
use sluice_types::{Error, Result, SqlCode};
use std::collections::VecDeque;
use std::sync::Arc;

/// An OVER aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Function {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl Function {
    pub(super) fn of(name: &str) -> Result<Function> {
        Ok(match name {
            "count" => Function::Count,
            "sum" => Function::Sum,
            "avg" => Function::Avg,
            "min" => Function::Min,
            "max" => Function::Max,
            other => return Err(Error::internal(format!("OVER aggregate {other}"))),
        })
    }
}

/// How a frame keeps one aggregate's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ArgKind {
    /// `count(*)`: nothing (the frame's length).
    Star,
    /// `count(x)`: whether each is NULL.
    Present,
    /// Integers (of at most 63 bits) of `sum` into BIGINT, `avg`, `min`,
    /// `max`: as `i64`.
    Int,
    /// Floats of `sum` into DOUBLE and `avg` (and unsigned 64-bit
    /// integers of `avg`): as `f64`.
    Float,
    /// Anything else: `ScalarValue`s.
    Scalar,
}

impl ArgKind {
    pub(super) fn of(function: Function, arg: Option<&DataType>, out: &DataType) -> ArgKind {
        use DataType::*;
        let Some(ty) = arg else { return ArgKind::Star };
        let int = matches!(ty, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32);
        let float = matches!(ty, Float32 | Float64);
        match function {
            Function::Count => ArgKind::Present,
            Function::Sum if int && *out == Int64 => ArgKind::Int,
            Function::Sum if float && *out == Float64 => ArgKind::Float,
            Function::Avg if int => ArgKind::Int,
            Function::Avg if float || *ty == UInt64 => ArgKind::Float,
            Function::Min | Function::Max if int => ArgKind::Int,
            _ => ArgKind::Scalar,
        }
    }
}

/// One aggregate of the operator.
pub(super) struct Agg {
    /// Its SQL name (for the general path).
    pub name: String,
    pub function: Function,
    pub kind: ArgKind,
    /// Its argument's input column (`count(*)`: none).
    pub arg: Option<usize>,
    /// Its result's type.
    pub out: DataType,
}

/// A batch's argument column of one aggregate, read as its kind reads it
/// (cast once per batch, not once per value).
pub(super) enum Column {
    Star,
    Present(ArrayRef),
    Int(Int64Array),
    Float(Float64Array),
    Scalar(ArrayRef),
}

impl Column {
    /// `array` (the argument's column, or a frame snapshot's) for `kind`.
    pub(super) fn prepare(kind: ArgKind, array: Option<&ArrayRef>) -> Result<Column> {
        let Some(a) = array else { return Ok(Column::Star) };
        Ok(match kind {
            ArgKind::Star => Column::Star,
            ArgKind::Present => Column::Present(a.clone()),
            ArgKind::Int => Column::Int(cast(a, &DataType::Int64)?.as_primitive::<Int64Type>().clone()),
            ArgKind::Float => Column::Float(cast(a, &DataType::Float64)?.as_primitive::<Float64Type>().clone()),
            ArgKind::Scalar => Column::Scalar(a.clone()),
        })
    }

    /// Every argument column of `aggs` in `batch`'s columns.
    pub(super) fn prepare_all(aggs: &[Agg], columns: &[ArrayRef]) -> Result<Vec<Column>> {
        aggs.iter()
            .map(|a| Column::prepare(a.kind, a.arg.map(|c| &columns[c])))
            .collect()
    }
}

/// What a frame keeps of one aggregate's arguments.
enum Values {
    Star,
    Present {
        valid: VecDeque<bool>,
        count: i64,
    },
    Int {
        values: VecDeque<Option<i64>>,
        count: i64,
        sum: i128,
        /// `min`/`max` only: (position, value) of each row that may still
        /// become the frame's least (greatest) — values strictly rising
        /// (falling) from the front, which is the answer.
        best: VecDeque<(u64, i64)>,
    },
    Float {
        values: VecDeque<Option<f64>>,
        count: i64,
    },
    Scalar {
        values: VecDeque<ScalarValue>,
    },
}

impl Values {
    fn new(kind: ArgKind) -> Values {
        match kind {
            ArgKind::Star => Values::Star,
            ArgKind::Present => Values::Present {
                valid: VecDeque::new(),
                count: 0,
            },
            ArgKind::Int => Values::Int {
                values: VecDeque::new(),
                count: 0,
                sum: 0,
                best: VecDeque::new(),
            },
            ArgKind::Float => Values::Float {
                values: VecDeque::new(),
                count: 0,
            },
            ArgKind::Scalar => Values::Scalar {
                values: VecDeque::new(),
            },
        }
    }
}

/// One aggregate's results for a batch of output rows (or a frame
/// snapshot's argument column), built without a `ScalarValue` a row where
/// the kind allows.
pub(super) enum Builder {
    Bools(Vec<Option<bool>>),
    Ints(Vec<Option<i64>>),
    Floats(Vec<Option<f64>>),
    Scalars(Vec<ScalarValue>),
}

/// One result.
pub(super) enum Value {
    Int(Option<i64>),
    Float(Option<f64>),
    Scalar(ScalarValue),
}

impl Builder {
    /// For `agg`'s results out of a bounded frame.
    pub(super) fn results(agg: &Agg) -> Builder {
        match (agg.kind, agg.function) {
            (ArgKind::Scalar, _) => Builder::Scalars(Vec::new()),
            (ArgKind::Int, Function::Avg) | (ArgKind::Float, _) => Builder::Floats(Vec::new()),
            _ => Builder::Ints(Vec::new()),
        }
    }

    pub(super) fn push_n(&mut self, value: Value, n: usize) {
        match (self, value) {
            (Builder::Ints(v), Value::Int(x)) => v.extend(std::iter::repeat_n(x, n)),
            (Builder::Floats(v), Value::Float(x)) => v.extend(std::iter::repeat_n(x, n)),
            (Builder::Scalars(v), Value::Scalar(x)) => v.extend(std::iter::repeat_n(x, n)),
            _ => unreachable!("a result of another kind than its builder's"),
        }
    }

    /// The column, as type `out` when given (integers and floats are cast;
    /// `ScalarValue`s already have it).
    pub(super) fn finish(self, out: Option<&DataType>) -> Result<ArrayRef> {
        let array: ArrayRef = match self {
            Builder::Bools(v) => Arc::new(BooleanArray::from(v)),
            Builder::Ints(v) => Arc::new(Int64Array::from(v)),
            Builder::Floats(v) => Arc::new(Float64Array::from(v)),
            Builder::Scalars(v) => ScalarValue::iter_to_array(v).map_err(df_error)?,
        };
        match out {
            Some(ty) if array.data_type() != ty => Ok(cast(&array, ty)?),
            _ => Ok(array),
        }
    }
}

/// A partition's bounded frame.
#[derive(Default)]
pub(super) struct Frame {
    times: VecDeque<i64>,
    seqs: VecDeque<u64>,
    /// The position of the front row (rows ever pushed before it).
    first: u64,
    /// Per aggregate (empty until the first row).
    values: Vec<Values>,
}

impl Frame {
    pub(super) fn len(&self) -> usize {
        self.times.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    pub(super) fn front_time(&self) -> Option<i64> {
        self.times.front().copied()
    }

    /// Each row's time and arrival number, front first.
    pub(super) fn rows(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.times.iter().copied().zip(self.seqs.iter().copied())
    }

    /// Row `row` of a batch whose argument columns are `columns` joins the
    /// frame's back.
    pub(super) fn push(&mut self, aggs: &[Agg], columns: &[Column], row: usize, time: i64, seq: u64) -> Result<()> {
        if self.values.is_empty() {
            self.values = aggs.iter().map(|a| Values::new(a.kind)).collect();
        }
        let position = self.first + self.times.len() as u64;
        for ((values, column), agg) in self.values.iter_mut().zip(columns).zip(aggs) {
            match (values, column) {
                (Values::Star, _) => {}
                (Values::Present { valid, count }, Column::Present(a)) => {
                    let v = a.is_valid(row);
                    valid.push_back(v);
                    *count += i64::from(v);
                }
                (
                    Values::Int {
                        values,
                        count,
                        sum,
                        best,
                    },
                    Column::Int(a),
                ) => {
                    let v = a.is_valid(row).then(|| a.value(row));
                    values.push_back(v);
                    if let Some(x) = v {
                        *count += 1;
                        *sum += i128::from(x);
                        let worse = |b: i64| match agg.function {
                            Function::Min => b >= x,
                            Function::Max => b <= x,
                            _ => false,
                        };
                        if matches!(agg.function, Function::Min | Function::Max) {
                            while best.back().is_some_and(|b| worse(b.1)) {
                                best.pop_back();
                            }
                            best.push_back((position, x));
                        }
                    }
                }
                (Values::Float { values, count }, Column::Float(a)) => {
                    let v = a.is_valid(row).then(|| a.value(row));
                    values.push_back(v);
                    *count += i64::from(v.is_some());
                }
                (Values::Scalar { values }, Column::Scalar(a)) => {
                    values.push_back(ScalarValue::try_from_array(a, row).map_err(df_error)?);
                }
                _ => return Err(Error::internal("OVER frame: an argument of another kind")),
            }
        }
        self.times.push_back(time);
        self.seqs.push_back(seq);
        Ok(())
    }

    /// The front row leaves the frame.
    pub(super) fn pop_front(&mut self) {
        if self.times.pop_front().is_none() {
            return;
        }
        self.seqs.pop_front();
        let position = self.first;
        self.first += 1;
        for values in &mut self.values {
            match values {
                Values::Star => {}
                Values::Present { valid, count } => {
                    if valid.pop_front() == Some(true) {
                        *count -= 1;
                    }
                }
                Values::Int {
                    values,
                    count,
                    sum,
                    best,
                } => {
                    if let Some(Some(x)) = values.pop_front() {
                        *count -= 1;
                        *sum -= i128::from(x);
                    }
                    if best.front().is_some_and(|b| b.0 == position) {
                        best.pop_front();
                    }
                }
                Values::Float { values, count } => {
                    if let Some(Some(_)) = values.pop_front() {
                        *count -= 1;
                    }
                }
                Values::Scalar { values } => {
                    values.pop_front();
                }
            }
        }
    }

    /// Aggregate `a` over the frame.
    pub(super) fn value(&self, a: usize, agg: &Agg) -> Result<Value> {
        Ok(match &self.values[a] {
            Values::Star => Value::Int(Some(self.times.len() as i64)),
            Values::Present { count, .. } => Value::Int(Some(*count)),
            Values::Int { count, sum, best, .. } => match agg.function {
                Function::Count => Value::Int(Some(*count)),
                Function::Sum if *count == 0 => Value::Int(None),
                Function::Sum => Value::Int(Some(i64::try_from(*sum).map_err(|_| {
                    Error::user(
                        SqlCode::DataException,
                        format!("OVER sum overflowed: the frame's sum {sum} does not fit in a BIGINT"),
                    )
                })?)),
                Function::Avg => Value::Float((*count > 0).then(|| *sum as f64 / *count as f64)),
                Function::Min | Function::Max => Value::Int(best.front().map(|b| b.1)),
            },
            Values::Float { values, count } => {
                // In frame order, as the frame's rows are added one by one.
                let mut total: Option<f64> = None;
                for x in values.iter().flatten() {
                    total = Some(total.map_or(*x, |t| t + x));
                }
                match agg.function {
                    Function::Avg => Value::Float(total.map(|t| t / *count as f64)),
                    _ => Value::Float(total),
                }
            }
            Values::Scalar { values } => Value::Scalar(aggregate_scalars(&agg.name, &agg.out, values.iter())?),
        })
    }

    /// Appends aggregate `a`'s kept arguments, front first, to a snapshot
    /// column (see [`Builder::snapshot`]).
    pub(super) fn snapshot_args(&self, a: usize, into: &mut Builder) {
        match (&self.values[a], into) {
            (Values::Star, Builder::Bools(v)) => v.extend(std::iter::repeat_n(Some(true), self.len())),
            (Values::Present { valid, .. }, Builder::Bools(v)) => v.extend(valid.iter().map(|x| x.then_some(true))),
            (Values::Int { values, .. }, Builder::Ints(v)) => v.extend(values.iter().copied()),
            (Values::Float { values, .. }, Builder::Floats(v)) => v.extend(values.iter().copied()),
            (Values::Scalar { values }, Builder::Scalars(v)) => v.extend(values.iter().cloned()),
            _ => unreachable!("a snapshot column of another kind"),
        }
    }
}

impl Builder {
    /// For a frame snapshot's column of `kind` arguments: booleans
    /// (`count(*)`: all true; `count(x)`: true or NULL), BIGINT, DOUBLE, or
    /// the argument's own type. [`Column::prepare`] reads them back.
    pub(super) fn snapshot(kind: ArgKind) -> Builder {
        match kind {
            ArgKind::Star | ArgKind::Present => Builder::Bools(Vec::new()),
            ArgKind::Int => Builder::Ints(Vec::new()),
            ArgKind::Float => Builder::Floats(Vec::new()),
            ArgKind::Scalar => Builder::Scalars(Vec::new()),
        }
    }
}
