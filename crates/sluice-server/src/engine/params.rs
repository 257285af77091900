//! Binding `$n` parameters of a prepared statement: each placeholder is
//! replaced by a typed literal before planning.

use datafusion::scalar::ScalarValue;
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{Expr, Statement, Value, VisitMut, VisitorMut};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// SQL text of a literal for `value`, typed so the planner sees its type.
pub fn literal_sql(value: &ScalarValue) -> String {
    if value.is_null() {
        return match value.data_type() {
            arrow::datatypes::DataType::Null => "NULL".to_string(),
            t => format!("CAST(NULL AS {})", sql_type(&t)),
        };
    }
    match value {
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => quote(s),
        ScalarValue::Boolean(Some(b)) => b.to_string(),
        v if v.data_type().is_integer() => v.to_string(),
        v if v.data_type().is_floating() => format!("CAST({} AS DOUBLE)", quote(&v.to_string())),
        v => format!("CAST({} AS {})", quote(&display(v)), sql_type(&v.data_type())),
    }
}

/// The value as Postgres-style text (timestamps and dates as calendar text).
fn display(v: &ScalarValue) -> String {
    v.to_array()
        .ok()
        .and_then(|a| arrow::util::display::array_value_to_string(&a, 0).ok())
        .map(|s| s.replacen('T', " ", 1))
        .unwrap_or_else(|| v.to_string())
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn sql_type(t: &arrow::datatypes::DataType) -> String {
    use arrow::datatypes::DataType as D;
    match t {
        D::Timestamp(_, None) => "TIMESTAMP".into(),
        D::Timestamp(_, Some(_)) => "TIMESTAMPTZ".into(),
        D::Date32 => "DATE".into(),
        D::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        D::Float32 => "REAL".into(),
        D::Float64 => "DOUBLE".into(),
        D::Int16 => "SMALLINT".into(),
        D::Int32 => "INT".into(),
        D::Int64 => "BIGINT".into(),
        D::Boolean => "BOOLEAN".into(),
        _ => "VARCHAR".into(),
    }
}

struct Binder<'a> {
    params: &'a [ScalarValue],
    error: Option<Error>,
}

impl VisitorMut for Binder<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Value(v) = expr else {
            return ControlFlow::Continue(());
        };
        let Value::Placeholder(p) = &v.value else {
            return ControlFlow::Continue(());
        };
        let index = p.trim_start_matches('$').parse::<usize>().ok().filter(|i| *i >= 1);
        let Some(value) = index.and_then(|i| self.params.get(i - 1)) else {
            self.error = Some(Error::user(SqlCode::Syntax, format!("there is no parameter {p}")));
            return ControlFlow::Break(());
        };
        let sql = literal_sql(value);
        match Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&sql)
            .and_then(|mut p| p.parse_expr())
        {
            Ok(e) => *expr = Expr::Nested(Box::new(e)),
            Err(e) => {
                self.error = Some(Error::internal(format!("literal {sql} did not parse: {e}")));
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

/// Replaces `$n` placeholders in `statement` with `params`.
pub fn bind(statement: &mut Statement, params: &[ScalarValue]) -> Result<()> {
    let mut binder = Binder { params, error: None };
    let _ = statement.visit(&mut binder);
    binder.error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_typed_literals() {
        let mut s = Parser::new(&PostgreSqlDialect {})
            .try_with_sql("SELECT a FROM t WHERE a > $1 AND b = $2 AND c = $3")
            .unwrap()
            .parse_statement()
            .unwrap();
        bind(
            &mut s,
            &[
                ScalarValue::Int64(Some(5)),
                ScalarValue::Utf8(Some("it's".into())),
                ScalarValue::Int64(None),
            ],
        )
        .unwrap();
        assert_eq!(
            s.to_string(),
            "SELECT a FROM t WHERE a > (5) AND b = ('it''s') AND c = (CAST(NULL AS BIGINT))"
        );
    }

    #[test]
    fn timestamps_bind_as_calendar_text() {
        let v = ScalarValue::TimestampMicrosecond(Some(1_704_110_401_250_000), None);
        assert_eq!(literal_sql(&v), "CAST('2024-01-01 12:00:01.250' AS TIMESTAMP)");
    }

    #[test]
    fn a_missing_parameter_is_an_error() {
        let mut s = Parser::new(&PostgreSqlDialect {})
            .try_with_sql("SELECT $2")
            .unwrap()
            .parse_statement()
            .unwrap();
        assert!(bind(&mut s, &[ScalarValue::Int64(Some(1))]).is_err());
    }
}
