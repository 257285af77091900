//! Arrow record batches → Postgres `DataRow`s.
//!
//! [`value_at`] reads one cell as a [`PgValue`] (the Postgres value the
//! column's type maps to, see [`super::types`]); [`PgValue::write_text`]
//! and [`PgValue::write_binary`] write its wire form. [`BatchEncoder`] does
//! this per cell of a batch, with Arrow's display formatter for columns
//! without a native mapping, and [`encode_data_rows`] builds the `DataRow`
//! messages in the format the client chose per column.

use arrow::array::{Array, AsArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType as D, IntervalUnit, TimeUnit, *};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use bytes::{BufMut, BytesMut};
use pgwire::api::results::FieldFormat;
use pgwire::messages::data::DataRow;
use sluice_types::{Error, Result, SqlCode};

use super::format::{self, Numeric, OutOfRange, PG_EPOCH_DAYS, PG_EPOCH_MICROS};
use super::types::{PgKind, pg_kind};

/// One cell as the Postgres value it is sent as.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PgValue<'a> {
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Float4(f32),
    Float8(f64),
    Numeric(Numeric),
    Text(&'a str),
    Bytes(&'a [u8]),
    /// Days since 1970-01-01.
    Date(i64),
    /// Microseconds since midnight.
    Time(i64),
    /// Microseconds since 1970-01-01 (UTC for `TimestampTz`).
    Timestamp(i64),
    TimestampTz(i64),
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
}

fn out_of_range(e: OutOfRange) -> Error {
    Error::user(SqlCode::DataException, e.0)
}

/// `value × factor` microseconds, or an out-of-range error.
fn scale_micros(value: i64, factor: i64, what: &'static str) -> Result<i64> {
    value.checked_mul(factor).ok_or_else(|| out_of_range(OutOfRange(what)))
}

/// Microseconds for a value of `unit` (nanoseconds are floored, as
/// Postgres keeps microseconds).
fn to_micros(unit: TimeUnit, value: i64, what: &'static str) -> Result<i64> {
    match unit {
        TimeUnit::Second => scale_micros(value, 1_000_000, what),
        TimeUnit::Millisecond => scale_micros(value, 1_000, what),
        TimeUnit::Microsecond => Ok(value),
        TimeUnit::Nanosecond => Ok(value.div_euclid(1_000)),
    }
}

fn timestamp_raw(array: &dyn Array, unit: TimeUnit, row: usize) -> i64 {
    match unit {
        TimeUnit::Second => array.as_primitive::<TimestampSecondType>().value(row),
        TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().value(row),
        TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().value(row),
        TimeUnit::Nanosecond => array.as_primitive::<TimestampNanosecondType>().value(row),
    }
}

fn duration_raw(array: &dyn Array, unit: TimeUnit, row: usize) -> i64 {
    match unit {
        TimeUnit::Second => array.as_primitive::<DurationSecondType>().value(row),
        TimeUnit::Millisecond => array.as_primitive::<DurationMillisecondType>().value(row),
        TimeUnit::Microsecond => array.as_primitive::<DurationMicrosecondType>().value(row),
        TimeUnit::Nanosecond => array.as_primitive::<DurationNanosecondType>().value(row),
    }
}

fn time_micros(array: &dyn Array, row: usize) -> Option<Result<i64>> {
    let micros = match array.data_type() {
        D::Time32(TimeUnit::Second) => to_micros(
            TimeUnit::Second,
            array.as_primitive::<Time32SecondType>().value(row).into(),
            "time",
        ),
        D::Time32(TimeUnit::Millisecond) => {
            let ms = array.as_primitive::<Time32MillisecondType>().value(row);
            to_micros(TimeUnit::Millisecond, ms.into(), "time")
        }
        D::Time64(TimeUnit::Microsecond) => Ok(array.as_primitive::<Time64MicrosecondType>().value(row)),
        D::Time64(TimeUnit::Nanosecond) => to_micros(
            TimeUnit::Nanosecond,
            array.as_primitive::<Time64NanosecondType>().value(row),
            "time",
        ),
        _ => return None,
    };
    Some(micros)
}

fn interval_at(array: &dyn Array, unit: IntervalUnit, row: usize) -> PgValue<'static> {
    match unit {
        IntervalUnit::YearMonth => PgValue::Interval {
            months: array.as_primitive::<IntervalYearMonthType>().value(row),
            days: 0,
            micros: 0,
        },
        IntervalUnit::DayTime => {
            let v = array.as_primitive::<IntervalDayTimeType>().value(row);
            PgValue::Interval {
                months: 0,
                days: v.days,
                micros: i64::from(v.milliseconds) * 1_000,
            }
        }
        IntervalUnit::MonthDayNano => {
            let v = array.as_primitive::<IntervalMonthDayNanoType>().value(row);
            PgValue::Interval {
                months: v.months,
                days: v.days,
                micros: v.nanoseconds / 1_000,
            }
        }
    }
}

