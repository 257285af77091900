//! Parsing a query string into statements.
//!
//! Sluice's own statements are parsed here on top of sqlparser's parser (the
//! way DataFusion's `DFParser` extends it); everything else is sqlparser's
//! PostgreSQL dialect.

use crate::complexity;
use crate::errors::parser_error;
pub use crate::names::{normalize_ident, normalize_name};
use crate::window_tvf::rewrite_flink_window_syntax;
use sluice_types::{Error, Result};
use sqlparser::ast::{ColumnDef, Expr, Query, Statement, Visit, VisitMut, Visitor, VisitorMut};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// `CREATE STREAM name (columns, WATERMARK FOR …) WITH (…)`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateStream {
    pub name: String,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnDef>,
    /// `WATERMARK FOR column AS expr`.
    pub watermark: Option<(String, Expr)>,
    /// Computed columns `name AS expr`, with their position among all the
    /// stream's columns (declared and computed, in the order written).
    pub computed: Vec<(usize, String, Expr)>,
    pub options: BTreeMap<String, String>,
}

/// What `DROP` drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropKind {
    Stream,
    Sink,
    Pipeline,
    /// `DROP MATERIALIZED VIEW`.
    MaterializedView,
}

/// What `ALTER PIPELINE name …` changes in a running pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineChange {
    /// `AS query [WITH (state = 'reset')]`.
    Query {
        query: Box<Query>,
        /// `state = 'reset'`: operators whose state changes shape start
        /// empty instead of the change being refused.
        reset_state: bool,
    },
    /// `SET PARALLELISM n` (`operator: None`) or `ALTER OPERATOR id SET
    /// PARALLELISM n`.
    Parallelism { operator: Option<u32>, parallelism: u32 },
    /// `RESET SOURCE stream TO TIMESTAMP 'time' [WITH (state = 'reset')]`.
    ResetSource { stream: String, timestamp: String },
}

/// One statement.
#[derive(Debug, Clone, PartialEq)]
pub enum SluiceStatement {
    CreateStream(Box<CreateStream>),
    /// `CREATE STREAM name AS query`: a derived stream and its pipeline.
    CreateStreamAs {
        name: String,
        if_not_exists: bool,
        query: Box<Query>,
    },
    /// `CREATE SINK name WITH (…) AS query`.
    CreateSink {
        name: String,
        if_not_exists: bool,
        options: BTreeMap<String, String>,
        query: Box<Query>,
    },
    /// `CREATE MATERIALIZED VIEW name [WITH (…)] AS query`: a pipeline
    /// keeping the query's current result, which `SELECT … FROM name`
    /// reads.
    CreateMaterializedView {
        name: String,
        if_not_exists: bool,
        options: BTreeMap<String, String>,
        query: Box<Query>,
    },
    Drop {
        kind: DropKind,
        name: String,
        if_exists: bool,
    },
    ShowStreams,
    ShowPipelines,
    /// `SHOW CLUSTER`: masters (role, term, quorum) and workers.
    ShowCluster,
    /// `SHOW MATERIALIZED VIEWS`: each view's state, rows and how fresh
    /// they are.
    ShowMaterializedViews,
    /// `SHOW CHECKPOINTS FOR pipeline`.
    ShowCheckpoints(String),
    /// `SHOW name`.
    ShowVariable(String),
    ShowAll,
    /// `DESCRIBE name` / `SHOW COLUMNS FROM name`.
    Describe(String),
    Explain(Box<Query>),
    ExplainPipeline(String),
    /// `ALTER PIPELINE name PAUSE | RESUME`.
    AlterPipelinePause {
        name: String,
        paused: bool,
    },
    /// `ALTER PIPELINE name AS … | SET PARALLELISM … | ALTER OPERATOR …`.
    AlterPipeline {
        name: String,
        change: PipelineChange,
    },
    /// `EXPLAIN ALTER PIPELINE …`: the diff, nothing applied.
    ExplainAlter {
        name: String,
        change: PipelineChange,
    },
    /// `SHOW PIPELINE HISTORY name`.
    ShowPipelineHistory(String),
    /// Roles, privileges and tokens (`CREATE USER`, `GRANT`, …).
    Security(crate::security_statement::SecurityStatement),
    /// Anything sqlparser parses: queries, INSERT, SET, BEGIN/COMMIT,
    /// DECLARE/FETCH/CLOSE, COPY, …
    Sql(Box<Statement>),
}

