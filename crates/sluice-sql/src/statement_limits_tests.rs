//! The limits of [`crate::complexity`] as `parse_statements` applies them.

use super::{SluiceStatement, parse_statements};
use crate::complexity::REGROUP_OPERANDS_MIN;
use sluice_types::limits::{EXPRESSION_DEPTH_MAX, STATEMENT_BYTES_MAX};
use sqlparser::ast::{BinaryOperator, Expr, SetExpr};

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