fn decimal_at(array: &dyn Array, row: usize) -> Option<Numeric> {
    let (unscaled, scale) = match array.data_type() {
        D::Decimal32(_, s) => (array.as_primitive::<Decimal32Type>().value(row).to_string(), *s),
        D::Decimal64(_, s) => (array.as_primitive::<Decimal64Type>().value(row).to_string(), *s),
        D::Decimal128(_, s) => (array.as_primitive::<Decimal128Type>().value(row).to_string(), *s),
        D::Decimal256(_, s) => (array.as_primitive::<Decimal256Type>().value(row).to_string(), *s),
        D::UInt64 => (array.as_primitive::<UInt64Type>().value(row).to_string(), 0),
        _ => return None,
    };
    Some(Numeric::from_unscaled(&unscaled, i32::from(scale)))
}

/// Reads the non-null cell `row` of `array` as its Postgres value. Columns
/// of [`PgKind::Display`] have no native value (an internal error here).
pub(crate) fn value_at(array: &dyn Array, row: usize) -> Result<PgValue<'_>> {
    let value = match array.data_type() {
        D::Boolean => PgValue::Bool(array.as_boolean().value(row)),
        D::Int8 => PgValue::Int2(array.as_primitive::<Int8Type>().value(row).into()),
        D::Int16 => PgValue::Int2(array.as_primitive::<Int16Type>().value(row)),
        D::UInt8 => PgValue::Int2(array.as_primitive::<UInt8Type>().value(row).into()),
        D::Int32 => PgValue::Int4(array.as_primitive::<Int32Type>().value(row)),
        D::UInt16 => PgValue::Int4(array.as_primitive::<UInt16Type>().value(row).into()),
        D::Int64 => PgValue::Int8(array.as_primitive::<Int64Type>().value(row)),
        D::UInt32 => PgValue::Int8(array.as_primitive::<UInt32Type>().value(row).into()),
        D::Float16 => PgValue::Float4(array.as_primitive::<Float16Type>().value(row).to_f32()),
        D::Float32 => PgValue::Float4(array.as_primitive::<Float32Type>().value(row)),
        D::Float64 => PgValue::Float8(array.as_primitive::<Float64Type>().value(row)),
        D::UInt64 | D::Decimal32(..) | D::Decimal64(..) | D::Decimal128(..) | D::Decimal256(..) => {
            PgValue::Numeric(decimal_at(array, row).unwrap_or_else(|| Numeric::from_unscaled("0", 0)))
        }
        D::Utf8 => PgValue::Text(array.as_string::<i32>().value(row)),
        D::LargeUtf8 => PgValue::Text(array.as_string::<i64>().value(row)),
        D::Utf8View => PgValue::Text(array.as_string_view().value(row)),
        D::Binary => PgValue::Bytes(array.as_binary::<i32>().value(row)),
        D::LargeBinary => PgValue::Bytes(array.as_binary::<i64>().value(row)),
        D::BinaryView => PgValue::Bytes(array.as_binary_view().value(row)),
        D::FixedSizeBinary(_) => PgValue::Bytes(array.as_fixed_size_binary().value(row)),
        _ => return temporal_at(array, row),
    };
    Ok(value)
}

