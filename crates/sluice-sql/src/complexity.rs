//! Statements too long or too deep to handle safely are refused before
//! anything recurses over them: `54000` for the length, `54001` for the
//! depth and for the size of the bound plan (the limits are in
//! [`sluice_types::limits`]).
//!
//! sqlparser parses a chain of infix operators (`a OR b OR c …`,
//! `1 + 1 + …`) in a loop, not by recursion, so its recursion limit never
//! sees it: the tree it builds is as deep as the chain is long, and every
//! later pass over it (binding, optimising, unparsing, evaluating, even
//! dropping it) recurses once per level. Three steps keep that bounded:
//!
//! 1. parsing, and dropping whatever a refused statement built, run on a
//!    stack sized for the statement's length ([`with_stack_for`]): a tree
//!    can be no deeper than the text is long;
//! 2. a long chain of `AND` or `OR` (the shape generated filters have) is
//!    regrouped into a balanced tree ([`regroup_chains`]), as Postgres
//!    flattens them into one n-ary node: 30 000 terms become 15 levels, and
//!    the result is the same (both are associative, and the operands keep
//!    their order);
//! 3. what is still deeper than [`EXPRESSION_DEPTH_MAX`] is refused
//!    ([`check_depth`]); the walk stops at the limit, so it never goes
//!    deeper than that itself.

use crate::statement::SluiceStatement;
use datafusion::logical_expr::LogicalPlan;
use sluice_types::limits::{EXPRESSION_DEPTH_MAX, PLAN_NODES_MAX, STATEMENT_BYTES_MAX};
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{BinaryOperator, Expr, Query, SetExpr, Value, Visit, VisitMut, Visitor, VisitorMut};
use std::ops::ControlFlow;

/// `AND` / `OR` chains with at least this many operands are regrouped;
/// shorter ones keep the shape they were written in (and the text EXPLAIN
/// shows for them).
pub const REGROUP_OPERANDS_MIN: usize = 64;

/// Stack reserved per byte of SQL text while parsing: the deepest tree a
/// text can make has about one level per two bytes (`1+1+…`), and dropping
/// one level of sqlparser's `Expr` takes under 300 bytes of stack in a
/// debug build.
const STACK_BYTES_PER_SQL_BYTE: usize = 256;

/// Refuses a query string longer than [`STATEMENT_BYTES_MAX`] (`54000`).
pub fn check_length(sql: &str) -> Result<()> {
    if sql.len() > STATEMENT_BYTES_MAX {
        return Err(Error::user(
            SqlCode::ProgramLimitExceeded,
            format!(
                "statement is too long: {} bytes, at most {STATEMENT_BYTES_MAX} are accepted",
                sql.len()
            ),
        ));
    }
    Ok(())
}

/// Runs `f` (parsing `bytes` of SQL and checking what it built) on a stack
/// large enough for the deepest tree that text can make: the current one if
/// it has that much left, else a new one of that size (address space; only
/// the pages used are touched).
pub fn with_stack_for<T>(bytes: usize, f: impl FnOnce() -> T) -> T {
    let need = bytes.saturating_mul(STACK_BYTES_PER_SQL_BYTE).max(256 << 10);
    stacker::maybe_grow(need, need, f)
}

/// Regroups every long `AND` / `OR` chain of `statement` into a balanced
/// tree. Call it on a stack sized by [`with_stack_for`]: the walk recurses
/// once per level of the tree as parsed.
pub fn regroup_chains(statement: &mut SluiceStatement) {
    let _ = visit_statement_mut(statement, &mut Regroup);
}

/// Refuses a statement nested deeper than [`EXPRESSION_DEPTH_MAX`]
/// (`54001`). The walk stops at the limit.
pub fn check_depth(statement: &SluiceStatement) -> Result<()> {
    let mut gauge = Gauge::default();
    match visit_statement(statement, &mut gauge) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(Error::too_complex(format!(
            "statement too complex: expressions nested more than {EXPRESSION_DEPTH_MAX} levels deep \
             (long AND/OR chains are fine; split deep arithmetic or nested CASE/subqueries)"
        ))),
    }
}

/// Refuses a bound plan of more than [`PLAN_NODES_MAX`] nodes (`54001`).
/// Counted without recursion.
pub fn check_plan(plan: &LogicalPlan) -> Result<()> {
    let mut count = 0usize;
    let mut pending = vec![plan];
    while let Some(node) = pending.pop() {
        count += 1;
        if count > PLAN_NODES_MAX {
            return Err(Error::too_complex(format!(
                "statement too complex: its plan has more than {PLAN_NODES_MAX} operators; \
                 split it into derived streams"
            )));
        }
        pending.extend(node.inputs());
    }
    Ok(())
}

