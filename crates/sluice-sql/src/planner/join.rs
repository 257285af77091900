//! Joins of two streams → a join operator fed by a hash exchange of each
//! side on its equi-join keys. The ON of an outer join (LEFT, RIGHT,
//! FULL) holds only what the operator decides matches by (keys, time
//! bounds) and filters of the side that is not preserved; its WHERE
//! filters the joined rows. A join with a changelog side (an aggregate
//! without a window before it), and an outer join that is neither windowed
//! nor an interval join, is *updating*: its result is a changelog
//! (`crates/sluice-dataflow/src/updating_join.rs`).
//!
//! The conjuncts of `ON` and of a `WHERE` right above the join are sorted:
//! those reading one side only become that side's filter (before the
//! exchange, so fewer rows are shipped and stored), `l = r` pairs become
//! the join keys, and the rest filter the joined rows: in the operator for
//! an append-only inner join (`JoinSpec::filter`, checked before a pair is
//! built whole), else in a filter after it. A join whose keys
//! pair the two sides' event-time columns (e.g. both `window_end`s after
//! window aggregates) is *windowed*: its state is freed on the watermark.
//! A join whose other conditions bound each side's event time by the
//! other's (`a.ts BETWEEN b.ts - INTERVAL '10' SECOND AND b.ts`, or a pair
//! of `<=`/`>=`) is an *interval* join: a row is freed once the watermark
//! shows that no row it could match can still come. Any other join keeps
//! its rows for `SET join_state_ttl`, or without one until the rows limit
//! (`join_state_rows_max`) fails it.

use super::{DagBuilder, unsupported};
use crate::planner::stage::{Stage, col, substitute, to_sql};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::DFSchema;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Join, JoinType, Operator};
use sluice_plan::{JoinKind, JoinSide, JoinSpec, OP_COLUMN, OperatorKind, Partitioning};
use sluice_types::{Error, Result, SqlCode};
use std::sync::Arc;

/// Which input(s) an expression reads.
#[derive(Debug, PartialEq, Eq)]
enum Reads {
    Left,
    Right,
    Both,
    Neither,
}

fn reads(expr: &Expr, left: &DFSchema, right: &DFSchema) -> Reads {
    let (mut l, mut r) = (false, false);
    for c in expr.column_refs() {
        if left.has_column(c) {
            l = true;
        } else if right.has_column(c) {
            r = true;
        }
    }
    match (l, r) {
        (true, true) => Reads::Both,
        (true, false) => Reads::Left,
        (false, true) => Reads::Right,
        (false, false) => Reads::Neither,
    }
}

/// A side being prepared: its stage and the key expressions over it.
struct SidePlan {
    stage: Stage,
    keys: Vec<Expr>,
}

