//! Bind parameters → `ScalarValue`s.
//!
//! Each parameter arrives as bytes in text or binary format and is read as
//! the Postgres type it was sent as (the client's type from Parse, else the
//! one Sluice described), following Postgres' input functions (`boolin`,
//! `int4in`, `numeric_in`, `timestamp_in`, …) and binary `*recv` functions.
//! The value is then cast to the Arrow type the engine declared for the
//! placeholder; NULL becomes a typed null of that type.

use arrow::datatypes::{DataType, IntervalMonthDayNano};
use bytes::Bytes;
use chrono::{Datelike, NaiveDate, NaiveTime, Timelike};
use datafusion::scalar::ScalarValue;
use pgwire::api::Type;
use std::sync::Arc;

use super::format::{MICROS_PER_DAY, PG_EPOCH_DAYS, PG_EPOCH_MICROS, UNIX_EPOCH_FROM_CE_DAYS};
use super::types::{UTC, param_data_type};

/// Decimal digits a `Decimal128` holds.
const DECIMAL128_DIGITS_MAX: usize = 38;

/// Why a parameter could not be read, with the SQLSTATE Postgres uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamError {
    pub(crate) sqlstate: &'static str,
    pub(crate) message: String,
}

impl ParamError {
    fn new(sqlstate: &'static str, message: impl Into<String>) -> Self {
        ParamError {
            sqlstate,
            message: message.into(),
        }
    }

    fn invalid_text(type_name: &str, text: &str) -> Self {
        ParamError::new(
            "22P02",
            format!("invalid input syntax for type {type_name}: \"{text}\""),
        )
    }

    fn binary_format(param: usize) -> Self {
        ParamError::new(
            "22P03",
            format!("incorrect binary data format in bind parameter {param}"),
        )
    }
}

/// One parameter of a Bind message, with what is known about its type.
pub(crate) struct BoundParam<'a> {
    /// 1-based, for messages.
    pub(crate) position: usize,
    /// `None` for SQL NULL.
    pub(crate) bytes: Option<&'a [u8]>,
    /// Whether `bytes` are in binary format.
    pub(crate) binary: bool,
    /// The Postgres type the value was sent as.
    pub(crate) wire_type: &'a Type,
    /// The Arrow type the engine expects, when it declared one.
    pub(crate) target: Option<&'a DataType>,
}

/// Checks Bind's parameter format codes against the parameter count and
/// returns whether each parameter is binary.
pub(crate) fn binary_flags(format_codes: &[i16], params: usize) -> Result<Vec<bool>, ParamError> {
    let flag = |code: i16| match code {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(ParamError::new("22023", format!("unsupported format code: {other}"))),
    };
    match format_codes {
        [] => Ok(vec![false; params]),
        [code] => Ok(vec![flag(*code)?; params]),
        codes if codes.len() == params => codes.iter().map(|c| flag(*c)).collect(),
        codes => Err(ParamError::new(
            "08P01",
            format!(
                "bind message has {} parameter formats but {params} parameters",
                codes.len()
            ),
        )),
    }
}

/// Decodes all parameters of a Bind message. `wire_types` and `targets`
/// are indexed by parameter; missing entries mean text / undeclared.
pub(crate) fn decode_params(
    values: &[Option<Bytes>],
    format_codes: &[i16],
    wire_types: &[Type],
    targets: &[DataType],
) -> Result<Vec<ScalarValue>, ParamError> {
    let binary = binary_flags(format_codes, values.len())?;
    values
        .iter()
        .enumerate()
        .map(|(idx, value)| {
            decode_param(&BoundParam {
                position: idx + 1,
                bytes: value.as_deref(),
                binary: binary[idx],
                wire_type: wire_types.get(idx).unwrap_or(&Type::TEXT),
                target: targets.get(idx),
            })
        })
        .collect()
}

/// Decodes one parameter and casts it to its target type.
pub(crate) fn decode_param(param: &BoundParam<'_>) -> Result<ScalarValue, ParamError> {
    let Some(bytes) = param.bytes else {
        let null_type = param.target.cloned().or_else(|| param_data_type(param.wire_type));
        return Ok(null_type
            .and_then(|t| ScalarValue::try_new_null(&t).ok())
            .unwrap_or(ScalarValue::Null));
    };
    let value = if param.binary {
        decode_binary(bytes, param.wire_type, param.position)?
    } else {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| ParamError::new("22021", "invalid byte sequence for encoding \"UTF8\""))?;
        decode_text(text, param.wire_type)?
    };
    match param.target {
        Some(target) if value.data_type() != *target && *target != DataType::Null => {
            cast_param(&value, target, param.position)
        }
        _ => Ok(value),
    }
}

