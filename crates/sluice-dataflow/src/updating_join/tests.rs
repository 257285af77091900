use super::*;
use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use sluice_plan::JoinKind;
use std::collections::BTreeMap;

/// A side's row: (key, value); a NULL key matches nothing.
type Row = (Option<i64>, i64);
/// An output row: the left row's columns, then the right's (NULLs: None).
type Joined = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// A side `[k, v, op?]`: keys `[k]`, output `[k, v]`.
fn side(changelog: bool) -> JoinSide {
    let mut fields = vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
    ];
    if changelog {
        fields.push(Field::new("op", DataType::Utf8, false));
    }
    JoinSide {
        schema: Arc::new(Schema::new(fields)),
        keys: vec![0],
        time_column: None,
        output_columns: 2,
        op_column: changelog.then_some(2),
    }
}

fn spec(kind: JoinKind, changelog: [bool; 2], rows_max: usize, ttl: Option<i64>) -> JoinSpec {
    JoinSpec {
        left: side(changelog[0]),
        right: side(changelog[1]),
        kind,
        windowed: false,
        interval_ms: None,
        state_ttl_ms: ttl,
        state_rows_max: rows_max,
        filter: None,
    }
}

fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("op", DataType::Utf8, false),
        Field::new("_l0", DataType::Int64, true),
        Field::new("_l1", DataType::Int64, true),
        Field::new("_r0", DataType::Int64, true),
        Field::new("_r1", DataType::Int64, true),
    ]))
}

fn operator(spec: &JoinSpec) -> UpdatingJoinOperator {
    UpdatingJoinOperator::new(spec, output_schema(), 1).unwrap()
}

fn batch(changelog: bool, rows: &[(ChangeOp, Row)]) -> RecordBatch {
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter(rows.iter().map(|(_, (k, _))| *k))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|(_, (_, v))| *v))),
    ];
    if changelog {
        columns.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(op, _)| op.as_str()),
        )));
    }
    RecordBatch::try_new(side(changelog).schema, columns).unwrap()
}

/// The output rows with their ops.
fn changes(out: Option<RecordBatch>) -> Vec<(String, Joined)> {
    let Some(out) = out else { return Vec::new() };
    let ops = out.column(0).as_string::<i32>();
    let int = |c: usize, i: usize| {
        let a = out.column(c).as_primitive::<Int64Type>();
        (!a.is_null(i)).then(|| a.value(i))
    };
    (0..out.num_rows())
        .map(|i| (ops.value(i).to_string(), (int(1, i), int(2, i), int(3, i), int(4, i))))
        .collect()
}

/// Adds a changelog to a multiset; a count below zero is a retraction of
/// a row never emitted.
fn fold(into: &mut BTreeMap<Joined, i64>, changes: &[(String, Joined)]) {
    for (op, row) in changes {
        let n = into.entry(*row).or_insert(0);
        *n += if op.starts_with('+') { 1 } else { -1 };
        assert!(*n >= 0, "{op} of {row:?}, which was not in the result");
        if *n == 0 {
            into.remove(row);
        }
    }
}