impl DagBuilder<'_> {
    pub(super) fn plan_join(&mut self, join: &Join, above: Option<&Expr>) -> Result<Stage> {
        if matches!(join.join_type, JoinType::LeftSemi | JoinType::LeftAnti) {
            // What INTERSECT, EXCEPT and IN / EXISTS subqueries become.
            return Err(unsupported(
                "INTERSECT, EXCEPT and IN or EXISTS subqueries over streams (semi and anti joins) are not \
                 supported yet; UNION ALL and inner joins are",
            ));
        }
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            other => {
                return Err(unsupported(&format!(
                    "{other} joins of streams are not supported yet; inner and outer joins are"
                )));
            }
        };
        let preserved = kind.preserved();
        let (ls, rs) = (join.left.schema().clone(), join.right.schema().clone());
        let mut left = SidePlan {
            stage: self.plan_node(&join.left)?,
            keys: Vec::new(),
        };
        let mut right = SidePlan {
            stage: self.plan_node(&join.right)?,
            keys: Vec::new(),
        };
        // A changelog side (an aggregate without a window, a top-N) makes
        // the join's result a changelog too.
        let changelog = [self.updating(left.stage.op), self.updating(right.stage.op)];
        if left.stage.window.is_some() || right.stage.window.is_some() {
            return Err(unsupported(
                "joining window TVFs directly is not supported yet; aggregate each side per window first and join on window_end",
            ));
        }
        for (l, r) in &join.on {
            left.keys.push(left.stage.substitute(l, &ls)?);
            right.keys.push(right.stage.substitute(r, &rs)?);
        }
        // An inner join's ON and the WHERE above it are one condition; an
        // outer join's WHERE filters the joined rows (padded ones too).
        let mut conjuncts: Vec<Expr> = Vec::new();
        let mut after: Vec<Expr> = Vec::new();
        if let Some(e) = &join.filter {
            conjuncts.extend(split_conjunction(e).into_iter().cloned());
        }
        if let Some(e) = above {
            let split = split_conjunction(e).into_iter().cloned();
            if kind.is_inner() {
                conjuncts.extend(split);
            } else {
                after.extend(split);
            }
        }
        let mut residual = Vec::new();
        for c in conjuncts {
            let side = match reads(&c, &ls, &rs) {
                Reads::Left => Some(0),
                Reads::Right => Some(1),
                _ => None,
            };
            if let Some(s) = side.filter(|s| preserved[*s]) {
                // Filtering a preserved side's rows before the join would
                // drop rows an outer join must keep.
                return Err(unsupported(&format!(
                    "a condition in the ON of a {} join on its preserved {} side only ({c}) is not supported; \
                     put it in WHERE, or in a subquery of that side",
                    kind.describe(),
                    ["left", "right"][s]
                )));
            }
            match reads(&c, &ls, &rs) {
                Reads::Left => {
                    let e = left.stage.substitute(&c, &ls)?;
                    add_filter(&mut left.stage, e);
                }
                Reads::Right => {
                    let e = right.stage.substitute(&c, &rs)?;
                    add_filter(&mut right.stage, e);
                }
                Reads::Both | Reads::Neither => match &c {
                    Expr::BinaryExpr(BinaryExpr {
                        left: a,
                        op: Operator::Eq,
                        right: b,
                    }) if reads(a, &ls, &rs) != Reads::Both && reads(b, &ls, &rs) != Reads::Both => {
                        let (l, r) = match (reads(a, &ls, &rs), reads(b, &ls, &rs)) {
                            (Reads::Left, Reads::Right) => (a, b),
                            (Reads::Right, Reads::Left) => (b, a),
                            _ => {
                                residual.push(c.clone());
                                continue;
                            }
                        };
                        left.keys.push(left.stage.substitute(l, &ls)?);
                        right.keys.push(right.stage.substitute(r, &rs)?);
                    }
                    _ => residual.push(c),
                },
            }
        }
        if left.keys.is_empty() {
            return Err(unsupported(
                "a join of streams needs at least one equality between the two sides (ON a.x = b.y)",
            ));
        }
        let windowed = left.keys.iter().zip(&right.keys).any(|(l, r)| {
            is_column(l, left.stage.time_column.as_deref()) && is_column(r, right.stage.time_column.as_deref())
        });
        let interval_ms = if windowed {
            None
        } else {
            interval_bounds(&residual, [&left.stage, &right.stage], [&ls, &rs])
        };
        if !kind.is_inner() {
            // The operator decides which rows matched: by the keys and, for
            // an interval join, the bounds between the times — nothing else.
            if let Some(c) = residual
                .iter()
                .find(|c| !is_time_bound(c, [&left.stage, &right.stage], [&ls, &rs]))
            {
                return Err(unsupported(&format!(
                    "the ON of a {} join of streams may hold equalities between the sides, bounds between \
                     their event times, and conditions on the side that is not preserved; not {c}",
                    kind.describe()
                )));
            }
            if !windowed && interval_ms.is_none() && !residual.is_empty() {
                // A regular outer join decides matches by the keys alone.
                return Err(unsupported(&format!(
                    "a {} join without a window bounds the event times of its sides both ways or not at all \
                     (a.ts BETWEEN b.ts - INTERVAL '10' SECOND AND b.ts + INTERVAL '10' SECOND makes it an \
                     interval join); not {}",
                    kind.describe(),
                    residual[0]
                )));
            }
        }
        // Any other join keeps its rows: without `join_state_ttl` only
        // `join_state_rows_max` bounds it (Flink's and RisingWave's regular
        // join), and reaching it fails the pipeline naming the setting.
        let state_ttl_ms = self.settings.join_state_ttl_ms;
        let n_left = left.stage.exprs.len();
        let n_right = right.stage.exprs.len();
        let (left_op, left_side) = self.join_input(left, changelog[0])?;
        let (right_op, right_side) = self.join_input(right, changelog[1])?;
        for (l, r) in left_side.keys.iter().zip(&right_side.keys) {
            let (lt, rt) = (
                left_side.schema.field(*l).data_type(),
                right_side.schema.field(*r).data_type(),
            );
            if lt != rt {
                return Err(Error::user(
                    SqlCode::DatatypeMismatch,
                    format!("join keys of different types ({lt} and {rt}); CAST one side"),
                ));
            }
        }
        let updating = changelog.contains(&true) || (!kind.is_inner() && !windowed && interval_ms.is_none());
        let mut fields: Vec<Field> = Vec::new();
        if updating {
            fields.push(Field::new(OP_COLUMN, DataType::Utf8, false));
        }
        for i in 0..n_left {
            fields.push(Field::new(
                format!("_l{i}"),
                left_side.schema.field(i).data_type().clone(),
                true,
            ));
        }
        for i in 0..n_right {
            fields.push(Field::new(
                format!("_r{i}"),
                right_side.schema.field(i).data_type().clone(),
                true,
            ));
        }
        let out_schema = Arc::new(Schema::new(fields));
        let exprs: Vec<Expr> = (0..n_left)
            .map(|i| col(&format!("_l{i}")))
            .chain((0..n_right).map(|i| col(&format!("_r{i}"))))
            .collect();
        let joined = join.schema.as_ref();
        // An outer join's ON conditions were all taken by the operator.
        let mut residual = if kind.is_inner() { residual } else { Vec::new() };
        // An append-only inner join checks the rest itself, on the columns
        // they read, before it builds a pair whole (a changelog's rows pass
        // through the filter after it, op and all).
        let filter = if kind.is_inner() && !updating && !residual.is_empty() {
            let over_output = std::mem::take(&mut residual)
                .iter()
                .map(|r| substitute(r, joined, &exprs))
                .collect::<Result<Vec<_>>>()?;
            conjunction(over_output).map(|e| to_sql(&e)).transpose()?
        } else {
            None
        };
        let spec = JoinSpec {
            left: left_side.clone(),
            right: right_side.clone(),
            kind,
            windowed,
            interval_ms,
            state_ttl_ms,
            state_rows_max: self.settings.join_state_rows_max,
            filter,
        };
        debug_assert_eq!(spec.updating(), updating);
        let parallelism = self.settings.parallelism;
        let op = self.add(OperatorKind::Join(spec), parallelism, out_schema.clone());
        self.connect(left_op, op, Partitioning::Hash(left_side.keys.clone()));
        self.connect(right_op, op, Partitioning::Hash(right_side.keys.clone()));
        // The joined rows keep the left side's event time when it is an output
        // column and the join is windowed (its rows never fall behind the watermark).
        // (A right or full outer join's left columns may be NULL: no event time.)
        let time_column = left_side
            .time_column
            .filter(|i| windowed && *i < n_left && !preserved[1])
            .map(|i| format!("_l{i}"));
        let mut stage = Stage::new(op, parallelism, out_schema, exprs, time_column);
        for r in residual.into_iter().chain(after) {
            let e = stage.substitute(&r, joined)?;
            add_filter(&mut stage, e);
        }
        Ok(stage)
    }

    /// Materialises one side as `[its columns…, keys…, time?, op?]` (`op`:
    /// a changelog side's op column, last).
    fn join_input(&mut self, side: SidePlan, changelog: bool) -> Result<(sluice_types::OperatorId, JoinSide)> {
        let SidePlan { stage, keys } = side;
        let n = stage.exprs.len();
        let time_expr = stage.time_column.as_deref().map(col);
        // The time column among the side's own output columns, if passed through.
        let time_in_output = stage.time_column.as_deref().and_then(|t| {
            stage
                .exprs
                .iter()
                .position(|e| matches!(e.clone().unalias(), Expr::Column(c) if c.name == t))
        });
        let mut exprs = stage.exprs.clone();
        let mut names: Vec<String> = (0..n).map(|i| format!("_c{i}")).collect();
        // A key that is one of the side's output columns is not stored twice.
        let mut key_columns = Vec::with_capacity(keys.len());
        for (j, k) in keys.iter().enumerate() {
            match stage
                .exprs
                .iter()
                .position(|e| e.clone().unalias() == k.clone().unalias())
            {
                Some(i) => key_columns.push(i),
                None => {
                    key_columns.push(exprs.len());
                    exprs.push(k.clone());
                    names.push(format!("_key{j}"));
                }
            }
        }
        let time_column = match (time_in_output, time_expr) {
            (Some(i), _) => Some(i),
            (None, Some(t)) => {
                exprs.push(t);
                names.push("_time".into());
                Some(names.len() - 1)
            }
            (None, None) => None,
        };
        let op_column = changelog.then(|| {
            exprs.push(col(OP_COLUMN));
            names.push(OP_COLUMN.to_string());
            names.len() - 1
        });
        let prepared = Stage { exprs, ..stage };
        let (op, schema, _) = self.materialize(&prepared, &names)?;
        Ok((
            op,
            JoinSide {
                schema,
                keys: key_columns,
                time_column,
                output_columns: n,
                op_column,
            },
        ))
    }
}