fn cast_param(value: &ScalarValue, target: &DataType, position: usize) -> Result<ScalarValue, ParamError> {
    value.cast_to(target).map_err(|_| {
        let sqlstate = if matches!(value, ScalarValue::Utf8(_)) {
            "22P02"
        } else {
            "42804"
        };
        ParamError::new(
            sqlstate,
            format!("parameter ${position}: cannot convert {value} to {target}"),
        )
    })
}

/// Reads a text-format parameter as Postgres type `wire`. Types without a
/// dedicated reader stay text and are converted by the cast to the target.
pub(crate) fn decode_text(text: &str, wire: &Type) -> Result<ScalarValue, ParamError> {
    let trimmed = text.trim();
    let value = match *wire {
        Type::BOOL => ScalarValue::Boolean(Some(parse_bool(trimmed).ok_or_else(|| bad(wire, text))?)),
        Type::INT2 => ScalarValue::Int16(Some(trimmed.parse().map_err(|_| bad(wire, text))?)),
        Type::INT4 => ScalarValue::Int32(Some(trimmed.parse().map_err(|_| bad(wire, text))?)),
        Type::INT8 => ScalarValue::Int64(Some(trimmed.parse().map_err(|_| bad(wire, text))?)),
        Type::FLOAT4 => ScalarValue::Float32(Some(trimmed.parse().map_err(|_| bad(wire, text))?)),
        Type::FLOAT8 => ScalarValue::Float64(Some(trimmed.parse().map_err(|_| bad(wire, text))?)),
        Type::NUMERIC => parse_numeric(trimmed).ok_or_else(|| bad(wire, text))?,
        // JDBC sends dates with a zone (`2024-02-05 +00`); a date ignores it.
        Type::DATE => {
            let day = trimmed.split_whitespace().next().unwrap_or_default();
            ScalarValue::Date32(Some(parse_date(day).ok_or_else(|| bad(wire, text))?))
        }
        Type::TIMESTAMP => {
            let micros = parse_timestamp(trimmed, false).ok_or_else(|| bad(wire, text))?;
            ScalarValue::TimestampMicrosecond(Some(micros), None)
        }
        Type::TIMESTAMPTZ => {
            let micros = parse_timestamp(trimmed, true).ok_or_else(|| bad(wire, text))?;
            ScalarValue::TimestampMicrosecond(Some(micros), Some(Arc::from(UTC)))
        }
        Type::BYTEA => ScalarValue::Binary(Some(parse_bytea(text).ok_or_else(|| bad(wire, text))?)),
        _ => ScalarValue::Utf8(Some(text.to_owned())),
    };
    Ok(value)
}

fn bad(wire: &Type, text: &str) -> ParamError {
    ParamError::invalid_text(wire.name(), text)
}

/// Reads a binary-format parameter (the Postgres `*recv` layouts).
pub(crate) fn decode_binary(bytes: &[u8], wire: &Type, position: usize) -> Result<ScalarValue, ParamError> {
    let fixed = |n: usize| -> Result<&[u8], ParamError> {
        if bytes.len() == n {
            Ok(bytes)
        } else {
            Err(ParamError::binary_format(position))
        }
    };
    let value = match *wire {
        Type::BOOL => ScalarValue::Boolean(Some(fixed(1)?[0] != 0)),
        Type::INT2 => ScalarValue::Int16(Some(i16::from_be_bytes(array(fixed(2)?)))),
        Type::INT4 => ScalarValue::Int32(Some(i32::from_be_bytes(array(fixed(4)?)))),
        Type::INT8 => ScalarValue::Int64(Some(i64::from_be_bytes(array(fixed(8)?)))),
        Type::FLOAT4 => ScalarValue::Float32(Some(f32::from_be_bytes(array(fixed(4)?)))),
        Type::FLOAT8 => ScalarValue::Float64(Some(f64::from_be_bytes(array(fixed(8)?)))),
        Type::NUMERIC => numeric_recv(bytes).ok_or_else(|| ParamError::binary_format(position))?,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| ParamError::new("22021", "invalid byte sequence for encoding \"UTF8\""))?;
            ScalarValue::Utf8(Some(text.to_owned()))
        }
        Type::BYTEA => ScalarValue::Binary(Some(bytes.to_vec())),
        Type::DATE => {
            let days = i64::from(i32::from_be_bytes(array(fixed(4)?))) + PG_EPOCH_DAYS;
            ScalarValue::Date32(Some(
                i32::try_from(days).map_err(|_| ParamError::binary_format(position))?,
            ))
        }
        Type::TIME => ScalarValue::Time64Microsecond(Some(i64::from_be_bytes(array(fixed(8)?)))),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let pg_micros = i64::from_be_bytes(array(fixed(8)?));
            let micros = pg_micros
                .checked_add(PG_EPOCH_MICROS)
                .ok_or_else(|| ParamError::binary_format(position))?;
            let tz = (*wire == Type::TIMESTAMPTZ).then(|| Arc::from(UTC));
            ScalarValue::TimestampMicrosecond(Some(micros), tz)
        }
        Type::INTERVAL => interval_recv(fixed(16)?).ok_or_else(|| ParamError::binary_format(position))?,
        _ => {
            return Err(ParamError::new(
                "0A000",
                format!(
                    "binary format for parameters of type {} is not supported; send parameter ${position} as text",
                    wire.name()
                ),
            ));
        }
    };
    Ok(value)
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

