//! Arrow ↔ Postgres types on the wire.
//!
//! A result column of Arrow type `T` is sent as the Postgres type
//! [`sluice_sql::types::pg_type`]`(T)` — the one map that DESCRIBE, psql's
//! `\d`, the `pg_catalog` tables and the REST API name types by — in the
//! wire form (text and binary) that [`super::encode`] writes. A bound
//! parameter of Postgres type `P` decodes to the Arrow type
//! [`param_data_type`]`(P)` before it is cast to the type the engine expects.

use arrow::datatypes::{DataType, Schema, TimeUnit};
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use sluice_sql::types::{PgType, pg_sent_as_display};

/// The Postgres representation a column is sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PgKind {
    /// The value's own Postgres form.
    Native(PgType),
    /// No native form: sent as `text`, formatted by Arrow's display.
    Display,
}

/// The representation a column of `data_type` is sent in.
pub(crate) fn pg_kind(data_type: &DataType) -> PgKind {
    if pg_sent_as_display(data_type) {
        PgKind::Display
    } else {
        PgKind::Native(sluice_sql::types::pg_type(data_type))
    }
}

impl PgKind {
    /// The Postgres type of this representation.
    pub(crate) fn pg_type(self) -> PgType {
        match self {
            PgKind::Native(t) => t,
            PgKind::Display => PgType::Text,
        }
    }

    /// The pgwire type (and so the OID) of this representation.
    pub(crate) fn wire_type(self) -> Type {
        let t = self.pg_type();
        Type::from_oid(t.oid()).unwrap_or_else(|| panic!("pgwire knows no type of oid {} ({t:?})", t.oid()))
    }

    /// `pg_type.typlen`: the fixed width in bytes, or -1 for variable width.
    pub(crate) fn type_size(self) -> i16 {
        self.pg_type().typlen()
    }
}

/// The Postgres type a column of `data_type` is sent as.
pub(crate) fn pg_type(data_type: &DataType) -> Type {
    pg_kind(data_type).wire_type()
}

/// `atttypmod` for a column (see [`sluice_sql::types::pg_type_modifier`]).
pub(crate) fn type_modifier(data_type: &DataType) -> i32 {
    sluice_sql::types::pg_type_modifier(data_type)
}

/// Row description fields for `schema`, each column in the given format.
pub(crate) fn field_infos(schema: &Schema, formats: &[FieldFormat]) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(idx, field)| {
            let kind = pg_kind(field.data_type());
            let format = formats.get(idx).copied().unwrap_or(FieldFormat::Text);
            FieldInfo::new(field.name().clone(), None, None, kind.wire_type(), format)
                .with_type_size(kind.type_size())
                .with_type_modifier(type_modifier(field.data_type()))
        })
        .collect()
}

/// The per-column formats of a portal with `columns` result columns.
/// Never panics on a short format list (pgwire's `Format::format_for` does);
/// Bind validates the count, so a missing code only means "text".
pub(crate) fn column_formats(format: &Format, columns: usize) -> Vec<FieldFormat> {
    (0..columns)
        .map(|idx| match format {
            Format::UnifiedText => FieldFormat::Text,
            Format::UnifiedBinary => FieldFormat::Binary,
            Format::Individual(codes) => codes.get(idx).map_or(FieldFormat::Text, |c| FieldFormat::from(*c)),
        })
        .collect()
}

/// The Arrow type a parameter sent as Postgres type `pg` decodes to, or
/// `None` for types without a dedicated decoder (those are read as text).
/// `numeric` is absent: it decodes to a decimal of the value's own scale.
pub(crate) fn param_data_type(pg: &Type) -> Option<DataType> {
    let data_type = match *pg {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => DataType::Utf8,
        Type::BYTEA => DataType::Binary,
        Type::DATE => DataType::Date32,
        Type::TIME => DataType::Time64(TimeUnit::Microsecond),
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        Type::INTERVAL => DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
        _ => return None,
    };
    Some(data_type)
}

