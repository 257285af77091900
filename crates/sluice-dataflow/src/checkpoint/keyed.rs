//! Keyed state, stored per key group, and how a restore splits or merges
//! it.
//!
//! A keyed operator (a window with GROUP BY keys, a stream join: every
//! input hash-partitioned) hands its state over as [`KeyedBatches`]: rows
//! plus which of their columns are the key. The encoder, on the checkpoint
//! thread, labels every row with its key group — the same hash the
//! exchange routes by ([`crate::exchange::key_groups`]) — so the task's
//! data path does no per-row work for it; the file keeps the label, and the
//! manifest the task's key-group range.
//!
//! Restoring instance `i` at parallelism `p` ([`assemble`]) reads the files
//! of the operator's uid whose ranges overlap the instance's range, keeps
//! the keyed rows of its groups, and concatenates them. State that is not
//! keyed (a source's position, an unkeyed window) is per instance: it is
//! taken from the same instance at the same parallelism, and restoring it
//! at another parallelism is refused. The task's low watermark is the
//! instance's own, or after a rescale the lowest of the parts (every
//! instance of a keyed operator sees the same watermarks before a barrier,
//! so they agree).
//!
//! Checkpoints from before key groups (state format 1–2, manifest 1) were
//! routed by `hash % parallelism`, so any old instance may hold keys of any
//! group: every old file of the operator is a part, its keyed entries are
//! recognised by the operator's migration ([`Part::legacy`]) and labelled by
//! hashing their keys at restore.

use super::LOW_WATERMARK_KEY;
pub use super::key_groups::{KeyGroups, KeyedBatches, label};
use super::state::{StateValue, TaskState};
use sluice_plan::KeyGroupRange;
use sluice_types::{Error, Result, SqlCode};

/// One old instance's file that may hold state of the instance restored.
pub struct Part {
    pub instance: u32,
    /// The same instance at the same parallelism: its per-instance state
    /// is this instance's.
    pub same: bool,
    /// From a checkpoint written before key groups: keyed entries are not
    /// marked yet (the operator's migration marks them).
    pub legacy: bool,
    pub state: TaskState,
}

/// Turns a checkpoint's old-format state into today's (marks keyed
/// entries with their key columns): per operator kind.
pub type Migration<'a> = &'a dyn Fn(TaskState) -> Result<TaskState>;