/// [`value_at`] for dates, times, timestamps and intervals.
fn temporal_at(array: &dyn Array, row: usize) -> Result<PgValue<'static>> {
    let value = match array.data_type() {
        D::Date32 => PgValue::Date(array.as_primitive::<Date32Type>().value(row).into()),
        D::Date64 => PgValue::Date(array.as_primitive::<Date64Type>().value(row).div_euclid(86_400_000)),
        D::Time32(_) | D::Time64(_) => match time_micros(array, row) {
            Some(micros) => PgValue::Time(micros?),
            None => {
                return Err(Error::internal(format!("invalid time type {}", array.data_type())));
            }
        },
        D::Timestamp(unit, tz) => {
            let micros = to_micros(*unit, timestamp_raw(array, *unit, row), "timestamp out of range")?;
            if tz.is_some() {
                PgValue::TimestampTz(micros)
            } else {
                PgValue::Timestamp(micros)
            }
        }
        D::Interval(unit) => interval_at(array, *unit, row),
        D::Duration(unit) => PgValue::Interval {
            months: 0,
            days: 0,
            micros: to_micros(*unit, duration_raw(array, *unit, row), "interval out of range")?,
        },
        other => {
            return Err(Error::internal(format!("no Postgres encoding for Arrow type {other}")));
        }
    };
    Ok(value)
}

impl PgValue<'_> {
    /// Writes the Postgres text form.
    pub(crate) fn write_text(&self, out: &mut BytesMut) -> Result<()> {
        match self {
            PgValue::Bool(v) => out.put_slice(if *v { b"t" } else { b"f" }),
            PgValue::Int2(v) => format::put_display(out, v),
            PgValue::Int4(v) => format::put_display(out, v),
            PgValue::Int8(v) => format::put_display(out, v),
            PgValue::Float4(v) => out.put_slice(format::float4_text(*v).as_bytes()),
            PgValue::Float8(v) => out.put_slice(format::float8_text(*v).as_bytes()),
            PgValue::Numeric(v) => v.write_text(out),
            PgValue::Text(v) => out.put_slice(v.as_bytes()),
            PgValue::Bytes(v) => format::bytea_text(v, out),
            PgValue::Date(days) => format::date_text(*days, out).map_err(out_of_range)?,
            PgValue::Time(micros) => format::time_text(*micros, out),
            PgValue::Timestamp(micros) => format::timestamp_text(*micros, false, out).map_err(out_of_range)?,
            PgValue::TimestampTz(micros) => format::timestamp_text(*micros, true, out).map_err(out_of_range)?,
            PgValue::Interval { months, days, micros } => format::interval_text(*months, *days, *micros, out),
        }
        Ok(())
    }

    /// Writes the Postgres binary form (the backend's `*send` functions).
    pub(crate) fn write_binary(&self, out: &mut BytesMut) -> Result<()> {
        match self {
            PgValue::Bool(v) => out.put_u8(u8::from(*v)),
            PgValue::Int2(v) => out.put_i16(*v),
            PgValue::Int4(v) => out.put_i32(*v),
            PgValue::Int8(v) => out.put_i64(*v),
            PgValue::Float4(v) => out.put_f32(*v),
            PgValue::Float8(v) => out.put_f64(*v),
            PgValue::Numeric(v) => v.write_binary(out),
            PgValue::Text(v) => out.put_slice(v.as_bytes()),
            PgValue::Bytes(v) => out.put_slice(v),
            PgValue::Date(days) => {
                let pg_days = days.checked_sub(PG_EPOCH_DAYS).and_then(|d| i32::try_from(d).ok());
                out.put_i32(pg_days.ok_or_else(|| out_of_range(OutOfRange("date out of range")))?);
            }
            PgValue::Time(micros) => out.put_i64(*micros),
            PgValue::Timestamp(micros) | PgValue::TimestampTz(micros) => {
                let pg_micros = micros.checked_sub(PG_EPOCH_MICROS);
                out.put_i64(pg_micros.ok_or_else(|| out_of_range(OutOfRange("timestamp out of range")))?);
            }
            PgValue::Interval { months, days, micros } => {
                out.put_i64(*micros);
                out.put_i32(*days);
                out.put_i32(*months);
            }
        }
        Ok(())
    }
}

