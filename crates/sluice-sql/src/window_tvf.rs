//! Window table-valued functions.
//!
//! `FROM TUMBLE(stream, time_col, size)`, `HOP(stream, time_col, slide,
//! size)` and `SESSION(stream, time_col, gap)` are replaced in the AST by a
//! reference to a synthetic table (the stream's columns plus `window_start`
//! and `window_end`); the planner later recognises the scan of that table
//! and builds the window aggregate. Flink's spelling
//! `TABLE(TUMBLE(TABLE s, DESCRIPTOR(c), INTERVAL '10' SECONDS))` is first
//! rewritten, at the token level, into the plain one; its session form
//! `SESSION(TABLE s PARTITION BY k, DESCRIPTOR(c), gap)` keeps the keys as
//! `SESSION(__sluice_partitioned(s, k), c, gap)`. Sessions are per group
//! key, so the planner requires the partition keys in the GROUP BY (where
//! Flink's meaning and Sluice's are then the same).

use crate::errors::parser_error;
use crate::names::normalize_ident;
use crate::types::interval_ms;
use sluice_plan::WindowKind;
use sluice_types::{Error, Result};
use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, Query, SetExpr, TableFactor, TableWithJoins};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

/// Prefix of the synthetic tables that stand for window TVFs.
pub const WINDOW_TABLE_PREFIX: &str = "__sluice_window_";
/// The call a `TABLE s PARTITION BY k` argument is rewritten into.
const PARTITIONED: &str = "__sluice_partitioned";

/// One window TVF found in a query.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowTvf {
    /// The synthetic table that replaced the call.
    pub table: String,
    pub stream: String,
    pub time_column: String,
    pub kind: WindowKind,
    /// `PARTITION BY` keys (a session window's, in Flink's form).
    pub partition_by: Vec<String>,
}