/// The join of two multisets, computed directly.
fn reference(kind: JoinKind, left: &BTreeMap<Row, i64>, right: &BTreeMap<Row, i64>) -> BTreeMap<Joined, i64> {
    let preserved = kind.preserved();
    let mut out = BTreeMap::new();
    let matches = |k: Option<i64>, other: &BTreeMap<Row, i64>| k.is_some() && other.keys().any(|(ok, _)| *ok == k);
    for (&(lk, lv), &ln) in left {
        for (&(rk, rv), &rn) in right {
            if lk.is_some() && lk == rk {
                *out.entry((lk, Some(lv), rk, Some(rv))).or_insert(0) += ln * rn;
            }
        }
        if preserved[0] && !matches(lk, right) {
            *out.entry((lk, Some(lv), None, None)).or_insert(0) += ln;
        }
    }
    if preserved[1] {
        for (&(rk, rv), &rn) in right {
            if !matches(rk, left) {
                *out.entry((None, None, rk, Some(rv))).or_insert(0) += rn;
            }
        }
    }
    out
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random changelogs on both sides (retracting only rows a side holds;
/// an append-only side only inserts), applied in random batches, with a
/// snapshot and restore into a fresh operator half-way: the folded output
/// is the join of what each side holds at the end.
fn random_run(kind: JoinKind, changelog: [bool; 2], seed: u64) {
    let spec = spec(kind, changelog, 1_000_000, None);
    let mut op = operator(&spec);
    let mut rng = Rng(seed);
    let mut held: [BTreeMap<Row, i64>; 2] = Default::default();
    let mut result = BTreeMap::new();
    for step in 0..60 {
        if step == 30 {
            let state = futures::executor::block_on(op.snapshot(1)).unwrap();
            op = operator(&spec);
            futures::executor::block_on(op.restore(Some((1, state)))).unwrap();
        }
        let s = rng.below(2) as usize;
        let mut rows = Vec::new();
        for _ in 0..1 + rng.below(6) {
            let holding: Vec<Row> = held[s].keys().copied().collect();
            if changelog[s] && !holding.is_empty() && rng.below(3) == 0 {
                let row = holding[rng.below(holding.len() as u64) as usize];
                let op = [ChangeOp::Delete, ChangeOp::UpdateBefore][rng.below(2) as usize];
                let n = held[s].get_mut(&row).unwrap();
                *n -= 1;
                if *n == 0 {
                    held[s].remove(&row);
                }
                rows.push((op, row));
            } else {
                let key = match rng.below(6) {
                    0 => None,
                    k => Some(k as i64),
                };
                let row = (key, rng.below(3) as i64);
                *held[s].entry(row).or_insert(0) += 1;
                let op = if changelog[s] {
                    [ChangeOp::Insert, ChangeOp::UpdateAfter][rng.below(2) as usize]
                } else {
                    ChangeOp::Insert
                };
                rows.push((op, row));
            }
        }
        let out = op.update(s, &batch(changelog[s], &rows), 0).unwrap();
        fold(&mut result, &changes(out));
    }
    assert_eq!(
        result,
        reference(kind, &held[0], &held[1]),
        "{kind:?} {changelog:?} seed {seed}"
    );
    let non_null = |m: &BTreeMap<Row, i64>| m.iter().filter(|((k, _), _)| k.is_some()).map(|(_, n)| *n).sum::<i64>();
    assert_eq!(op.rows_held() as i64, non_null(&held[0]) + non_null(&held[1]));
}

#[test]
fn random_changelogs_fold_to_the_join_of_what_each_side_holds() {
    for kind in [JoinKind::Inner, JoinKind::Left, JoinKind::Right, JoinKind::Full] {
        for changelog in [[true, true], [true, false], [false, true], [false, false]] {
            for seed in 1..40 {
                random_run(kind, changelog, seed * 7919);
            }
        }
    }
}

#[test]
fn an_update_of_a_side_retracts_and_re_emits_its_pairs_with_its_ops() {
    let mut op = operator(&spec(JoinKind::Inner, [true, false], 100, None));
    let out = op
        .update(1, &batch(false, &[(ChangeOp::Insert, (Some(1), 100))]), 0)
        .unwrap();
    assert!(changes(out).is_empty(), "nothing on the left yet");
    let out = op
        .update(0, &batch(true, &[(ChangeOp::Insert, (Some(1), 10))]), 0)
        .unwrap();
    assert_eq!(
        changes(out),
        vec![("+I".into(), (Some(1), Some(10), Some(1), Some(100)))]
    );
    let out = op
        .update(
            0,
            &batch(
                true,
                &[
                    (ChangeOp::UpdateBefore, (Some(1), 10)),
                    (ChangeOp::UpdateAfter, (Some(1), 11)),
                ],
            ),
            0,
        )
        .unwrap();
    assert_eq!(
        changes(out),
        vec![
            ("-U".into(), (Some(1), Some(10), Some(1), Some(100))),
            ("+U".into(), (Some(1), Some(11), Some(1), Some(100))),
        ]
    );
}

#[test]
fn a_left_join_replaces_its_padded_row_when_the_first_match_comes_and_restores_it_when_the_last_goes() {
    let mut op = operator(&spec(JoinKind::Left, [false, true], 100, None));
    let out = op
        .update(0, &batch(false, &[(ChangeOp::Insert, (Some(1), 10))]), 0)
        .unwrap();
    assert_eq!(changes(out), vec![("+I".into(), (Some(1), Some(10), None, None))]);
    let out = op
        .update(1, &batch(true, &[(ChangeOp::Insert, (Some(1), 100))]), 0)
        .unwrap();
    assert_eq!(
        changes(out),
        vec![
            ("-D".into(), (Some(1), Some(10), None, None)),
            ("+I".into(), (Some(1), Some(10), Some(1), Some(100))),
        ]
    );
    let out = op
        .update(1, &batch(true, &[(ChangeOp::Delete, (Some(1), 100))]), 0)
        .unwrap();
    assert_eq!(
        changes(out),
        vec![
            ("-D".into(), (Some(1), Some(10), Some(1), Some(100))),
            ("+I".into(), (Some(1), Some(10), None, None)),
        ]
    );
    // A NULL key matches nothing and is not held.
    let out = op
        .update(0, &batch(false, &[(ChangeOp::Insert, (None, 5))]), 0)
        .unwrap();
    assert_eq!(changes(out), vec![("+I".into(), (None, Some(5), None, None))]);
    assert_eq!(op.rows_held(), 1);
}

#[test]
fn the_rows_bound_fails_the_row_past_it_with_the_setting_named() {
    let mut op = operator(&spec(JoinKind::Inner, [false, false], 3, None));
    let three: Vec<(ChangeOp, Row)> = (0..3).map(|v| (ChangeOp::Insert, (Some(1), v))).collect();
    op.update(0, &batch(false, &three), 0).unwrap();
    assert_eq!(op.rows_held(), 3);
    let err = op
        .update(1, &batch(false, &[(ChangeOp::Insert, (Some(1), 9))]), 0)
        .unwrap_err();
    assert!(err.to_string().contains("join_state_rows_max"), "{err}");
    // A retraction frees room (a changelog side).
    let mut op = operator(&spec(JoinKind::Inner, [true, false], 1, None));
    op.update(0, &batch(true, &[(ChangeOp::Insert, (Some(1), 1))]), 0)
        .unwrap();
    op.update(
        0,
        &batch(
            true,
            &[
                (ChangeOp::UpdateBefore, (Some(1), 1)),
                (ChangeOp::UpdateAfter, (Some(1), 2)),
            ],
        ),
        0,
    )
    .unwrap();
    assert_eq!(op.rows_held(), 1);
}

#[test]
fn the_ttl_drops_keys_no_row_reached_without_retracting() {
    let mut op = operator(&spec(JoinKind::Inner, [false, false], 100, Some(1_000)));
    op.update(0, &batch(false, &[(ChangeOp::Insert, (Some(1), 1))]), 0)
        .unwrap();
    op.update(0, &batch(false, &[(ChangeOp::Insert, (Some(2), 2))]), 900)
        .unwrap();
    op.expire(1_500);
    assert_eq!(op.rows_held(), 1, "key 1 expired, key 2 not yet");
    let out = op
        .update(1, &batch(false, &[(ChangeOp::Insert, (Some(1), 7))]), 1_600)
        .unwrap();
    assert!(changes(out).is_empty(), "key 1's left row is gone");
    let out = op
        .update(1, &batch(false, &[(ChangeOp::Insert, (Some(2), 7))]), 1_600)
        .unwrap();
    assert_eq!(changes(out), vec![("+I".into(), (Some(2), Some(2), Some(2), Some(7)))]);
}

/// Random changelogs on both sides of a FULL join (retracting only rows a
/// side holds; 300 keys, a NULL one time in twenty), checkpointed every
/// third batch: copies restored from the checkpoints, one of them
/// rescaled to two instances, emit the rows the operator emits for each
/// batch ([`copies_go_on_as_the_operator`]; a key's pairs come in the
/// order of a hash map, which a restore rebuilds); most checkpoints write
/// only the keys changed since the one before.
#[tokio::test]
async fn joins_restored_from_incremental_checkpoints_go_on_as_the_operator_never_stopped() {
    use crate::checkpoint::testing::copies_go_on_as_the_operator;
    let spec = spec(JoinKind::Full, [true, true], 1_000_000, None);
    let mut rng = Rng(0x901e);
    let mut held: [Vec<Row>; 2] = Default::default();
    let inputs: Vec<(usize, RecordBatch)> = (0..150)
        .map(|_| {
            let s = rng.below(2) as usize;
            let rows: Vec<(ChangeOp, Row)> = (0..1 + rng.below(30))
                .map(|_| {
                    if !held[s].is_empty() && rng.below(4) == 0 {
                        let row = held[s].swap_remove(rng.below(held[s].len() as u64) as usize);
                        ([ChangeOp::Delete, ChangeOp::UpdateBefore][rng.below(2) as usize], row)
                    } else {
                        let key = (rng.below(20) != 0).then(|| rng.below(300) as i64);
                        let row = (key, rng.below(5) as i64);
                        held[s].push(row);
                        ([ChangeOp::Insert, ChangeOp::UpdateAfter][rng.below(2) as usize], row)
                    }
                })
                .collect();
            (s, batch(true, &rows))
        })
        .collect();
    let counted = copies_go_on_as_the_operator(
        tempfile::tempdir().unwrap().path(),
        &inputs,
        &|_| vec![0],
        &|| operator(&spec),
        &mut |op, side, batch| op.update(side, batch, 0).unwrap().into_iter().collect(),
        ("full join", false),
    )
    .await;
    assert!(counted.taken >= 45, "{counted:?}");
    assert!(counted.referencing * 2 >= counted.taken, "{counted:?}");
}