/// sqlparser's `Visit` and `VisitMut` for a statement: every expression
/// and query it holds (the limits of [`crate::complexity`] walk them).
macro_rules! statement_walk {
    ($visitor:ident, $visit:ident, $($ref:tt)+) => {
        impl $visit for SluiceStatement {
            fn visit<V: $visitor>($($ref)+ self, v: &mut V) -> ControlFlow<V::Break> {
            match self {
                SluiceStatement::CreateStream(c) => {
                    $visit::visit($($ref)+ c.columns, v)?;
                    if let Some((_, e)) = $($ref)+ c.watermark {
                        $visit::visit(e, v)?;
                    }
                    for (_, _, e) in $($ref)+ c.computed {
                        $visit::visit(e, v)?;
                    }
                }
                SluiceStatement::CreateStreamAs { query, .. }
                | SluiceStatement::CreateSink { query, .. }
                | SluiceStatement::CreateMaterializedView { query, .. }
                | SluiceStatement::Explain(query) => $visit::visit(query, v)?,
                SluiceStatement::AlterPipeline { change, .. } | SluiceStatement::ExplainAlter { change, .. } => {
                    if let PipelineChange::Query { query, .. } = change {
                        $visit::visit(query, v)?;
                    }
                }
                SluiceStatement::Sql(s) => $visit::visit(s, v)?,
                SluiceStatement::Drop { .. }
                | SluiceStatement::ShowStreams
                | SluiceStatement::ShowPipelines
                | SluiceStatement::ShowCluster
                | SluiceStatement::ShowMaterializedViews
                | SluiceStatement::ShowCheckpoints(_)
                | SluiceStatement::ShowVariable(_)
                | SluiceStatement::ShowAll
                | SluiceStatement::Describe(_)
                | SluiceStatement::ExplainPipeline(_)
                | SluiceStatement::ShowPipelineHistory(_)
                | SluiceStatement::AlterPipelinePause { .. }
                | SluiceStatement::Security(_) => {}
            }
            ControlFlow::Continue(())
            }
        }
    };
}

statement_walk!(Visitor, Visit, &);
statement_walk!(VisitorMut, VisitMut, &mut);

/// Parses every statement of `sql` (separated by semicolons), held to the
/// limits of [`crate::complexity`]: `54000` for a text too long, `54001`
/// for one nested too deeply. Parsing, and dropping what a refused text
/// built, run on a stack sized for the text.
pub fn parse_statements(sql: &str) -> Result<Vec<SluiceStatement>> {
    complexity::check_length(sql)?;
    complexity::with_stack_for(sql.len(), || {
        let mut statements = parse_unchecked(sql)?;
        for statement in &mut statements {
            complexity::regroup_chains(statement);
            complexity::check_depth(statement)?;
        }
        Ok(statements)
    })
}

fn parse_unchecked(sql: &str) -> Result<Vec<SluiceStatement>> {
    let sql = rewrite_flink_window_syntax(sql)?;
    let dialect = PostgreSqlDialect {};
    let mut parser = Parser::new(&dialect).try_with_sql(&sql).map_err(parser_error)?;
    let mut out = Vec::new();
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        if parser.peek_token().token == Token::EOF {
            break;
        }
        out.push(parse_one(&mut parser)?);
        let next = parser.peek_token();
        if !matches!(next.token, Token::SemiColon | Token::EOF) {
            return Err(Error::syntax(format!(
                "syntax error at or near \"{}\" (at {})",
                next.token, next.span.start
            )));
        }
    }
    Ok(out)
}

