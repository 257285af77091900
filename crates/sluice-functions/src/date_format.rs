//! `DATE_FORMAT(ts, pattern)`: a timestamp as text in a Java date pattern
//! (`'yyyy-MM-dd HH:mm:ss'`), as Flink's. The pattern is translated once
//! into chrono's items; a letter it does not know is an error naming it,
//! not a silent literal.
//!
//! A pattern's finest field decides how long a text lasts (`yyyy-MM-dd` a
//! day, `HH:mm` a minute): a row in the same day (minute) as the row before
//! it reuses that row's text instead of formatting again. Streams arrive
//! roughly in time order, so a batch formats a handful of texts, not one
//! per row (formatting per row was a quarter of Nexmark q17's CPU).

use super::{arrays, is_text};
use arrow::array::{Array, AsArray, StringBuilder};
use arrow::compute::kernels::cast::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, FixedOffset};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use std::fmt::Write;
use std::sync::Arc;

udf_struct!(DateFormat);

/// `pattern` (Java's `DateTimeFormatter` letters) as a strftime string:
/// `y` year (`yy` two digits), `M` month (`MMM` abbreviated, `MMMM` full
/// name), `d` day, `D` day of the year, `H` hour 0–23, `h` hour 1–12, `m`
/// minute, `s` second, `SSS`/`SSSSSS`/`SSSSSSSSS` fraction (4–5 and 7–8
/// `S` print 6 and 9 digits; 1–2 are refused: chrono cannot cut to them), `E` day
/// name, `a` AM/PM, `u` day of the week (1 = Monday), `Z` offset; `'…'`
/// quotes text (`''` is a quote); anything but a letter is itself.
pub fn java_pattern(pattern: &str) -> std::result::Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // A quoted text, or '' for a quote.
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return Err(format!("unterminated quote in date pattern \"{pattern}\"")),
                    Some('\'') if chars.get(j + 1) == Some(&'\'') => {
                        out.push('\'');
                        j += 2;
                    }
                    Some('\'') => break,
                    Some('%') => {
                        out.push_str("%%");
                        j += 1;
                    }
                    Some(&other) => {
                        out.push(other);
                        j += 1;
                    }
                }
            }
            i = j + 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            if c == '%' {
                out.push_str("%%");
            } else {
                out.push(c);
            }
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&d| d == c).count();
        let spec = match (c, run) {
            ('y' | 'Y', 2) => "%y",
            ('y' | 'Y', _) => "%Y",
            ('M' | 'L', 1) => "%-m",
            ('M' | 'L', 2) => "%m",
            ('M' | 'L', 3) => "%b",
            ('M' | 'L', _) => "%B",
            ('d', 1) => "%-d",
            ('d', _) => "%d",
            ('D', 1) => "%-j",
            ('D', _) => "%j",
            ('H', 1) => "%-H",
            ('H', _) => "%H",
            ('h', 1) => "%-I",
            ('h', _) => "%I",
            ('m', 1) => "%-M",
            ('m', _) => "%M",
            ('s', 1) => "%-S",
            ('s', _) => "%S",
            ('S', 3) => "%3f",
            ('S', 4..=6) => "%6f",
            ('S', 7..=9) => "%9f",
            ('E', 1..=3) => "%a",
            ('E', _) => "%A",
            ('a', _) => "%p",
            ('u', 1) => "%u",
            ('Z', _) => "%z",
            _ => {
                return Err(format!(
                    "date pattern letter '{}' (×{run}) in \"{pattern}\" is not supported",
                    c
                ));
            }
        };
        out.push_str(spec);
        i += run;
    }
    Ok(out)
}

/// chrono's items for `pattern`, checked.
pub(crate) fn items(pattern: &str) -> std::result::Result<Vec<Item<'static>>, String> {
    let strftime = java_pattern(pattern)?;
    let items: Vec<Item<'static>> = StrftimeItems::new(&strftime).map(|item| item.to_owned()).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(format!("date pattern \"{pattern}\" cannot be formatted"));
    }
    Ok(items)
}

