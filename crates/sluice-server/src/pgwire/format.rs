//! Postgres' wire forms of single values, as pure functions.
//!
//! Text forms follow what a Postgres server prints with `DateStyle = 'ISO,
//! MDY'`, `IntervalStyle = postgres`, `TimeZone = UTC` and the default
//! `extra_float_digits = 1` (shortest round-trip floats); binary forms follow
//! the `*send` functions of the Postgres backend. [`super::encode`] picks the
//! function for an Arrow value; COPY reuses the text forms.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use chrono::{Datelike, NaiveDate};

/// Microseconds in a day.
pub(crate) const MICROS_PER_DAY: i64 = 86_400_000_000;
/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (Postgres' epoch).
pub(crate) const PG_EPOCH_DAYS: i64 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
pub(crate) const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * MICROS_PER_DAY;
/// Days from 0001-01-01 (chrono's day 1 is 0001-01-01) to 1970-01-01.
pub(crate) const UNIX_EPOCH_FROM_CE_DAYS: i64 = 719_163;

/// A value the wire form of a date or time cannot hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutOfRange(pub(crate) &'static str);

/// Appends `value` with its `Display` form.
pub(crate) fn put_display(out: &mut BytesMut, value: impl std::fmt::Display) {
    // BytesMut's fmt::Write grows the buffer and never fails.
    let _ = write!(out, "{value}");
}

/// `float8` text: shortest round-trip digits, fixed notation for decimal
/// exponents in `-4..15`, otherwise `d.ddde+XX`, as Postgres' `float8out`.
pub(crate) fn float8_text(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    shortest_to_pg(&format!("{value:e}"), 15)
}

/// `float4` text: as [`float8_text`] with the fixed range `-4..6`.
pub(crate) fn float4_text(value: f32) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    shortest_to_pg(&format!("{value:e}"), 6)
}

/// Rewrites Rust's shortest scientific form (`-1.25e-7`, `1e20`) into
/// Postgres' choice of fixed or scientific notation.
fn shortest_to_pg(scientific: &str, fixed_exp_max: i32) -> String {
    let (negative, body) = match scientific.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, scientific),
    };
    let (mantissa, exp) = body.split_once('e').unwrap_or((body, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    if (-4..fixed_exp_max).contains(&exp) {
        // `point` digits before the decimal point (≤ 0: leading zeros after it).
        let point = exp + 1;
        let len = digits.len() as i32;
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        } else if point >= len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', (point - len) as usize));
        } else {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.unsigned_abs());
    }
    out
}

/// An exact decimal: `(-1)^negative × digits × 10^-scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Numeric {
    negative: bool,
    /// Decimal digits of the magnitude, without sign.
    digits: String,
    /// Digits after the point; never negative once normalised.
    scale: u32,
}

impl Numeric {
    /// A decimal from an unscaled integer's decimal text (`"-12345"`) and a
    /// scale (Arrow decimals' scale may be negative: trailing zeros).
    pub(crate) fn from_unscaled(unscaled: &str, scale: i32) -> Numeric {
        let (negative, magnitude) = match unscaled.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, unscaled),
        };
        let mut digits = magnitude.trim_start_matches('0').to_owned();
        if digits.is_empty() {
            digits.push('0');
        }
        let negative = negative && digits != "0";
        if scale < 0 {
            if digits != "0" {
                digits.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
            }
            return Numeric {
                negative,
                digits,
                scale: 0,
            };
        }
        Numeric {
            negative,
            digits,
            scale: scale as u32,
        }
    }

    /// The integer part and exactly `scale` fraction digits.
    fn split(&self) -> (&str, String) {
        let scale = self.scale as usize;
        if self.digits.len() > scale {
            let (int, frac) = self.digits.split_at(self.digits.len() - scale);
            (int, frac.to_owned())
        } else {
            let zeros = "0".repeat(scale - self.digits.len());
            ("", zeros + &self.digits)
        }
    }

    /// `numeric` text: `-123.4500` (exactly `scale` fraction digits).
    pub(crate) fn write_text(&self, out: &mut BytesMut) {
        let (int, frac) = self.split();
        if self.negative {
            out.put_u8(b'-');
        }
        out.put_slice(if int.is_empty() { b"0" } else { int.as_bytes() });
        if !frac.is_empty() {
            out.put_u8(b'.');
            out.put_slice(frac.as_bytes());
        }
    }

    /// `numeric` binary (`numeric_send`): ndigits, weight, sign, dscale,
    /// then base-10000 digits, leading and trailing zero digits dropped.
    pub(crate) fn write_binary(&self, out: &mut BytesMut) {
        let (int, frac) = self.split();
        let int_pad = (4 - int.len() % 4) % 4;
        let int_padded = "0".repeat(int_pad) + int;
        let frac_pad = (4 - frac.len() % 4) % 4;
        let frac_padded = frac + &"0".repeat(frac_pad);
        let mut weight = (int_padded.len() / 4) as i32 - 1;
        let mut groups: Vec<i16> = int_padded
            .as_bytes()
            .chunks(4)
            .chain(frac_padded.as_bytes().chunks(4))
            .map(|chunk| chunk.iter().fold(0i16, |acc, d| acc * 10 + i16::from(d - b'0')))
            .collect();
        let leading = groups.iter().take_while(|g| **g == 0).count();
        groups.drain(..leading);
        weight -= leading as i32;
        while groups.last() == Some(&0) {
            groups.pop();
        }
        if groups.is_empty() {
            weight = 0;
        }
        let sign: u16 = if self.negative && !groups.is_empty() { 0x4000 } else { 0 };
        out.put_i16(groups.len() as i16);
        out.put_i16(weight as i16);
        out.put_u16(sign);
        out.put_u16(self.scale as u16);
        for group in groups {
            out.put_i16(group);
        }
    }
}