/// Rewrites Flink's window TVF spelling into Sluice's plain one. Text
/// without it is returned unchanged.
pub fn rewrite_flink_window_syntax(sql: &str) -> Result<String> {
    let upper = sql.to_ascii_uppercase();
    if !upper.contains("DESCRIPTOR")
        && !upper.contains("PARTITION")
        && !upper.contains("SECONDS")
        && !upper.contains("MINUTES")
        && !upper.contains("HOURS")
    {
        return Ok(sql.to_string());
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(sql.to_string());
    };
    let significant = |i: usize| {
        tokens
            .iter()
            .skip(i)
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .cloned()
    };
    let is_word =
        |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    // Depths at which a `TABLE(` wrapper's closing paren must be dropped.
    let mut drop_close_at: Vec<i32> = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let mut next = significant(i + 1);
        let (n1, n2) = (next.next(), next.next());
        if is_word(t, "TABLE")
            && n1 == Some(Token::LParen)
            && n2
                .as_ref()
                .is_some_and(|w| ["TUMBLE", "HOP", "SESSION"].iter().any(|k| is_word(w, k)))
        {
            // `TABLE (` wrapper: drop it and its closing paren.
            i = skip_to(&tokens, i + 1, &Token::LParen) + 1;
            depth += 1;
            drop_close_at.push(depth);
            continue;
        }
        if is_word(t, "TABLE")
            && matches!(
                out.iter().rev().find(|t| !matches!(t, Token::Whitespace(_))),
                Some(Token::LParen) | Some(Token::Comma)
            )
            && matches!(n1, Some(Token::Word(_)))
        {
            // `TABLE s` argument → `s`; `TABLE s PARTITION BY keys` →
            // `__sluice_partitioned(s, keys)` (the keys end at the comma
            // before DESCRIPTOR, or the call's closing parenthesis).
            let name_at = next_significant(&tokens, i + 1);
            let partition_at = name_at.map(|n| next_significant(&tokens, n + 1));
            let by_at = partition_at.flatten().map(|p| next_significant(&tokens, p + 1));
            if let (Some(name_at), Some(Some(p)), Some(Some(b))) = (name_at, partition_at, by_at)
                && is_word(&tokens[p], "PARTITION")
                && is_word(&tokens[b], "BY")
            {
                let keys_from = b + 1;
                let mut end = keys_from;
                let mut nested = 0i32;
                while end < tokens.len() {
                    match &tokens[end] {
                        Token::LParen => nested += 1,
                        Token::RParen if nested == 0 => break,
                        Token::RParen => nested -= 1,
                        Token::Comma
                            if nested == 0
                                && next_significant(&tokens, end + 1)
                                    .is_some_and(|d| is_word(&tokens[d], "DESCRIPTOR")) =>
                        {
                            break;
                        }
                        _ => {}
                    }
                    end += 1;
                }
                out.push(Token::make_word(PARTITIONED, None));
                out.push(Token::LParen);
                out.push(tokens[name_at].clone());
                out.push(Token::Comma);
                out.extend(tokens[keys_from..end].iter().cloned());
                out.push(Token::RParen);
                i = end;
                continue;
            }
            i += 1;
            continue;
        }
        if is_word(t, "DESCRIPTOR") && n1 == Some(Token::LParen) {
            // DESCRIPTOR ( col ) → col
            let open = skip_to(&tokens, i + 1, &Token::LParen);
            let close = skip_to(&tokens, open + 1, &Token::RParen);
            out.extend(tokens[open + 1..close].iter().cloned());
            i = close + 1;
            continue;
        }
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                if drop_close_at.last() == Some(&depth) {
                    drop_close_at.pop();
                    depth -= 1;
                    i += 1;
                    continue;
                }
                depth -= 1;
            }
            Token::Word(w) if w.quote_style.is_none() => {
                let singular = match w.value.to_ascii_uppercase().as_str() {
                    "SECONDS" => Some("SECOND"),
                    "MINUTES" => Some("MINUTE"),
                    "HOURS" => Some("HOUR"),
                    "DAYS" => Some("DAY"),
                    _ => None,
                };
                let after_interval_literal = matches!(
                    out.iter().rev().find(|t| !matches!(t, Token::Whitespace(_))),
                    Some(Token::SingleQuotedString(_))
                );
                if let (Some(s), true) = (singular, after_interval_literal) {
                    out.push(Token::make_keyword(s));
                    i += 1;
                    continue;
                }
            }
            _ => {}
        }
        out.push(t.clone());
        i += 1;
    }
    Ok(out.iter().map(|t| t.to_string()).collect())
}

/// The index of the first token at or after `from` that is not whitespace.
fn next_significant(tokens: &[Token], from: usize) -> Option<usize> {
    (from..tokens.len()).find(|i| !matches!(tokens[*i], Token::Whitespace(_)))
}

fn skip_to(tokens: &[Token], from: usize, wanted: &Token) -> usize {
    (from..tokens.len())
        .find(|i| &tokens[*i] == wanted)
        .unwrap_or(tokens.len() - 1)
}

/// Replaces every window TVF in `query` (including subqueries and CTEs) by
/// a synthetic table reference; returns what was replaced.
pub fn extract_window_tvfs(query: &mut Query) -> Result<Vec<WindowTvf>> {
    let mut found = Vec::new();
    visit_query(query, &mut found)?;
    Ok(found)
}

fn visit_query(query: &mut Query, found: &mut Vec<WindowTvf>) -> Result<()> {
    if let Some(with) = query.with.as_mut() {
        for cte in &mut with.cte_tables {
            visit_query(&mut cte.query, found)?;
        }
    }
    visit_set_expr(&mut query.body, found)
}

fn visit_set_expr(body: &mut SetExpr, found: &mut Vec<WindowTvf>) -> Result<()> {
    match body {
        SetExpr::Select(select) => {
            for twj in &mut select.from {
                visit_table_with_joins(twj, found)?;
            }
            Ok(())
        }
        SetExpr::Query(q) => visit_query(q, found),
        SetExpr::SetOperation { left, right, .. } => {
            visit_set_expr(left, found)?;
            visit_set_expr(right, found)
        }
        _ => Ok(()),
    }
}