fn word(p: &Parser, n: usize) -> Option<String> {
    match p.peek_nth_token(n).token {
        Token::Word(w) => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

fn parse_one(p: &mut Parser) -> Result<SluiceStatement> {
    if crate::security_statement::starts_security_statement(p) {
        return Ok(SluiceStatement::Security(
            crate::security_statement::parse_security_statement(p)?,
        ));
    }
    let first = word(p, 0);
    let second = word(p, 1);
    match (first.as_deref(), second.as_deref()) {
        (Some("CREATE"), Some("STREAM")) => parse_create_stream(p),
        (Some("CREATE"), Some("SINK")) => parse_create_sink(p),
        (Some("CREATE"), Some("MATERIALIZED")) => parse_create_materialized_view(p),
        (Some("DROP"), Some("STREAM" | "SINK" | "PIPELINE" | "MATERIALIZED")) => parse_drop(p),
        (Some("SHOW"), _) => parse_show(p),
        (Some("DESCRIBE" | "DESC"), _) => {
            p.next_token();
            Ok(SluiceStatement::Describe(object_name(p)?))
        }
        (Some("ALTER"), Some("PIPELINE")) => {
            p.next_token();
            p.next_token();
            let name = object_name(p)?;
            if let Some(action @ ("PAUSE" | "RESUME")) = word(p, 0).as_deref() {
                p.next_token();
                return Ok(SluiceStatement::AlterPipelinePause {
                    name,
                    paused: action == "PAUSE",
                });
            }
            let change = parse_pipeline_change(p)?;
            Ok(SluiceStatement::AlterPipeline { name, change })
        }
        (Some("EXPLAIN"), Some("ALTER")) => {
            p.next_token();
            p.next_token();
            if word(p, 0).as_deref() != Some("PIPELINE") {
                return Err(Error::syntax("EXPLAIN ALTER is followed by PIPELINE name …"));
            }
            p.next_token();
            let name = object_name(p)?;
            let change = parse_pipeline_change(p)?;
            Ok(SluiceStatement::ExplainAlter { name, change })
        }
        (Some("EXPLAIN"), Some("PIPELINE")) => {
            p.next_token();
            p.next_token();
            Ok(SluiceStatement::ExplainPipeline(object_name(p)?))
        }
        (Some("EXPLAIN"), _) => {
            p.next_token();
            Ok(SluiceStatement::Explain(p.parse_query().map_err(parser_error)?))
        }
        _ => Ok(SluiceStatement::Sql(Box::new(
            p.parse_statement().map_err(parser_error)?,
        ))),
    }
}

/// What follows `ALTER PIPELINE name`: `AS query [WITH (state =
/// 'reset')]`, `SET PARALLELISM n`, `ALTER OPERATOR id SET PARALLELISM n`.
fn parse_pipeline_change(p: &mut Parser) -> Result<PipelineChange> {
    const EXPECTED: &str = "ALTER PIPELINE name takes PAUSE, RESUME, AS query, SET PARALLELISM n, ALTER OPERATOR id SET PARALLELISM n, or RESET SOURCE stream TO TIMESTAMP 'time'";
    match word(p, 0).as_deref() {
        Some("AS") => {
            p.next_token();
            let mut query = p.parse_query().map_err(parser_error)?;
            let mut options = trailing_table_hints(&mut query)?;
            if p.parse_keyword(Keyword::WITH) {
                options.extend(parse_options(p)?);
            }
            let mut reset_state = false;
            {
                for (key, value) in options {
                    match (key.as_str(), value.to_ascii_lowercase().as_str()) {
                        ("state", "reset") => reset_state = true,
                        ("state", "keep") => reset_state = false,
                        ("state", other) => {
                            return Err(Error::invalid_option(format!(
                                "option 'state' is 'keep' (the default) or 'reset', got '{other}'"
                            )));
                        }
                        (other, _) => {
                            return Err(Error::invalid_option(format!(
                                "ALTER PIPELINE … AS takes the option 'state' ('keep' or 'reset'), not '{other}'"
                            )));
                        }
                    }
                }
            }
            Ok(PipelineChange::Query { query, reset_state })
        }
        Some("SET") => {
            p.next_token();
            Ok(PipelineChange::Parallelism {
                operator: None,
                parallelism: parse_parallelism(p)?,
            })
        }
        Some("RESET") if word(p, 1).as_deref() == Some("SOURCE") => {
            p.next_token();
            p.next_token();
            let stream = object_name(p)?;
            if !p.parse_keyword(Keyword::TO) || !p.parse_keyword(Keyword::TIMESTAMP) {
                return Err(Error::syntax("RESET SOURCE stream is followed by TO TIMESTAMP 'time'"));
            }
            let timestamp = match p.next_token().token {
                Token::SingleQuotedString(s) => s,
                Token::Number(n, _) => n,
                other => {
                    return Err(Error::syntax(format!(
                        "expected a time like '2026-11-30 12:00:00', got \"{other}\""
                    )));
                }
            };
            if p.parse_keyword(Keyword::WITH) {
                for (key, value) in parse_options(p)? {
                    if key != "state" || !value.eq_ignore_ascii_case("reset") {
                        return Err(Error::invalid_option(format!(
                            "RESET SOURCE takes only WITH (state = 'reset'): the state downstream of the source is always rebuilt; got '{key}' = '{value}'"
                        )));
                    }
                }
            }
            Ok(PipelineChange::ResetSource { stream, timestamp })
        }
        Some("ALTER") if word(p, 1).as_deref() == Some("OPERATOR") => {
            p.next_token();
            p.next_token();
            let operator = parse_u32(p, "an operator number (see EXPLAIN PIPELINE)")?;
            if !p.parse_keyword(Keyword::SET) {
                return Err(Error::syntax("ALTER OPERATOR id is followed by SET PARALLELISM n"));
            }
            Ok(PipelineChange::Parallelism {
                operator: Some(operator),
                parallelism: parse_parallelism(p)?,
            })
        }
        _ => Err(Error::syntax(EXPECTED)),
    }
}

/// `… FROM t WITH (state = 'reset')`: a query ending in a table is
/// followed by `WITH (…)`, which sqlparser takes for the table's hints (SQL
/// Server syntax, meaningless here): they are the statement's options.
fn trailing_table_hints(query: &mut Query) -> Result<BTreeMap<String, String>> {
    use sqlparser::ast::{BinaryOperator, SetExpr, TableFactor, Value};
    let mut options = BTreeMap::new();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Ok(options);
    };
    let Some(from) = select.from.last_mut() else {
        return Ok(options);
    };
    let relation = match from.joins.last_mut() {
        Some(join) => &mut join.relation,
        None => &mut from.relation,
    };
    let TableFactor::Table { with_hints, .. } = relation else {
        return Ok(options);
    };
    for hint in std::mem::take(with_hints) {
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = &hint
        else {
            return Err(Error::syntax(format!(
                "expected an option like state = 'reset', got {hint}"
            )));
        };
        let (Expr::Identifier(key), Expr::Value(value)) = (left.as_ref(), right.as_ref()) else {
            return Err(Error::syntax(format!(
                "expected an option like state = 'reset', got {hint}"
            )));
        };
        let value = match &value.value {
            Value::SingleQuotedString(v) => v.clone(),
            other => other.to_string(),
        };
        options.insert(key.value.to_ascii_lowercase(), value);
    }
    Ok(options)
}

/// `PARALLELISM [=|TO] n`.
fn parse_parallelism(p: &mut Parser) -> Result<u32> {
    if word(p, 0).as_deref() != Some("PARALLELISM") {
        return Err(Error::syntax("SET is followed by PARALLELISM n"));
    }
    p.next_token();
    if !p.consume_token(&Token::Eq) {
        let _ = p.parse_keyword(Keyword::TO);
    }
    parse_u32(p, "a parallelism")
}

fn parse_u32(p: &mut Parser, what: &str) -> Result<u32> {
    let t = p.next_token();
    match &t.token {
        Token::Number(n, _) => n
            .parse()
            .map_err(|_| Error::syntax(format!("expected {what}, got {n}"))),
        other => Err(Error::syntax(format!("expected {what}, got \"{other}\""))),
    }
}

fn object_name(p: &mut Parser) -> Result<String> {
    let name = p.parse_object_name(false).map_err(parser_error)?;
    Ok(normalize_name(&name))
}

fn parse_create_stream(p: &mut Parser) -> Result<SluiceStatement> {
    p.next_token();
    p.next_token();
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(p)?;
    if p.parse_keyword(Keyword::AS) {
        let query = p.parse_query().map_err(parser_error)?;
        return Ok(SluiceStatement::CreateStreamAs {
            name,
            if_not_exists,
            query,
        });
    }
    let mut columns = Vec::new();
    let mut watermark = None;
    let mut computed = Vec::new();
    if p.consume_token(&Token::LParen) {
        loop {
            if word(p, 0).is_some() && word(p, 1).as_deref() == Some("AS") {
                let name = normalize_ident(&p.parse_identifier().map_err(parser_error)?);
                p.expect_keyword(Keyword::AS).map_err(parser_error)?;
                let expr = p.parse_expr().map_err(parser_error)?;
                computed.push((columns.len() + computed.len(), name, expr));
            } else if word(p, 0).as_deref() == Some("WATERMARK") {
                p.next_token();
                p.expect_keyword(Keyword::FOR).map_err(parser_error)?;
                let column = normalize_ident(&p.parse_identifier().map_err(parser_error)?);
                p.expect_keyword(Keyword::AS).map_err(parser_error)?;
                let expr = p.parse_expr().map_err(parser_error)?;
                if watermark.replace((column, expr)).is_some() {
                    return Err(Error::syntax("a stream has at most one WATERMARK clause"));
                }
            } else {
                columns.push(p.parse_column_def().map_err(parser_error)?);
            }
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen).map_err(parser_error)?;
    }
    let options = if p.parse_keyword(Keyword::WITH) {
        parse_options(p)?
    } else {
        BTreeMap::new()
    };
    Ok(SluiceStatement::CreateStream(Box::new(CreateStream {
        name,
        if_not_exists,
        columns,
        watermark,
        computed,
        options,
    })))
}

fn parse_create_sink(p: &mut Parser) -> Result<SluiceStatement> {
    p.next_token();
    p.next_token();
    let (name, if_not_exists, options, query) = parse_named_query(p)?;
    Ok(SluiceStatement::CreateSink {
        name,
        if_not_exists,
        options,
        query,
    })
}

/// `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name [WITH (…)] AS query`.
fn parse_create_materialized_view(p: &mut Parser) -> Result<SluiceStatement> {
    p.next_token();
    p.next_token();
    if word(p, 0).as_deref() != Some("VIEW") {
        return Err(Error::syntax("CREATE MATERIALIZED is followed by VIEW name AS query"));
    }
    p.next_token();
    let (name, if_not_exists, options, query) = parse_named_query(p)?;
    Ok(SluiceStatement::CreateMaterializedView {
        name,
        if_not_exists,
        options,
        query,
    })
}

/// What follows `CREATE SINK` or `CREATE MATERIALIZED VIEW`: `[IF NOT
/// EXISTS] name [WITH (…)] AS query`.
type NamedQuery = (String, bool, BTreeMap<String, String>, Box<Query>);

fn parse_named_query(p: &mut Parser) -> Result<NamedQuery> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(p)?;
    let options = if p.parse_keyword(Keyword::WITH) {
        parse_options(p)?
    } else {
        BTreeMap::new()
    };
    p.expect_keyword(Keyword::AS).map_err(parser_error)?;
    let query = p.parse_query().map_err(parser_error)?;
    Ok((name, if_not_exists, options, query))
}