fn interval_recv(bytes: &[u8]) -> Option<ScalarValue> {
    let micros = i64::from_be_bytes(array(&bytes[0..8]));
    let days = i32::from_be_bytes(array(&bytes[8..12]));
    let months = i32::from_be_bytes(array(&bytes[12..16]));
    let nanos = micros.checked_mul(1_000)?;
    Some(ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(
        months, days, nanos,
    ))))
}

/// Postgres `boolin`: `t/true/y/yes/on/1` and `f/false/n/no/off/0`, any
/// case, unique prefixes of the words allowed.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    let lower = text.to_ascii_lowercase();
    let word = lower.as_str();
    let prefix_of = |full: &str, min: usize| word.len() >= min && full.starts_with(word);
    if prefix_of("true", 1) || prefix_of("yes", 1) || word == "on" || word == "1" {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || word == "0" {
        Some(false)
    } else {
        None
    }
}

/// Postgres `numeric_in`: a `Decimal128(38, scale)` with the text's own
/// scale, or `Float64` for NaN, ±Infinity and values beyond 38 digits.
pub(crate) fn parse_numeric(text: &str) -> Option<ScalarValue> {
    let lower = text.to_ascii_lowercase();
    let special = match lower.as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "+infinity" | "inf" | "+inf" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    };
    if let Some(value) = special {
        return Some(ScalarValue::Float64(Some(value)));
    }
    let (negative, digits, exponent) = split_decimal(text)?;
    match decimal128(negative, &digits, exponent) {
        Some((unscaled, scale)) => Some(ScalarValue::Decimal128(Some(unscaled), 38, scale)),
        None => text.parse::<f64>().ok().map(|v| ScalarValue::Float64(Some(v))),
    }
}

/// `[+-]int[.frac][e[+-]exp]` → (negative, all digits, power of ten of
/// the last digit).
fn split_decimal(text: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    Some((negative, format!("{int}{frac}"), exp.checked_sub(frac.len() as i64)?))
}

/// The unscaled value and scale for `digits × 10^exponent`, when it fits a
/// `Decimal128(38, _)`.
fn decimal128(negative: bool, digits: &str, exponent: i64) -> Option<(i128, i8)> {
    let mut digits = digits.trim_start_matches('0').to_owned();
    if digits.is_empty() {
        let scale = usize::try_from(-exponent).unwrap_or(0).min(DECIMAL128_DIGITS_MAX);
        return Some((0, i8::try_from(scale).ok()?));
    }
    let scale = if exponent > 0 {
        digits.extend(std::iter::repeat_n(
            '0',
            usize::try_from(exponent).ok()?.min(DECIMAL128_DIGITS_MAX + 1),
        ));
        0
    } else {
        usize::try_from(-exponent).ok()?
    };
    if digits.len() > DECIMAL128_DIGITS_MAX || scale > DECIMAL128_DIGITS_MAX {
        return None;
    }
    let magnitude: i128 = digits.parse().ok()?;
    Some((if negative { -magnitude } else { magnitude }, i8::try_from(scale).ok()?))
}