fn visit_table_with_joins(twj: &mut TableWithJoins, found: &mut Vec<WindowTvf>) -> Result<()> {
    visit_factor(&mut twj.relation, found)?;
    for join in &mut twj.joins {
        visit_factor(&mut join.relation, found)?;
    }
    Ok(())
}

fn visit_factor(factor: &mut TableFactor, found: &mut Vec<WindowTvf>) -> Result<()> {
    match factor {
        TableFactor::Table {
            name,
            args: Some(args),
            alias,
            ..
        } => {
            let function = name.to_string().to_ascii_uppercase();
            if !matches!(function.as_str(), "TUMBLE" | "HOP" | "SESSION") {
                return Err(Error::unsupported(format!(
                    "table function {name} is not supported; window functions are TUMBLE, HOP and SESSION"
                )));
            }
            let table = format!("{WINDOW_TABLE_PREFIX}{}", found.len());
            let tvf = window_from_args(&function, &args.args, table.clone())?;
            // Without an alias, columns read as the stream's (`bid.price`).
            let mut replacement = synthetic_table(&table, &tvf.stream)?;
            if let (TableFactor::Table { alias: new_alias, .. }, Some(alias)) = (&mut replacement, alias.as_ref()) {
                *new_alias = Some(alias.clone());
            }
            *factor = replacement;
            found.push(tvf);
            Ok(())
        }
        TableFactor::Derived { subquery, .. } => visit_query(subquery, found),
        TableFactor::NestedJoin { table_with_joins, .. } => visit_table_with_joins(table_with_joins, found),
        TableFactor::Function { name, .. } => {
            Err(Error::unsupported(format!("table function {name} is not supported")))
        }
        _ => Ok(()),
    }
}

fn synthetic_table(name: &str, alias: &str) -> Result<TableFactor> {
    let sql = format!("SELECT * FROM {name} AS \"{}\"", alias.replace('"', "\"\""));
    let stmt = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_query())
        .map_err(parser_error)?;
    match *stmt.body {
        SetExpr::Select(mut s) => Ok(s.from.remove(0).relation),
        _ => Err(Error::internal("synthetic table did not parse")),
    }
}