/// `( key = value, … )` where a key is an identifier, a dotted name or a
/// quoted string, and a value a string, number or word. Keys are
/// lower-cased; values kept as written.
pub fn parse_options(p: &mut Parser) -> Result<BTreeMap<String, String>> {
    p.expect_token(&Token::LParen).map_err(parser_error)?;
    let mut options = BTreeMap::new();
    if p.consume_token(&Token::RParen) {
        return Ok(options);
    }
    loop {
        let mut key = option_atom(p, "option name")?;
        while p.consume_token(&Token::Period) {
            key = format!("{key}.{}", option_atom(p, "option name")?);
        }
        p.expect_token(&Token::Eq).map_err(parser_error)?;
        let value = option_atom(p, "option value")?;
        if options.insert(key.to_ascii_lowercase(), value).is_some() {
            return Err(Error::syntax(format!("option '{key}' given twice")));
        }
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen).map_err(parser_error)?;
    Ok(options)
}

fn option_atom(p: &mut Parser, what: &str) -> Result<String> {
    let t = p.next_token();
    match t.token {
        Token::SingleQuotedString(s) => Ok(s),
        Token::Number(n, _) => Ok(n),
        Token::Word(w) => Ok(if w.quote_style.is_some() {
            w.value
        } else {
            w.value.to_lowercase()
        }),
        Token::Minus => match p.next_token().token {
            Token::Number(n, _) => Ok(format!("-{n}")),
            other => Err(Error::syntax(format!(
                "syntax error: expected {what}, found \"{other}\""
            ))),
        },
        other => Err(Error::syntax(format!(
            "syntax error: expected {what}, found \"{other}\" (at {})",
            t.span.start
        ))),
    }
}

