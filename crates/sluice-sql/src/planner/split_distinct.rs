//! Split distinct aggregation (`SET distinct_split_buckets = n`, Flink's
//! `table.optimizer.distinct-agg.split.enabled`): an aggregate without a
//! window with `count(DISTINCT x)` (or another aggregate of distinct
//! values) over few groups — Nexmark q15 has one a day — keeps each group's
//! distinct values in one instance, which then does all the work. Split, it
//! is two levels of aggregates without a window:
//!
//! - **partial**, one aggregate per distinct value `x` (its FILTER left
//!   out: the same value, counted or not): grouped by the keys and
//!   `split_bucket(x, n)`, hashed on them over every instance; equal values
//!   share a bucket, so each bucket's distinct count is exact and the
//!   buckets' counts add up. The aggregates without DISTINCT go to the first
//!   partial. Each partial's changelog is padded to the calls of all of them
//!   (NULL where another partial computes the call).
//! - **final**, grouped by the keys, over the partials' changelogs (the
//!   union of their edges): `sum` of the partial counts and sums, `min`/`max`
//!   of the partial minimums and maximums, taking back each partial row a
//!   partial retracts. A count is `coalesce(…, 0)` above it: a group whose
//!   first partial row came from another partial has no value for it yet.
//!
//! Between barriers a final row may combine partials that have read
//! different amounts of the input (the partials run apart); at a barrier
//! every partial has passed it, so a materialized view or a checkpoint is as
//! of one point of the input, and the changelog ends at the exact result.
//! Over a changelog input, with an aggregate that does not combine (`avg`,
//! a decimal `sum`, a `min` of timestamps…), or with `SET state_ttl` (an
//! idle bucket expiring would take its part out of a group still live), the
//! query is planned unsplit.

use super::super::stage::{Stage, col};
use super::{DagBuilder, unaliased};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::{Aggregate, Expr, expr::AggregateFunction};
use datafusion::scalar::ScalarValue;
use sluice_plan::{AggregateCall, GroupAggSpec, OP_COLUMN, OperatorKind, Partitioning};
use sluice_types::{Error, Result};
use std::sync::Arc;

/// How an aggregate splits: the distinct values bucketed, and the partial
/// each call is computed by.
pub(super) struct Split {
    /// Per partial, the value its buckets hash (the first: the first
    /// distinct call's, taking the calls without DISTINCT too).
    values: Vec<Expr>,
    /// Per call, its partial.
    partial_of: Vec<usize>,
    /// Per call, the function the final level combines its partial
    /// values with.
    combine: Vec<&'static str>,
}

/// The function the final level combines a call's partial values with,
/// when the call splits; its result type is the call's.
fn combiner(call: &AggregateCall, out: &DataType) -> Option<&'static str> {
    let numeric = matches!(out, DataType::Int64 | DataType::UInt64 | DataType::Float64);
    let ordered = numeric || out.is_integer() || matches!(out, DataType::Float32 | DataType::Utf8);
    match call.function.as_str() {
        "count" => Some("sum"),
        "sum" if numeric => Some("sum"),
        "min" if ordered => Some("min"),
        "max" if ordered => Some("max"),
        _ => None,
    }
}

