//! The top-N operator driven directly. Its changelog is folded into a
//! table keyed by (partition, row number) and checked against the first
//! rows per partition computed here by sorting all rows.

use super::TopNOperator;
use crate::checkpoint::TaskState;
use crate::operator::Operator;
use arrow::array::{Array, Int64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_plan::{SortKey, TopNSpec};
use sluice_types::SqlCode;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `[k, v, id]`: partition k, order by v (direction per test), id names the row.
fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("id", DataType::Int64, false),
    ]))
}

fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("op", DataType::Utf8, false),
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("id", DataType::Int64, false),
        Field::new("rn", DataType::UInt64, false),
    ]))
}

fn spec(limit: usize, descending: bool, partitions_max: usize) -> TopNSpec {
    TopNSpec {
        input_schema: input_schema(),
        partition_columns: vec![0],
        order: vec![SortKey {
            column: 1,
            descending,
            nulls_first: false,
        }],
        limit,
        partitions_max,
        state_ttl_ms: None,
        op_column: None,
    }
}

fn rows(rows: &[(i64, Option<i64>, i64)]) -> RecordBatch {
    let k = Int64Array::from_iter_values(rows.iter().map(|r| r.0));
    let v = Int64Array::from_iter(rows.iter().map(|r| r.1));
    let id = Int64Array::from_iter_values(rows.iter().map(|r| r.2));
    RecordBatch::try_new(input_schema(), vec![Arc::new(k), Arc::new(v), Arc::new(id)]).unwrap()
}

/// (op, (k, rn), id).
fn changelog(batch: &RecordBatch) -> Vec<(String, (i64, u64), i64)> {
    let ops = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
    let k = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
    let id = batch.column(3).as_any().downcast_ref::<Int64Array>().unwrap();
    let rn = batch.column(4).as_any().downcast_ref::<UInt64Array>().unwrap();
    (0..batch.num_rows())
        .map(|i| (ops.value(i).to_string(), (k.value(i), rn.value(i)), id.value(i)))
        .collect()
}

/// Applies a changelog keyed by (k, rn), checking each -U names the row shown.
fn fold(table: &mut BTreeMap<(i64, u64), i64>, changes: &[(String, (i64, u64), i64)]) {
    for (op, key, id) in changes {
        match op.as_str() {
            "+I" => assert!(table.insert(*key, *id).is_none(), "+I at {key:?}, already shown"),
            "-U" => assert_eq!(table.remove(key), Some(*id), "-U at {key:?} is not the row shown"),
            "+U" => assert!(table.insert(*key, *id).is_none(), "+U at {key:?} without its -U"),
            other => panic!("op {other}"),
        }
    }
}

/// The first `limit` rows per k by v (NULLs last; ties: earlier rows first).
fn expected(all: &[(i64, Option<i64>, i64)], limit: usize, descending: bool) -> BTreeMap<(i64, u64), i64> {
    let mut per_k: BTreeMap<i64, Vec<(usize, Option<i64>, i64)>> = BTreeMap::new();
    for (arrival, (k, v, id)) in all.iter().enumerate() {
        per_k.entry(*k).or_default().push((arrival, *v, *id));
    }
    let mut out = BTreeMap::new();
    for (k, mut rows) in per_k {
        rows.sort_by(|a, b| {
            let by_value = match (a.1, b.1) {
                (Some(x), Some(y)) if descending => y.cmp(&x),
                (Some(x), Some(y)) => x.cmp(&y),
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, None) => std::cmp::Ordering::Equal,
            };
            by_value.then(a.0.cmp(&b.0))
        });
        for (i, (_, _, id)) in rows.into_iter().take(limit).enumerate() {
            out.insert((k, i as u64 + 1), id);
        }
    }
    out
}

const BATCHES: &[&[(i64, Option<i64>, i64)]] = &[
    &[(1, Some(5), 1), (2, Some(3), 2), (1, Some(7), 3)],
    // A tie with row 1 (ranks after it), a new top for k 1, a NULL.
    &[(1, Some(5), 4), (1, Some(9), 5), (2, None, 6)],
    &[(2, Some(8), 7), (1, Some(1), 8), (3, Some(2), 9), (2, Some(8), 10)],
];

