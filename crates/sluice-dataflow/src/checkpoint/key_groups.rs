//! Keyed state as an operator hands it over and the state file stores it:
//! rows plus their key groups, given as the key columns (labelled when
//! written) or as the groups read back. Splitting and merging it for a
//! restore at another parallelism is [`super::keyed`]'s.

use arrow::array::{Array, BooleanArray, UInt16Array};
use arrow::compute::filter_record_batch;
use arrow::record_batch::RecordBatch;
use sluice_plan::KeyGroupRange;
use sluice_types::{Error, Result};

/// Rows of keyed state and their key groups.
#[derive(Debug, Clone)]
pub struct KeyedBatches {
    pub batches: Vec<RecordBatch>,
    pub groups: KeyGroups,
}

/// Where a keyed value's key groups come from.
#[derive(Debug, Clone)]
pub enum KeyGroups {
    /// Computed from these key columns of the batches (when written, or
    /// when a checkpoint from before key groups is restored).
    Columns(Vec<usize>),
    /// Read back: one array per batch.
    Stored(Vec<UInt16Array>),
}

impl KeyedBatches {
    /// Each batch's key groups (of `key_groups` in all).
    pub fn group_arrays(&self, key_groups: u32) -> Result<Vec<UInt16Array>> {
        match &self.groups {
            KeyGroups::Stored(groups) => Ok(groups.clone()),
            KeyGroups::Columns(columns) => self.batches.iter().map(|b| label(b, columns, key_groups)).collect(),
        }
    }

    /// The rows whose key group is in `range`, with their groups.
    pub fn select(&self, range: KeyGroupRange, key_groups: u32) -> Result<(Vec<RecordBatch>, Vec<UInt16Array>)> {
        let mut batches = Vec::new();
        let mut groups = Vec::new();
        for (batch, g) in self.batches.iter().zip(self.group_arrays(key_groups)?) {
            if g.len() != batch.num_rows() {
                return Err(Error::internal("keyed state: key groups do not match the rows"));
            }
            let keep: BooleanArray = g.values().iter().map(|g| Some(range.contains(u32::from(*g)))).collect();
            match keep.true_count() {
                0 => continue,
                n if n == batch.num_rows() => {
                    batches.push(batch.clone());
                    groups.push(g);
                }
                _ => {
                    batches.push(filter_record_batch(batch, &keep)?);
                    let kept = arrow::compute::filter(&g, &keep)?;
                    groups.push(kept.as_any().downcast_ref::<UInt16Array>().expect("u16").clone());
                }
            }
        }
        Ok((batches, groups))
    }
}

/// The key group of every row of `batch`, its key being `columns`.
pub fn label(batch: &RecordBatch, columns: &[usize], key_groups: u32) -> Result<UInt16Array> {
    let arrays: Vec<_> = columns.iter().map(|c| batch.column(*c).clone()).collect();
    Ok(UInt16Array::from(crate::exchange::key_groups(
        &arrays,
        batch.num_rows(),
        key_groups,
    )?))
}
