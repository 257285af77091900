//! Common subexpressions of a project operator, evaluated once a batch.
//!
//! A query often names one expression several times — Nexmark q21 extracts
//! the same `channel_id` from the URL in its WHERE and in its CASE, and
//! lowers `channel` in four WHEN branches; q14 takes `HOUR(date_time)` four
//! times. DataFusion evaluates each occurrence. Here every such expression
//! is computed once per batch as a hidden column the filter and the
//! projection then read: those the filter surely evaluates on every row
//! before the filter (the filtered rows keep theirs for the projection),
//! those the projection surely evaluates on the rows that passed after it.
//!
//! Only an expression *surely* evaluated somewhere at its level is taken
//! out: one that appears only in a CASE branch, after the first operand of
//! AND/OR, or after the first argument of a short-circuiting function
//! (`coalesce`) may be skipped on some rows, and computing it on every row
//! could fail where the query does not (`CASE WHEN x <> 0 THEN 10 / x
//! END`). Volatile expressions (`random()`) are never shared.

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::expr::Case;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator};
use std::collections::HashMap;

/// An expression taken out: its hidden column's name and what computes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shared {
    pub name: String,
    pub expr: Expr,
}

/// Calls `f` on `expr` and each of its subexpressions with whether it is
/// surely evaluated whenever `expr` is (given `sure` for `expr`).
fn visit<'a>(expr: &'a Expr, sure: bool, f: &mut impl FnMut(&'a Expr, bool)) {
    f(expr, sure);
    match expr {
        Expr::Case(Case {
            expr: base,
            when_then_expr,
            else_expr,
        }) => {
            if let Some(base) = base {
                visit(base, sure, f);
            }
            for (i, (when, then)) in when_then_expr.iter().enumerate() {
                visit(when, sure && i == 0, f);
                visit(then, false, f);
            }
            if let Some(e) = else_expr {
                visit(e, false, f);
            }
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And | Operator::Or,
            right,
        }) => {
            visit(left, sure, f);
            visit(right, false, f);
        }
        Expr::ScalarFunction(call) if call.func.short_circuits() => {
            for (i, arg) in call.args.iter().enumerate() {
                visit(arg, sure && i == 0, f);
            }
        }
        other => {
            let _ = other.apply_children(|child| {
                visit(child, sure, f);
                Ok(TreeNodeRecursion::Continue)
            });
        }
    }
}

/// Whether sharing `expr` can save work.
fn shareable(expr: &Expr) -> bool {
    !matches!(
        expr,
        Expr::Column(_)
            | Expr::Literal(..)
            | Expr::Alias(_)
            | Expr::ScalarVariable(..)
            | Expr::Placeholder(_)
            | Expr::OuterReferenceColumn(..)
    ) && !expr.is_volatile()
}

fn size(expr: &Expr) -> usize {
    let mut n = 0;
    let _ = expr.apply(|_| {
        n += 1;
        Ok(TreeNodeRecursion::Continue)
    });
    n
}

/// Takes out of `roots` (`sure[i]`: whether root `i` is evaluated on every
/// row at this level) every shareable expression that occurs at least
/// twice — in the roots or in what was taken out before — and surely once,
/// the biggest first; each occurrence becomes a column named `prefix` and a
/// number from `next`. `schema` is the input's with the columns taken out
/// so far (it grows with the new ones). Returns them in the order they
/// were taken out.
pub(super) fn share(
    roots: &mut [Expr],
    sure: &[bool],
    taken: &mut Vec<Shared>,
    schema: &mut DFSchema,
    (prefix, next): (&str, &mut usize),
) -> datafusion::error::Result<()> {
    let first_new = taken.len();
    loop {
        // Occurrences of each expression, and whether one is sure.
        let mut seen: HashMap<&Expr, (usize, bool)> = HashMap::new();
        for (root, sure) in roots.iter().zip(sure) {
            visit(root, *sure, &mut |e, s| {
                if shareable(e) {
                    let entry = seen.entry(e).or_default();
                    entry.0 += 1;
                    entry.1 |= s;
                }
            });
        }
        // What this level took out is computed on every row of it.
        for shared in &taken[first_new..] {
            visit(&shared.expr, true, &mut |e, s| {
                if shareable(e) {
                    let entry = seen.entry(e).or_default();
                    entry.0 += 1;
                    entry.1 |= s;
                }
            });
        }
        let best = seen
            .into_iter()
            .filter(|(_, (n, sure))| *n >= 2 && *sure)
            .map(|(e, _)| (size(e), e.to_string(), e))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
            .map(|(_, _, e)| e.clone());
        let Some(target) = best else { return Ok(()) };
        let name = loop {
            let name = format!("{prefix}{next}");
            *next += 1;
            if !schema.has_column_with_unqualified_name(&name) {
                break name;
            }
        };
        let data_type = target.get_type(&*schema)?;
        let field = arrow::datatypes::Field::new(&name, data_type, true);
        let added = DFSchema::from_unqualified_fields(vec![field].into(), Default::default())?;
        *schema = schema.join(&added)?;
        let column = Expr::Column(Column::from_name(&name));
        let replace = |e: Expr| -> datafusion::error::Result<Expr> {
            Ok(e.transform_down(|node| {
                Ok(if node == target {
                    Transformed::new(column.clone(), true, TreeNodeRecursion::Jump)
                } else {
                    Transformed::no(node)
                })
            })?
            .data)
        };
        for root in roots.iter_mut() {
            *root = replace(std::mem::replace(root, Expr::Literal(ScalarValue::Null, None)))?;
        }
        for shared in taken[first_new..].iter_mut() {
            shared.expr = replace(std::mem::replace(
                &mut shared.expr,
                Expr::Literal(ScalarValue::Null, None),
            ))?;
        }
        taken.push(Shared { name, expr: target });
    }
}

/// `taken` ordered so that each comes after the ones it reads.
pub(super) fn in_order(taken: Vec<Shared>) -> Vec<Shared> {
    let mut left = taken;
    let mut out: Vec<Shared> = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let pending: Vec<String> = left.iter().map(|s| s.name.clone()).collect();
        let ready = left.iter().position(|s| {
            let mut reads_pending = false;
            let _ = s.expr.apply(|e| {
                if let Expr::Column(c) = e
                    && pending.contains(&c.name)
                {
                    reads_pending = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            });
            !reads_pending
        });
        // Each reads only ones taken out after it, so one is always ready.
        let i = ready.unwrap_or(0);
        out.push(left.remove(i));
    }
    out
}
