//! Tests of bind parameter decoding; expected values from Postgres'
//! documented input formats and `*send` layouts.

use super::*;
use arrow::datatypes::TimeUnit;

/// 2026-11-30 12:00:00 UTC in microseconds since 1970 (`date -d … +%s`).
const NOON_MICROS: i64 = 1_796_040_000_000_000;

fn text(value: &str, wire: &Type, target: Option<&DataType>) -> Result<ScalarValue, ParamError> {
    decode_param(&BoundParam {
        position: 1,
        bytes: Some(value.as_bytes()),
        binary: false,
        wire_type: wire,
        target,
    })
}

fn binary(value: &[u8], wire: &Type, target: Option<&DataType>) -> Result<ScalarValue, ParamError> {
    decode_param(&BoundParam {
        position: 1,
        bytes: Some(value),
        binary: true,
        wire_type: wire,
        target,
    })
}

#[test]
fn integers_and_floats_decode_from_text_and_binary() {
    assert_eq!(text(" 42 ", &Type::INT4, None), Ok(ScalarValue::Int32(Some(42))));
    assert_eq!(text("-7", &Type::INT8, None), Ok(ScalarValue::Int64(Some(-7))));
    assert_eq!(text("2.5", &Type::FLOAT8, None), Ok(ScalarValue::Float64(Some(2.5))));
    assert_eq!(
        text("-Infinity", &Type::FLOAT8, None),
        Ok(ScalarValue::Float64(Some(f64::NEG_INFINITY)))
    );
    assert_eq!(
        binary(&[0x00, 0x2a], &Type::INT2, None),
        Ok(ScalarValue::Int16(Some(42)))
    );
    assert_eq!(
        binary(&[0xff, 0xff, 0xff, 0xfe], &Type::INT4, None),
        Ok(ScalarValue::Int32(Some(-2)))
    );
    assert_eq!(
        binary(&7i64.to_be_bytes(), &Type::INT8, None),
        Ok(ScalarValue::Int64(Some(7)))
    );
    assert_eq!(
        binary(&1.5f32.to_be_bytes(), &Type::FLOAT4, None),
        Ok(ScalarValue::Float32(Some(1.5)))
    );
    assert_eq!(
        binary(&0.25f64.to_be_bytes(), &Type::FLOAT8, None),
        Ok(ScalarValue::Float64(Some(0.25)))
    );
}

#[test]
fn values_are_cast_to_the_declared_type() {
    // An int4 sent for a BIGINT placeholder arrives as Int64.
    assert_eq!(
        binary(&5i32.to_be_bytes(), &Type::INT4, Some(&DataType::Int64)),
        Ok(ScalarValue::Int64(Some(5)))
    );
    // Text sent for a BIGINT placeholder is parsed by the cast.
    assert_eq!(
        text("12", &Type::TEXT, Some(&DataType::Int64)),
        Ok(ScalarValue::Int64(Some(12)))
    );
    let err = text("abc", &Type::TEXT, Some(&DataType::Int64)).unwrap_err();
    assert_eq!(err.sqlstate, "22P02");
    assert!(err.message.contains("$1"), "{}", err.message);
}

#[test]
fn bad_input_reports_postgres_sqlstates() {
    let err = text("12x", &Type::INT4, None).unwrap_err();
    assert_eq!(
        err,
        ParamError::new("22P02", "invalid input syntax for type int4: \"12x\"")
    );
    assert_eq!(binary(&[0, 1, 2], &Type::INT4, None).unwrap_err().sqlstate, "22P03");
    assert_eq!(binary(&[1, 2], &Type::JSON, None).unwrap_err().sqlstate, "0A000");
    assert_eq!(text("99999", &Type::INT2, None).unwrap_err().sqlstate, "22P02");
    let invalid_utf8 = decode_param(&BoundParam {
        position: 1,
        bytes: Some(&[0xff, 0xfe]),
        binary: false,
        wire_type: &Type::TEXT,
        target: None,
    });
    assert_eq!(invalid_utf8.unwrap_err().sqlstate, "22021");
}

#[test]
fn booleans_follow_boolin() {
    for yes in ["t", "TRUE", "tr", "y", "yes", "on", "1", " true "] {
        assert_eq!(
            text(yes, &Type::BOOL, None),
            Ok(ScalarValue::Boolean(Some(true))),
            "{yes}"
        );
    }
    for no in ["f", "false", "n", "no", "off", "of", "0"] {
        assert_eq!(
            text(no, &Type::BOOL, None),
            Ok(ScalarValue::Boolean(Some(false))),
            "{no}"
        );
    }
    for bad in ["o", "maybe", "2", ""] {
        assert!(text(bad, &Type::BOOL, None).is_err(), "{bad}");
    }
    assert_eq!(binary(&[1], &Type::BOOL, None), Ok(ScalarValue::Boolean(Some(true))));
}