/// One column of a batch, ready to write cell by cell.
struct ColumnEncoder<'a> {
    array: &'a dyn Array,
    /// Logical nulls (covers `NullArray`, dictionaries and run-ends).
    nulls: Option<NullBuffer>,
    /// Arrow's formatter, for columns without a native Postgres value.
    display: Option<ArrayFormatter<'a>>,
}

/// Writes the cells of one record batch in Postgres wire forms.
pub(crate) struct BatchEncoder<'a> {
    columns: Vec<ColumnEncoder<'a>>,
}

impl<'a> BatchEncoder<'a> {
    pub(crate) fn try_new(batch: &'a RecordBatch) -> Result<Self> {
        let options = FormatOptions::new();
        let columns = batch
            .columns()
            .iter()
            .map(|array| {
                let array: &'a dyn Array = array.as_ref();
                let display = match pg_kind(array.data_type()) {
                    PgKind::Display => Some(ArrayFormatter::try_new(array, &options)?),
                    _ => None,
                };
                Ok(ColumnEncoder {
                    array,
                    nulls: array.logical_nulls(),
                    display,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(BatchEncoder { columns })
    }

    pub(crate) fn num_columns(&self) -> usize {
        self.columns.len()
    }

    pub(crate) fn is_null(&self, col: usize, row: usize) -> bool {
        self.columns[col].nulls.as_ref().is_some_and(|nulls| nulls.is_null(row))
    }

    /// Writes the text form of a non-null cell.
    pub(crate) fn write_text(&self, col: usize, row: usize, out: &mut BytesMut) -> Result<()> {
        let column = &self.columns[col];
        match &column.display {
            Some(formatter) => {
                format::put_display(out, formatter.value(row));
                Ok(())
            }
            None => value_at(column.array, row)?.write_text(out),
        }
    }

    /// Writes the binary form of a non-null cell (`text` for display columns).
    pub(crate) fn write_binary(&self, col: usize, row: usize, out: &mut BytesMut) -> Result<()> {
        match &self.columns[col].display {
            Some(_) => self.write_text(col, row, out),
            None => value_at(self.columns[col].array, row)?.write_binary(out),
        }
    }

    /// Writes one `DataRow` field: its length (-1 for NULL), then its bytes.
    fn write_field(&self, col: usize, row: usize, format: FieldFormat, out: &mut BytesMut) -> Result<()> {
        if self.is_null(col, row) {
            out.put_i32(-1);
            return Ok(());
        }
        let start = out.len();
        out.put_i32(0);
        match format {
            FieldFormat::Text => self.write_text(col, row, out)?,
            FieldFormat::Binary => self.write_binary(col, row, out)?,
        }
        let len = i32::try_from(out.len() - start - 4)
            .map_err(|_| Error::user(SqlCode::DataException, "value too large to send"))?;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

/// Encodes every row of `batch` as a `DataRow`, column `i` in `formats[i]`
/// (text where `formats` is shorter).
pub(crate) fn encode_data_rows(batch: &RecordBatch, formats: &[FieldFormat]) -> Result<Vec<DataRow>> {
    let encoder = BatchEncoder::try_new(batch)?;
    let columns = encoder.num_columns();
    let field_count =
        i16::try_from(columns).map_err(|_| Error::unsupported("a result row may have at most 32767 columns"))?;
    let mut buf = BytesMut::with_capacity(batch.num_rows() * (columns * 12 + 8));
    let mut rows = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for col in 0..columns {
            let format = formats.get(col).copied().unwrap_or(FieldFormat::Text);
            encoder.write_field(col, row, format, &mut buf)?;
        }
        rows.push(DataRow::new(buf.split(), field_count));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::*;
    use arrow::datatypes::{Field, IntervalDayTime, IntervalMonthDayNano, Schema};
    use std::sync::Arc;

    /// 2026-11-30 12:00:00.123 UTC in microseconds since 1970.
    const NOON_123_MICROS: i64 = 1_796_040_000_123_000;

    fn text_of(array: &dyn Array, row: usize) -> String {
        let mut out = BytesMut::new();
        value_at(array, row).unwrap().write_text(&mut out).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn binary_of(array: &dyn Array, row: usize) -> Vec<u8> {
        let mut out = BytesMut::new();
        value_at(array, row).unwrap().write_binary(&mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn scalars_encode_as_text_and_binary() {
        let bools = BooleanArray::from(vec![true, false]);
        assert_eq!((text_of(&bools, 0), text_of(&bools, 1)), ("t".into(), "f".into()));
        assert_eq!(binary_of(&bools, 0), vec![1]);

        let i8s = Int8Array::from(vec![-5]);
        assert_eq!(text_of(&i8s, 0), "-5");
        assert_eq!(binary_of(&i8s, 0), (-5i16).to_be_bytes());

        let i32s = Int32Array::from(vec![123_456]);
        assert_eq!(binary_of(&i32s, 0), 123_456i32.to_be_bytes());

        let u32s = UInt32Array::from(vec![u32::MAX]);
        assert_eq!(text_of(&u32s, 0), "4294967295");
        assert_eq!(binary_of(&u32s, 0), 4_294_967_295i64.to_be_bytes());

        let u64s = UInt64Array::from(vec![u64::MAX]);
        assert_eq!(text_of(&u64s, 0), "18446744073709551615");

        let f64s = Float64Array::from(vec![0.1, 1e20]);
        assert_eq!((text_of(&f64s, 0), text_of(&f64s, 1)), ("0.1".into(), "1e+20".into()));
        assert_eq!(binary_of(&f64s, 0), 0.1f64.to_be_bytes());

        let strings = StringArray::from(vec!["héllo"]);
        assert_eq!(text_of(&strings, 0), "héllo");
        assert_eq!(binary_of(&strings, 0), "héllo".as_bytes());
        let views = StringViewArray::from(vec!["a longer string than twelve bytes"]);
        assert_eq!(text_of(&views, 0), "a longer string than twelve bytes");

        let bytes = BinaryArray::from(vec![&[0xde, 0xad][..]]);
        assert_eq!(text_of(&bytes, 0), "\\xdead");
        assert_eq!(binary_of(&bytes, 0), vec![0xde, 0xad]);
    }

    #[test]
    fn decimals_encode_with_their_scale() {
        let decimals = Decimal128Array::from(vec![12_345, -5, 0])
            .with_precision_and_scale(10, 2)
            .unwrap();
        assert_eq!(text_of(&decimals, 0), "123.45");
        assert_eq!(text_of(&decimals, 1), "-0.05");
        assert_eq!(text_of(&decimals, 2), "0.00");
        // numeric_send of 123.45: ndigits 2, weight 0, sign +, dscale 2, [123, 4500]
        let expected: Vec<u8> = [2i16, 0, 0, 2, 123, 4500]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(binary_of(&decimals, 0), expected);
    }

    #[test]
    fn timestamps_of_every_unit_print_the_same_instant() {
        let seconds = TimestampSecondArray::from(vec![NOON_123_MICROS / 1_000_000]);
        let millis = TimestampMillisecondArray::from(vec![NOON_123_MICROS / 1_000]);
        let micros = TimestampMicrosecondArray::from(vec![NOON_123_MICROS]);
        let nanos = TimestampNanosecondArray::from(vec![NOON_123_MICROS * 1_000 + 999]);
        assert_eq!(text_of(&seconds, 0), "2026-11-30 12:00:00");
        assert_eq!(text_of(&millis, 0), "2026-11-30 12:00:00.123");
        assert_eq!(text_of(&micros, 0), "2026-11-30 12:00:00.123");
        assert_eq!(text_of(&nanos, 0), "2026-11-30 12:00:00.123");
        let with_tz = TimestampMillisecondArray::from(vec![NOON_123_MICROS / 1_000]).with_timezone("UTC");
        assert_eq!(text_of(&with_tz, 0), "2026-11-30 12:00:00.123+00");
        // Binary: microseconds since 2000-01-01 (946684800 s after 1970).
        let expected = NOON_123_MICROS - 946_684_800_000_000;
        assert_eq!(binary_of(&micros, 0), expected.to_be_bytes());
        assert_eq!(binary_of(&with_tz, 0), expected.to_be_bytes());
    }

    #[test]
    fn dates_times_and_intervals_encode() {
        let dates = Date32Array::from(vec![20_787]);
        assert_eq!(text_of(&dates, 0), "2026-11-30");
        assert_eq!(binary_of(&dates, 0), (20_787i32 - 10_957).to_be_bytes());
        let dates64 = Date64Array::from(vec![20_787 * 86_400_000]);
        assert_eq!(text_of(&dates64, 0), "2026-11-30");

        let times = Time64NanosecondArray::from(vec![45_296_500_000_000]);
        assert_eq!(text_of(&times, 0), "12:34:56.5");
        assert_eq!(binary_of(&times, 0), 45_296_500_000i64.to_be_bytes());

        let mdn = IntervalMonthDayNanoArray::from(vec![IntervalMonthDayNano::new(14, 3, 3_600_000_000_000)]);
        assert_eq!(text_of(&mdn, 0), "1 year 2 mons 3 days 01:00:00");
        let mut expected = 3_600_000_000i64.to_be_bytes().to_vec();
        expected.extend(3i32.to_be_bytes());
        expected.extend(14i32.to_be_bytes());
        assert_eq!(binary_of(&mdn, 0), expected);
        let day_time = IntervalDayTimeArray::from(vec![IntervalDayTime::new(1, 1_500)]);
        assert_eq!(text_of(&day_time, 0), "1 day 00:00:01.5");
        let duration = DurationSecondArray::from(vec![90]);
        assert_eq!(text_of(&duration, 0), "00:01:30");
    }

    fn field_lengths_and_bytes(row: &DataRow) -> Vec<Option<Vec<u8>>> {
        let mut data = &row.data[..];
        let mut fields = Vec::new();
        for _ in 0..row.field_count {
            let len = i32::from_be_bytes(data[..4].try_into().unwrap());
            data = &data[4..];
            if len < 0 {
                fields.push(None);
            } else {
                fields.push(Some(data[..len as usize].to_vec()));
                data = &data[len as usize..];
            }
        }
        assert!(data.is_empty());
        fields
    }

    #[test]
    fn data_rows_mix_formats_and_nulls() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("tags", DataType::new_list(DataType::Int32, true), true),
        ]));
        let tags = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1), Some(2)]), None]);
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(7), None])),
                Arc::new(StringArray::from(vec![Some("a"), Some("b")])),
                Arc::new(tags),
            ],
        )
        .unwrap();
        let rows = encode_data_rows(&batch, &[FieldFormat::Binary, FieldFormat::Text]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            field_lengths_and_bytes(&rows[0]),
            vec![
                Some(7i64.to_be_bytes().to_vec()),
                Some(b"a".to_vec()),
                Some(b"[1, 2]".to_vec())
            ]
        );
        assert_eq!(field_lengths_and_bytes(&rows[1]), vec![None, Some(b"b".to_vec()), None]);
    }

    #[test]
    fn null_typed_columns_are_all_null() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(NullArray::new(2))]).unwrap();
        let rows = encode_data_rows(&batch, &[]).unwrap();
        assert_eq!(field_lengths_and_bytes(&rows[0]), vec![None]);
        assert_eq!(field_lengths_and_bytes(&rows[1]), vec![None]);
    }
}
