//! SQL column types to Arrow types, and Arrow types to the Postgres types
//! clients see.
//!
//! Sluice follows Postgres' names. `TIMESTAMP` is stored with millisecond
//! precision (the unit of event time and watermarks); `TIMESTAMPTZ` as UTC.
//!
//! [`pg_type`] is the one map from an Arrow type to the Postgres type a
//! column of it is: the wire sends that type's OID and the value in its
//! form, and everything that names a type (DESCRIBE, psql's `\d`, the
//! `pg_catalog` and `information_schema` tables, the REST API, error
//! messages) names it with [`pg_type_name`].
//!
//! | Arrow                                   | Postgres                  |
//! |-----------------------------------------|---------------------------|
//! | Boolean                                 | boolean                   |
//! | Int8, Int16, UInt8                      | smallint (int2)           |
//! | Int32, UInt16                           | integer (int4)            |
//! | Int64, UInt32                           | bigint (int8)             |
//! | UInt64, Decimal32/64/128/256            | numeric (`numeric(p,s)` for decimals) |
//! | Float16, Float32 / Float64              | real / double precision   |
//! | Utf8, LargeUtf8, Utf8View               | text                      |
//! | Binary, LargeBinary, BinaryView, FixedSizeBinary | bytea            |
//! | Date32, Date64                          | date                      |
//! | Time32, Time64                          | time without time zone    |
//! | Timestamp(_, None) / Timestamp(_, tz)   | timestamp without / with time zone |
//! | Interval, Duration                      | interval                  |
//! | anything else (Null, lists, structs, …) | text (Arrow's display of the value) |

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

/// A Postgres type that Sluice sends columns as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    Text,
    Bytea,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Interval,
}

impl PgType {
    /// Every type [`pg_type`] maps to.
    pub const ALL: [PgType; 14] = [
        PgType::Bool,
        PgType::Int2,
        PgType::Int4,
        PgType::Int8,
        PgType::Float4,
        PgType::Float8,
        PgType::Numeric,
        PgType::Text,
        PgType::Bytea,
        PgType::Date,
        PgType::Time,
        PgType::Timestamp,
        PgType::TimestampTz,
        PgType::Interval,
    ];

    /// `pg_type.oid` (Postgres' `pg_type.dat`).
    pub fn oid(self) -> u32 {
        match self {
            PgType::Bool => 16,
            PgType::Int2 => 21,
            PgType::Int4 => 23,
            PgType::Int8 => 20,
            PgType::Float4 => 700,
            PgType::Float8 => 701,
            PgType::Numeric => 1700,
            PgType::Text => 25,
            PgType::Bytea => 17,
            PgType::Date => 1082,
            PgType::Time => 1083,
            PgType::Timestamp => 1114,
            PgType::TimestampTz => 1184,
            PgType::Interval => 1186,
        }
    }

    /// `pg_type.typarray`: the oid of the array type.
    pub fn array_oid(self) -> u32 {
        match self {
            PgType::Bool => 1000,
            PgType::Int2 => 1005,
            PgType::Int4 => 1007,
            PgType::Int8 => 1016,
            PgType::Float4 => 1021,
            PgType::Float8 => 1022,
            PgType::Numeric => 1231,
            PgType::Text => 1009,
            PgType::Bytea => 1001,
            PgType::Date => 1182,
            PgType::Time => 1183,
            PgType::Timestamp => 1115,
            PgType::TimestampTz => 1185,
            PgType::Interval => 1187,
        }
    }