/// `bytea` text in Postgres' default hex format: `\x` then lowercase hex.
pub(crate) fn bytea_text(bytes: &[u8], out: &mut BytesMut) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(2 + bytes.len() * 2);
    out.put_slice(b"\\x");
    for byte in bytes {
        out.put_u8(HEX[usize::from(byte >> 4)]);
        out.put_u8(HEX[usize::from(byte & 0x0f)]);
    }
}

/// The calendar date `days` after 1970-01-01.
fn civil_date(days: i64) -> Result<NaiveDate, OutOfRange> {
    days.checked_add(UNIX_EPOCH_FROM_CE_DAYS)
        .and_then(|d| i32::try_from(d).ok())
        .and_then(NaiveDate::from_num_days_from_ce_opt)
        .ok_or(OutOfRange("date out of range"))
}

/// Writes `YYYY-MM-DD` and returns whether the year is BC (Postgres puts
/// ` BC` after the whole value; year 0 is 1 BC).
fn write_ymd(days: i64, out: &mut BytesMut) -> Result<bool, OutOfRange> {
    let date = civil_date(days)?;
    let (year, bc) = if date.year() <= 0 {
        (1 - date.year(), true)
    } else {
        (date.year(), false)
    };
    let _ = write!(out, "{year:04}-{:02}-{:02}", date.month(), date.day());
    Ok(bc)
}

/// `date` text: `2026-11-30`, or `0044-03-15 BC`.
pub(crate) fn date_text(days: i64, out: &mut BytesMut) -> Result<(), OutOfRange> {
    if write_ymd(days, out)? {
        out.put_slice(b" BC");
    }
    Ok(())
}