#[test]
fn the_changelog_folds_into_the_first_rows_of_each_partition() {
    for descending in [true, false] {
        for limit in [1, 2, 3] {
            let mut op = TopNOperator::new(&spec(limit, descending, 10), output_schema()).unwrap();
            let mut table = BTreeMap::new();
            let mut all = Vec::new();
            for batch in BATCHES {
                all.extend_from_slice(batch);
                fold(&mut table, &changelog(&op.update(&rows(batch)).unwrap().unwrap()));
                assert_eq!(
                    table,
                    expected(&all, limit, descending),
                    "top {limit}, descending {descending}"
                );
            }
        }
    }
}

#[test]
fn keep_first_deduplication_emits_each_key_once() {
    // limit 1 ascending by v: each k's smallest v, the earliest on ties.
    let mut op = TopNOperator::new(&spec(1, false, 10), output_schema()).unwrap();
    let first = changelog(&op.update(&rows(&[(1, Some(1), 1), (2, Some(1), 2)])).unwrap().unwrap());
    assert_eq!(first.iter().filter(|c| c.0 == "+I").count(), 2);
    // Later rows with larger or equal values change nothing.
    let later = op
        .update(&rows(&[(1, Some(1), 3), (2, Some(4), 4), (1, Some(2), 5)]))
        .unwrap()
        .unwrap();
    assert_eq!(later.num_rows(), 0);
}

#[test]
fn the_partition_limit_admits_exactly_its_number_of_partitions() {
    let mut op = TopNOperator::new(&spec(2, true, 2), output_schema()).unwrap();
    op.update(&rows(&[(1, Some(1), 1), (2, Some(1), 2), (1, Some(3), 3)]))
        .unwrap();
    let e = op.update(&rows(&[(3, Some(1), 4)])).unwrap_err();
    assert_eq!(e.sqlstate(), SqlCode::ConfigurationLimitExceeded.sqlstate(), "{e}");
    assert!(e.to_string().contains("2 partitions"), "{e}");
}

#[tokio::test]
async fn a_restored_operator_continues_the_lists_with_their_ties() {
    let mut op = TopNOperator::new(&spec(2, true, 10), output_schema()).unwrap();
    let mut table = BTreeMap::new();
    fold(&mut table, &changelog(&op.update(&rows(BATCHES[0])).unwrap().unwrap()));
    let mut state = op.snapshot(1).await.unwrap();
    state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
    let state = TaskState::decode(&state.encode().unwrap()).unwrap();
    let mut restored = TopNOperator::new(&spec(2, true, 10), output_schema()).unwrap();
    restored.restore(Some((1, state))).await.unwrap();
    let mut all: Vec<_> = BATCHES[0].to_vec();
    for batch in &BATCHES[1..] {
        all.extend_from_slice(batch);
        let a = changelog(&op.update(&rows(batch)).unwrap().unwrap());
        let b = changelog(&restored.update(&rows(batch)).unwrap().unwrap());
        assert_eq!(a, b);
        fold(&mut table, &b);
        assert_eq!(table, expected(&all, 2, true));
    }
}

/// `state_ttl`: an idle partition's rows are deleted (`-D`, with their
/// numbers) and its list freed.
#[test]
fn idle_partitions_are_deleted_after_the_state_ttl() {
    let spec = TopNSpec {
        state_ttl_ms: Some(60_000),
        op_column: None,
        ..spec(2, true, 10)
    };
    let mut op = TopNOperator::new(&spec, output_schema()).unwrap();
    let mut table = BTreeMap::new();
    fold(&mut table, &changelog(&op.update(&rows(BATCHES[0])).unwrap().unwrap()));
    let now = sluice_types::now_ms();
    assert_eq!(op.expire(now + 1_000).unwrap().unwrap().num_rows(), 0, "not idle yet");
    let expired = changelog(&op.expire(now + 120_000).unwrap().unwrap());
    for (o, key, id) in &expired {
        assert_eq!(o, "-D");
        assert_eq!(table.remove(key), Some(*id), "-D at {key:?} is the row shown");
    }
    assert!(table.is_empty(), "every shown row deleted");
    assert!(op.partitions.is_empty(), "state freed");
}

/// Over a changelog: `[k, v, id, op]`.
fn changelog_spec(limit: usize, descending: bool, rows_max: usize) -> TopNSpec {
    let mut fields: Vec<Field> = input_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("op", DataType::Utf8, false));
    TopNSpec {
        input_schema: Arc::new(Schema::new(fields)),
        op_column: Some(3),
        ..spec(limit, descending, rows_max)
    }
}

