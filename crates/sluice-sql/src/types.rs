//! SQL column types to Arrow types.
//!
//! Sluice follows Postgres' names. `TIMESTAMP` is stored with millisecond
//! precision (the unit of event time and watermarks); `TIMESTAMPTZ` as UTC.

use arrow::datatypes::{DataType, TimeUnit};
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::{DataType as SqlType, ExactNumberInfo, TimezoneInfo};

/// The Arrow type of a SQL column type, or `0A000` naming the supported ones.
pub fn arrow_type(t: &SqlType) -> Result<DataType> {
    use SqlType as S;
    Ok(match t {
        S::Boolean | S::Bool => DataType::Boolean,
        S::SmallInt(_) | S::Int2(_) => DataType::Int16,
        S::Int(_) | S::Integer(_) | S::Int4(_) => DataType::Int32,
        S::BigInt(_) | S::Int8(_) => DataType::Int64,
        S::Real | S::Float4 => DataType::Float32,
        S::Double(_) | S::DoublePrecision | S::Float8 => DataType::Float64,
        S::Float(_) => DataType::Float64,
        S::Varchar(_) | S::CharacterVarying(_) | S::Text | S::String(_) | S::Char(_) | S::Character(_) => {
            DataType::Utf8
        }
        S::Bytea => DataType::Binary,
        S::Date => DataType::Date32,
        S::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => {
            DataType::Timestamp(TimeUnit::Millisecond, None)
        }
        S::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => {
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        }
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => match info {
            ExactNumberInfo::None => DataType::Decimal128(38, 10),
            ExactNumberInfo::Precision(p) => DataType::Decimal128(*p as u8, 0),
            ExactNumberInfo::PrecisionAndScale(p, s) => DataType::Decimal128(*p as u8, *s as i8),
        },
        other => {
            return Err(Error::user(
                SqlCode::FeatureNotSupported,
                format!(
                    "column type {other} is not supported; use BOOLEAN, SMALLINT, INT, BIGINT, REAL, DOUBLE, \
                     DECIMAL(p,s), VARCHAR/TEXT, BYTEA, DATE, TIMESTAMP or TIMESTAMPTZ"
                ),
            ));
        }
    })
}

/// The length of an `INTERVAL` expression in milliseconds: `INTERVAL '10'
/// SECOND`, `INTERVAL '2' MINUTE`, `INTERVAL '1 hour 30 minutes'`, or a
/// plain duration string `'10s'`.
pub fn interval_ms(expr: &sqlparser::ast::Expr) -> Result<i64> {
    use sqlparser::ast::{Expr, Value};
    let bad = || {
        Error::user(
            SqlCode::Syntax,
            format!("expected an interval such as INTERVAL '10' SECOND, got {expr}"),
        )
    };
    match expr {
        Expr::Interval(iv) => {
            let text = match iv.value.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(s) => s.clone(),
                    Value::Number(n, _) => n.clone(),
                    _ => return Err(bad()),
                },
                _ => return Err(bad()),
            };
            match &iv.leading_field {
                Some(field) => {
                    let n: f64 = text.trim().parse().map_err(|_| bad())?;
                    let unit = unit_ms(&field.to_string()).ok_or_else(bad)?;
                    positive((n * unit as f64) as i64, expr)
                }
                None => positive(duration_text_ms(&text).ok_or_else(bad)?, expr),
            }
        }
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => positive(duration_text_ms(s).ok_or_else(bad)?, expr),
            _ => Err(bad()),
        },
        Expr::Nested(inner) => interval_ms(inner),
        _ => Err(bad()),
    }
}

fn positive(ms: i64, expr: &sqlparser::ast::Expr) -> Result<i64> {
    if ms <= 0 {
        return Err(Error::user(
            SqlCode::InvalidParameterValue,
            format!("interval {expr} must be positive"),
        ));
    }
    Ok(ms)
}

fn unit_ms(unit: &str) -> Option<i64> {
    Some(match unit.to_ascii_uppercase().trim_end_matches('S') {
        "MILLISECOND" | "M" => 1,
        "SECOND" | "SEC" | "" => 1000,
        "MINUTE" | "MIN" => 60_000,
        "HOUR" | "H" => 3_600_000,
        "DAY" | "D" => 86_400_000,
        "WEEK" => 7 * 86_400_000,
        _ => return None,
    })
}

/// `'1 hour 30 minutes'`, `'10 seconds'`, `'500 milliseconds'`, `'10s'`.
fn duration_text_ms(text: &str) -> Option<i64> {
    let t = text.trim().to_ascii_lowercase();
    if let Some(ms) = t.strip_suffix("ms").and_then(|n| n.trim().parse::<i64>().ok()) {
        return Some(ms);
    }
    let mut total = 0i64;
    let mut words = t.split_whitespace().peekable();
    let mut any = false;
    while let Some(w) = words.next() {
        let (num, unit) = match w.find(|c: char| c.is_ascii_alphabetic()) {
            Some(i) => (w[..i].to_string(), w[i..].to_string()),
            None => (w.to_string(), words.next().unwrap_or("second").to_string()),
        };
        let n: f64 = num.parse().ok()?;
        let unit = match unit.as_str() {
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            u => unit_ms(u)?,
        };
        total += (n * unit as f64) as i64;
        any = true;
    }
    any.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn ms(sql: &str) -> Result<i64> {
        let e = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap();
        interval_ms(&e)
    }

    #[test]
    fn intervals() {
        assert_eq!(ms("INTERVAL '10' SECOND").unwrap(), 10_000);
        assert_eq!(ms("INTERVAL '2' MINUTE").unwrap(), 120_000);
        assert_eq!(ms("INTERVAL '1 hour 30 minutes'").unwrap(), 5_400_000);
        assert_eq!(ms("INTERVAL '500 milliseconds'").unwrap(), 500);
        assert_eq!(ms("'10s'").unwrap(), 10_000);
        assert!(ms("INTERVAL '0' SECOND").is_err());
        assert!(ms("42").is_err());
    }
}