/// The time zone name given to `timestamptz` parameters (the session's
/// `TimeZone` is always UTC).
pub(crate) const UTC: &str = "+00:00";

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, IntervalUnit};

    #[test]
    fn arrow_types_map_to_the_documented_postgres_types() {
        let cases = [
            (DataType::Boolean, Type::BOOL),
            (DataType::Int8, Type::INT2),
            (DataType::Int16, Type::INT2),
            (DataType::UInt8, Type::INT2),
            (DataType::Int32, Type::INT4),
            (DataType::UInt16, Type::INT4),
            (DataType::Int64, Type::INT8),
            (DataType::UInt32, Type::INT8),
            (DataType::UInt64, Type::NUMERIC),
            (DataType::Float32, Type::FLOAT4),
            (DataType::Float64, Type::FLOAT8),
            (DataType::Decimal128(10, 2), Type::NUMERIC),
            (DataType::Decimal256(50, 0), Type::NUMERIC),
            (DataType::Utf8, Type::TEXT),
            (DataType::LargeUtf8, Type::TEXT),
            (DataType::Utf8View, Type::TEXT),
            (DataType::Binary, Type::BYTEA),
            (DataType::FixedSizeBinary(16), Type::BYTEA),
            (DataType::Date32, Type::DATE),
            (DataType::Date64, Type::DATE),
            (DataType::Time64(TimeUnit::Nanosecond), Type::TIME),
            (DataType::Timestamp(TimeUnit::Second, None), Type::TIMESTAMP),
            (DataType::Timestamp(TimeUnit::Nanosecond, None), Type::TIMESTAMP),
            (
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                Type::TIMESTAMPTZ,
            ),
            (DataType::Interval(IntervalUnit::MonthDayNano), Type::INTERVAL),
            (DataType::Interval(IntervalUnit::YearMonth), Type::INTERVAL),
            (DataType::Duration(TimeUnit::Millisecond), Type::INTERVAL),
            (DataType::Null, Type::TEXT),
            (DataType::new_list(DataType::Int32, true), Type::TEXT),
        ];
        for (arrow, pg) in cases {
            assert_eq!(pg_type(&arrow), pg, "{arrow}");
        }
    }

    #[test]
    fn oids_are_postgres_catalog_oids() {
        // pg_type.oid values from the Postgres catalog (pg_type.dat).
        let cases = [
            (DataType::Boolean, 16),
            (DataType::Int16, 21),
            (DataType::Int32, 23),
            (DataType::Int64, 20),
            (DataType::Float32, 700),
            (DataType::Float64, 701),
            (DataType::Decimal128(5, 1), 1700),
            (DataType::Utf8, 25),
            (DataType::Binary, 17),
            (DataType::Date32, 1082),
            (DataType::Time64(TimeUnit::Microsecond), 1083),
            (DataType::Timestamp(TimeUnit::Microsecond, None), 1114),
            (DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), 1184),
            (DataType::Interval(IntervalUnit::DayTime), 1186),
        ];
        for (arrow, oid) in cases {
            assert_eq!(pg_type(&arrow).oid(), oid, "{arrow}");
        }
    }

    #[test]
    fn numeric_type_modifier_packs_precision_and_scale() {
        // numeric(10, 2): ((10 << 16) | 2) + 4 = 655360 + 2 + 4.
        assert_eq!(type_modifier(&DataType::Decimal128(10, 2)), 655_366);
        assert_eq!(type_modifier(&DataType::Decimal128(38, 0)), (38 << 16) + 4);
        assert_eq!(type_modifier(&DataType::Decimal128(5, -2)), -1);
        assert_eq!(type_modifier(&DataType::Int32), -1);
        assert_eq!(type_modifier(&DataType::Utf8), -1);
    }

    #[test]
    fn field_infos_carry_name_type_size_and_format() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
        ]);
        let fields = field_infos(&schema, &[FieldFormat::Binary, FieldFormat::Text]);
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[0].name(), "id");
        assert_eq!(fields[0].datatype(), &Type::INT8);
        assert_eq!(fields[0].type_size(), 8);
        assert_eq!(fields[0].format(), FieldFormat::Binary);
        assert_eq!(fields[1].datatype(), &Type::TEXT);
        assert_eq!(fields[1].type_size(), -1);
        assert_eq!(fields[1].format(), FieldFormat::Text);
        // Beyond the given formats: text.
        assert_eq!(fields[2].format(), FieldFormat::Text);
        assert_eq!(fields[2].type_modifier(), 655_366);
    }

    #[test]
    fn column_formats_never_index_past_the_codes() {
        let text = FieldFormat::Text;
        let binary = FieldFormat::Binary;
        assert_eq!(column_formats(&Format::UnifiedText, 2), vec![text, text]);
        assert_eq!(column_formats(&Format::UnifiedBinary, 2), vec![binary, binary]);
        assert_eq!(
            column_formats(&Format::Individual(vec![1, 0]), 3),
            vec![binary, text, text]
        );
    }

    #[test]
    fn parameter_types_decode_to_matching_arrow_types() {
        assert_eq!(param_data_type(&Type::INT4), Some(DataType::Int32));
        assert_eq!(param_data_type(&Type::VARCHAR), Some(DataType::Utf8));
        assert_eq!(
            param_data_type(&Type::TIMESTAMP),
            Some(DataType::Timestamp(TimeUnit::Microsecond, None))
        );
        assert_eq!(param_data_type(&Type::NUMERIC), None);
        assert_eq!(param_data_type(&Type::JSON), None);
    }
}