/// A row `(k, v, id)` with its op.
type OpRow<'a> = (&'a str, (i64, Option<i64>, i64));

fn changes(rows: &[OpRow<'_>]) -> RecordBatch {
    let mut fields: Vec<Field> = input_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("op", DataType::Utf8, false));
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1.0))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1.2))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
        ],
    )
    .unwrap()
}

/// Folds a changelog keyed by (k, rn) that may also delete positions.
fn fold_all(table: &mut BTreeMap<(i64, u64), i64>, changes: &[(String, (i64, u64), i64)]) {
    for (op, key, id) in changes {
        match op.as_str() {
            "+I" | "+U" => assert!(table.insert(*key, *id).is_none(), "{op} at {key:?}, already shown"),
            "-U" | "-D" => assert_eq!(table.remove(key), Some(*id), "{op} at {key:?} is not the row shown"),
            other => panic!("op {other}"),
        }
    }
}

/// Random changelogs (retracting only rows held; v unique per row, so no
/// ties), applied in random batches with a snapshot and restore half-way:
/// the folded output is the first rows of what each partition holds.
#[tokio::test]
async fn over_a_changelog_a_retracted_top_row_is_replaced_by_the_next() {
    for (limit, descending) in [(1, true), (2, false), (3, true)] {
        for seed in 1..30u64 {
            let spec = changelog_spec(limit, descending, 1_000);
            let mut op = TopNOperator::new(&spec, output_schema()).unwrap();
            let mut x = seed * 7919;
            let mut next = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mut held: Vec<(i64, Option<i64>, i64)> = Vec::new();
            let mut table = BTreeMap::new();
            for step in 0..40 {
                if step == 20 {
                    let mut state = op.snapshot(1).await.unwrap();
                    state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
                    let state = TaskState::decode(&state.encode().unwrap()).unwrap();
                    op = TopNOperator::new(&spec, output_schema()).unwrap();
                    op.restore(Some((1, state))).await.unwrap();
                }
                let mut batch = Vec::new();
                for _ in 0..1 + next(4) {
                    if !held.is_empty() && next(3) == 0 {
                        let row = held.remove(next(held.len() as u64) as usize);
                        batch.push((["-U", "-D"][next(2) as usize], row));
                    } else {
                        let id = (step * 10 + batch.len()) as i64;
                        let row = (next(3) as i64, Some(id * 7919 % 100_003), id);
                        held.push(row);
                        batch.push((["+I", "+U"][next(2) as usize], row));
                    }
                }
                if let Some(out) = op.update(&changes(&batch)).unwrap() {
                    fold_all(&mut table, &changelog(&out));
                }
                assert_eq!(
                    table,
                    expected(&held, limit, descending),
                    "limit {limit} seed {seed} step {step}"
                );
            }
        }
    }
}

#[test]
fn over_a_changelog_the_rows_held_are_bounded() {
    let mut op = TopNOperator::new(&changelog_spec(1, true, 2), output_schema()).unwrap();
    op.update(&changes(&[("+I", (1, Some(1), 1)), ("+I", (1, Some(2), 2))]))
        .unwrap();
    let e = op.update(&changes(&[("+I", (2, Some(3), 3))])).unwrap_err();
    assert!(e.to_string().contains("2 rows held"), "{e}");
    // A retraction makes room.
    op.update(&changes(&[("-D", (1, Some(1), 1)), ("+I", (2, Some(3), 3))]))
        .unwrap();
}

/// Random batches (1–30 rows; a hot partition in a third of them, 12
/// others; values 0–9, so many ties, NULL one time in eight) for limits
/// 1, 2, 3 and 5 in both directions: after every batch the folded
/// changelog is the first rows of each partition, worked out from all rows.
/// Several rows of one batch land in one list, before and after it fills.
#[test]
fn random_batches_fold_into_the_first_rows_of_each_partition() {
    let mut seed: u64 = 0x70b;
    let mut below = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for descending in [true, false] {
        for limit in [1, 2, 3, 5] {
            let mut op = TopNOperator::new(&spec(limit, descending, 100), output_schema()).unwrap();
            let (mut table, mut all, mut id) = (BTreeMap::new(), Vec::new(), 0);
            for _ in 0..40 {
                let batch: Vec<(i64, Option<i64>, i64)> = (0..1 + below(30))
                    .map(|_| {
                        id += 1;
                        let k = if below(3) == 0 { 0 } else { 1 + below(12) as i64 };
                        (k, (below(8) != 0).then(|| below(10) as i64), id)
                    })
                    .collect();
                all.extend_from_slice(&batch);
                if let Some(out) = op.update(&rows(&batch)).unwrap() {
                    fold(&mut table, &changelog(&out));
                }
                assert_eq!(
                    table,
                    expected(&all, limit, descending),
                    "top {limit}, descending {descending}"
                );
            }
        }
    }
}