impl DagBuilder<'_> {
    /// How `agg` (its `calls` as planned over `child`) splits, or `None`
    /// when it does not: no distinct call, or a call that does not combine.
    pub(super) fn split_of(&self, agg: &Aggregate, child: &Stage, calls: &[AggregateCall]) -> Result<Option<Split>> {
        if !calls.iter().any(|c| c.distinct) {
            return Ok(None);
        }
        let first_value = agg.group_expr.len();
        let mut values: Vec<Expr> = Vec::new();
        let mut partial_of = Vec::with_capacity(calls.len());
        let mut combine = Vec::with_capacity(calls.len());
        for (i, (call, e)) in calls.iter().zip(&agg.aggr_expr).enumerate() {
            let out = agg.schema.field(first_value + i).data_type();
            let Some(f) = combiner(call, out) else {
                return Ok(None);
            };
            combine.push(f);
            if !call.distinct {
                partial_of.push(0);
                continue;
            }
            let Expr::AggregateFunction(AggregateFunction { params, .. }) = unaliased(e.clone()) else {
                return Ok(None);
            };
            let [arg] = params.args.as_slice() else {
                return Ok(None);
            };
            let value = child.substitute(arg, agg.input.schema())?;
            let d = match values.iter().position(|v| *v == value) {
                Some(d) => d,
                None => {
                    values.push(value);
                    values.len() - 1
                }
            };
            partial_of.push(d);
        }
        Ok(Some(Split {
            values,
            partial_of,
            combine,
        }))
    }

    /// Plans `agg` split (see the module): `calls` read `args` as planned
    /// for the unsplit aggregate (numbered after the keys); returns the
    /// final level's stage, `[keys…, aggregates…]` as the unsplit one.
    pub(super) fn plan_split_distinct(
        &mut self,
        agg: &Aggregate,
        child: Stage,
        keys: &[Expr],
        (calls, args): (Vec<AggregateCall>, Vec<Expr>),
        split: Split,
    ) -> Result<Stage> {
        let buckets = self.settings.distinct_split_buckets;
        let (nk, na, nd) = (keys.len(), args.len(), split.values.len());
        // The partials' input: keys, arguments, then a bucket per distinct
        // value (`_arg<na + d>`).
        let mut columns = args;
        columns.extend(
            split
                .values
                .iter()
                .map(|v| sluice_functions::split_bucket(v.clone(), buckets)),
        );
        let (pre_op, pre_schema) = self.pre_project(child, None::<(Expr, &'static str)>, keys, &columns)?;
        let out_types: Vec<DataType> = (0..calls.len())
            .map(|i| agg.schema.field(nk + i).data_type().clone())
            .collect();

        // Each partial, padded to every call.
        let mut padded = Vec::with_capacity(nd);
        for d in 0..nd {
            let mine: Vec<usize> = (0..calls.len()).filter(|i| split.partial_of[*i] == d).collect();
            let key_columns: Vec<usize> = (0..nk).chain([nk + na + d]).collect();
            let mut fields = vec![Field::new(OP_COLUMN, DataType::Utf8, false)];
            fields.extend(key_columns.iter().map(|k| pre_schema.field(*k).clone()));
            fields.extend(
                mine.iter()
                    .map(|i| Field::new(format!("_p{i}"), out_types[*i].clone(), true)),
            );
            let schema = Arc::new(Schema::new(fields));
            let aggregates = mine.iter().map(|i| calls[*i].clone()).collect();
            let spec = GroupAggSpec {
                input_schema: pre_schema.clone(),
                op_column: None,
                state_ttl_ms: self.settings.state_ttl_ms,
                key_columns: key_columns.clone(),
                aggregates,
                groups_max: self.settings.aggregate_groups_max,
            };
            let (op, parallelism) =
                self.add_keyed(OperatorKind::GroupAggregate(spec), pre_op, key_columns, schema.clone());
            let mut exprs = vec![col(OP_COLUMN)];
            exprs.extend((0..nk).map(|j| col(&format!("_k{j}"))));
            exprs.extend((0..calls.len()).map(|i| match split.partial_of[i] == d {
                true => col(&format!("_p{i}")),
                false => Expr::Cast(datafusion::logical_expr::Cast::new(
                    Box::new(Expr::Literal(ScalarValue::Null, None)),
                    out_types[i].clone(),
                )),
            }));
            let mut names = vec![OP_COLUMN.to_string()];
            names.extend((0..nk).map(|j| format!("_k{j}")));
            names.extend((0..calls.len()).map(|i| format!("_arg{i}")));
            let stage = Stage::new(op, parallelism, schema, exprs, None);
            padded.push(self.materialize(&stage, &names)?);
        }
        let final_input = padded[0].1.clone();
        if let Some((_, other, _)) = padded.iter().find(|(_, s, _)| s.fields() != final_input.fields()) {
            return Err(Error::internal(format!(
                "split distinct: partial schemas differ: {final_input:?} and {other:?}"
            )));
        }

        // The final level over the union of the partials' changelogs.
        let key_columns: Vec<usize> = (1..=nk).collect();
        let mut fields = vec![Field::new(OP_COLUMN, DataType::Utf8, false)];
        fields.extend(key_columns.iter().map(|k| final_input.field(*k).clone()));
        fields.extend((0..calls.len()).map(|i| Field::new(format!("_a{i}"), out_types[i].clone(), true)));
        let out_schema = Arc::new(Schema::new(fields));
        let aggregates = split
            .combine
            .iter()
            .enumerate()
            .map(|(i, f)| AggregateCall {
                function: f.to_string(),
                args: vec![1 + nk + i],
                distinct: false,
            })
            .collect();
        let spec = GroupAggSpec {
            input_schema: final_input,
            op_column: Some(0),
            state_ttl_ms: self.settings.state_ttl_ms,
            key_columns: key_columns.clone(),
            aggregates,
            groups_max: self.settings.aggregate_groups_max,
        };
        let (parallelism, partitioning) = match nk {
            0 => (1, Partitioning::Single),
            _ => (self.settings.parallelism, Partitioning::Hash(key_columns)),
        };
        let op = self.add(OperatorKind::GroupAggregate(spec), parallelism, out_schema.clone());
        for (from, _, _) in padded {
            self.connect(from, op, partitioning.clone());
        }
        let mut exprs: Vec<Expr> = (0..nk).map(|j| col(&format!("_k{j}"))).collect();
        exprs.extend(calls.iter().enumerate().map(|(i, c)| {
            let a = col(&format!("_a{i}"));
            match c.function.as_str() {
                "count" => datafusion::functions::core::expr_fn::coalesce(vec![
                    a,
                    Expr::Literal(ScalarValue::Int64(Some(0)), None),
                ]),
                _ => a,
            }
        }));
        Ok(Stage::new(op, parallelism, out_schema, exprs, None))
    }
}
