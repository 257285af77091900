//! The aggregates of a GROUP BY without a window whose state per group is
//! a few numbers — `count`, `sum` and `avg` (also over a changelog), `min`,
//! `max` and `count(DISTINCT …)` (over an append-only input) of 64-bit
//! integers and doubles, `min` and `max` of text — kept in columns indexed
//! by group number instead of a boxed DataFusion `Accumulator` per group.
//!
//! The distinct counts of a group share one map from value to the bits of
//! the distinct counts that have seen it ([`Columns`]): Flink users write
//! one `count(DISTINCT x)` per `FILTER` (Nexmark q15/q16: four over
//! bidders, four over auctions), which reach the operator as `x` under
//! different `CASE`s, and a row's value is then one lookup for all of
//! them, not one per aggregate (perf of q16 had the hash sets' inserts at
//! half of the server's CPU), and is held once. The map keeps neighbouring
//! values together ([`seen`]).
//!
//! perf of Nexmark q17 (an auction's bids per day: 900 k groups, a batch
//! touching most of its groups once or twice) showed the per-group
//! accumulators dominating: creating them, slicing every argument per
//! group, evaluating each to a `ScalarValue` before and after the batch.
//! Here a batch is one pass per aggregate over its rows (`n[g] += 1`), and
//! the values before and after it are two arrays read from the columns.
//!
//! A snapshot holds exactly the state columns DataFusion's accumulator
//! gives (checked when the operator is built: otherwise the generic path
//! runs), so checkpoints move between the two paths and across versions.

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray, StringArray, UInt64Array};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Float64Type, Int64Type, UInt64Type};
use datafusion::scalar::ScalarValue;
use sluice_types::{Error, Result};
use std::sync::Arc;

mod seen;
use seen::Seen;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    CountDistinct,
}

/// One aggregate's state for every group slot.
#[derive(Debug)]
pub(super) struct Columnar {
    kind: Kind,
    /// The argument is a double (else a 64-bit integer; any type for count).
    float: bool,
    /// The argument is text (`min`/`max` only).
    text: bool,
    retracting: bool,
    /// Non-NULL rows added minus retracted (count's value; none: NULL).
    n: Vec<i64>,
    /// Sum, minimum or maximum of an integer argument.
    int: Vec<i64>,
    /// Sum, minimum or maximum of a double argument.
    flt: Vec<f64>,
    /// Minimum or maximum of a text argument.
    strs: Vec<String>,
    /// `count(DISTINCT …)`: DataFusion's state type of its values (a list
    /// of integers); the values are in [`Columns`]' shared maps.
    list_type: Option<DataType>,
}

impl Columnar {
    /// The columnar form of `function(arg_type)` with output `out_type`, when
    /// there is one and its snapshot columns are `state_types` (those of
    /// DataFusion's accumulator of the same call).
    pub(super) fn of(
        function: &str,
        distinct: bool,
        arg_type: Option<&DataType>,
        out_type: &DataType,
        retracting: bool,
        state_types: &[DataType],
    ) -> Option<Columnar> {
        let kind = match function {
            "count" if distinct && !retracting && arg_type == Some(&DataType::Int64) => Kind::CountDistinct,
            _ if distinct => return None,
            "count" => Kind::Count,
            "sum" => Kind::Sum,
            "avg" => Kind::Avg,
            "min" if !retracting => Kind::Min,
            "max" if !retracting => Kind::Max,
            _ => return None,
        };
        let text = matches!(kind, Kind::Min | Kind::Max) && arg_type == Some(&DataType::Utf8);
        let float = match (kind, arg_type) {
            _ if text => false,
            (Kind::Count | Kind::CountDistinct, _) => false,
            (Kind::Avg, Some(DataType::Float64)) => true,
            (Kind::Avg, _) => return None,
            (_, Some(DataType::Int64)) => false,
            (_, Some(DataType::Float64)) => true,
            _ => return None,
        };
        let c = Columnar {
            kind,
            float,
            text,
            retracting,
            n: Vec::new(),
            int: Vec::new(),
            flt: Vec::new(),
            strs: Vec::new(),
            list_type: match (kind, state_types) {
                (Kind::CountDistinct, [t @ DataType::List(item)]) if item.data_type() == &DataType::Int64 => {
                    Some(t.clone())
                }
                (Kind::CountDistinct, _) => return None,
                _ => None,
            },
        };
        (c.out_type() == *out_type && c.state_types() == state_types).then_some(c)
    }