/// The interval of an interval join: from conditions `p <= q` (`<`, `>`,
/// `>=`, `BETWEEN`) where `p` and `q` are the two sides' event-time columns
/// plus or minus constant intervals, the most a left row's time may exceed
/// a right row's (`L.t - R.t <= u`) and the reverse (`R.t - L.t <= v`).
/// Returns how long after the watermark passes a row of each side it can
/// still match (`[v, u]`: a left row at `t` matches right rows up to
/// `t + v`), or `None` unless both directions are bounded.
fn interval_bounds(conditions: &[Expr], stages: [&Stage; 2], schemas: [&DFSchema; 2]) -> Option<[i64; 2]> {
    let mut bounds: [Option<i64>; 2] = [None, None];
    // `strict`: p < q, which for whole ms is p <= q - 1 (exact: an outer
    // join decides matches by these bounds alone).
    let mut bound = |p: &Expr, q: &Expr, strict: bool| {
        let Some((sp, op)) = time_term(p, stages, schemas) else {
            return;
        };
        let Some((sq, oq)) = time_term(q, stages, schemas) else {
            return;
        };
        if sp == sq {
            return;
        }
        // t_p + op <= t_q + oq, i.e. t_p - t_q <= oq - op.
        let limit = oq - op - i64::from(strict);
        let b = &mut bounds[sp];
        *b = Some(b.map_or(limit, |old| old.min(limit)));
    };
    for c in conditions {
        for (p, q, strict) in comparisons(c) {
            bound(p, q, strict);
        }
    }
    // bounds[0] bounds L.t - R.t: a right row's wait; bounds[1] a left row's.
    Some([bounds[1]?, bounds[0]?])
}