/// The state instance `mine` restores from `parts` (see the module doc).
/// `operator` names it in errors.
pub fn assemble(
    parts: Vec<Part>,
    mine: KeyGroupRange,
    key_groups: u32,
    migrate: Migration<'_>,
    operator: &str,
) -> Result<TaskState> {
    // Today's format at an unchanged parallelism: the instance's own file.
    if let [part] = parts.as_slice()
        && part.same
        && !part.legacy
    {
        return Ok(parts.into_iter().next().expect("one").state);
    }
    let mut out = TaskState::default();
    let mut watermarks = Vec::new();
    let mut own_watermark = None;
    let mut unsplittable = None;
    let has_own = parts.iter().any(|p| p.same);
    for part in parts {
        let state = if part.legacy { migrate(part.state)? } else { part.state };
        for (key, value) in state.entries {
            match value {
                StateValue::Keyed(keyed) => {
                    let (batches, groups) = keyed.select(mine, key_groups)?;
                    if batches.is_empty() {
                        continue;
                    }
                    match out.entries.entry(key).or_insert_with(|| {
                        StateValue::Keyed(KeyedBatches {
                            batches: Vec::new(),
                            groups: KeyGroups::Stored(Vec::new()),
                        })
                    }) {
                        StateValue::Keyed(KeyedBatches {
                            batches: b,
                            groups: KeyGroups::Stored(g),
                        }) => {
                            b.extend(batches);
                            g.extend(groups);
                        }
                        _ => return Err(Error::internal("keyed state entry of two kinds")),
                    }
                }
                StateValue::Bytes(bytes) if key == LOW_WATERMARK_KEY => {
                    let low = i64::from_le_bytes(
                        bytes
                            .as_slice()
                            .try_into()
                            .map_err(|_| Error::internal("bad stored watermark"))?,
                    );
                    if part.same {
                        own_watermark = Some(low);
                    }
                    watermarks.push(low);
                }
                other if part.same => {
                    out.entries.insert(key, other);
                }
                _ => unsplittable = Some((key, part.instance)),
            }
        }
    }
    if let (Some((key, instance)), false) = (&unsplittable, has_own) {
        // Per-instance state, and this instance is not the one that
        // wrote it: the operator's parallelism changed.
        return Err(Error::user(
            SqlCode::FeatureNotSupported,
            format!(
                "operator {operator} keeps per-instance state ('{key}' of instance {instance}) and cannot be restored at another parallelism"
            ),
        ));
    }
    if let Some(low) = own_watermark.or(watermarks.iter().copied().min()) {
        out.put_bytes(LOW_WATERMARK_KEY, low.to_le_bytes().to_vec());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Int64Array};
    use arrow::compute::filter_record_batch;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use sluice_plan::{KEY_GROUPS_DEFAULT, key_group_range};
    use std::sync::Arc;

    fn rows(keys: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let k = Int64Array::from_iter_values(keys.clone());
        let v = Int64Array::from_iter_values(keys.map(|k| k * 10));
        RecordBatch::try_new(schema, vec![Arc::new(k), Arc::new(v)]).unwrap()
    }

    fn keys_of(state: &TaskState) -> Vec<i64> {
        let mut keys: Vec<i64> = state
            .rows("w")
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        keys.sort_unstable();
        keys
    }

    /// State written by 2 instances (each holding the keys routed to it),
    /// through the file format, restored at 1, 3 and 4 instances: every
    /// key lands exactly once, on the instance its rows now go to.
    #[test]
    fn keyed_state_splits_and_merges_across_parallelisms() {
        let k = KEY_GROUPS_DEFAULT;
        let all = rows(0..1000);
        let groups = label(&all, &[0], k).unwrap();
        let old_p = 2;
        let files: Vec<TaskState> = (0..old_p)
            .map(|i| {
                let range = key_group_range(i, old_p, k);
                let keep: BooleanArray = groups
                    .values()
                    .iter()
                    .map(|g| Some(range.contains(u32::from(*g))))
                    .collect();
                let mut s = TaskState::default();
                s.put_keyed("w", vec![filter_record_batch(&all, &keep).unwrap()], vec![0]);
                s.put_bytes(LOW_WATERMARK_KEY, 7i64.to_le_bytes().to_vec());
                s.key_groups = k;
                TaskState::decode(&s.encode().unwrap()).unwrap()
            })
            .collect();
        for p in [1, 2, 3, 4] {
            let mut seen = Vec::new();
            for i in 0..p {
                let mine = key_group_range(i, p, k);
                let parts = (0..old_p)
                    .filter(|j| key_group_range(*j, old_p, k).overlaps(&mine))
                    .map(|j| Part {
                        instance: j,
                        same: j == i && p == old_p,
                        legacy: false,
                        state: files[j as usize].clone(),
                    })
                    .collect();
                let state = assemble(parts, mine, k, &Ok, "w").unwrap();
                let keys = keys_of(&state);
                let router = sluice_plan::KeyGroupRouter::new(k, p);
                for key in &keys {
                    let g = label(&rows(*key..*key + 1), &[0], k).unwrap().value(0);
                    assert_eq!(router.instance_of_group(u32::from(g)), i, "p={p}: key {key}");
                }
                assert_eq!(state.bytes(LOW_WATERMARK_KEY).unwrap(), 7i64.to_le_bytes());
                seen.extend(keys);
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..1000).collect::<Vec<_>>(), "p={p}: every key exactly once");
        }
    }

    /// Per-instance state restores only on its own instance at its own
    /// parallelism; elsewhere the restore is refused, not guessed.
    #[test]
    fn per_instance_state_does_not_move_between_instances() {
        let mut s = TaskState::default();
        s.put_bytes("position", b"42".to_vec());
        let part = |same| Part {
            instance: 0,
            same,
            legacy: false,
            state: s.clone(),
        };
        let all = key_group_range(0, 1, 256);
        let back = assemble(vec![part(true)], all, 256, &Ok, "src").unwrap();
        assert_eq!(back.bytes("position").unwrap(), b"42");
        let e = assemble(vec![part(false)], key_group_range(0, 2, 256), 256, &Ok, "src")
            .unwrap_err()
            .to_string();
        assert!(e.contains("per-instance state"), "{e}");
    }
}