    fn num_type(&self) -> DataType {
        match (self.text, self.float) {
            (true, _) => DataType::Utf8,
            (_, true) => DataType::Float64,
            _ => DataType::Int64,
        }
    }

    fn out_type(&self) -> DataType {
        match self.kind {
            Kind::Count | Kind::CountDistinct => DataType::Int64,
            Kind::Avg => DataType::Float64,
            _ => self.num_type(),
        }
    }

    /// DataFusion's state columns: count `[n]`, sum `[sum]` (sliding:
    /// `[sum, n]`), avg `[n, sum]`, min/max `[value]`.
    fn state_types(&self) -> Vec<DataType> {
        match (self.kind, self.retracting) {
            (Kind::Count, _) => vec![DataType::Int64],
            (Kind::Sum, false) | (Kind::Min | Kind::Max, _) => vec![self.num_type()],
            (Kind::Sum, true) => vec![self.num_type(), DataType::UInt64],
            (Kind::Avg, _) => vec![DataType::UInt64, DataType::Float64],
            (Kind::CountDistinct, _) => self.list_type.iter().cloned().collect(),
        }
    }

    /// Group slot `g` holds no rows (a new group, or a freed slot reused).
    pub(super) fn reset(&mut self, g: u32) {
        let g = g as usize;
        // Only the columns its kind reads grow (a count keeps just `n`).
        let int = !self.float && !self.text && !matches!(self.kind, Kind::Count | Kind::CountDistinct);
        if g >= self.n.len() {
            self.n.resize(g + 1, 0);
            if int {
                self.int.resize(g + 1, 0);
            }
            if self.float {
                self.flt.resize(g + 1, 0.0);
            }
            if self.text {
                self.strs.resize_with(g + 1, String::new);
            }
        }
        self.n[g] = 0;
        if int {
            self.int[g] = 0;
        }
        if self.float {
            self.flt[g] = 0.0;
        }
        if self.text {
            self.strs[g] = String::new();
        }
    }

    /// Adds row `r` of `arg` to group `groups[r]` (retracts it when
    /// `retracted[r]`).
    /// `one_group`: the batch's only group, when it has one. Such a batch
    /// (an aggregate without keys, a key with few values) adds its column
    /// up at once, without a row's read and write of the group's count
    /// depending on the row before.
    pub(super) fn apply(
        &mut self,
        groups: &[u32],
        one_group: Option<usize>,
        retracted: Option<&[bool]>,
        arg: &ArrayRef,
    ) -> Result<()> {
        match (self.kind, one_group, retracted) {
            (Kind::Count, Some(g), None) => self.n[g] += (arg.len() - arg.null_count()) as i64,
            (Kind::Sum | Kind::Avg, Some(g), None) if !self.float => {
                let v = ints(arg)?;
                self.n[g] += (v.len() - v.null_count()) as i64;
                // Wrapping, as a row at a time.
                self.int[g] = self.int[g].wrapping_add(arrow::compute::sum(v).unwrap_or(0));
            }
            _ => self.apply_rows(groups, retracted, arg)?,
        }
        Ok(())
    }

