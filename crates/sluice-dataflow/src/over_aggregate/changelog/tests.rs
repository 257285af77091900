//! The OVER aggregate over a changelog driven directly: random inserts and
//! retractions, the changelog out folded into a multiset, compared with the
//! append-only tests' nested loop over the rows held at the end.

use super::*;
use crate::over_aggregate::tests::{In, Out, expected, input_schema, output_schema, rows_of, spec};
use arrow::array::{Int64Array, TimestampMillisecondArray};
use std::collections::BTreeMap;

/// The changelog operator's input: the append-only tests' columns and an op.
fn changelog_spec(frame: OverFrame, rows_max: usize) -> OverAggSpec {
    let mut fields: Vec<Field> = input_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(sluice_plan::OP_COLUMN, DataType::Utf8, false));
    OverAggSpec {
        input_schema: Arc::new(Schema::new(fields)),
        op_column: Some(3),
        ..spec(frame, rows_max)
    }
}

fn changelog_output() -> SchemaRef {
    let mut fields = vec![Field::new(sluice_plan::OP_COLUMN, DataType::Utf8, false)];
    fields.extend(output_schema().fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

fn changes(rows: &[(ChangeOp, In)]) -> RecordBatch {
    RecordBatch::try_new(
        changelog_spec(OverFrame::Rows { preceding: 0 }, 1).input_schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1.0))),
            Arc::new(TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.1.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1.2))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0.as_str()))),
        ],
    )
    .unwrap()
}

/// Folds a changelog batch into `into` (row → copies), failing on a row
/// taken back that is not there.
fn fold(into: &mut BTreeMap<Out, i64>, batch: &RecordBatch) {
    let ops = crate::group_aggregate::change_ops(batch, 0).unwrap();
    let rows = rows_of(&batch.project(&(1..batch.num_columns()).collect::<Vec<_>>()).unwrap());
    for (op, row) in ops.into_iter().zip(rows) {
        let n = into.entry(row).or_insert(0);
        *n += if op.retracts() { -1 } else { 1 };
        assert!(*n >= 0, "{op:?} of {row:?}, not in the result");
        if *n == 0 {
            into.remove(&row);
        }
    }
}

/// What the nested loop gives for `held`, as a multiset. Peers are taken
/// by their columns' values (NULL first), as the operator takes them.
fn want(held: &[In], frame: OverFrame) -> BTreeMap<Out, i64> {
    let mut sorted = held.to_vec();
    sorted.sort_unstable();
    let mut out = BTreeMap::new();
    for row in expected(&sorted, frame) {
        *out.entry(row).or_insert(0) += 1;
    }
    out
}

/// A random changelog over keys 0..3 and times 0..60 (many ties, copies):
/// inserts, and retractions of rows held (`-U`/`+U` pairs and `-D`s).
fn random_changes(n: usize, seed: &mut u64) -> (Vec<(ChangeOp, In)>, Vec<In>) {
    random_changes_over(3, n, seed)
}

/// [`random_changes`] over keys 0..`keys`.
fn random_changes_over(keys: i64, n: usize, seed: &mut u64) -> (Vec<(ChangeOp, In)>, Vec<In>) {
    let mut next = || {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*seed >> 33) as i64
    };
    let mut held: Vec<In> = Vec::new();
    let mut log = Vec::new();
    while log.len() < n {
        let v = next() % 20;
        let row = (next() % keys, next() % 60, (v % 7 != 0).then_some(v));
        match next() % 4 {
            0 | 1 if !held.is_empty() => {
                let old = held.swap_remove(next() as usize % held.len());
                if next() % 2 == 0 {
                    log.push((ChangeOp::Delete, old));
                } else {
                    log.push((ChangeOp::UpdateBefore, old));
                    log.push((ChangeOp::UpdateAfter, row));
                    held.push(row);
                }
            }
            _ => {
                log.push((ChangeOp::Insert, row));
                held.push(row);
            }
        }
    }
    (log, held)
}

const FRAMES: [OverFrame; 6] = [
    OverFrame::Rows { preceding: 0 },
    OverFrame::Rows { preceding: 3 },
    OverFrame::Range { preceding_ms: 0 },
    OverFrame::Range { preceding_ms: 7 },
    OverFrame::Unbounded { peers: false },
    OverFrame::Unbounded { peers: true },
];

#[test]
fn a_changelog_folds_into_the_nested_loop_over_the_rows_held() {
    let mut seed = 11;
    for frame in FRAMES {
        for _ in 0..5 {
            let (log, held) = random_changes(300, &mut seed);
            let mut op = OverChangelogOperator::new(&changelog_spec(frame, 10_000), changelog_output()).unwrap();
            let mut result = BTreeMap::new();
            for chunk in log.chunks(5) {
                if let Some(out) = op.update(&changes(chunk)).unwrap() {
                    fold(&mut result, &out);
                }
            }
            assert_eq!(op.held(), held.len(), "{frame:?}");
            assert_eq!(result, want(&held, frame), "{frame:?}");
        }
    }
}

