//! Every Arrow type the engine can produce, through the wire and through
//! every place that names a type: they must agree (issue 22).
//!
//! The wire path: the row description (`field_infos`: OID, typlen,
//! typmod) and the value encoder (`BatchEncoder`, `value_at`). The naming
//! path: DESCRIBE (`show::describe`), psql's `\d name` answer, and the
//! catalog tables (`pg_attribute`, `pg_type`, `format_type`,
//! `information_schema.columns`) over a stream with a column of each type.
//! The REST API and INSERT's type errors name types with the same
//! `pg_type_name` that DESCRIBE uses.
//!
//! The expected Postgres type of each Arrow type is written out here from
//! Postgres' catalog (`pg_type.dat`, `format_type`), not taken from the map.

use super::encode::{BatchEncoder, PgValue, value_at};
use super::types::{PgKind, field_infos, pg_kind};
use crate::engine::test_support::{catalog_rows, describe_rows, psql_columns};
use arrow::array::{
    ArrayRef, BinaryArray, BinaryViewArray, FixedSizeBinaryArray, Int32Array, LargeBinaryArray, LargeStringArray,
    StringArray, StringViewArray, StructArray,
};
use arrow::datatypes::{DataType as D, Field, Fields, IntervalUnit, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use bytes::BytesMut;
use datafusion::common::ScalarValue;
use std::sync::Arc;

/// (Arrow type, Postgres name as `format_type` writes it, OID, typlen).
fn cases() -> Vec<(D, &'static str, u32, i16)> {
    let tz = || Some(Arc::from("+00:00"));
    let mut cases = vec![
        (D::Boolean, "boolean", 16, 1),
        (D::Int8, "smallint", 21, 2),
        (D::Int16, "smallint", 21, 2),
        (D::Int32, "integer", 23, 4),
        (D::Int64, "bigint", 20, 8),
        (D::UInt8, "smallint", 21, 2),
        (D::UInt16, "integer", 23, 4),
        (D::UInt32, "bigint", 20, 8),
        (D::UInt64, "numeric", 1700, -1),
        (D::Float16, "real", 700, 4),
        (D::Float32, "real", 700, 4),
        (D::Float64, "double precision", 701, 8),
        (D::Decimal32(9, 2), "numeric(9,2)", 1700, -1),
        (D::Decimal64(18, 4), "numeric(18,4)", 1700, -1),
        (D::Decimal128(10, 2), "numeric(10,2)", 1700, -1),
        (D::Decimal128(38, 10), "numeric(38,10)", 1700, -1),
        (D::Decimal256(50, 0), "numeric(50,0)", 1700, -1),
        (D::Utf8, "text", 25, -1),
        (D::LargeUtf8, "text", 25, -1),
        (D::Utf8View, "text", 25, -1),
        (D::Binary, "bytea", 17, -1),
        (D::LargeBinary, "bytea", 17, -1),
        (D::BinaryView, "bytea", 17, -1),
        (D::FixedSizeBinary(4), "bytea", 17, -1),
        (D::Date32, "date", 1082, 4),
        (D::Date64, "date", 1082, 4),
        (D::Time32(TimeUnit::Second), "time without time zone", 1083, 8),
        (D::Time32(TimeUnit::Millisecond), "time without time zone", 1083, 8),
        (D::Time64(TimeUnit::Microsecond), "time without time zone", 1083, 8),
        (D::Time64(TimeUnit::Nanosecond), "time without time zone", 1083, 8),
        (D::Interval(IntervalUnit::YearMonth), "interval", 1186, 16),
        (D::Interval(IntervalUnit::DayTime), "interval", 1186, 16),
        (D::Interval(IntervalUnit::MonthDayNano), "interval", 1186, 16),
        // Columns without a Postgres form are sent as Arrow's text.
        (D::Null, "text", 25, -1),
        (D::new_list(D::Int64, true), "text", 25, -1),
        (D::new_large_list(D::Utf8, true), "text", 25, -1),
        (D::new_fixed_size_list(D::Int32, 2, true), "text", 25, -1),
        (
            D::Struct(Fields::from(vec![Field::new("a", D::Int32, true)])),
            "text",
            25,
            -1,
        ),
    ];
    for unit in [
        TimeUnit::Second,
        TimeUnit::Millisecond,
        TimeUnit::Microsecond,
        TimeUnit::Nanosecond,
    ] {
        cases.push((D::Timestamp(unit, None), "timestamp without time zone", 1114, 8));
        cases.push((D::Timestamp(unit, tz()), "timestamp with time zone", 1184, 8));
        cases.push((
            D::Timestamp(unit, Some("UTC".into())),
            "timestamp with time zone",
            1184,
            8,
        ));
        cases.push((D::Duration(unit), "interval", 1186, 16));
    }
    cases
}

/// A one-row array of `data_type` holding a non-null value.
fn sample(data_type: &D) -> ArrayRef {
    match data_type {
        D::Utf8 => Arc::new(StringArray::from(vec!["héllo"])),
        D::LargeUtf8 => Arc::new(LargeStringArray::from(vec!["héllo"])),
        D::Utf8View => Arc::new(StringViewArray::from(vec!["héllo"])),
        D::Binary => Arc::new(BinaryArray::from(vec![&b"\x01\x02"[..]])),
        D::LargeBinary => Arc::new(LargeBinaryArray::from(vec![&b"\x01\x02"[..]])),
        D::BinaryView => Arc::new(BinaryViewArray::from(vec![&b"\x01\x02"[..]])),
        D::FixedSizeBinary(4) => Arc::new(FixedSizeBinaryArray::try_from_iter([b"abcd"].into_iter()).unwrap()),
        D::Date32 => ScalarValue::Date32(Some(19_724)).to_array().unwrap(),
        D::Date64 => ScalarValue::Date64(Some(1_704_153_600_000)).to_array().unwrap(),
        D::Null => ScalarValue::Null.to_array().unwrap(),
        D::List(_) => ScalarValue::List(ScalarValue::new_list_nullable(
            &[ScalarValue::Int64(Some(7))],
            &D::Int64,
        ))
        .to_array()
        .unwrap(),
        D::LargeList(_) | D::FixedSizeList(..) => {
            let list: ArrayRef =
                ScalarValue::new_list_nullable(&[ScalarValue::Int32(Some(1)), ScalarValue::Int32(Some(2))], &D::Int32);
            arrow::compute::cast(&list, data_type).unwrap()
        }
        D::Struct(fields) => Arc::new(StructArray::new(
            fields.clone(),
            vec![Arc::new(Int32Array::from(vec![1])) as ArrayRef],
            None,
        )),
        other => ScalarValue::new_one(other)
            .or_else(|_| ScalarValue::new_zero(other))
            .unwrap_or_else(|e| panic!("no sample value of {other}: {e}"))
            .to_array()
            .unwrap(),
    }
}

/// The Postgres type (OID) a value the encoder produced is the form of.
fn value_oid(value: &PgValue<'_>) -> u32 {
    match value {
        PgValue::Bool(_) => 16,
        PgValue::Int2(_) => 21,
        PgValue::Int4(_) => 23,
        PgValue::Int8(_) => 20,
        PgValue::Float4(_) => 700,
        PgValue::Float8(_) => 701,
        PgValue::Numeric(_) => 1700,
        PgValue::Text(_) => 25,
        PgValue::Bytes(_) => 17,
        PgValue::Date(_) => 1082,
        PgValue::Time(_) => 1083,
        PgValue::Timestamp(_) => 1114,
        PgValue::TimestampTz(_) => 1184,
        PgValue::Interval { .. } => 1186,
    }
}

#[tokio::test]
async fn every_arrow_type_is_named_as_the_wire_sends_it() {
    let cases = cases();
    let fields: Vec<Field> = cases
        .iter()
        .enumerate()
        .map(|(i, (t, _, _, _))| Field::new(format!("c{i}"), t.clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));

    // The wire: row description and values.
    let infos = field_infos(&schema, &[]);
    let columns: Vec<ArrayRef> = cases.iter().map(|(t, _, _, _)| sample(t)).collect();
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let encoder = BatchEncoder::try_new(&batch).unwrap();

    // The names: DESCRIBE, psql's \d, the catalog tables.
    let described = describe_rows(&schema);
    let psql = psql_columns(&schema).await;
    let catalog = catalog_rows(&schema).await;
    assert_eq!(described.len(), cases.len());
    assert_eq!(psql.len(), cases.len());
    assert_eq!(catalog.len(), cases.len());

    for (i, (data_type, name, oid, len)) in cases.iter().enumerate() {
        let what = format!("column c{i} of Arrow type {data_type}");
        let info = &infos[i];
        assert_eq!(info.datatype().oid(), *oid, "wire OID of {what}");
        assert_eq!(info.type_size(), *len, "wire typlen of {what}");
        assert_eq!(
            info.type_modifier(),
            sluice_sql::types::pg_type_modifier(data_type),
            "wire typmod of {what}"
        );

        // The value is sent in the form of the type the row description names.
        let mut text = BytesMut::new();
        encoder
            .write_text(i, 0, &mut text)
            .unwrap_or_else(|e| panic!("text of {what}: {e}"));
        let mut binary = BytesMut::new();
        encoder
            .write_binary(i, 0, &mut binary)
            .unwrap_or_else(|e| panic!("binary of {what}: {e}"));
        match pg_kind(data_type) {
            PgKind::Native(_) => {
                let value = value_at(batch.column(i).as_ref(), 0).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(value_oid(&value), *oid, "encoded value of {what}: {value:?}");
            }
            PgKind::Display => {
                assert_eq!(*oid, 25, "{what} is sent as text");
                assert!(std::str::from_utf8(&text).is_ok(), "{what}: display text");
            }
        }

        assert_eq!(described[i], *name, "DESCRIBE's data_type of {what}");
        assert_eq!(psql[i], *name, "psql's \\d type of {what}");
        let row = &catalog[i];
        assert_eq!(row.atttypid, i64::from(*oid), "pg_attribute.atttypid of {what}");
        assert_eq!(row.atttypmod, info.type_modifier(), "pg_attribute.atttypmod of {what}");
        assert_eq!(row.typlen, *len, "pg_type.typlen of {what}'s type");
        assert_eq!(row.format_type, *name, "format_type(atttypid, atttypmod) of {what}");
        let without_typmod = name.split('(').next().unwrap_or(name);
        assert_eq!(
            row.information_schema_type, without_typmod,
            "information_schema.columns.data_type of {what}"
        );
        // The wire's type name (pgwire's) is the pg_type name.
        assert_eq!(info.datatype().name(), row.typname, "pg_type.typname of {what}");
    }
}