    /// [`Columnar::apply`] a row at a time.
    fn apply_rows(&mut self, groups: &[u32], retracted: Option<&[bool]>, arg: &ArrayRef) -> Result<()> {
        let back = |r: usize| retracted.is_some_and(|x| x[r]);
        // The null buffer once: `is_valid` through `dyn Array` a row was 8 %
        // of q17's profile.
        let nulls = arg.nulls();
        let valid = |r: usize| nulls.is_none_or(|n| n.is_valid(r));
        match self.kind {
            Kind::Count => {
                // Without a branch a row: a FILTER's nulls are as
                // unpredictable as its condition.
                for (r, g) in groups.iter().enumerate() {
                    let one = i64::from(valid(r));
                    self.n[*g as usize] += if back(r) { -one } else { one };
                }
            }
            Kind::CountDistinct => return Err(Error::internal("distinct counts are applied by Columns")),
            Kind::Sum | Kind::Avg if self.float => {
                let v = floats(arg)?;
                for (r, g) in groups.iter().enumerate() {
                    if valid(r) {
                        let g = *g as usize;
                        if back(r) {
                            self.n[g] -= 1;
                            self.flt[g] -= v.value(r);
                        } else {
                            self.n[g] += 1;
                            self.flt[g] += v.value(r);
                        }
                    }
                }
            }
            Kind::Sum | Kind::Avg => {
                let v = ints(arg)?;
                for (r, g) in groups.iter().enumerate() {
                    if valid(r) {
                        let g = *g as usize;
                        if back(r) {
                            self.n[g] -= 1;
                            self.int[g] = self.int[g].wrapping_sub(v.value(r));
                        } else {
                            self.n[g] += 1;
                            self.int[g] = self.int[g].wrapping_add(v.value(r));
                        }
                    }
                }
            }
            Kind::Min | Kind::Max => {
                let min = self.kind == Kind::Min;
                if self.text {
                    let v = arg
                        .as_string_opt::<i32>()
                        .ok_or_else(|| Error::internal(format!("aggregate: expected TEXT, got {}", arg.data_type())))?;
                    for (r, g) in groups.iter().enumerate() {
                        let g = *g as usize;
                        if valid(r) {
                            let x = v.value(r);
                            let kept = self.strs[g].as_str();
                            if self.n[g] == 0 || (if min { x < kept } else { x > kept }) {
                                self.strs[g].clear();
                                self.strs[g].push_str(x);
                            }
                            self.n[g] += 1;
                        }
                    }
                } else if self.float {
                    let v = floats(arg)?;
                    for (r, g) in groups.iter().enumerate() {
                        let g = *g as usize;
                        if valid(r) {
                            let x = v.value(r);
                            let better = x.total_cmp(&self.flt[g]);
                            if self.n[g] == 0 || (if min { better.is_lt() } else { better.is_gt() }) {
                                self.flt[g] = x;
                            }
                            self.n[g] += 1;
                        }
                    }
                } else {
                    let v = ints(arg)?;
                    for (r, g) in groups.iter().enumerate() {
                        let g = *g as usize;
                        if valid(r) {
                            let x = v.value(r);
                            if self.n[g] == 0 || (if min { x < self.int[g] } else { x > self.int[g] }) {
                                self.int[g] = x;
                            }
                            self.n[g] += 1;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The value of each of `groups`, as the aggregate's output column.
    pub(super) fn values(&self, groups: &[u32]) -> ArrayRef {
        let has = |g: &u32| self.n[*g as usize] > 0;
        match self.kind {
            Kind::Count | Kind::CountDistinct => {
                Arc::new(Int64Array::from_iter_values(groups.iter().map(|g| self.n[*g as usize])))
            }
            Kind::Avg => Arc::new(Float64Array::from_iter(groups.iter().map(|g| {
                has(g).then(|| {
                    let g = *g as usize;
                    let sum = if self.float { self.flt[g] } else { self.int[g] as f64 };
                    sum / self.n[g] as f64
                })
            }))),
            _ => self.values_of_sum(groups),
        }
    }

    /// The value of group `g` (for a `-D` when `state_ttl` expires it).
    pub(super) fn scalar(&self, g: u32) -> Result<ScalarValue> {
        ScalarValue::try_from_array(&self.values(&[g]), 0).map_err(crate::project::df_error)
    }

    /// The snapshot columns of `groups` (see [`Self::state_types`]).
    pub(super) fn state(&self, groups: &[u32]) -> Vec<ArrayRef> {
        let n = || -> ArrayRef { Arc::new(Int64Array::from_iter_values(groups.iter().map(|g| self.n[*g as usize]))) };
        let count = || -> ArrayRef {
            Arc::new(UInt64Array::from_iter_values(
                groups.iter().map(|g| self.n[*g as usize].max(0) as u64),
            ))
        };
        let num = || self.values_of_sum(groups);
        match (self.kind, self.retracting) {
            (Kind::Count, _) => vec![n()],
            (Kind::Sum, false) | (Kind::Min | Kind::Max, _) => vec![num()],
            (Kind::Sum, true) => vec![num(), count()],
            (Kind::Avg, _) => vec![count(), self.values_of_sum(groups)],
            (Kind::CountDistinct, _) => unreachable!("distinct counts are snapshot by Columns"),
        }
    }

    /// The sum (minimum, maximum) of each group, NULL without rows.
    fn values_of_sum(&self, groups: &[u32]) -> ArrayRef {
        let has = |g: &u32| self.n[*g as usize] > 0;
        if self.text {
            Arc::new(StringArray::from_iter(
                groups.iter().map(|g| has(g).then(|| self.strs[*g as usize].as_str())),
            ))
        } else if self.float {
            Arc::new(Float64Array::from_iter(
                groups.iter().map(|g| has(g).then(|| self.flt[*g as usize])),
            ))
        } else {
            Arc::new(Int64Array::from_iter(
                groups.iter().map(|g| has(g).then(|| self.int[*g as usize])),
            ))
        }
    }

    /// Merges row `row` of snapshot columns `state` into group `g` (a
    /// restore: `g` was reset; a rescale's old instances held other keys).
    pub(super) fn merge(&mut self, g: u32, state: &[ArrayRef], row: usize) -> Result<()> {
        let g = g as usize;
        let (value, count) = match (self.kind, self.retracting) {
            (Kind::Count, _) => {
                self.n[g] += ints(&state[0])?.value(row);
                return Ok(());
            }
            (Kind::CountDistinct, _) => return Err(Error::internal("distinct counts are restored by Columns")),
            (Kind::Sum, false) | (Kind::Min | Kind::Max, _) => (&state[0], None),
            (Kind::Sum, true) => (&state[0], Some(&state[1])),
            (Kind::Avg, _) => (&state[1], Some(&state[0])),
        };
        let count = match count {
            Some(c) if c.is_valid(row) => c.as_primitive::<UInt64Type>().value(row) as i64,
            Some(_) => 0,
            // A plain sum, min or max: one row or more when it has a value.
            None => i64::from(value.is_valid(row)),
        };
        if value.is_valid(row) {
            if self.text {
                let v = value
                    .as_string_opt::<i32>()
                    .ok_or_else(|| Error::internal("a text aggregate's state is not text"))?;
                self.strs[g] = v.value(row).to_string();
            } else if self.float {
                self.flt[g] = floats(value)?.value(row);
            } else {
                self.int[g] = ints(value)?.value(row);
            }
        }
        self.n[g] += count;
        Ok(())
    }
}

/// Every aggregate's columns, and the distinct counts' shared values.
#[derive(Debug)]
pub(super) struct Columns {
    aggregates: Vec<Columnar>,
    /// The aggregates that are distinct counts, by bit.
    distinct: Vec<usize>,
    /// Per group slot: each value any distinct count saw → the bits of the
    /// distinct counts that saw it.
    seen: Vec<Seen>,
}

impl Columns {
    /// The aggregates as one set of columns (up to 32 distinct counts).
    pub(super) fn new(aggregates: Vec<Columnar>) -> Option<Columns> {
        let distinct: Vec<usize> = (0..aggregates.len())
            .filter(|a| aggregates[*a].kind == Kind::CountDistinct)
            .collect();
        (distinct.len() <= 32).then_some(Columns {
            aggregates,
            distinct,
            seen: Vec::new(),
        })
    }

    /// Group slot `g` holds no rows (a new group, or a freed slot reused).
    pub(super) fn reset(&mut self, g: u32) {
        self.aggregates.iter_mut().for_each(|c| c.reset(g));
        if self.distinct.is_empty() {
            return;
        }
        let g = g as usize;
        if g >= self.seen.len() {
            self.seen.resize_with(g + 1, Seen::default);
        }
        self.seen[g] = Seen::default();
    }

    /// Adds (retracts) each row in its group: `arguments[a]` are
    /// aggregate `a`'s argument arrays.
    pub(super) fn apply(
        &mut self,
        groups: &[u32],
        retracted: Option<&[bool]>,
        arguments: &[Vec<ArrayRef>],
    ) -> Result<()> {
        // Found once a batch, for every aggregate.
        let one_group = groups
            .first()
            .filter(|g| groups.iter().all(|h| h == *g))
            .map(|g| *g as usize);
        for (a, c) in self.aggregates.iter_mut().enumerate() {
            if c.kind == Kind::CountDistinct {
                continue;
            }
            let arg = arguments[a]
                .first()
                .ok_or_else(|| Error::internal("a columnar aggregate without an argument"))?;
            c.apply(groups, one_group, retracted, arg)?;
        }
        if self.distinct.is_empty() {
            return Ok(());
        }
        let args = self
            .distinct
            .iter()
            .map(|a| {
                arguments[*a]
                    .first()
                    .ok_or_else(|| Error::internal("a distinct count without an argument"))
                    .and_then(ints)
            })
            .collect::<Result<Vec<_>>>()?;
        // Each value of a row once, with the bits of the distinct counts
        // that have it. Flink users write one count a FILTER, `x` under
        // different `CASE`s: a count whose values are, on every row of the
        // batch, null or its root's is a member of that root, and a row is
        // then one lookup a root with its members' bits read from their
        // null buffers, not a comparison of every pair of values a row
        // (with branches the filters make unpredictable).
        let roots = roots(&args);
        let bit = |j: usize, r: usize| -> u32 { u32::from(args[j].is_valid(r)) << j };
        for (r, g) in groups.iter().enumerate() {
            let g = *g as usize;
            for (root, members) in &roots {
                let bits = members.iter().fold(bit(*root, r), |bits, j| bits | bit(*j, r));
                if bits == 0 {
                    continue;
                }
                // A member's value is its root's, so the root has one.
                let mut new = self.seen[g].insert(args[*root].value(r), bits);
                while new != 0 {
                    let b = new.trailing_zeros() as usize;
                    self.aggregates[self.distinct[b]].n[g] += 1;
                    new &= new - 1;
                }
            }
        }
        Ok(())
    }

    /// Each aggregate's values for `groups`.
    pub(super) fn values(&self, groups: &[u32]) -> Vec<ArrayRef> {
        self.aggregates.iter().map(|c| c.values(groups)).collect()
    }

    pub(super) fn scalars(&self, g: u32) -> Result<Vec<ScalarValue>> {
        self.aggregates.iter().map(|c| c.scalar(g)).collect()
    }

    /// Every aggregate's snapshot columns of `groups`, one after another.
    pub(super) fn state(&self, groups: &[u32]) -> Vec<ArrayRef> {
        let mut out = Vec::new();
        for (a, c) in self.aggregates.iter().enumerate() {
            match self.distinct.iter().position(|d| *d == a) {
                Some(bit) => out.push(self.lists(c, bit, groups)),
                None => out.extend(c.state(groups)),
            }
        }
        out
    }

    /// The values distinct count `bit` saw in each group, as a list
    /// (DataFusion's state of a distinct count; in the map's order).
    fn lists(&self, c: &Columnar, bit: usize, groups: &[u32]) -> ArrayRef {
        let Some(DataType::List(item)) = &c.list_type else {
            unreachable!("a distinct count has its list type")
        };
        let mut lengths = Vec::with_capacity(groups.len());
        let mut values = Vec::new();
        for g in groups {
            let before = values.len();
            values.extend(
                self.seen[*g as usize]
                    .iter()
                    .filter(|(_, bits)| *bits & (1 << bit) != 0)
                    .map(|(v, _)| v),
            );
            lengths.push(values.len() - before);
        }
        let offsets = OffsetBuffer::from_lengths(lengths);
        Arc::new(ListArray::new(
            item.clone(),
            offsets,
            Arc::new(Int64Array::from(values)),
            None,
        ))
    }

    /// Merges row `row` of aggregate `a`'s snapshot columns `state` into
    /// group `g`.
    pub(super) fn merge(&mut self, a: usize, g: u32, state: &[ArrayRef], row: usize) -> Result<()> {
        let Some(bit) = self.distinct.iter().position(|d| *d == a) else {
            return self.aggregates[a].merge(g, state, row);
        };
        let lists = state[0]
            .as_list_opt::<i32>()
            .ok_or_else(|| Error::internal("a distinct count's state is not a list"))?;
        if lists.is_valid(row) {
            let values = lists.value(row);
            for v in ints(&values)?.iter().flatten() {
                if self.seen[g as usize].insert(v, 1 << bit) != 0 {
                    self.aggregates[a].n[g as usize] += 1;
                }
            }
        }
        Ok(())
    }
}

/// The distinct counts' arguments as roots, each with its members: the
/// counts after it whose every value in the batch is null or the root's
/// (a count that is no earlier root's member is a root).
fn roots(args: &[&arrow::array::PrimitiveArray<Int64Type>]) -> Vec<(usize, Vec<usize>)> {
    let mut roots: Vec<(usize, Vec<usize>)> = Vec::new();
    for (j, y) in args.iter().enumerate() {
        let member_of = roots.iter().position(|(i, _)| is_member(y, args[*i]));
        match member_of {
            Some(k) => roots[k].1.push(j),
            None => roots.push((j, Vec::new())),
        }
    }
    roots
}

/// Whether each of `y`'s values is null or `x`'s, compared a word of
/// rows at a time (a branch a row was half of q15's aggregate).
fn is_member(y: &arrow::array::PrimitiveArray<Int64Type>, x: &arrow::array::PrimitiveArray<Int64Type>) -> bool {
    let Ok(equal) = arrow::compute::kernels::cmp::eq(x, y) else {
        return false;
    };
    // Equal values where `x` has one (a null's slot holds any value).
    let same = match x.nulls() {
        Some(valid) => valid.inner() & equal.values(),
        None => equal.values().clone(),
    };
    let missed = match y.nulls() {
        Some(valid) => valid.inner() & &!&same,
        None => !&same,
    };
    missed.count_set_bits() == 0
}

fn ints(a: &ArrayRef) -> Result<&arrow::array::PrimitiveArray<Int64Type>> {
    a.as_primitive_opt::<Int64Type>()
        .ok_or_else(|| Error::internal(format!("aggregate: expected BIGINT, got {}", a.data_type())))
}

fn floats(a: &ArrayRef) -> Result<&arrow::array::PrimitiveArray<Float64Type>> {
    a.as_primitive_opt::<Float64Type>()
        .ok_or_else(|| Error::internal(format!("aggregate: expected DOUBLE, got {}", a.data_type())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_whose_values_are_null_or_an_earlier_counts_is_its_member() {
        let x = Int64Array::from(vec![Some(1), Some(2), None, Some(4)]);
        // x under a FILTER.
        let filtered = Int64Array::from(vec![None, Some(2), None, Some(4)]);
        // Another column that once equals x.
        let other = Int64Array::from(vec![Some(1), Some(7), Some(3), None]);
        // Valid where x is null: not x's member, though equal where both are.
        let wider = Int64Array::from(vec![Some(1), None, Some(3), Some(4)]);
        // Differs from x on one row.
        let differs = Int64Array::from(vec![Some(1), Some(2), None, Some(5)]);
        let args = [&x, &filtered, &other, &wider, &differs, &filtered];
        assert_eq!(
            roots(&args),
            vec![(0, vec![1, 5]), (2, vec![]), (3, vec![]), (4, vec![])]
        );
    }
}