fn visit_statement<V: Visitor>(statement: &SluiceStatement, v: &mut V) -> ControlFlow<V::Break> {
    match statement {
        SluiceStatement::CreateStream(c) => {
            c.columns.visit(v)?;
            if let Some((_, e)) = &c.watermark {
                e.visit(v)?;
            }
            for (_, _, e) in &c.computed {
                e.visit(v)?;
            }
        }
        SluiceStatement::CreateStreamAs { query, .. }
        | SluiceStatement::CreateSink { query, .. }
        | SluiceStatement::Explain(query) => query.visit(v)?,
        SluiceStatement::Sql(s) => s.visit(v)?,
        SluiceStatement::Drop { .. }
        | SluiceStatement::ShowStreams
        | SluiceStatement::ShowPipelines
        | SluiceStatement::ShowCheckpoints(_)
        | SluiceStatement::ShowVariable(_)
        | SluiceStatement::ShowAll
        | SluiceStatement::Describe(_)
        | SluiceStatement::ExplainPipeline(_)
        | SluiceStatement::AlterPipelinePause { .. } => {}
    }
    ControlFlow::Continue(())
}

fn visit_statement_mut<V: VisitorMut>(statement: &mut SluiceStatement, v: &mut V) -> ControlFlow<V::Break> {
    match statement {
        SluiceStatement::CreateStream(c) => {
            VisitMut::visit(&mut c.columns, v)?;
            if let Some((_, e)) = &mut c.watermark {
                VisitMut::visit(e, v)?;
            }
            for (_, _, e) in &mut c.computed {
                VisitMut::visit(e, v)?;
            }
        }
        SluiceStatement::CreateStreamAs { query, .. }
        | SluiceStatement::CreateSink { query, .. }
        | SluiceStatement::Explain(query) => VisitMut::visit(query, v)?,
        SluiceStatement::Sql(s) => VisitMut::visit(s, v)?,
        SluiceStatement::Drop { .. }
        | SluiceStatement::ShowStreams
        | SluiceStatement::ShowPipelines
        | SluiceStatement::ShowCheckpoints(_)
        | SluiceStatement::ShowVariable(_)
        | SluiceStatement::ShowAll
        | SluiceStatement::Describe(_)
        | SluiceStatement::ExplainPipeline(_)
        | SluiceStatement::AlterPipelinePause { .. } => {}
    }
    ControlFlow::Continue(())
}

/// The depth walk: one level per expression, per query and per level of
/// set operations in a query's body.
#[derive(Default)]
struct Gauge {
    depth: usize,
    /// What each open query added.
    queries: Vec<usize>,
}