fn window_from_args(function: &str, args: &[FunctionArg], table: String) -> Result<WindowTvf> {
    let usage = match function {
        "TUMBLE" => "TUMBLE(stream, time_column, size)",
        "HOP" => "HOP(stream, time_column, slide, size)",
        _ => "SESSION(stream, time_column, gap)",
    };
    let exprs: Vec<&Expr> = args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
            FunctionArg::Named {
                arg: FunctionArgExpr::Expr(e),
                ..
            } => Ok(e),
            _ => Err(Error::syntax(format!("{function}: expected {usage}"))),
        })
        .collect::<Result<_>>()?;
    let expected = if function == "HOP" { 4 } else { 3 };
    if exprs.len() != expected {
        return Err(Error::syntax(format!("{function} takes {expected} arguments: {usage}")));
    }
    let name_of = |e: &Expr| match e {
        Expr::Identifier(i) => Ok(normalize_ident(i)),
        Expr::CompoundIdentifier(parts) => Ok(parts.last().map(normalize_ident).unwrap_or_default()),
        other => Err(Error::syntax(format!(
            "{function}: expected a name, got {other}; usage {usage}"
        ))),
    };
    // `__sluice_partitioned(s, k1, (k2, k3))`: the stream and its keys.
    let (stream, partition_by) = match exprs[0] {
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case(PARTITIONED) => {
            if function != "SESSION" {
                return Err(Error::syntax(format!(
                    "{function}: PARTITION BY is for SESSION windows only (group by the keys instead)"
                )));
            }
            let sqlparser::ast::FunctionArguments::List(list) = &f.args else {
                return Err(Error::syntax(format!("{function}: expected TABLE s PARTITION BY keys")));
            };
            let mut names = Vec::new();
            for (position, arg) in list.args.iter().enumerate() {
                let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = arg else {
                    return Err(Error::syntax(format!("{function}: expected TABLE s PARTITION BY keys")));
                };
                match e {
                    Expr::Tuple(items) if position > 0 => {
                        for item in items {
                            names.push(name_of(item)?);
                        }
                    }
                    Expr::Nested(item) if position > 0 => names.push(name_of(item)?),
                    other => names.push(name_of(other)?),
                }
            }
            let stream = names.remove(0);
            if names.is_empty() {
                return Err(Error::syntax(format!(
                    "{function}: PARTITION BY needs at least one key"
                )));
            }
            (stream, names)
        }
        other => (name_of(other)?, Vec::new()),
    };
    let kind = match function {
        "TUMBLE" => WindowKind::Tumble {
            size_ms: interval_ms(exprs[2])?,
        },
        "HOP" => {
            let (slide_ms, size_ms) = (interval_ms(exprs[2])?, interval_ms(exprs[3])?);
            if slide_ms > size_ms {
                return Err(Error::invalid_option(format!(
                    "HOP slide ({slide_ms} ms) must not be larger than its size ({size_ms} ms)"
                )));
            }
            WindowKind::Hop { slide_ms, size_ms }
        }
        _ => WindowKind::Session {
            gap_ms: interval_ms(exprs[2])?,
        },
    };
    Ok(WindowTvf {
        table,
        stream,
        time_column: name_of(exprs[1])?,
        kind,
        partition_by,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::{SluiceStatement, parse_statements};

    fn query(sql: &str) -> Query {
        match parse_statements(sql).unwrap().remove(0) {
            SluiceStatement::Sql(s) => match *s {
                sqlparser::ast::Statement::Query(q) => *q,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tumble_is_replaced_by_a_synthetic_table() {
        let mut q = query(
            "SELECT window_start, count(*) FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end",
        );
        let w = extract_window_tvfs(&mut q).unwrap();
        assert_eq!(w[0].stream, "bid");
        assert_eq!(w[0].time_column, "date_time");
        assert_eq!(w[0].kind, WindowKind::Tumble { size_ms: 10_000 });
        assert!(q.to_string().contains("FROM __sluice_window_0 AS \"bid\""), "{q}");
    }

    #[test]
    fn flink_spelling_is_accepted() {
        let mut q = query(
            "SELECT window_start FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECONDS, INTERVAL '10' SECONDS)) GROUP BY window_start, window_end",
        );
        let w = extract_window_tvfs(&mut q).unwrap();
        assert_eq!(
            w[0].kind,
            WindowKind::Hop {
                slide_ms: 2_000,
                size_ms: 10_000
            }
        );
        assert_eq!(w[0].stream, "bid");
    }

    #[test]
    fn flinks_partitioned_session_keeps_its_keys() {
        for (sql, keys) in [
            (
                "SELECT bidder FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY bidder, window_start, window_end",
                vec!["bidder"],
            ),
            (
                "SELECT 1 FROM TABLE(SESSION(TABLE bid PARTITION BY (bidder, auction), DESCRIPTOR(date_time), INTERVAL '10' SECONDS))",
                vec!["bidder", "auction"],
            ),
            (
                "SELECT 1 FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND))",
                vec!["bidder", "auction"],
            ),
        ] {
            let mut q = query(sql);
            let w = extract_window_tvfs(&mut q).unwrap();
            assert_eq!(w[0].stream, "bid", "{sql}");
            assert_eq!(w[0].time_column, "date_time", "{sql}");
            assert_eq!(w[0].kind, WindowKind::Session { gap_ms: 10_000 }, "{sql}");
            assert_eq!(w[0].partition_by, keys, "{sql}");
        }
        let mut q = query(
            "SELECT 1 FROM TABLE(TUMBLE(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND))",
        );
        let e = extract_window_tvfs(&mut q).unwrap_err();
        assert!(e.to_string().contains("SESSION windows only"), "{e}");
    }

    #[test]
    fn wrong_arity_is_a_syntax_error() {
        let mut q = query("SELECT 1 FROM TUMBLE(bid, date_time)");
        let e = extract_window_tvfs(&mut q).unwrap_err();
        assert_eq!(e.sqlstate(), "42601");
        assert!(e.to_string().contains("TUMBLE(stream, time_column, size)"));
    }
}