impl TopNOperator {
    /// Partition `k`'s key, row-encoded.
    fn key_of(&self, k: i64) -> Box<[u8]> {
        let column: arrow::array::ArrayRef = Arc::new(Int64Array::from(vec![k]));
        self.partition
            .as_ref()
            .unwrap()
            .convert_columns(&[column])
            .unwrap()
            .row(0)
            .data()
            .into()
    }
}

/// Random input for [`lists_restored_from_incremental_checkpoints_go_on_as_the_operator_never_stopped`]:
/// 150 batches of 1–40 rows over 300 partitions (a hot one in a third of
/// the rows), values 0–99, with ops over a changelog (a held row taken
/// back one time in four).
fn incremental_input(over_changelog: bool) -> Vec<RecordBatch> {
    let mut seed: u64 = 0x1ed9e5;
    let mut below = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let (mut held, mut id) = (Vec::new(), 0);
    (0..150)
        .map(|_| {
            let mut batch: Vec<OpRow<'static>> = Vec::new();
            for _ in 0..1 + below(40) {
                if over_changelog && !held.is_empty() && below(4) == 0 {
                    let row = held.swap_remove(below(held.len() as u64) as usize);
                    batch.push((["-U", "-D"][below(2) as usize], row));
                    continue;
                }
                id += 1;
                let k = if below(3) == 0 { 0 } else { 1 + below(300) as i64 };
                let row = (k, Some(below(100) as i64), id);
                held.push(row);
                batch.push(("+I", row));
            }
            if over_changelog {
                changes(&batch)
            } else {
                rows(&batch.iter().map(|(_, r)| *r).collect::<Vec<_>>())
            }
        })
        .collect()
}

/// Both forms — lists over an append-only input (ties broken by arrival,
/// which the restored numbers keep) and held rows over a changelog —
/// checkpointed every third batch: copies restored from the checkpoints,
/// one of them rescaled to two instances, emit what the operator emits
/// ([`copies_go_on_as_the_operator`]); most checkpoints write only the
/// partitions changed since the one before.
#[tokio::test]
async fn lists_restored_from_incremental_checkpoints_go_on_as_the_operator_never_stopped() {
    use crate::checkpoint::testing::copies_go_on_as_the_operator;
    for over_changelog in [false, true] {
        let spec = if over_changelog {
            changelog_spec(3, true, 1_000_000)
        } else {
            spec(3, true, 1_000_000)
        };
        let inputs: Vec<(usize, RecordBatch)> = incremental_input(over_changelog).into_iter().map(|b| (0, b)).collect();
        let counted = copies_go_on_as_the_operator(
            tempfile::tempdir().unwrap().path(),
            &inputs,
            &|_| vec![0],
            &|| TopNOperator::new(&spec, output_schema()).unwrap(),
            &mut |op, _, batch| op.update(batch).unwrap().into_iter().collect(),
            (&format!("over a changelog: {over_changelog}"), true),
        )
        .await;
        assert!(counted.taken >= 45, "{counted:?}");
        assert!(counted.referencing * 2 >= counted.taken, "{counted:?}");
    }
}

/// A top-2 over at most 10 partitions with a 60-s `state_ttl`, its spec,
/// and a checkpoint loop over a store in a directory kept while the
/// returned handle lives.
fn expiring_top2_with_checkpoints() -> (
    TopNSpec,
    tempfile::TempDir,
    crate::checkpoint::testing::CheckpointLoop,
    TopNOperator,
) {
    use crate::checkpoint::{LocalStateStore, StateStore};
    let spec = TopNSpec {
        state_ttl_ms: Some(60_000),
        ..spec(2, true, 10)
    };
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
    let checkpoints = crate::checkpoint::testing::CheckpointLoop::new(store, 2);
    let op = TopNOperator::new(&spec, output_schema()).unwrap();
    (spec, tmp, checkpoints, op)
}

