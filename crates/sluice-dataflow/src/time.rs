//! Event-time columns: reading Arrow timestamps as epoch milliseconds and
//! writing window bounds back in the column's own unit.

use arrow::array::{Array, ArrayRef, PrimitiveArray};
use arrow::datatypes::{
    DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use sluice_types::{Error, Result};
use std::sync::Arc;

/// Milliseconds per unit, as (multiply, divide) to get ms from the unit.
fn unit_to_ms(value: i64, unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => value.saturating_mul(1000),
        TimeUnit::Millisecond => value,
        TimeUnit::Microsecond => value.div_euclid(1000),
        TimeUnit::Nanosecond => value.div_euclid(1_000_000),
    }
}

fn ms_to_unit(ms: i64, unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => ms.div_euclid(1000),
        TimeUnit::Millisecond => ms,
        TimeUnit::Microsecond => ms.saturating_mul(1000),
        TimeUnit::Nanosecond => ms.saturating_mul(1_000_000),
    }
}

/// The event times of a timestamp column in epoch milliseconds; `None` for nulls.
pub fn timestamps_ms(column: &ArrayRef) -> Result<Vec<Option<i64>>> {
    fn collect<T: arrow::datatypes::ArrowPrimitiveType<Native = i64>>(
        column: &ArrayRef,
        unit: TimeUnit,
    ) -> Vec<Option<i64>> {
        let a = column
            .as_any()
            .downcast_ref::<PrimitiveArray<T>>()
            .expect("checked type");
        a.iter().map(|v| v.map(|v| unit_to_ms(v, unit))).collect()
    }
    match column.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => Ok(collect::<TimestampSecondType>(column, TimeUnit::Second)),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            Ok(collect::<TimestampMillisecondType>(column, TimeUnit::Millisecond))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            Ok(collect::<TimestampMicrosecondType>(column, TimeUnit::Microsecond))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            Ok(collect::<TimestampNanosecondType>(column, TimeUnit::Nanosecond))
        }
        other => Err(Error::internal(format!(
            "event-time column has type {other}, not a timestamp"
        ))),
    }
}

/// The largest event time (ms) in a timestamp column, ignoring nulls.
pub fn max_timestamp_ms(column: &ArrayRef) -> Result<Option<i64>> {
    Ok(timestamps_ms(column)?.into_iter().flatten().max())
}

/// A timestamp array of `data_type` from epoch-millisecond values.
pub fn timestamp_array(values_ms: &[i64], data_type: &DataType) -> Result<ArrayRef> {
    let DataType::Timestamp(unit, tz) = data_type else {
        return Err(Error::internal(format!("{data_type} is not a timestamp type")));
    };
    let values = values_ms.iter().map(|ms| ms_to_unit(*ms, *unit));
    let array: ArrayRef = match unit {
        TimeUnit::Second => {
            Arc::new(PrimitiveArray::<TimestampSecondType>::from_iter_values(values).with_timezone_opt(tz.clone()))
        }
        TimeUnit::Millisecond => {
            Arc::new(PrimitiveArray::<TimestampMillisecondType>::from_iter_values(values).with_timezone_opt(tz.clone()))
        }
        TimeUnit::Microsecond => {
            Arc::new(PrimitiveArray::<TimestampMicrosecondType>::from_iter_values(values).with_timezone_opt(tz.clone()))
        }
        TimeUnit::Nanosecond => {
            Arc::new(PrimitiveArray::<TimestampNanosecondType>::from_iter_values(values).with_timezone_opt(tz.clone()))
        }
    };
    Ok(array)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanoseconds_floor_to_milliseconds_including_before_epoch() {
        let a: ArrayRef = Arc::new(PrimitiveArray::<TimestampNanosecondType>::from(vec![
            Some(1_999_999),
            None,
            Some(-1),
        ]));
        assert_eq!(timestamps_ms(&a).unwrap(), vec![Some(1), None, Some(-1)]);
    }

    #[test]
    fn round_trip_in_each_unit() {
        for unit in [
            TimeUnit::Second,
            TimeUnit::Millisecond,
            TimeUnit::Microsecond,
            TimeUnit::Nanosecond,
        ] {
            let dt = DataType::Timestamp(unit, None);
            let a = timestamp_array(&[0, 10_000, 1_700_000_000_000], &dt).unwrap();
            assert_eq!(a.data_type(), &dt);
            let back: Vec<i64> = timestamps_ms(&a).unwrap().into_iter().flatten().collect();
            assert_eq!(back, vec![0, 10_000, 1_700_000_000_000]);
        }
    }
}