/// Postgres `numeric_recv` → the same values as [`parse_numeric`].
fn numeric_recv(bytes: &[u8]) -> Option<ScalarValue> {
    let word = |i: usize| bytes.get(i * 2..i * 2 + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(1)? as i16);
    let sign = word(2)?;
    let dscale = i64::from(word(3)?);
    let special = match sign {
        0x0000 | 0x4000 => None,
        0xC000 => Some(f64::NAN),
        0xD000 => Some(f64::INFINITY),
        0xF000 => Some(f64::NEG_INFINITY),
        _ => return None,
    };
    if let Some(value) = special {
        return Some(ScalarValue::Float64(Some(value)));
    }
    if bytes.len() != 8 + ndigits * 2 {
        return None;
    }
    let mut digits = String::with_capacity(ndigits * 4);
    for i in 0..ndigits {
        let group = word(4 + i)?;
        if group > 9999 {
            return None;
        }
        digits.push_str(&format!("{group:04}"));
    }
    // The last written digit has power 10^(4·(weight − ndigits + 1)); the
    // value is shown with `dscale` fraction digits.
    let exponent = 4 * (weight - ndigits as i64 + 1);
    let (digits, exponent) = rescale(digits, exponent, -dscale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    let digits = if digits.is_empty() { "0" } else { digits.as_str() };
    parse_numeric(&format!("{sign}{digits}e{exponent}"))
}

/// Re-expresses `digits × 10^exponent` with the given last-digit exponent
/// (appending zeros, or dropping digits that are beyond the display scale).
fn rescale(mut digits: String, exponent: i64, target: i64) -> (String, i64) {
    if exponent > target {
        let zeros = usize::try_from(exponent - target).unwrap_or(0);
        digits.extend(std::iter::repeat_n('0', zeros));
    } else if exponent < target {
        let drop = usize::try_from(target - exponent).unwrap_or(0).min(digits.len());
        digits.truncate(digits.len() - drop);
    }
    (digits, target)
}

/// `YYYY-MM-DD` → days since 1970-01-01.
pub(crate) fn parse_date(text: &str) -> Option<i32> {
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    i32::try_from(i64::from(date.num_days_from_ce()) - UNIX_EPOCH_FROM_CE_DAYS).ok()
}

/// `YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]][zone]` → microseconds since
/// 1970-01-01. The zone (`Z`, `UTC`, `±HH`, `±HH:MM`, `±HHMM`) converts a
/// `timestamptz` to UTC (no zone: the session's UTC); a `timestamp`
/// ignores it, as Postgres does.
pub(crate) fn parse_timestamp(text: &str, with_tz: bool) -> Option<i64> {
    let split = text.find([' ', 'T']).unwrap_or(text.len());
    let days = i64::from(parse_date(&text[..split])?);
    let rest = text[split..].trim_start_matches([' ', 'T']);
    let time_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let time_micros = if time_len == 0 {
        0
    } else {
        parse_time_micros(&rest[..time_len])?
    };
    let offset_secs = parse_zone(rest[time_len..].trim())?;
    let local = days.checked_mul(MICROS_PER_DAY)?.checked_add(time_micros)?;
    if with_tz {
        local.checked_sub(offset_secs * 1_000_000)
    } else {
        Some(local)
    }
}

/// `HH:MM[:SS[.fraction]]` → microseconds, the fraction rounded to µs.
fn parse_time_micros(text: &str) -> Option<i64> {
    let (clock, fraction) = text.split_once('.').unwrap_or((text, ""));
    let format = if clock.len() > 5 { "%H:%M:%S" } else { "%H:%M" };
    let time = NaiveTime::parse_from_str(clock, format).ok()?;
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut padded: String = fraction.chars().take(7).collect();
    while padded.len() < 7 {
        padded.push('0');
    }
    let tenths_of_micros: i64 = padded.parse().ok()?;
    let fraction_micros = (tenths_of_micros + 5) / 10;
    Some(i64::from(time.num_seconds_from_midnight()) * 1_000_000 + fraction_micros)
}

/// A zone suffix → its offset east of UTC in seconds.
fn parse_zone(zone: &str) -> Option<i64> {
    if zone.is_empty() || zone.eq_ignore_ascii_case("z") || zone.eq_ignore_ascii_case("utc") {
        return Some(0);
    }
    let (sign, rest) = match zone.as_bytes()[0] {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let padded = format!("{digits:0<6}");
    let (hours, minutes, seconds): (i64, i64, i64) = if digits.len() <= 2 {
        (digits.parse().ok()?, 0, 0)
    } else {
        (
            padded[0..2].parse().ok()?,
            padded[2..4].parse().ok()?,
            padded[4..6].parse().ok()?,
        )
    };
    Some(sign * (hours * 3600 + minutes * 60 + seconds))
}

/// `bytea` input: hex (`\x0a0b`) or the escape format (`a\\b\001`).
pub(crate) fn parse_bytea(text: &str) -> Option<Vec<u8>> {
    if let Some(hex) = text.strip_prefix("\\x") {
        let hex: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !hex.len().is_multiple_of(2) {
            return None;
        }
        return hex
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
            .collect();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let octal = std::str::from_utf8(bytes.get(i + 1..i + 4)?).ok()?;
            out.push(u8::from_str_radix(octal, 8).ok()?);
            i += 4;
        }
    }
    Some(out)
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