#[test]
fn a_row_whose_aggregates_stay_emits_nothing_and_a_retraction_of_no_row_is_ignored() {
    let mut op = OverChangelogOperator::new(
        &changelog_spec(OverFrame::Rows { preceding: 1 }, 100),
        changelog_output(),
    )
    .unwrap();
    let first = op
        .update(&changes(&[
            (ChangeOp::Insert, (1, 10, Some(5))),
            (ChangeOp::Insert, (1, 20, Some(7))),
        ]))
        .unwrap()
        .unwrap();
    assert_eq!(first.num_rows(), 2, "two +I");
    // A row after both changes only itself.
    let late = op
        .update(&changes(&[(ChangeOp::Insert, (1, 30, Some(9)))]))
        .unwrap()
        .unwrap();
    assert_eq!(late.num_rows(), 1);
    // A row before both changes the one after it (its frame is 2 rows).
    let early = op
        .update(&changes(&[(ChangeOp::Insert, (1, 5, Some(1)))]))
        .unwrap()
        .unwrap();
    let ops = crate::group_aggregate::change_ops(&early, 0).unwrap();
    assert_eq!(
        ops,
        vec![ChangeOp::Insert, ChangeOp::UpdateBefore, ChangeOp::UpdateAfter]
    );
    let none = op
        .update(&changes(&[
            (ChangeOp::Delete, (1, 99, Some(1))),
            (ChangeOp::Delete, (2, 5, Some(1))),
        ]))
        .unwrap()
        .unwrap();
    assert_eq!(none.num_rows(), 0);
    assert_eq!(op.held(), 4);
}

#[test]
fn the_rows_limit_fails_the_row_past_it() {
    let mut op =
        OverChangelogOperator::new(&changelog_spec(OverFrame::Rows { preceding: 1 }, 3), changelog_output()).unwrap();
    let three: Vec<(ChangeOp, In)> = (0..3).map(|t| (ChangeOp::Insert, (t % 2, t, Some(t)))).collect();
    op.update(&changes(&three)).unwrap();
    // A retraction frees room.
    op.update(&changes(&[
        (ChangeOp::Delete, (0, 0, Some(0))),
        (ChangeOp::Insert, (0, 9, Some(9))),
    ]))
    .unwrap();
    let err = op
        .update(&changes(&[(ChangeOp::Insert, (1, 10, Some(1)))]))
        .unwrap_err();
    assert!(err.to_string().contains("3 rows held"), "{err}");
    assert_eq!(err.sqlstate(), SqlCode::ConfigurationLimitExceeded.sqlstate());
}

#[tokio::test]
async fn restored_state_goes_on_as_if_never_stopped() {
    let mut seed = 5;
    for frame in FRAMES {
        let (log, held) = random_changes(200, &mut seed);
        let (before, after) = log.split_at(log.len() / 2);
        let spec = changelog_spec(frame, 10_000);
        let mut op = OverChangelogOperator::new(&spec, changelog_output()).unwrap();
        let mut result = BTreeMap::new();
        for chunk in before.chunks(9) {
            fold(&mut result, &op.update(&changes(chunk)).unwrap().unwrap());
        }
        let state = op.snapshot(1).await.unwrap();
        let mut restored = OverChangelogOperator::new(&spec, changelog_output()).unwrap();
        restored.restore(Some((1, state))).await.unwrap();
        assert_eq!(restored.held(), op.held());
        for chunk in after.chunks(9) {
            fold(&mut result, &restored.update(&changes(chunk)).unwrap().unwrap());
        }
        assert_eq!(result, want(&held, frame), "{frame:?}");
    }
}

#[test]
fn state_ttl_deletes_an_idle_partition_with_the_rows_it_showed() {
    let spec = OverAggSpec {
        state_ttl_ms: Some(1_000),
        ..changelog_spec(OverFrame::Unbounded { peers: false }, 100)
    };
    let mut op = OverChangelogOperator::new(&spec, changelog_output()).unwrap();
    let mut result = BTreeMap::new();
    let rows = [(1, 1, Some(2)), (1, 2, Some(3)), (2, 1, Some(4))];
    let log: Vec<(ChangeOp, In)> = rows.iter().map(|r| (ChangeOp::Insert, *r)).collect();
    fold(&mut result, &op.update(&changes(&log)).unwrap().unwrap());
    assert_eq!(result.len(), 3);
    assert!(op.expire(sluice_types::now_ms()).unwrap().unwrap().num_rows() == 0);
    fold(
        &mut result,
        &op.expire(sluice_types::now_ms() + 2_000).unwrap().unwrap(),
    );
    assert!(result.is_empty(), "every row shown is deleted: {result:?}");
    assert_eq!(op.held(), 0);
}

/// A random changelog over 300 partitions, in batches of 1–40 changes,
/// checkpointed every third batch: copies restored from the checkpoints,
/// one of them rescaled to two instances, emit what the operator emits
/// ([`copies_go_on_as_the_operator`]), for a ROWS and an unbounded frame;
/// most checkpoints write only the partitions changed since the one
/// before.
#[tokio::test]
async fn partitions_restored_from_incremental_checkpoints_go_on_as_the_operator_never_stopped() {
    use crate::checkpoint::testing::copies_go_on_as_the_operator;
    for frame in [OverFrame::Rows { preceding: 3 }, OverFrame::Unbounded { peers: true }] {
        let mut seed = 0x0e1;
        let (log, _) = random_changes_over(300, 3_000, &mut seed);
        let (mut inputs, mut at) = (Vec::new(), 0);
        while at < log.len() {
            let n = (1 + (seed >> 40) % 40) as usize;
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let end = (at + n).min(log.len());
            inputs.push((0, changes(&log[at..end])));
            at = end;
        }
        let spec = changelog_spec(frame, 1_000_000);
        let counted = copies_go_on_as_the_operator(
            tempfile::tempdir().unwrap().path(),
            &inputs,
            &|_| vec![0],
            &|| OverChangelogOperator::new(&spec, changelog_output()).unwrap(),
            &mut |op, _, batch| op.update(batch).unwrap().into_iter().collect(),
            (&format!("{frame:?}"), true),
        )
        .await;
        assert!(counted.taken >= 45, "{counted:?}");
        assert!(counted.referencing * 2 >= counted.taken, "{counted:?}");
    }
}
