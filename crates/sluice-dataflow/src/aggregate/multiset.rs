//! `min`, `max` and `count(DISTINCT …)` over a changelog: accumulators
//! that keep every value with its multiplicity, so a retracted value
//! leaves exactly one of its copies. (DataFusion's sliding `min`/`max`
//! retract the oldest value whatever value is given — right for window
//! frames, wrong for a changelog.)
//!
//! Values are kept row-encoded (Arrow's row format), whose bytes compare
//! as the values do: the map's first key is the minimum, its last the
//! maximum. NULLs are skipped, as the aggregates skip them.

use arrow::array::{Array, ArrayRef, BinaryArray};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Accumulator;
use datafusion::scalar::ScalarValue;
use sluice_types::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a [`Multiset`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Min,
    Max,
    CountDistinct,
}

/// A multiset of one group's values.
#[derive(Debug)]
pub struct Multiset {
    answer: Answer,
    converter: Arc<RowConverter>,
    data_type: DataType,
    values: BTreeMap<Box<[u8]>, u64>,
}

type DfResult<T> = datafusion::error::Result<T>;

fn arrow_error(e: arrow::error::ArrowError) -> DataFusionError {
    DataFusionError::ArrowError(Box::new(e), None)
}

impl Multiset {
    /// The converter for values of `data_type`, shared by a group's
    /// accumulators of one aggregate.
    pub fn converter(data_type: &DataType) -> Result<Arc<RowConverter>> {
        Ok(Arc::new(RowConverter::new(vec![SortField::new(data_type.clone())])?))
    }

    pub fn new(answer: Answer, converter: Arc<RowConverter>, data_type: DataType) -> Self {
        Multiset {
            answer,
            converter,
            data_type,
            values: BTreeMap::new(),
        }
    }

    /// Adds (`by` 1) or takes back (`by` -1) each non-NULL value.
    fn apply(&mut self, values: &ArrayRef, add: bool) -> DfResult<()> {
        let rows = self
            .converter
            .convert_columns(std::slice::from_ref(values))
            .map_err(arrow_error)?;
        for i in (0..values.len()).filter(|i| values.is_valid(*i)) {
            let key = rows.row(i);
            if add {
                *self.values.entry(key.data().into()).or_insert(0) += 1;
            } else if let Some(n) = self.values.get_mut(key.data()) {
                *n -= 1;
                if *n == 0 {
                    self.values.remove(key.data());
                }
            }
            // A value taken back that was never added (its addition went
            // elsewhere) is not there to remove.
        }
        Ok(())
    }

    fn value_of(&self, key: &[u8]) -> DfResult<ScalarValue> {
        let parser = self.converter.parser();
        let arrays = self
            .converter
            .convert_rows(std::iter::once(parser.parse(key)))
            .map_err(arrow_error)?;
        ScalarValue::try_from_array(&arrays[0], 0)
    }
}

impl Accumulator for Multiset {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.apply(&values[0], true)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.apply(&values[0], false)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let extreme = match self.answer {
            Answer::CountDistinct => return Ok(ScalarValue::Int64(Some(self.values.len() as i64))),
            Answer::Min => self.values.keys().next(),
            Answer::Max => self.values.keys().next_back(),
        };
        match extreme {
            Some(key) => self.value_of(key),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.values.keys().map(|k| k.len() + 48).sum::<usize>()
    }

    /// One binary value: each distinct value's row bytes (length-prefixed)
    /// and its multiplicity.
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let mut out = Vec::new();
        for (key, n) in &self.values {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Ok(vec![ScalarValue::Binary(Some(out))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let states = states[0]
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| DataFusionError::Internal("a multiset's state is not binary".into()))?;
        let corrupt = || DataFusionError::Internal("a multiset's state is corrupt".into());
        for state in states.iter().flatten() {
            let mut at = 0;
            while at < state.len() {
                let len = u32::from_le_bytes(state.get(at..at + 4).ok_or_else(corrupt)?.try_into().unwrap()) as usize;
                at += 4;
                let key = state.get(at..at + len).ok_or_else(corrupt)?;
                at += len;
                let n = u64::from_le_bytes(state.get(at..at + 8).ok_or_else(corrupt)?.try_into().unwrap());
                at += 8;
                *self.values.entry(key.into()).or_insert(0) += n;
            }
        }
        Ok(())
    }
}

/// The multiset accumulator for aggregate `function` (DISTINCT or not)
/// over `data_type`, if it is one of those it answers.
pub fn for_function(function: &str, distinct: bool, data_type: &DataType) -> Result<Option<Box<dyn Accumulator>>> {
    let answer = match (function, distinct) {
        ("min", _) => Answer::Min,
        ("max", _) => Answer::Max,
        ("count", true) => Answer::CountDistinct,
        _ => return Ok(None),
    };
    let converter = Multiset::converter(data_type)?;
    Ok(Some(Box::new(Multiset::new(answer, converter, data_type.clone()))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn ints(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn retracting_the_extreme_falls_back_to_the_next_copy_or_value() {
        let conv = Multiset::converter(&DataType::Int64).unwrap();
        let mut max = Multiset::new(Answer::Max, conv.clone(), DataType::Int64);
        let mut min = Multiset::new(Answer::Min, conv.clone(), DataType::Int64);
        let mut distinct = Multiset::new(Answer::CountDistinct, conv, DataType::Int64);
        for acc in [&mut max, &mut min, &mut distinct] {
            acc.update_batch(&[ints(&[Some(5), Some(9), None, Some(9), Some(-3)])])
                .unwrap();
        }
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(9)));
        assert_eq!(min.evaluate().unwrap(), ScalarValue::Int64(Some(-3)));
        assert_eq!(distinct.evaluate().unwrap(), ScalarValue::Int64(Some(3)));
        // One 9 taken back: the other copy is still the max.
        for acc in [&mut max, &mut min, &mut distinct] {
            acc.retract_batch(&[ints(&[Some(9), Some(-3)])]).unwrap();
        }
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(9)));
        assert_eq!(min.evaluate().unwrap(), ScalarValue::Int64(Some(5)));
        assert_eq!(distinct.evaluate().unwrap(), ScalarValue::Int64(Some(2)));
        // Through the state, as a checkpoint stores it.
        let state = max.state().unwrap();
        let mut restored = for_function("max", false, &DataType::Int64).unwrap().unwrap();
        let array = ScalarValue::iter_to_array(state).unwrap();
        restored.merge_batch(&[array]).unwrap();
        restored.retract_batch(&[ints(&[Some(9)])]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(Some(5)));
        restored.retract_batch(&[ints(&[Some(5)])]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(None), "empty: NULL");
    }

    #[test]
    fn text_values_order_as_text() {
        let mut max = for_function("max", false, &DataType::Utf8).unwrap().unwrap();
        let words: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["pear", "apple", "zebra", "kiwi"]));
        max.update_batch(&[words]).unwrap();
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Utf8(Some("zebra".into())));
        assert!(for_function("sum", false, &DataType::Int64).unwrap().is_none());
    }
}