/// A conjunct as `p <= q` comparisons (`strict`: `p < q`): `BETWEEN` is
/// two, `<`, `<=`, `>`, `>=` one, anything else none.
fn comparisons(c: &Expr) -> Vec<(&Expr, &Expr, bool)> {
    match c {
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => vec![(low, expr, false), (expr, high, false)],
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::Lt => vec![(left, right, true)],
            Operator::LtEq => vec![(left, right, false)],
            Operator::Gt => vec![(right, left, true)],
            Operator::GtEq => vec![(right, left, false)],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Whether `c` bounds one side's event time by the other's (what
/// [`interval_bounds`] reads): `BETWEEN` or a comparison between the two
/// sides' event-time columns plus or minus constant intervals.
fn is_time_bound(c: &Expr, stages: [&Stage; 2], schemas: [&DFSchema; 2]) -> bool {
    let terms = comparisons(c);
    !terms.is_empty()
        && terms.iter().all(
            |(p, q, _)| match (time_term(p, stages, schemas), time_term(q, stages, schemas)) {
                (Some((a, _)), Some((b, _))) => a != b,
                _ => false,
            },
        )
}

/// `(side, offset)` when `e` is a side's event-time column plus a constant
/// interval (in ms).
fn time_term(e: &Expr, stages: [&Stage; 2], schemas: [&DFSchema; 2]) -> Option<(usize, i64)> {
    let side = match reads(e, schemas[0], schemas[1]) {
        Reads::Left => 0,
        Reads::Right => 1,
        _ => return None,
    };
    let stage = stages[side];
    let e = stage.substitute(e, schemas[side]).ok()?;
    Some((side, time_offset(&e, stage.time_column.as_deref()?)?))
}

fn time_offset(e: &Expr, time: &str) -> Option<i64> {
    match e {
        Expr::Alias(a) => time_offset(&a.expr, time),
        Expr::Column(c) if c.name == time => Some(0),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Plus,
            right,
        }) => match (time_offset(left, time), time_offset(right, time)) {
            (Some(t), None) => t.checked_add(interval_ms(right)?),
            (None, Some(t)) => t.checked_add(interval_ms(left)?),
            _ => None,
        },
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Minus,
            right,
        }) => time_offset(left, time)?.checked_sub(interval_ms(right)?),
        _ => None,
    }
}

/// A constant day-time interval in whole ms (rounded down: event times are
/// whole ms, so `a - b <= x` holds exactly when `a - b <= floor(x)`).
fn interval_ms(e: &Expr) -> Option<i64> {
    match e {
        Expr::Alias(a) => interval_ms(&a.expr),
        Expr::Literal(v, _) => super::interval_literal_ms(v),
        _ => None,
    }
}

fn is_column(e: &Expr, name: Option<&str>) -> bool {
    match e {
        Expr::Alias(a) => is_column(&a.expr, name),
        Expr::Column(c) => name == Some(c.name.as_str()),
        _ => false,
    }
}

fn add_filter(stage: &mut Stage, predicate: Expr) {
    stage.filter = Some(match stage.filter.take() {
        Some(existing) => existing.and(predicate),
        None => predicate,
    });
}