#[test]
fn numerics_decode_to_decimals_of_their_own_scale() {
    let dec = |v, s| Ok(ScalarValue::Decimal128(Some(v), 38, s));
    assert_eq!(text("123.45", &Type::NUMERIC, None), dec(12_345, 2));
    assert_eq!(text("-0.005", &Type::NUMERIC, None), dec(-5, 3));
    assert_eq!(text("+7", &Type::NUMERIC, None), dec(7, 0));
    assert_eq!(text("1.5e3", &Type::NUMERIC, None), dec(1_500, 0));
    assert_eq!(text("25e-3", &Type::NUMERIC, None), dec(25, 3));
    assert_eq!(text(".5", &Type::NUMERIC, None), dec(5, 1));
    assert_eq!(text("0.00", &Type::NUMERIC, None), dec(0, 2));
    assert!(matches!(text("NaN", &Type::NUMERIC, None), Ok(ScalarValue::Float64(Some(v))) if v.is_nan()));
    // Beyond 38 digits: a float approximation.
    assert_eq!(text("1e40", &Type::NUMERIC, None), Ok(ScalarValue::Float64(Some(1e40))));
    assert!(text("1.2.3", &Type::NUMERIC, None).is_err());
    // Cast into the declared decimal type.
    let target = DataType::Decimal128(10, 2);
    assert_eq!(
        text("3.5", &Type::NUMERIC, Some(&target)),
        Ok(ScalarValue::Decimal128(Some(350), 10, 2))
    );
}

fn numeric_send(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[test]
fn numerics_decode_from_numeric_send_layout() {
    let dec = |v, s| Ok(ScalarValue::Decimal128(Some(v), 38, s));
    // 12345.678: ndigits 3, weight 1, +, dscale 3, [1, 2345, 6780]
    assert_eq!(
        binary(&numeric_send(&[3, 1, 0, 3, 1, 2345, 6780]), &Type::NUMERIC, None),
        dec(12_345_678, 3)
    );
    // -1.5: ndigits 2, weight 0, −, dscale 1, [1, 5000]
    assert_eq!(
        binary(&numeric_send(&[2, 0, 0x4000, 1, 1, 5000]), &Type::NUMERIC, None),
        dec(-15, 1)
    );
    // 0.00001: ndigits 1, weight -2, dscale 5, [1000]
    assert_eq!(
        binary(&numeric_send(&[1, 0xfffe, 0, 5, 1000]), &Type::NUMERIC, None),
        dec(1, 5)
    );
    // 100000000: ndigits 1, weight 2, dscale 0, [1]
    assert_eq!(
        binary(&numeric_send(&[1, 2, 0, 0, 1]), &Type::NUMERIC, None),
        dec(100_000_000, 0)
    );
    // 0.00 and NaN
    assert_eq!(binary(&numeric_send(&[0, 0, 0, 2]), &Type::NUMERIC, None), dec(0, 2));
    let nan = binary(&numeric_send(&[0, 0, 0xC000, 0]), &Type::NUMERIC, None);
    assert!(matches!(nan, Ok(ScalarValue::Float64(Some(v))) if v.is_nan()));
    // Truncated message
    assert!(binary(&numeric_send(&[2, 0, 0, 0, 1]), &Type::NUMERIC, None).is_err());
}

#[test]
fn timestamps_decode_from_text_and_binary() {
    let ts = |micros| Ok(ScalarValue::TimestampMicrosecond(Some(micros), None));
    assert_eq!(text("2026-11-30 12:00:00", &Type::TIMESTAMP, None), ts(NOON_MICROS));
    assert_eq!(
        text("2026-11-30T12:00:00.123", &Type::TIMESTAMP, None),
        ts(NOON_MICROS + 123_000)
    );
    assert_eq!(text("2026-11-30 12:00", &Type::TIMESTAMP, None), ts(NOON_MICROS));
    assert_eq!(
        text("2026-11-30", &Type::TIMESTAMP, None),
        ts(NOON_MICROS - 12 * 3_600_000_000)
    );
    // 7 fraction digits round to the microsecond.
    assert_eq!(
        text("2026-11-30 12:00:00.0000015", &Type::TIMESTAMP, None),
        ts(NOON_MICROS + 2)
    );
    // timestamp ignores a zone, as Postgres does (JDBC sends one).
    assert_eq!(text("2026-11-30 12:00:00+05", &Type::TIMESTAMP, None), ts(NOON_MICROS));
    let tz = |micros| Ok(ScalarValue::TimestampMicrosecond(Some(micros), Some(Arc::from(UTC))));
    assert_eq!(
        text("2026-11-30 12:00:00+00", &Type::TIMESTAMPTZ, None),
        tz(NOON_MICROS)
    );
    assert_eq!(
        text("2026-11-30 17:30:00+05:30", &Type::TIMESTAMPTZ, None),
        tz(NOON_MICROS)
    );
    assert_eq!(
        text("2026-11-30 04:00:00-0800", &Type::TIMESTAMPTZ, None),
        tz(NOON_MICROS)
    );
    assert_eq!(text("2026-11-30 12:00:00Z", &Type::TIMESTAMPTZ, None), tz(NOON_MICROS));
    assert_eq!(text("2026-11-30 12:00:00", &Type::TIMESTAMPTZ, None), tz(NOON_MICROS));
    assert!(text("2026-13-30 12:00:00", &Type::TIMESTAMP, None).is_err());
    assert!(text("yesterday", &Type::TIMESTAMP, None).is_err());
    // Binary: microseconds since 2000-01-01.
    let pg = (NOON_MICROS - 946_684_800_000_000).to_be_bytes();
    assert_eq!(binary(&pg, &Type::TIMESTAMP, None), ts(NOON_MICROS));
    assert_eq!(binary(&pg, &Type::TIMESTAMPTZ, None), tz(NOON_MICROS));
    // Cast to the declared unit.
    let target = DataType::Timestamp(TimeUnit::Millisecond, None);
    assert_eq!(
        binary(&pg, &Type::TIMESTAMP, Some(&target)),
        Ok(ScalarValue::TimestampMillisecond(Some(NOON_MICROS / 1_000), None))
    );
}

#[test]
fn dates_times_and_intervals_decode() {
    assert_eq!(
        text("2026-11-30", &Type::DATE, None),
        Ok(ScalarValue::Date32(Some(20_787)))
    );
    assert_eq!(text("1969-12-31", &Type::DATE, None), Ok(ScalarValue::Date32(Some(-1))));
    assert_eq!(
        binary(&(20_787i32 - 10_957).to_be_bytes(), &Type::DATE, None),
        Ok(ScalarValue::Date32(Some(20_787)))
    );
    assert_eq!(
        binary(&45_296_500_000i64.to_be_bytes(), &Type::TIME, None),
        Ok(ScalarValue::Time64Microsecond(Some(45_296_500_000)))
    );
    let mut interval = 3_600_000_000i64.to_be_bytes().to_vec();
    interval.extend(3i32.to_be_bytes());
    interval.extend(14i32.to_be_bytes());
    assert_eq!(
        binary(&interval, &Type::INTERVAL, None),
        Ok(ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(
            14,
            3,
            3_600_000_000_000
        ))))
    );
    // Text for types without a reader stays text until cast.
    assert_eq!(
        text("12:34:56", &Type::TIME, None),
        Ok(ScalarValue::Utf8(Some("12:34:56".into())))
    );
}