fn parse_drop(p: &mut Parser) -> Result<SluiceStatement> {
    p.next_token();
    let kind = match word(p, 0).as_deref() {
        Some("STREAM") => DropKind::Stream,
        Some("SINK") => DropKind::Sink,
        Some("MATERIALIZED") => {
            p.next_token();
            if word(p, 0).as_deref() != Some("VIEW") {
                return Err(Error::syntax("DROP MATERIALIZED is followed by VIEW name"));
            }
            DropKind::MaterializedView
        }
        _ => DropKind::Pipeline,
    };
    p.next_token();
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = object_name(p)?;
    Ok(SluiceStatement::Drop { kind, name, if_exists })
}

fn parse_show(p: &mut Parser) -> Result<SluiceStatement> {
    p.next_token();
    match word(p, 0).as_deref() {
        Some("STREAMS") | Some("TABLES") => {
            p.next_token();
            Ok(SluiceStatement::ShowStreams)
        }
        Some("PIPELINES") | Some("SINKS") => {
            p.next_token();
            Ok(SluiceStatement::ShowPipelines)
        }
        Some("ALL") => {
            p.next_token();
            Ok(SluiceStatement::ShowAll)
        }
        Some("CLUSTER") => {
            p.next_token();
            Ok(SluiceStatement::ShowCluster)
        }
        Some("MATERIALIZED") if word(p, 1).as_deref() == Some("VIEWS") => {
            p.next_token();
            p.next_token();
            Ok(SluiceStatement::ShowMaterializedViews)
        }
        Some("PIPELINE") if word(p, 1).as_deref() == Some("HISTORY") => {
            p.next_token();
            p.next_token();
            if word(p, 0).as_deref() == Some("FOR") {
                p.next_token();
            }
            Ok(SluiceStatement::ShowPipelineHistory(object_name(p)?))
        }
        Some("CHECKPOINTS") => {
            p.next_token();
            p.expect_keyword(Keyword::FOR).map_err(parser_error)?;
            Ok(SluiceStatement::ShowCheckpoints(object_name(p)?))
        }
        Some("COLUMNS") => {
            p.next_token();
            if !p.parse_keyword(Keyword::FROM) {
                p.expect_keyword(Keyword::IN).map_err(parser_error)?;
            }
            Ok(SluiceStatement::Describe(object_name(p)?))
        }
        _ => {
            let name = p.parse_object_name(false).map_err(parser_error)?;
            let text: Vec<String> = name
                .0
                .iter()
                .filter_map(|part| part.as_ident())
                .map(|i| i.value.to_lowercase())
                .collect();
            Ok(SluiceStatement::ShowVariable(text.join(".")))
        }
    }
}