/// A partition `state_ttl` expired after a checkpoint wrote it is not in
/// the next checkpoint, which writes nothing new and only references the
/// other partition's rows.
#[tokio::test]
async fn a_partition_expired_after_a_checkpoint_is_gone_from_the_next() {
    let (spec, _tmp, mut checkpoints, mut op) = expiring_top2_with_checkpoints();
    op.update(&rows(&[(1, Some(5), 1), (2, Some(3), 2)])).unwrap();
    let id = checkpoints.start();
    checkpoints.complete(id, op.snapshot(id).await.unwrap()).await.unwrap();
    // Partition 2 is refreshed; partition 1 expires.
    let now = sluice_types::now_ms();
    op.partitions.get_mut(&op.key_of(2)).unwrap().touched_ms = now + 100_000;
    let expired = changelog(&op.expire(now + 120_000).unwrap().unwrap());
    assert_eq!(expired, [("-D".to_string(), (1, 1), 1)]);
    let id = checkpoints.start();
    let (entry, state) = checkpoints
        .complete_and_read(id, op.snapshot(id).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        entry.references.len(),
        1,
        "partition 2's rows are referenced, not written again"
    );
    let mut restored = TopNOperator::new(&spec, output_schema()).unwrap();
    restored.restore(Some((id, state))).await.unwrap();
    assert_eq!(restored.partitions.len(), 1);
    // Partition 1 starts again from nothing; partition 2 still holds row 2.
    let out = changelog(
        &restored
            .update(&rows(&[(1, Some(1), 3), (2, Some(9), 4)]))
            .unwrap()
            .unwrap(),
    );
    assert_eq!(
        out,
        [
            ("+I".to_string(), (1, 1), 3),
            ("-U".to_string(), (2, 1), 2),
            ("+U".to_string(), (2, 1), 4),
            ("+I".to_string(), (2, 2), 2),
        ]
    );
    checkpoints.finish().await;
}

/// An expiry fills a removed partition's index with the last partition's;
/// a partition changed since the last checkpoint and moved so is still
/// written by the next (its change noted by index, listed again after the
/// move), and what was written of the removed one is dead.
#[tokio::test]
async fn a_changed_partition_moved_by_an_expiry_is_written_by_the_next_checkpoint() {
    let (spec, _tmp, mut checkpoints, mut op) = expiring_top2_with_checkpoints();
    op.update(&rows(&[(1, Some(5), 1), (2, Some(3), 2), (3, Some(4), 3)]))
        .unwrap();
    let id = checkpoints.start();
    checkpoints.complete(id, op.snapshot(id).await.unwrap()).await.unwrap();
    // Partition 3 (the last index) takes a row; partition 1 (the first)
    // expires, and 3 moves into its index.
    op.update(&rows(&[(3, Some(8), 4)])).unwrap();
    let now = sluice_types::now_ms();
    for k in [2, 3] {
        op.partitions.get_mut(&op.key_of(k)).unwrap().touched_ms = now + 100_000;
    }
    let expired = changelog(&op.expire(now + 120_000).unwrap().unwrap());
    assert_eq!(expired, [("-D".to_string(), (1, 1), 1)]);
    assert_eq!(op.partitions.get_index_of(&op.key_of(3)), Some(0), "moved");
    let id = checkpoints.start();
    let (entry, state) = checkpoints
        .complete_and_read(id, op.snapshot(id).await.unwrap())
        .await
        .unwrap();
    assert_eq!(entry.references.len(), 1, "partition 2's rows are referenced");
    let mut restored = TopNOperator::new(&spec, output_schema()).unwrap();
    restored.restore(Some((id, state))).await.unwrap();
    assert_eq!(restored.partitions.len(), 2, "partition 1 is not restored");
    // Partition 3 holds rows 4 and 3: a row between them takes rank 2.
    let next = rows(&[(3, Some(6), 5), (2, Some(1), 6)]);
    let out = changelog(&restored.update(&next).unwrap().unwrap());
    assert_eq!(
        out,
        [
            ("-U".to_string(), (3, 2), 3),
            ("+U".to_string(), (3, 2), 5),
            ("+I".to_string(), (2, 2), 6),
        ]
    );
    assert_eq!(out, changelog(&op.update(&next).unwrap().unwrap()), "as the operator");
    checkpoints.finish().await;
}