impl Gauge {
    fn enter(&mut self, levels: usize) -> ControlFlow<()> {
        self.depth += levels;
        if self.depth > EXPRESSION_DEPTH_MAX {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl Visitor for Gauge {
    type Break = ();

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let levels = 1 + set_operation_depth(&query.body);
        self.queries.push(levels);
        self.enter(levels)
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        self.depth -= self.queries.pop().unwrap_or(0);
        ControlFlow::Continue(())
    }
}

/// How deeply `UNION` / `INTERSECT` / `EXCEPT` nest in a query's body
/// (sqlparser builds a chain of them in a loop, like infix operators).
fn set_operation_depth(body: &SetExpr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(body, 0usize)];
    while let Some((node, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        if let SetExpr::SetOperation { left, right, .. } = node {
            pending.push((left, depth + 1));
            pending.push((right, depth + 1));
        }
    }
    deepest
}

struct Regroup;

impl VisitorMut for Regroup {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::BinaryOp { op, .. } = expr else {
            return ControlFlow::Continue(());
        };
        if !matches!(op, BinaryOperator::And | BinaryOperator::Or) {
            return ControlFlow::Continue(());
        }
        let op = op.clone();
        if chain_len(expr, &op) < REGROUP_OPERANDS_MIN {
            return ControlFlow::Continue(());
        }
        let chain = std::mem::replace(expr, Expr::Value(Value::Null.into()));
        let mut operands = Vec::new();
        let mut pending = vec![chain];
        while let Some(node) = pending.pop() {
            match node {
                Expr::BinaryOp { left, op: o, right } if o == op => {
                    pending.push(*right);
                    pending.push(*left);
                }
                operand => operands.push(operand),
            }
        }
        *expr = balanced(operands, &op);
        // The walk goes on into the new tree's operands.
        ControlFlow::Continue(())
    }
}

/// Operands of the chain of `op` rooted at `expr`, counted without
/// recursion.
fn chain_len(expr: &Expr, op: &BinaryOperator) -> usize {
    let mut count = 0;
    let mut pending = vec![expr];
    while let Some(node) = pending.pop() {
        match node {
            Expr::BinaryOp { left, op: o, right } if o == op => {
                pending.push(right);
                pending.push(left);
            }
            _ => count += 1,
        }
    }
    count
}

/// `operands` joined by `op` as a balanced tree, in their order.
fn balanced(mut operands: Vec<Expr>, op: &BinaryOperator) -> Expr {
    if operands.len() == 1 {
        return operands.pop().expect("one operand");
    }
    let right = operands.split_off(operands.len() / 2);
    Expr::BinaryOp {
        left: Box::new(balanced(operands, op)),
        op: op.clone(),
        right: Box::new(balanced(right, op)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::parse_statements;

    fn chain(op: &str, n: usize) -> String {
        (0..n)
            .map(|i| format!("k = {i}"))
            .collect::<Vec<_>>()
            .join(&format!(" {op} "))
    }

    fn where_expr(statement: &SluiceStatement) -> &Expr {
        let SluiceStatement::Sql(s) = statement else {
            panic!("not a query")
        };
        let sqlparser::ast::Statement::Query(q) = s.as_ref() else {
            panic!("not a query")
        };
        let SetExpr::Select(select) = q.body.as_ref() else {
            panic!("not a select")
        };
        select.selection.as_ref().expect("a WHERE")
    }

    fn depth(e: &Expr) -> usize {
        match e {
            Expr::BinaryOp { left, right, .. } => 1 + depth(left).max(depth(right)),
            _ => 1,
        }
    }

    #[test]
    fn long_or_chains_become_balanced_with_their_operands_in_order() {
        let sql = format!("SELECT k FROM s WHERE {}", chain("OR", 5000));
        let statements = parse_statements(&sql).unwrap();
        let e = where_expr(&statements[0]);
        // 5000 operands: 13 levels of OR above each `k = i` (2 levels).
        assert_eq!(depth(e), 13 + 2);
        let mut values = Vec::new();
        let mut pending = vec![e];
        while let Some(node) = pending.pop() {
            match node {
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Or,
                    right,
                } => {
                    pending.push(right);
                    pending.push(left);
                }
                Expr::BinaryOp { right, .. } => values.push(right.to_string()),
                other => panic!("unexpected operand {other}"),
            }
        }
        let expected: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
        assert_eq!(values, expected);
    }

    #[test]
    fn short_chains_keep_their_written_shape() {
        let sql = format!("SELECT k FROM s WHERE {}", chain("AND", REGROUP_OPERANDS_MIN - 1));
        let statements = parse_statements(&sql).unwrap();
        assert_eq!(depth(where_expr(&statements[0])), REGROUP_OPERANDS_MIN - 2 + 2);
    }

    #[test]
    fn the_depth_limit_is_exact() {
        // `1 + 1 + … + 1` with n terms: n - 1 operators over leaves, plus the
        // query: depth n + 1 counting the query and the leaf.
        let ok = format!("SELECT {}", vec!["1"; EXPRESSION_DEPTH_MAX - 1].join(" + "));
        parse_statements(&ok).expect("at the limit");
        let over = format!("SELECT {}", vec!["1"; EXPRESSION_DEPTH_MAX].join(" + "));
        let err = parse_statements(&over).unwrap_err();
        assert_eq!(err.sqlstate(), "54001", "{err}");
    }

    #[test]
    fn a_deep_chain_far_over_the_limit_is_refused_without_overflowing() {
        // 200 000 levels: parsed and dropped on a stack sized for its text.
        let sql = format!("SELECT {}", vec!["1"; 200_000].join("+"));
        let err = parse_statements(&sql).unwrap_err();
        assert_eq!(err.sqlstate(), "54001");
    }

    #[test]
    fn the_length_limit_is_exact() {
        let pad = |n: usize| format!("SELECT 1{}", " ".repeat(n - "SELECT 1".len()));
        parse_statements(&pad(STATEMENT_BYTES_MAX)).expect("at the limit");
        let err = parse_statements(&pad(STATEMENT_BYTES_MAX + 1)).unwrap_err();
        assert_eq!(err.sqlstate(), "54000");
    }

    #[test]
    fn union_chains_count_towards_the_depth() {
        let over = vec!["SELECT 1"; EXPRESSION_DEPTH_MAX + 1].join(" UNION ALL ");
        assert_eq!(parse_statements(&over).unwrap_err().sqlstate(), "54001");
        let ok = vec!["SELECT 1"; 100].join(" UNION ALL ");
        parse_statements(&ok).expect("100 unions");
    }
}