#[test]
fn text_and_bytea_decode() {
    assert_eq!(
        text("héllo", &Type::VARCHAR, None),
        Ok(ScalarValue::Utf8(Some("héllo".into())))
    );
    assert_eq!(
        binary("héllo".as_bytes(), &Type::TEXT, None),
        Ok(ScalarValue::Utf8(Some("héllo".into())))
    );
    assert_eq!(
        text("\\xdeAD", &Type::BYTEA, None),
        Ok(ScalarValue::Binary(Some(vec![0xde, 0xad])))
    );
    assert_eq!(
        text("a\\\\b\\001", &Type::BYTEA, None),
        Ok(ScalarValue::Binary(Some(b"a\\b\x01".to_vec())))
    );
    assert!(text("\\xabc", &Type::BYTEA, None).is_err());
    assert_eq!(
        binary(&[0, 255], &Type::BYTEA, None),
        Ok(ScalarValue::Binary(Some(vec![0, 255])))
    );
}

#[test]
fn nulls_are_typed_by_the_declared_type() {
    let null = |wire: &Type, target: Option<&DataType>| {
        decode_param(&BoundParam {
            position: 1,
            bytes: None,
            binary: false,
            wire_type: wire,
            target,
        })
    };
    assert_eq!(null(&Type::INT4, Some(&DataType::Int64)), Ok(ScalarValue::Int64(None)));
    assert_eq!(null(&Type::INT4, None), Ok(ScalarValue::Int32(None)));
    assert_eq!(null(&Type::TEXT, None), Ok(ScalarValue::Utf8(None)));
    assert_eq!(null(&Type::JSON, None), Ok(ScalarValue::Null));
}

#[test]
fn format_codes_must_match_the_parameter_count() {
    assert_eq!(binary_flags(&[], 2), Ok(vec![false, false]));
    assert_eq!(binary_flags(&[1], 3), Ok(vec![true, true, true]));
    assert_eq!(binary_flags(&[0, 1], 2), Ok(vec![false, true]));
    assert_eq!(binary_flags(&[0, 1], 3).unwrap_err().sqlstate, "08P01");
    assert_eq!(binary_flags(&[2], 1).unwrap_err().sqlstate, "22023");
}

#[test]
fn decode_params_reads_each_parameter_with_its_format() {
    let values = vec![
        Some(Bytes::from_static(&[0, 0, 0, 9])),
        Some(Bytes::from_static(b"x")),
        None,
    ];
    let decoded = decode_params(
        &values,
        &[1, 0, 0],
        &[Type::INT4, Type::TEXT],
        &[DataType::Int64, DataType::Utf8, DataType::Float64],
    )
    .unwrap();
    assert_eq!(
        decoded,
        vec![
            ScalarValue::Int64(Some(9)),
            ScalarValue::Utf8(Some("x".into())),
            ScalarValue::Float64(None)
        ]
    );
}