    /// `pg_type.typname`, the internal name (`int8`).
    pub fn typname(self) -> &'static str {
        match self {
            PgType::Bool => "bool",
            PgType::Int2 => "int2",
            PgType::Int4 => "int4",
            PgType::Int8 => "int8",
            PgType::Float4 => "float4",
            PgType::Float8 => "float8",
            PgType::Numeric => "numeric",
            PgType::Text => "text",
            PgType::Bytea => "bytea",
            PgType::Date => "date",
            PgType::Time => "time",
            PgType::Timestamp => "timestamp",
            PgType::TimestampTz => "timestamptz",
            PgType::Interval => "interval",
        }
    }

    /// The SQL name, as `format_type` and `information_schema.columns.data_type`
    /// give it (`bigint`, `timestamp without time zone`).
    pub fn name(self) -> &'static str {
        match self {
            PgType::Bool => "boolean",
            PgType::Int2 => "smallint",
            PgType::Int4 => "integer",
            PgType::Int8 => "bigint",
            PgType::Float4 => "real",
            PgType::Float8 => "double precision",
            PgType::Numeric => "numeric",
            PgType::Text => "text",
            PgType::Bytea => "bytea",
            PgType::Date => "date",
            PgType::Time => "time without time zone",
            PgType::Timestamp => "timestamp without time zone",
            PgType::TimestampTz => "timestamp with time zone",
            PgType::Interval => "interval",
        }
    }

    /// `pg_type.typlen`: the width in bytes, or -1 for variable width.
    pub fn typlen(self) -> i16 {
        match self {
            PgType::Bool => 1,
            PgType::Int2 => 2,
            PgType::Int4 | PgType::Float4 | PgType::Date => 4,
            PgType::Int8 | PgType::Float8 | PgType::Time | PgType::Timestamp | PgType::TimestampTz => 8,
            PgType::Interval => 16,
            PgType::Numeric | PgType::Text | PgType::Bytea => -1,
        }
    }

    /// `pg_type.typcategory`.
    pub fn category(self) -> char {
        match self {
            PgType::Bool => 'B',
            PgType::Int2 | PgType::Int4 | PgType::Int8 | PgType::Float4 | PgType::Float8 | PgType::Numeric => 'N',
            PgType::Text => 'S',
            PgType::Bytea => 'U',
            PgType::Date | PgType::Time | PgType::Timestamp | PgType::TimestampTz => 'D',
            PgType::Interval => 'T',
        }
    }

    /// The type with oid `oid`, if Sluice sends it.
    pub fn from_oid(oid: u32) -> Option<PgType> {
        PgType::ALL.into_iter().find(|t| t.oid() == oid)
    }
}

/// The Postgres type a column of Arrow type `data_type` is: the one map
/// (see the module documentation).
pub fn pg_type(data_type: &DataType) -> PgType {
    use DataType as D;
    match data_type {
        D::Boolean => PgType::Bool,
        D::Int8 | D::Int16 | D::UInt8 => PgType::Int2,
        D::Int32 | D::UInt16 => PgType::Int4,
        D::Int64 | D::UInt32 => PgType::Int8,
        D::UInt64 | D::Decimal32(..) | D::Decimal64(..) | D::Decimal128(..) | D::Decimal256(..) => PgType::Numeric,
        D::Float16 | D::Float32 => PgType::Float4,
        D::Float64 => PgType::Float8,
        D::Utf8 | D::LargeUtf8 | D::Utf8View => PgType::Text,
        D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_) => PgType::Bytea,
        D::Date32 | D::Date64 => PgType::Date,
        D::Time32(_) | D::Time64(_) => PgType::Time,
        D::Timestamp(_, None) => PgType::Timestamp,
        D::Timestamp(_, Some(_)) => PgType::TimestampTz,
        D::Interval(_) | D::Duration(_) => PgType::Interval,
        _ => PgType::Text,
    }
}

/// Whether a column of `data_type` is sent as the text of Arrow's display
/// of each value: the types [`pg_type`] maps to `text` without being strings.
pub fn pg_sent_as_display(data_type: &DataType) -> bool {
    pg_type(data_type) == PgType::Text
        && !matches!(data_type, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// `atttypmod` of a column: `numeric(p, s)` packs precision and scale as
/// Postgres does (`(p << 16 | s) + 4`); everything else has none (-1).
pub fn pg_type_modifier(data_type: &DataType) -> i32 {
    let (precision, scale) = match data_type {
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => (*p, *s),
        DataType::Decimal256(p, s) => (*p, *s),
        _ => return -1,
    };
    if scale < 0 || i32::from(scale) > i32::from(precision) {
        return -1;
    }
    ((i32::from(precision) << 16) | i32::from(scale)) + 4
}

/// The name of type `t` with modifier `typmod`, as Postgres' `format_type`
/// writes it: `numeric(10,2)` for a numeric with a modifier.
pub fn format_pg_type(t: PgType, typmod: i32) -> String {
    match t {
        PgType::Numeric if typmod >= 4 => {
            let packed = typmod - 4;
            format!("numeric({},{})", packed >> 16, packed & 0xffff)
        }
        other => other.name().to_string(),
    }
}

/// The name of the Postgres type a column of `data_type` is
/// (`format_type(atttypid, atttypmod)`): what DESCRIBE, `\d`, the REST API
/// and error messages call it.
pub fn pg_type_name(data_type: &DataType) -> String {
    format_pg_type(pg_type(data_type), pg_type_modifier(data_type))
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