/// `time` text: `HH:MM:SS` plus `.ffffff` without trailing zeros.
pub(crate) fn time_text(micros: i64, out: &mut BytesMut) {
    let micros = micros.unsigned_abs();
    let secs = micros / 1_000_000;
    let _ = write!(out, "{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    write_fraction(micros % 1_000_000, out);
}

/// `.ffffff` with trailing zeros removed; nothing for zero.
fn write_fraction(micros: u64, out: &mut BytesMut) {
    if micros == 0 {
        return;
    }
    let mut text = format!("{micros:06}");
    while text.ends_with('0') {
        text.pop();
    }
    out.put_u8(b'.');
    out.put_slice(text.as_bytes());
}

/// `timestamp` / `timestamptz` text for microseconds since 1970-01-01 UTC:
/// `2026-11-30 12:00:00.123`, with `+00` for timestamptz (the session's
/// TimeZone is UTC) and ` BC` for years before 1.
pub(crate) fn timestamp_text(micros: i64, with_tz: bool, out: &mut BytesMut) -> Result<(), OutOfRange> {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let bc = write_ymd(days, out)?;
    out.put_u8(b' ');
    time_text(micros.rem_euclid(MICROS_PER_DAY), out);
    if with_tz {
        out.put_slice(b"+00");
    }
    if bc {
        out.put_slice(b" BC");
    }
    Ok(())
}

/// `interval` text in `IntervalStyle = postgres`: `1 year 2 mons -3 days
/// +04:05:06.5`. Years and months come from `months`, the clock part from
/// `micros` (hours are not folded into days, as in Postgres).
pub(crate) fn interval_text(months: i32, days: i32, micros: i64, out: &mut BytesMut) {
    let mut state = IntervalParts {
        is_zero: true,
        is_before: false,
    };
    state.push(i64::from(months / 12), "year", out);
    state.push(i64::from(months % 12), "mon", out);
    state.push(i64::from(days), "day", out);
    if state.is_zero || micros != 0 {
        if !state.is_zero {
            out.put_u8(b' ');
        }
        if micros < 0 {
            out.put_u8(b'-');
        } else if state.is_before {
            out.put_u8(b'+');
        }
        let magnitude = micros.unsigned_abs();
        let secs = magnitude / 1_000_000;
        let _ = write!(out, "{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
        write_fraction(magnitude % 1_000_000, out);
    }
}

/// Postgres' `AddPostgresIntPart` state: whether anything was written, and
/// whether the previous part was negative (the next positive one gets `+`).
struct IntervalParts {
    is_zero: bool,
    is_before: bool,
}

impl IntervalParts {
    fn push(&mut self, value: i64, unit: &str, out: &mut BytesMut) {
        if value == 0 {
            return;
        }
        if !self.is_zero {
            out.put_u8(b' ');
        }
        if self.is_before && value > 0 {
            out.put_u8(b'+');
        }
        let plural = if value == 1 { "" } else { "s" };
        let _ = write!(out, "{value} {unit}{plural}");
        self.is_before = value < 0;
        self.is_zero = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut BytesMut)) -> String {
        let mut out = BytesMut::new();
        f(&mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn float8_text_matches_postgres_shortest_output() {
        // Expected strings are what `SELECT x::float8` prints in Postgres 12+.
        let cases = [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (123.456, "123.456"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (100_000_000_000_000.0, "100000000000000"),
            (1e15, "1e+15"),
            (1e20, "1e+20"),
            (123_456_789_012_345_680.0, "1.2345678901234568e+17"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (value, expected) in cases {
            assert_eq!(float8_text(value), expected, "{value:?}");
        }
    }

    #[test]
    fn float4_text_switches_to_exponent_at_six_digits() {
        let cases = [
            (1.5f32, "1.5"),
            (0.1f32, "0.1"),
            (100_000.0f32, "100000"),
            (1_000_000.0f32, "1e+06"),
            (1.25e-5f32, "1.25e-05"),
            (f32::NAN, "NaN"),
            (f32::NEG_INFINITY, "-Infinity"),
        ];
        for (value, expected) in cases {
            assert_eq!(float4_text(value), expected, "{value:?}");
        }
    }

    #[test]
    fn numeric_text_keeps_exactly_the_scale_digits() {
        let num = |unscaled: &str, scale| text(|o| Numeric::from_unscaled(unscaled, scale).write_text(o));
        assert_eq!(num("12345", 2), "123.45");
        assert_eq!(num("-12345", 2), "-123.45");
        assert_eq!(num("5", 3), "0.005");
        assert_eq!(num("-5", 3), "-0.005");
        assert_eq!(num("0", 2), "0.00");
        assert_eq!(num("1230", 0), "1230");
        assert_eq!(num("123", -2), "12300");
        assert_eq!(num("-0", 1), "0.0");
        assert_eq!(num("18446744073709551615", 0), "18446744073709551615");
    }

    /// Decodes `numeric_send` output into its header and digits.
    fn numeric_binary(unscaled: &str, scale: i32) -> (i16, i16, u16, u16, Vec<i16>) {
        let mut out = BytesMut::new();
        Numeric::from_unscaled(unscaled, scale).write_binary(&mut out);
        let words: Vec<u16> = out.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
        let digits = words[4..].iter().map(|w| *w as i16).collect();
        (words[0] as i16, words[1] as i16, words[2], words[3], digits)
    }

    #[test]
    fn numeric_binary_matches_numeric_send() {
        // 12345.678 = 1·10000¹ + 2345·10000⁰ + 6780·10000⁻¹
        assert_eq!(numeric_binary("12345678", 3), (3, 1, 0, 3, vec![1, 2345, 6780]));
        // -1.5 = -(1 + 5000·10000⁻¹)
        assert_eq!(numeric_binary("-15", 1), (2, 0, 0x4000, 1, vec![1, 5000]));
        // 0.5: no integer digits, weight -1
        assert_eq!(numeric_binary("5", 1), (1, -1, 0, 1, vec![5000]));
        // 0.00001 = 1000·10000⁻², leading zero group dropped
        assert_eq!(numeric_binary("1", 5), (1, -2, 0, 5, vec![1000]));
        // 100000000 = 1·10000², trailing zero groups dropped
        assert_eq!(numeric_binary("100000000", 0), (1, 2, 0, 0, vec![1]));
        // zero keeps its display scale and no digits
        assert_eq!(numeric_binary("0", 2), (0, 0, 0, 2, vec![]));
        // negative scale: 123 × 10² = 12300 = 1·10000 + 2300
        assert_eq!(numeric_binary("123", -2), (2, 1, 0, 0, vec![1, 2300]));
    }

    #[test]
    fn bytea_text_is_hex() {
        assert_eq!(text(|o| bytea_text(&[0x00, 0xab, 0x10, 0xff], o)), "\\x00ab10ff");
        assert_eq!(text(|o| bytea_text(&[], o)), "\\x");
    }

    #[test]
    fn date_text_is_iso_with_bc_suffix() {
        // Day numbers relative to 1970-01-01 (date -d ... +%s / 86400).
        assert_eq!(text(|o| date_text(0, o).unwrap()), "1970-01-01");
        assert_eq!(text(|o| date_text(10_957, o).unwrap()), "2000-01-01");
        assert_eq!(text(|o| date_text(20_787, o).unwrap()), "2026-11-30");
        assert_eq!(text(|o| date_text(-1, o).unwrap()), "1969-12-31");
        // 0001-01-01 is day -719162; the day before is 1 BC (year 0).
        assert_eq!(text(|o| date_text(-719_162, o).unwrap()), "0001-01-01");
        assert_eq!(text(|o| date_text(-719_163, o).unwrap()), "0001-12-31 BC");
        assert!(date_text(i64::MAX, &mut BytesMut::new()).is_err());
    }

    #[test]
    fn timestamp_text_is_postgres_form() {
        // 2026-11-30 12:00:00 UTC = 1796040000 s since 1970.
        let noon = 1_796_040_000_000_000i64;
        let ts = |micros, tz| text(|o| timestamp_text(micros, tz, o).unwrap());
        assert_eq!(ts(noon, false), "2026-11-30 12:00:00");
        assert_eq!(ts(noon + 123_000, false), "2026-11-30 12:00:00.123");
        assert_eq!(ts(noon + 1, false), "2026-11-30 12:00:00.000001");
        assert_eq!(ts(noon + 123_000, true), "2026-11-30 12:00:00.123+00");
        assert_eq!(ts(0, false), "1970-01-01 00:00:00");
        assert_eq!(ts(-1, false), "1969-12-31 23:59:59.999999");
    }

    #[test]
    fn time_text_trims_fraction() {
        assert_eq!(text(|o| time_text(0, o)), "00:00:00");
        assert_eq!(text(|o| time_text(45_296_500_000, o)), "12:34:56.5");
        assert_eq!(text(|o| time_text(86_399_999_999, o)), "23:59:59.999999");
    }

    #[test]
    fn interval_text_matches_intervalstyle_postgres() {
        const HOUR: i64 = 3_600_000_000;
        let iv = |months, days, micros| text(|o| interval_text(months, days, micros, o));
        assert_eq!(iv(0, 0, 0), "00:00:00");
        assert_eq!(iv(0, 1, 2 * HOUR), "1 day 02:00:00");
        assert_eq!(iv(2, 0, 0), "2 mons");
        assert_eq!(iv(14, 3, 0), "1 year 2 mons 3 days");
        assert_eq!(iv(24, 0, 0), "2 years");
        assert_eq!(iv(0, 0, -HOUR), "-01:00:00");
        assert_eq!(iv(0, 1, -HOUR), "1 day -01:00:00");
        assert_eq!(iv(0, -1, HOUR), "-1 days +01:00:00");
        assert_eq!(iv(12, -1, 0), "1 year -1 days");
        assert_eq!(iv(-10, 0, 0), "-10 mons");
        assert_eq!(iv(0, 0, 1_500_000), "00:00:01.5");
        assert_eq!(iv(0, 0, 100 * HOUR + 61_000_000), "100:01:01");
    }
}