/// How many µs one text of `items` lasts: the unit of its finest field (a
/// day for dates, down to a second); 1 when it shows fractions of a second
/// or a field not known here (every distinct instant is formatted).
pub(crate) fn unit_micros(items: &[Item<'_>]) -> i64 {
    use chrono::format::{Fixed, Numeric};
    const DAY: i64 = 86_400_000_000;
    items
        .iter()
        .map(|item| match item {
            Item::Literal(_) | Item::OwnedLiteral(_) | Item::Space(_) | Item::OwnedSpace(_) => DAY,
            // The offset is fixed for the whole array.
            Item::Fixed(
                Fixed::TimezoneOffset
                | Fixed::TimezoneOffsetColon
                | Fixed::TimezoneOffsetColonZ
                | Fixed::TimezoneOffsetZ
                | Fixed::TimezoneOffsetDoubleColon
                | Fixed::TimezoneOffsetTripleColon
                | Fixed::ShortMonthName
                | Fixed::LongMonthName
                | Fixed::ShortWeekdayName
                | Fixed::LongWeekdayName,
            ) => DAY,
            Item::Fixed(Fixed::LowerAmPm | Fixed::UpperAmPm) => 3_600_000_000,
            Item::Numeric(n, _) => match n {
                Numeric::Year
                | Numeric::YearDiv100
                | Numeric::YearMod100
                | Numeric::IsoYear
                | Numeric::IsoYearDiv100
                | Numeric::IsoYearMod100
                | Numeric::Quarter
                | Numeric::Month
                | Numeric::Day
                | Numeric::WeekFromSun
                | Numeric::WeekFromMon
                | Numeric::IsoWeek
                | Numeric::NumDaysFromSun
                | Numeric::WeekdayFromMon
                | Numeric::Ordinal => DAY,
                Numeric::Hour | Numeric::Hour12 => 3_600_000_000,
                Numeric::Minute => 60_000_000,
                Numeric::Second | Numeric::Timestamp => 1_000_000,
                _ => 1,
            },
            _ => 1,
        })
        .min()
        .unwrap_or(DAY)
}

impl ScalarUDFImpl for DateFormat {
    fn name(&self) -> &str {
        "date_format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [t @ DataType::Timestamp(..), p] if is_text(p) => Ok(vec![t.clone(), DataType::Utf8]),
            [DataType::Date32 | DataType::Date64, p] if is_text(p) => {
                Ok(vec![DataType::Timestamp(TimeUnit::Millisecond, None), DataType::Utf8])
            }
            // Text is read as a timestamp row by row (NULL when it is none).
            [t, p] if is_text(t) && is_text(p) => Ok(vec![DataType::Utf8, DataType::Utf8]),
            [t, p] => plan_err!("DATE_FORMAT takes (timestamp, pattern text), not ({t}, {p})"),
            _ => plan_err!("DATE_FORMAT takes two arguments, not {}", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    /// A constant pattern is checked when the statement is planned, so a
    /// pattern with an unknown letter is refused, not a failing pipeline.
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        super::check_pattern(self.name(), &args)?;
        Ok(ExprSimplifyResult::Original(args))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // A constant pattern (as good as always) is read and compiled once,
        // not compared with the last one a row (3 % of Nexmark q15's
        // profile was that `memcmp`).
        let (ts, patterns, constant) = match &args.args[..] {
            [ts, ColumnarValue::Scalar(p)] => (ts.to_array(args.number_rows)?, p.to_array_of_size(1)?, true),
            _ => {
                let mut a = arrays(&args)?.into_iter();
                let (ts, p) = (a.next(), a.next());
                match (ts, p) {
                    (Some(ts), Some(p)) => (ts, p, false),
                    _ => return exec_err!("DATE_FORMAT takes two arguments"),
                }
            }
        };
        let zone = match ts.data_type() {
            DataType::Timestamp(_, Some(tz)) => Some(tz.to_string()),
            _ => None,
        };
        // Microseconds, keeping the zone; text that is no timestamp is NULL.
        let safe = CastOptions {
            safe: true,
            ..CastOptions::default()
        };
        let target = DataType::Timestamp(TimeUnit::Microsecond, zone.clone().map(Into::into));
        let ts = cast_with_options(&ts, &target, &safe)?;
        let ts = ts.as_primitive::<TimestampMicrosecondType>();
        let offset = match zone.as_deref() {
            None => FixedOffset::east_opt(0).expect("UTC"),
            Some(z) => match offset_of(z) {
                Some(o) => o,
                None => return exec_err!("DATE_FORMAT: time zone \"{z}\" is not supported (only UTC and ±HH:MM)"),
            },
        };
        let patterns = patterns.as_string::<i32>();
        // The pattern, its items and how long one of its texts lasts.
        let mut compiled: Option<(String, Vec<Item<'static>>, i64)> = None;
        // The text of the last row formatted and its unit (local time / unit).
        let mut last: Option<i64> = None;
        let mut text = String::new();
        let offset_micros = i64::from(offset.local_minus_utc()) * 1_000_000;
        let mut out = StringBuilder::with_capacity(ts.len(), ts.len() * 20);
        let (min_micros, max_micros) = (
            DateTime::<chrono::Utc>::MIN_UTC.timestamp_micros(),
            DateTime::<chrono::Utc>::MAX_UTC.timestamp_micros(),
        );
        for row in 0..ts.len() {
            let at = if constant { 0 } else { row };
            if ts.is_null(row) || patterns.is_null(at) {
                out.append_null();
                continue;
            }
            let pattern = patterns.value(at);
            if compiled.as_ref().is_none_or(|(p, _, _)| !constant && p != pattern) {
                match items(pattern) {
                    Ok(items) => {
                        let unit = unit_micros(&items);
                        compiled = Some((pattern.to_string(), items, unit));
                        last = None;
                    }
                    Err(why) => return exec_err!("DATE_FORMAT: {why}"),
                }
            }
            let (_, items, unit) = compiled.as_ref().expect("compiled above");
            let micros = ts.value(row);
            // Beyond chrono's years: NULL. Checked against the bounds, not by
            // building a date a row (4 % of Nexmark q15's profile): the date
            // is built only for a row that starts a new unit.
            if !(min_micros..=max_micros).contains(&micros) {
                out.append_null();
                continue;
            }
            let unit_no = micros.saturating_add(offset_micros).div_euclid(*unit);
            if last != Some(unit_no) {
                let utc = DateTime::from_timestamp_micros(micros).ok_or_else(|| {
                    datafusion::common::DataFusionError::Execution("DATE_FORMAT: timestamp out of range".into())
                })?;
                // A timestamp without a zone is shown as UTC (`Z` prints +0000).
                text.clear();
                write!(text, "{}", utc.with_timezone(&offset).format_with_items(items.iter()))
                    .map_err(|_| datafusion::common::DataFusionError::Execution("DATE_FORMAT: cannot format".into()))?;
                last = Some(unit_no);
            }
            out.append_value(&text);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// The fixed offset a time zone name stands for: `UTC`/`Z` or `±HH:MM`.
fn offset_of(zone: &str) -> Option<FixedOffset> {
    if matches!(zone, "UTC" | "utc" | "Z" | "Etc/UTC") {
        return FixedOffset::east_opt(0);
    }
    let (sign, rest) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let seconds = h.parse::<i32>().ok()? * 3600 + m.parse::<i32>().ok()? * 60;
    FixedOffset::east_opt(sign * seconds)
}