#[cfg(test)]
#[path = "statement_limits_tests.rs"]
mod limits_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn change(sql: &str) -> PipelineChange {
        match parse_statements(sql).unwrap().remove(0) {
            SluiceStatement::AlterPipeline { change, .. } | SluiceStatement::ExplainAlter { change, .. } => change,
            other => panic!("{other:?}"),
        }
    }

    /// `WITH (state = 'reset')` after a query ending in a table is the
    /// statement's option, not the table's hints (sqlparser reads SQL
    /// Server hints there); after a WHERE it is read as written.
    #[test]
    fn alter_pipeline_options_after_any_query() {
        for sql in [
            "ALTER PIPELINE p AS SELECT k FROM s WITH (state = 'reset')",
            "ALTER PIPELINE p AS SELECT k FROM s WHERE k > 1 WITH (state = 'reset')",
            "EXPLAIN ALTER PIPELINE p AS SELECT k FROM s a JOIN t b ON a.k = b.k WITH (state = 'reset')",
        ] {
            let PipelineChange::Query { query, reset_state } = change(sql) else {
                panic!("{sql}")
            };
            assert!(reset_state, "{sql}");
            assert!(!query.to_string().contains("WITH"), "{sql}: {query}");
        }
        let PipelineChange::Query { reset_state, .. } = change("ALTER PIPELINE p AS SELECT k FROM s") else {
            panic!()
        };
        assert!(!reset_state);
        for bad in [
            "ALTER PIPELINE p AS SELECT k FROM s WITH (state = 'gone')",
            "ALTER PIPELINE p AS SELECT k FROM s WHERE k > 1 WITH (colour = 'red')",
            "ALTER PIPELINE p AS SELECT k FROM s WITH (NOLOCK)",
        ] {
            assert!(parse_statements(bad).is_err(), "{bad}");
        }
        assert_eq!(
            change("ALTER PIPELINE p ALTER OPERATOR 3 SET PARALLELISM 4"),
            PipelineChange::Parallelism {
                operator: Some(3),
                parallelism: 4
            }
        );
        assert_eq!(
            change("ALTER PIPELINE p SET PARALLELISM = 2"),
            PipelineChange::Parallelism {
                operator: None,
                parallelism: 2
            }
        );
        assert_eq!(
            parse_statements("SHOW PIPELINE HISTORY p").unwrap()[0],
            SluiceStatement::ShowPipelineHistory("p".into())
        );
    }

    #[test]
    fn create_stream_with_watermark_and_options() {
        let s = parse_statements(
            "CREATE STREAM Bid (auction BIGINT, date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND) \
             WITH (connector = 'nexmark', 'events.max' = 100, table = bid);",
        )
        .unwrap();
        let SluiceStatement::CreateStream(c) = &s[0] else {
            panic!("{s:?}")
        };
        assert_eq!(c.name, "bid");
        assert_eq!(c.columns.len(), 2);
        assert_eq!(c.watermark.as_ref().unwrap().0, "date_time");
        assert_eq!(c.options.get("events.max").unwrap(), "100");
        assert_eq!(c.options.get("table").unwrap(), "bid");
    }

    #[test]
    fn several_statements_and_custom_ones() {
        let s = parse_statements("SHOW STREAMS; SHOW PIPELINES; DESCRIBE bid; EXPLAIN PIPELINE p; DROP STREAM IF EXISTS x; SET parallelism = 4; SHOW parallelism").unwrap();
        assert_eq!(s.len(), 7);
        assert_eq!(s[2], SluiceStatement::Describe("bid".into()));
        assert_eq!(
            s[4],
            SluiceStatement::Drop {
                kind: DropKind::Stream,
                name: "x".into(),
                if_exists: true
            }
        );
        assert_eq!(s[6], SluiceStatement::ShowVariable("parallelism".into()));
        let s = parse_statements("SHOW CHECKPOINTS FOR \"My Sink\"; show checkpoints for s2").unwrap();
        assert_eq!(
            s,
            vec![
                SluiceStatement::ShowCheckpoints("My Sink".into()),
                SluiceStatement::ShowCheckpoints("s2".into())
            ]
        );
        assert!(parse_statements("SHOW CHECKPOINTS s2").is_err());
    }

    #[test]
    fn create_sink_as_select() {
        let s =
            parse_statements("CREATE SINK s WITH (connector = 'file', path = '/tmp/x') AS SELECT * FROM bid").unwrap();
        assert!(
            matches!(&s[0], SluiceStatement::CreateSink { name, options, .. } if name == "s" && options["path"] == "/tmp/x")
        );
    }

    #[test]
    fn syntax_errors_name_the_token() {
        let e = parse_statements("SELEC 1").unwrap_err();
        assert_eq!(e.sqlstate(), "42601");
        assert!(e.to_string().contains("SELEC"), "{e}");
        let e = parse_statements("CREATE STREAM x (a BIGINT,,)").unwrap_err();
        assert_eq!(e.sqlstate(), "42601");
    }
}
