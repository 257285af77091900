//! The aggregate without a window driven directly: batches in, changelog
//! rows out. Each test folds the changelog into a table and checks it
//! against the aggregates computed here over all the rows, and checks the
//! changelog itself: `+I` only for a new key, `-U` exactly the row the key
//! showed, `+U` right after its `-U`.

use super::GroupAggregateOperator;
use crate::checkpoint::TaskState;
use crate::operator::Operator;
use arrow::array::{Array, Float64Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_plan::{AggregateCall, GroupAggSpec};
use sluice_types::SqlCode;
use std::collections::BTreeMap;
use std::sync::Arc;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("_k0", DataType::Int64, false),
        Field::new("_arg0", DataType::Int64, true),
        // avg's argument as the planner gives it: cast to double.
        Field::new("_arg1", DataType::Float64, true),
    ]))
}

/// `[op, k, count(*), sum(v), min(v), max(v), avg(v), count(DISTINCT v)]`.
fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("op", DataType::Utf8, false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_a0", DataType::Int64, true),
        Field::new("_a1", DataType::Int64, true),
        Field::new("_a2", DataType::Int64, true),
        Field::new("_a3", DataType::Int64, true),
        Field::new("_a4", DataType::Float64, true),
        Field::new("_a5", DataType::Int64, true),
    ]))
}

fn call(function: &str, args: Vec<usize>, distinct: bool) -> AggregateCall {
    AggregateCall {
        function: function.into(),
        args,
        distinct,
    }
}

fn spec(groups_max: usize) -> GroupAggSpec {
    GroupAggSpec {
        input_schema: input_schema(),
        op_column: None,
        key_columns: vec![0],
        aggregates: vec![
            call("count", vec![], false),
            call("sum", vec![1], false),
            call("min", vec![1], false),
            call("max", vec![1], false),
            call("avg", vec![2], false),
            call("count", vec![1], true),
        ],
        groups_max,
        state_ttl_ms: None,
    }
}

fn operator(groups_max: usize) -> GroupAggregateOperator {
    GroupAggregateOperator::new(&spec(groups_max), output_schema()).unwrap()
}

/// Rows of (key, value); `None` is NULL.
fn rows(rows: &[(i64, Option<i64>)]) -> RecordBatch {
    let k = Int64Array::from_iter_values(rows.iter().map(|r| r.0));
    let v = Int64Array::from_iter(rows.iter().map(|r| r.1));
    let f = Float64Array::from_iter(rows.iter().map(|r| r.1.map(|v| v as f64)));
    RecordBatch::try_new(input_schema(), vec![Arc::new(k), Arc::new(v), Arc::new(f)]).unwrap()
}

/// An output row: (count, sum, min, max, avg × 1000 rounded, distinct count).
type Values = (i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>, i64);

fn changelog(batch: &RecordBatch) -> Vec<(String, i64, Values)> {
    let ops = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
    let int = |c: usize| batch.column(c).as_any().downcast_ref::<Int64Array>().unwrap().clone();
    let (k, count, sum, min, max, distinct) = (int(1), int(2), int(3), int(4), int(5), int(7));
    let avg = batch.column(6).as_any().downcast_ref::<Float64Array>().unwrap();
    let opt = |a: &Int64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
    (0..batch.num_rows())
        .map(|i| {
            let avg = (!avg.is_null(i)).then(|| (avg.value(i) * 1000.0).round() as i64);
            let values = (
                count.value(i),
                opt(&sum, i),
                opt(&min, i),
                opt(&max, i),
                avg,
                distinct.value(i),
            );
            (ops.value(i).to_string(), k.value(i), values)
        })
        .collect()
}

/// Applies a changelog to `table`, checking that it is well formed.
fn fold(table: &mut BTreeMap<i64, Values>, changes: &[(String, i64, Values)]) {
    let mut pending_after: Option<i64> = None;
    for (op, k, values) in changes {
        if let Some(expected) = pending_after.take() {
            assert_eq!((op.as_str(), *k), ("+U", expected), "-U must be followed by its +U");
            table.insert(*k, *values);
            continue;
        }
        match op.as_str() {
            "+I" => assert!(table.insert(*k, *values).is_none(), "+I for key {k} already present"),
            "-U" => {
                assert_eq!(table.remove(k).as_ref(), Some(values), "-U of key {k} is not its row");
                pending_after = Some(*k);
            }
            other => panic!("unexpected op {other}"),
        }
    }
    assert!(pending_after.is_none(), "a -U without its +U");
}

/// The aggregates of every key over `all`, computed directly.
fn expected(all: &[(i64, Option<i64>)]) -> BTreeMap<i64, Values> {
    let mut per_key: BTreeMap<i64, Vec<Option<i64>>> = BTreeMap::new();
    for (k, v) in all {
        per_key.entry(*k).or_default().push(*v);
    }
    per_key
        .into_iter()
        .map(|(k, vs)| {
            let present: Vec<i64> = vs.iter().flatten().copied().collect();
            let sum = (!present.is_empty()).then(|| present.iter().sum::<i64>());
            let avg = sum.map(|s| ((s as f64 / present.len() as f64) * 1000.0).round() as i64);
            let distinct = present.iter().collect::<std::collections::BTreeSet<_>>().len() as i64;
            let values = (
                vs.len() as i64,
                sum,
                present.iter().min().copied(),
                present.iter().max().copied(),
                avg,
                distinct,
            );
            (k, values)
        })
        .collect()
}

#[test]
fn the_changelog_folds_into_the_aggregates_of_all_rows() {
    let batches: Vec<Vec<(i64, Option<i64>)>> = vec![
        vec![(1, Some(5)), (2, Some(7)), (1, Some(3))],
        vec![(2, None), (3, Some(-4)), (1, Some(5))],
        vec![(3, Some(10)), (3, None), (2, Some(7)), (4, None)],
        vec![(1, Some(100))],
    ];
    let mut op = operator(100);
    let mut table = BTreeMap::new();
    let mut all = Vec::new();
    for batch in &batches {
        all.extend_from_slice(batch);
        let out = op.update(&rows(batch)).unwrap().unwrap();
        fold(&mut table, &changelog(&out));
        // After every batch the table is the aggregates of the rows so far.
        assert_eq!(table, expected(&all));
    }
}

#[test]
fn a_group_whose_values_do_not_change_emits_nothing() {
    let spec = GroupAggSpec {
        aggregates: vec![call("max", vec![1], false)],
        ..spec(10)
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("op", DataType::Utf8, false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_a0", DataType::Int64, true),
    ]));
    let mut op = GroupAggregateOperator::new(&spec, schema).unwrap();
    assert_eq!(op.update(&rows(&[(1, Some(9))])).unwrap().unwrap().num_rows(), 1);
    // A smaller value leaves max(v) at 9: no -U/+U pair.
    assert_eq!(op.update(&rows(&[(1, Some(2))])).unwrap().unwrap().num_rows(), 0);
    // A larger one updates it.
    let out = op.update(&rows(&[(1, Some(11)), (1, Some(4))])).unwrap().unwrap();
    let ops = out.column(0).as_any().downcast_ref::<StringArray>().unwrap();
    let max = out.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(
        (0..2).map(|i| (ops.value(i), max.value(i))).collect::<Vec<_>>(),
        vec![("-U", 9), ("+U", 11)]
    );
}

#[test]
fn the_group_limit_admits_exactly_its_number_of_groups() {
    let mut op = operator(3);
    op.update(&rows(&[(1, Some(1)), (2, Some(1)), (3, Some(1))])).unwrap();
    // Known keys still update at the limit.
    op.update(&rows(&[(3, Some(2)), (1, Some(2))])).unwrap();
    let e = op.update(&rows(&[(2, Some(1)), (4, Some(1))])).unwrap_err();
    assert_eq!(e.sqlstate(), SqlCode::ConfigurationLimitExceeded.sqlstate(), "{e}");
    assert!(e.to_string().contains("3 groups"), "{e}");
}

#[test]
fn without_keys_there_is_one_group() {
    let spec = GroupAggSpec {
        key_columns: vec![],
        aggregates: vec![call("count", vec![], false), call("sum", vec![1], false)],
        ..spec(10)
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("op", DataType::Utf8, false),
        Field::new("_a0", DataType::Int64, true),
        Field::new("_a1", DataType::Int64, true),
    ]));
    let mut op = GroupAggregateOperator::new(&spec, schema).unwrap();
    let mut seen = Vec::new();
    for batch in [vec![(1, Some(2)), (5, Some(3))], vec![(9, Some(10))]] {
        let out = op.update(&rows(&batch)).unwrap().unwrap();
        let ops = out.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let count = out.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let sum = out.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        seen.extend((0..out.num_rows()).map(|i| (ops.value(i).to_string(), count.value(i), sum.value(i))));
    }
    let expected: Vec<(String, i64, i64)> = vec![("+I".into(), 2, 5), ("-U".into(), 2, 5), ("+U".into(), 3, 15)];
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_restored_operator_retracts_what_the_original_emitted() {
    let first = [(1, Some(5)), (2, Some(7)), (1, Some(3)), (2, Some(7))];
    let mut op = operator(100);
    let mut table = BTreeMap::new();
    fold(&mut table, &changelog(&op.update(&rows(&first)).unwrap().unwrap()));
    // Through the file format, as recovery reads it.
    let mut state = op.snapshot(1).await.unwrap();
    state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
    let state = TaskState::decode(&state.encode().unwrap()).unwrap();
    let mut restored = operator(100);
    restored.restore(Some((1, state))).await.unwrap();
    // Both get the same rows and emit the same changelog, which retracts
    // the rows emitted before the snapshot.
    let second = [(2, Some(1)), (3, None), (1, Some(5))];
    let a = changelog(&op.update(&rows(&second)).unwrap().unwrap());
    let b = changelog(&restored.update(&rows(&second)).unwrap().unwrap());
    assert_eq!(a, b);
    fold(&mut table, &b);
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    assert_eq!(table, expected(&all));
}

/// Over a changelog: `[op, k, v, v as double]`, aggregating count(*),
/// sum(v), avg(v), count(v).
mod over_a_changelog {
    use super::*;

    fn input_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("op", DataType::Utf8, false),
            Field::new("_k0", DataType::Int64, false),
            Field::new("_arg0", DataType::Int64, true),
            Field::new("_arg1", DataType::Float64, true),
        ]))
    }

    fn output_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("op", DataType::Utf8, false),
            Field::new("_k0", DataType::Int64, false),
            Field::new("_a0", DataType::Int64, true),
            Field::new("_a1", DataType::Int64, true),
            Field::new("_a2", DataType::Float64, true),
            Field::new("_a3", DataType::Int64, true),
        ]))
    }

    fn spec() -> GroupAggSpec {
        GroupAggSpec {
            input_schema: input_schema(),
            op_column: Some(0),
            key_columns: vec![1],
            aggregates: vec![
                call("count", vec![], false),
                call("sum", vec![2], false),
                call("avg", vec![3], false),
                call("count", vec![2], false),
            ],
            groups_max: 100,
            state_ttl_ms: None,
        }
    }

    fn operator() -> GroupAggregateOperator {
        GroupAggregateOperator::new(&spec(), output_schema()).unwrap()
    }

    /// Changelog rows of (op, key, value).
    fn changes(rows: &[(&str, i64, Option<i64>)]) -> RecordBatch {
        let op = StringArray::from_iter_values(rows.iter().map(|r| r.0));
        let k = Int64Array::from_iter_values(rows.iter().map(|r| r.1));
        let v = Int64Array::from_iter(rows.iter().map(|r| r.2));
        let f = Float64Array::from_iter(rows.iter().map(|r| r.2.map(|v| v as f64)));
        RecordBatch::try_new(
            input_schema(),
            vec![Arc::new(op), Arc::new(k), Arc::new(v), Arc::new(f)],
        )
        .unwrap()
    }

    /// (count(*), sum, avg × 1000 rounded, count(v)).
    type Row = (i64, Option<i64>, Option<i64>, i64);

    fn output(batch: &RecordBatch) -> Vec<(String, i64, Row)> {
        let ops = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let int = |c: usize| batch.column(c).as_any().downcast_ref::<Int64Array>().unwrap().clone();
        let (k, count, sum, present) = (int(1), int(2), int(3), int(5));
        let avg = batch.column(4).as_any().downcast_ref::<Float64Array>().unwrap();
        (0..batch.num_rows())
            .map(|i| {
                let row = (
                    count.value(i),
                    (!sum.is_null(i)).then(|| sum.value(i)),
                    (!avg.is_null(i)).then(|| (avg.value(i) * 1000.0).round() as i64),
                    present.value(i),
                );
                (ops.value(i).to_string(), k.value(i), row)
            })
            .collect()
    }

    /// Folds an output changelog, checking it as `fold` does, `-D` too.
    fn apply(table: &mut BTreeMap<i64, Row>, out: &[(String, i64, Row)]) {
        let mut after: Option<i64> = None;
        for (op, k, row) in out {
            if let Some(expected) = after.take() {
                assert_eq!((op.as_str(), *k), ("+U", expected));
                table.insert(*k, *row);
                continue;
            }
            match op.as_str() {
                "+I" => assert!(table.insert(*k, *row).is_none(), "+I of shown key {k}"),
                "-U" | "-D" => {
                    assert_eq!(
                        table.remove(k).as_ref(),
                        Some(row),
                        "{op} of key {k} retracts another row"
                    );
                    if op == "-U" {
                        after = Some(*k);
                    }
                }
                other => panic!("op {other}"),
            }
        }
        assert!(after.is_none());
    }

    /// The aggregates of the rows an input changelog leaves, by key.
    fn expected(input: &[(&str, i64, Option<i64>)]) -> BTreeMap<i64, Row> {
        let mut live: BTreeMap<i64, Vec<Option<i64>>> = BTreeMap::new();
        for (op, k, v) in input {
            let rows = live.entry(*k).or_default();
            if op.starts_with('-') {
                let at = rows
                    .iter()
                    .position(|x| x == v)
                    .expect("a retraction of a row added before");
                rows.remove(at);
            } else {
                rows.push(*v);
            }
        }
        live.into_iter()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(k, rows)| {
                let present: Vec<i64> = rows.iter().flatten().copied().collect();
                let sum = (!present.is_empty()).then(|| present.iter().sum::<i64>());
                let avg = sum.map(|s| ((s as f64 / present.len() as f64) * 1000.0).round() as i64);
                (k, (rows.len() as i64, sum, avg, present.len() as i64))
            })
            .collect()
    }

    #[test]
    fn retractions_fold_into_the_aggregates_of_the_rows_left() {
        let batches: Vec<Vec<(&str, i64, Option<i64>)>> = vec![
            vec![("+I", 1, Some(10)), ("+I", 2, Some(4)), ("+I", 1, Some(6))],
            // An update of key 1's 10 to 20, and key 2's only row deleted.
            vec![("-U", 1, Some(10)), ("+U", 1, Some(20)), ("-D", 2, Some(4))],
            // Key 2 comes back; key 3 gets a NULL; key 1 retracts a row
            // before adding one in the same batch.
            vec![
                ("+I", 2, Some(7)),
                ("+I", 3, None),
                ("-U", 1, Some(6)),
                ("+U", 1, Some(6)),
            ],
            // Key 3's NULL row is retracted (-D), key 1 loses 20.
            vec![("-D", 3, None), ("-D", 1, Some(20))],
        ];
        let mut op = operator();
        let mut table = BTreeMap::new();
        let mut all = Vec::new();
        let mut deletes = 0;
        for batch in &batches {
            all.extend_from_slice(batch);
            let out = output(&op.update(&changes(batch)).unwrap().unwrap());
            deletes += out.iter().filter(|(o, _, _)| o == "-D").count();
            apply(&mut table, &out);
            assert_eq!(table, expected(&all), "after {batch:?}");
        }
        // Key 2 and key 3 were each left without rows once: two -D rows,
        // and their state is gone (key 2 was recreated, key 3 is not).
        assert_eq!(deletes, 2);
        assert_eq!(op.index.len(), 2, "groups kept: keys 1 and 2");
    }

    #[test]
    fn an_aggregate_that_cannot_retract_is_refused_over_a_changelog() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("op", DataType::Utf8, false),
            Field::new("_k0", DataType::Int64, false),
            Field::new("_a0", DataType::Float64, true),
        ]));
        for (function, distinct) in [("sum", true), ("stddev", false), ("median", false)] {
            let spec = GroupAggSpec {
                aggregates: vec![call(function, vec![3], distinct)],
                ..spec()
            };
            let e = GroupAggregateOperator::new(&spec, schema.clone())
                .err()
                .expect("refused");
            assert_eq!(e.sqlstate(), SqlCode::FeatureNotSupported.sqlstate(), "{e}");
            assert!(e.to_string().contains("over an updating result"), "{e}");
        }
    }

    /// min, max and count(DISTINCT) over a changelog keep every value with
    /// its copies: retracting the current max falls back to the next.
    #[test]
    fn min_max_and_distinct_counts_take_values_back() {
        let spec = GroupAggSpec {
            aggregates: vec![
                call("min", vec![2], false),
                call("max", vec![2], false),
                call("count", vec![2], true),
            ],
            ..spec()
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("op", DataType::Utf8, false),
            Field::new("_k0", DataType::Int64, false),
            Field::new("_a0", DataType::Int64, true),
            Field::new("_a1", DataType::Int64, true),
            Field::new("_a2", DataType::Int64, true),
        ]));
        let mut op = GroupAggregateOperator::new(&spec, schema).unwrap();
        let batches: Vec<Vec<(&str, i64, Option<i64>)>> = vec![
            vec![
                ("+I", 1, Some(4)),
                ("+I", 1, Some(9)),
                ("+I", 1, Some(9)),
                ("+I", 2, None),
            ],
            // One copy of the max retracted: still 9; then the other: 4.
            vec![("-U", 1, Some(9)), ("+U", 1, Some(2))],
            vec![("-D", 1, Some(9)), ("+I", 2, Some(6))],
        ];
        let mut table: BTreeMap<i64, (Option<i64>, Option<i64>, i64)> = BTreeMap::new();
        let mut live: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut rows: BTreeMap<i64, i64> = BTreeMap::new();
        for batch in &batches {
            for (o, k, v) in batch {
                let delta = if o.starts_with('-') { -1 } else { 1 };
                *rows.entry(*k).or_default() += delta;
                let Some(v) = v else { continue };
                let values = live.entry(*k).or_default();
                if delta > 0 {
                    values.push(*v);
                } else {
                    values.remove(values.iter().position(|x| x == v).unwrap());
                }
            }
            let out = op.update(&changes(batch)).unwrap().unwrap();
            let ops = out.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let int = |c: usize| out.column(c).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            let (k, min, max, distinct) = (int(1), int(2), int(3), int(4));
            let opt = |a: &Int64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
            for i in 0..out.num_rows() {
                let row = (opt(&min, i), opt(&max, i), distinct.value(i));
                match ops.value(i) {
                    "+I" | "+U" => assert!(table.insert(k.value(i), row).is_none()),
                    _ => assert_eq!(table.remove(&k.value(i)), Some(row)),
                }
            }
            let want: BTreeMap<i64, (Option<i64>, Option<i64>, i64)> = rows
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, _)| {
                    let values = live.get(k).cloned().unwrap_or_default();
                    let distinct = values.iter().collect::<std::collections::BTreeSet<_>>().len() as i64;
                    (
                        *k,
                        (values.iter().min().copied(), values.iter().max().copied(), distinct),
                    )
                })
                .collect();
            assert_eq!(table, want, "after {batch:?}");
        }
        assert_eq!(table[&1], (Some(2), Some(4), 2));
    }

    #[tokio::test]
    async fn a_restored_operator_knows_each_groups_rows() {
        let first = [("+I", 1, Some(5)), ("+I", 1, Some(7)), ("+I", 2, Some(1))];
        let mut op = operator();
        let mut table = BTreeMap::new();
        apply(&mut table, &output(&op.update(&changes(&first)).unwrap().unwrap()));
        let mut state = op.snapshot(1).await.unwrap();
        state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
        let state = TaskState::decode(&state.encode().unwrap()).unwrap();
        let mut restored = operator();
        restored.restore(Some((1, state))).await.unwrap();
        // Retracting key 1's two rows deletes it in both; key 2 updates.
        let second = [("-D", 1, Some(5)), ("-D", 1, Some(7)), ("+I", 2, Some(3))];
        let a = output(&op.update(&changes(&second)).unwrap().unwrap());
        let b = output(&restored.update(&changes(&second)).unwrap().unwrap());
        assert_eq!(a, b);
        assert!(b.iter().any(|(o, k, _)| o == "-D" && *k == 1), "{b:?}");
        apply(&mut table, &b);
        let all: Vec<_> = first.iter().chain(&second).copied().collect();
        assert_eq!(table, expected(&all));
    }
}

/// `state_ttl`: a group no row reached for the TTL is deleted (`-D` of the
/// row it showed) and its state freed; a later row starts it anew (`+I`).
#[test]
fn idle_groups_are_deleted_after_the_state_ttl() {
    let spec = GroupAggSpec {
        state_ttl_ms: Some(60_000),
        ..spec(10)
    };
    let mut op = GroupAggregateOperator::new(&spec, output_schema()).unwrap();
    let mut table = BTreeMap::new();
    fold(
        &mut table,
        &changelog(&op.update(&rows(&[(1, Some(5)), (2, Some(7))])).unwrap().unwrap()),
    );
    let now = sluice_types::now_ms();
    assert_eq!(op.expire(now + 1_000).unwrap().unwrap().num_rows(), 0, "not idle yet");
    let expired = changelog(&op.expire(now + 120_000).unwrap().unwrap());
    assert_eq!(expired.len(), 2);
    for (o, k, values) in &expired {
        assert_eq!(o, "-D");
        assert_eq!(table.remove(k).as_ref(), Some(values), "-D of {k} is its row");
    }
    assert!(op.index.is_empty(), "state freed");
    let again = changelog(&op.update(&rows(&[(1, Some(3))])).unwrap().unwrap());
    assert_eq!(
        (again[0].0.as_str(), again[0].1, again[0].2.0),
        ("+I", 1, 1),
        "counted anew"
    );
}

/// The columnar form ([`super::columnar`]) against the generic accumulators:
/// over random batches of hot and cold keys with NULLs, append-only and as
/// a changelog that retracts rows it added, both emit the same changelog
/// batch for batch; a snapshot of either restores into the other, which
/// then goes on emitting what the original does.
mod columnar_equals_generic {
    use super::*;

    struct Random(u64);

    impl Random {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// `[op, k, v, v as double, v as text, v when positive, v × 3 mod 17]`;
    /// `op` is read only with `changelog`. The last two are what distinct
    /// counts share maps over: `v` under a FILTER, and another value.
    fn input_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("op", DataType::Utf8, false),
            Field::new("_k0", DataType::Int64, false),
            Field::new("_arg0", DataType::Int64, true),
            Field::new("_arg1", DataType::Float64, true),
            Field::new("_arg2", DataType::Utf8, true),
            Field::new("_arg3", DataType::Int64, true),
            Field::new("_arg4", DataType::Int64, true),
        ]))
    }

    /// The aggregates and their output types: append-only, every columnar
    /// one; over a changelog, those that retract without a multiset.
    fn calls(changelog: bool) -> Vec<(AggregateCall, DataType)> {
        let (int, dbl) = (DataType::Int64, DataType::Float64);
        let mut calls = vec![
            (call("count", vec![], false), int.clone()),
            (call("count", vec![2], false), int.clone()),
            (call("sum", vec![2], false), int.clone()),
            (call("avg", vec![3], false), dbl.clone()),
            (call("sum", vec![3], false), dbl.clone()),
        ];
        if !changelog {
            calls.extend([
                (call("min", vec![2], false), int.clone()),
                (call("max", vec![2], false), int.clone()),
                (call("min", vec![3], false), dbl.clone()),
                (call("max", vec![3], false), dbl),
                (call("count", vec![2], true), int),
                (call("min", vec![4], false), DataType::Utf8),
                (call("max", vec![4], false), DataType::Utf8),
                (call("count", vec![5], true), DataType::Int64),
                (call("count", vec![6], true), DataType::Int64),
            ]);
        }
        calls
    }

    /// Grouped by `k`, or (`keyed` false) one group of all rows.
    fn spec(changelog: bool, keyed: bool) -> (GroupAggSpec, SchemaRef) {
        let calls = calls(changelog);
        let mut fields = vec![Field::new("op", DataType::Utf8, false)];
        if keyed {
            fields.push(Field::new("_k0", DataType::Int64, false));
        }
        for (i, (_, t)) in calls.iter().enumerate() {
            fields.push(Field::new(format!("_a{i}"), t.clone(), true));
        }
        let spec = GroupAggSpec {
            input_schema: input_schema(),
            op_column: changelog.then_some(0),
            key_columns: if keyed { vec![1] } else { vec![] },
            aggregates: calls.into_iter().map(|(c, _)| c).collect(),
            groups_max: 10_000,
            state_ttl_ms: None,
        };
        (spec, Arc::new(Schema::new(fields)))
    }

    /// Random batches: 1–40 rows over 30 keys (key 0 in a third of the
    /// rows), values -50..50 (NULL one time in seven), doubles holding the
    /// same integers (so sums are exact in any order). With `changelog`, a
    /// row is a retraction of a row added before (`-U`/`-D`) one time in
    /// three, else an addition (`+I`/`+U`).
    fn batches(seed: u64, changelog: bool) -> Vec<RecordBatch> {
        let mut r = Random(seed);
        let mut added: Vec<(i64, Option<i64>)> = Vec::new();
        (0..60)
            .map(|_| {
                let len = 1 + r.below(40) as usize;
                let mut rows: Vec<(&str, i64, Option<i64>)> = Vec::new();
                for _ in 0..len {
                    if changelog && !added.is_empty() && r.below(3) == 0 {
                        let (k, v) = added.swap_remove(r.below(added.len() as u64) as usize);
                        rows.push((["-U", "-D"][r.below(2) as usize], k, v));
                        continue;
                    }
                    let k = if r.below(3) == 0 { 0 } else { r.below(30) as i64 };
                    let v = (r.below(7) != 0).then(|| r.below(100) as i64 - 50);
                    added.push((k, v));
                    rows.push((["+I", "+U"][r.below(2) as usize], k, v));
                }
                let op = StringArray::from_iter_values(rows.iter().map(|r| r.0));
                let k = Int64Array::from_iter_values(rows.iter().map(|r| r.1));
                let v = Int64Array::from_iter(rows.iter().map(|r| r.2));
                let f = Float64Array::from_iter(rows.iter().map(|r| r.2.map(|v| v as f64)));
                // Text orders otherwise than numbers ("v-7" < "v-50" < "v3").
                let t = StringArray::from_iter(rows.iter().map(|r| r.2.map(|v| format!("v{v}"))));
                let positive = Int64Array::from_iter(rows.iter().map(|r| r.2.filter(|v| *v > 0)));
                let other = Int64Array::from_iter(rows.iter().map(|r| r.2.map(|v| (v * 3).rem_euclid(17))));
                RecordBatch::try_new(
                    input_schema(),
                    vec![
                        Arc::new(op),
                        Arc::new(k),
                        Arc::new(v),
                        Arc::new(f),
                        Arc::new(t),
                        Arc::new(positive),
                        Arc::new(other),
                    ],
                )
                .unwrap()
            })
            .collect()
    }

    /// `batch` as text, each list's values sorted.
    fn sorted_lists(batch: &RecordBatch) -> Vec<Vec<String>> {
        use arrow::array::AsArray;
        batch
            .columns()
            .iter()
            .map(|c| {
                (0..c.len())
                    .map(|r| match c.as_list_opt::<i32>() {
                        Some(l) => {
                            let mut v: Vec<i64> = l
                                .value(r)
                                .as_primitive::<arrow::datatypes::Int64Type>()
                                .values()
                                .to_vec();
                            v.sort();
                            format!("{v:?}")
                        }
                        None => arrow::util::display::array_value_to_string(c, r).unwrap(),
                    })
                    .collect()
            })
            .collect()
    }

    async fn restored(
        from: &mut GroupAggregateOperator,
        into: fn(&GroupAggSpec, SchemaRef) -> sluice_types::Result<GroupAggregateOperator>,
        changelog: bool,
        keyed: bool,
    ) -> GroupAggregateOperator {
        let mut state = from.snapshot(1).await.unwrap();
        state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
        let state = TaskState::decode(&state.encode().unwrap()).unwrap();
        let (spec, out) = spec(changelog, keyed);
        let mut op = into(&spec, out).unwrap();
        op.restore(Some((1, state))).await.unwrap();
        op
    }

    #[tokio::test]
    async fn the_columnar_form_emits_and_restores_as_the_accumulators_do() {
        for (changelog, keyed) in [(false, true), (true, true), (false, false), (true, false)] {
            for seed in 0..25 {
                let (spec, out) = spec(changelog, keyed);
                let mut columnar = GroupAggregateOperator::new(&spec, out.clone()).unwrap();
                let mut generic = GroupAggregateOperator::generic(&spec, out).unwrap();
                assert!(columnar.is_columnar() && !generic.is_columnar());
                let mut emitted = 0;
                for (i, batch) in batches(seed, changelog).iter().enumerate() {
                    if i == 20 {
                        // Each restored from the other's snapshot.
                        let c = restored(&mut generic, GroupAggregateOperator::new, changelog, keyed).await;
                        let g = restored(&mut columnar, GroupAggregateOperator::generic, changelog, keyed).await;
                        assert!(c.is_columnar() && !g.is_columnar());
                        (columnar, generic) = (c, g);
                    }
                    let a = columnar.update(batch).unwrap().unwrap();
                    let b = generic.update(batch).unwrap().unwrap();
                    assert_eq!(a, b, "seed {seed}, changelog {changelog}, keyed {keyed}, batch {i}");
                    emitted += a.num_rows();
                }
                assert!(emitted > 50, "seed {seed}: {emitted} changelog rows");
                if !changelog {
                    // Append-only, the snapshots are the same columns too
                    // (a distinct count's values in any order).
                    let a = columnar
                        .snapshot_batch(&columnar.live_groups(), false)
                        .unwrap()
                        .unwrap();
                    let b = generic.snapshot_batch(&generic.live_groups(), false).unwrap().unwrap();
                    assert_eq!(sorted_lists(&a), sorted_lists(&b), "seed {seed}");
                }
            }
        }
    }

    /// Batches over 3 000 keys (one row in four on keys 0–4), 1–60 rows
    /// each; as a changelog, one row in three retracts a row added before,
    /// so groups change, empty and go.
    fn wide_batches(seed: u64, n: usize) -> Vec<RecordBatch> {
        let mut r = Random(seed);
        let mut added: Vec<(i64, Option<i64>)> = Vec::new();
        (0..n)
            .map(|_| {
                let len = 1 + r.below(60) as usize;
                let mut rows: Vec<(&str, i64, Option<i64>)> = Vec::new();
                for _ in 0..len {
                    if !added.is_empty() && r.below(3) == 0 {
                        let (k, v) = added.swap_remove(r.below(added.len() as u64) as usize);
                        rows.push(("-D", k, v));
                        continue;
                    }
                    let k = if r.below(4) == 0 { r.below(5) } else { r.below(3000) } as i64;
                    let v = (r.below(7) != 0).then(|| r.below(100) as i64 - 50);
                    added.push((k, v));
                    rows.push(("+I", k, v));
                }
                changelog_batch(&rows)
            })
            .collect()
    }

    /// `[op, k, v, …]` rows as a batch of [`input_schema`] (the text and
    /// derived columns from `v`).
    fn changelog_batch(rows: &[(&str, i64, Option<i64>)]) -> RecordBatch {
        let v = |f: &dyn Fn(i64) -> Option<i64>| Int64Array::from_iter(rows.iter().map(|r| r.2.and_then(f)));
        RecordBatch::try_new(
            input_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(v(&Some)),
                Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2.map(|v| v as f64)))),
                Arc::new(StringArray::from_iter(
                    rows.iter().map(|r| r.2.map(|v| format!("v{v}"))),
                )),
                Arc::new(v(&|v| (v > 0).then_some(v))),
                Arc::new(v(&|v| Some((v * 3).rem_euclid(17)))),
            ],
        )
        .unwrap()
    }

    /// Checkpoints every third batch through the real state writer,
    /// manifest, pruning and reader (one checkpoint kept, and what it
    /// references); a copy restored from each — in either form, and two
    /// instances of a rescale from one — goes on beside the operator and
    /// must emit its changelog batch for batch. Most checkpoints reference
    /// earlier ones and are smaller than a full snapshot of the same groups.
    #[tokio::test]
    async fn groups_restored_from_incremental_checkpoints_go_on_as_the_operator_never_stopped() {
        use crate::checkpoint::testing::{CheckpointLoop, Incrementality, restored_copies};
        use crate::checkpoint::{LocalStateStore, StateStore};
        use sluice_plan::{KEY_GROUPS_DEFAULT, KeyGroupRange};
        for (changelog, form) in [(false, 0), (true, 0), (true, 1)] {
            let (spec, out) = spec(changelog, true);
            let build: fn(&GroupAggSpec, SchemaRef) -> sluice_types::Result<GroupAggregateOperator> = match form {
                0 => GroupAggregateOperator::new,
                _ => GroupAggregateOperator::generic,
            };
            let mut op = build(&spec, out.clone()).unwrap();
            let tmp = tempfile::tempdir().unwrap();
            let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
            let mut checkpoints = CheckpointLoop::new(store, 1);
            let mut copies: Vec<Vec<(KeyGroupRange, GroupAggregateOperator)>> = Vec::new();
            let mut counted = Incrementality::default();
            let mut data = wide_batches(7, 150);
            if !changelog {
                // Append-only: the additions alone.
                data = data
                    .iter()
                    .map(|b| {
                        let ops = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                        let keep: arrow::array::BooleanArray = ops.iter().map(|o| Some(o == Some("+I"))).collect();
                        arrow::compute::filter_record_batch(b, &keep).unwrap()
                    })
                    .filter(|b| b.num_rows() > 0)
                    .collect();
            }
            for (i, batch) in data.iter().enumerate() {
                if i % 3 == 2 {
                    let id = checkpoints.start();
                    let state = op.snapshot(id).await.unwrap();
                    let (entry, restored) = checkpoints.complete_and_read(id, state).await.unwrap();
                    let rescales: &[u32] = if i == 74 { &[1, 2] } else { &[1] };
                    // A single copy is restored into the other form: the
                    // same groups.
                    let copy = |n: u32| {
                        let form = match (n, form) {
                            (1, 0) => GroupAggregateOperator::generic,
                            (1, _) => GroupAggregateOperator::new,
                            _ => build,
                        };
                        form(&spec, out.clone()).unwrap()
                    };
                    let more = restored_copies(id, &entry, &restored, rescales, copy, (&mut counted, 10)).await;
                    copies.extend(more);
                }
                let want = rows_of(&op.update(batch).unwrap().unwrap());
                for (c, copy) in copies.iter_mut().enumerate() {
                    let mut got = Vec::new();
                    for (range, o) in copy.iter_mut() {
                        let labels = crate::checkpoint::keyed::label(batch, &[1], KEY_GROUPS_DEFAULT).unwrap();
                        let mine: arrow::array::BooleanArray = labels
                            .values()
                            .iter()
                            .map(|g| Some(range.contains(u32::from(*g))))
                            .collect();
                        let rows = arrow::compute::filter_record_batch(batch, &mine).unwrap();
                        if let Some(b) = o.update(&rows).unwrap() {
                            got.extend(rows_of(&b));
                        }
                    }
                    let mut want = want.clone();
                    if copy.len() > 1 {
                        // Each instance emits its own groups' rows.
                        want.sort();
                        got.sort();
                    }
                    assert_eq!(got, want, "changelog {changelog}, form {form}, copy {c}, batch {i}");
                }
            }
            assert!(counted.taken >= 45, "{counted:?}");
            assert!(counted.referencing * 2 >= counted.taken, "{counted:?}");
            checkpoints.finish().await;
        }
    }

    /// A batch's rows as text, each list's values sorted.
    fn rows_of(batch: &RecordBatch) -> Vec<String> {
        let columns = sorted_lists(batch);
        (0..batch.num_rows())
            .map(|r| columns.iter().map(|c| c[r].as_str()).collect::<Vec<_>>().join("|"))
            .collect()
    }

    /// Groups deleted after a checkpoint leave rows behind in the batches
    /// it wrote; once those pass twice the live groups (and the slack), the
    /// next checkpoint writes every live group again and references none —
    /// and restores to the same groups.
    #[tokio::test]
    async fn a_checkpoint_over_mostly_dead_rows_writes_every_group_again() {
        use crate::checkpoint::testing::CheckpointLoop;
        use crate::checkpoint::{LocalStateStore, StateStore};
        let (spec, out) = spec(true, true);
        let mut op = GroupAggregateOperator::new(&spec, out.clone()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
        let mut checkpoints = CheckpointLoop::new(store, 1);
        let added: Vec<(&str, i64, Option<i64>)> = (0..2000).map(|k| ("+I", k, Some(k))).collect();
        op.update(&changelog_batch(&added)).unwrap();
        let mut snapshot = async |op: &mut GroupAggregateOperator| {
            let id = checkpoints.start();
            let state = op.snapshot(id).await.unwrap();
            let m = checkpoints.complete(id, state).await.unwrap();
            (m.tasks[0].references.len(), checkpoints.read(id).await.unwrap())
        };
        assert_eq!(snapshot(&mut op).await.0, 0, "the first writes all");
        // 1 500 groups go: 2 000 rows held for 500 live, within 2 × 500 + 1 024.
        let gone: Vec<_> = added[..1500].iter().map(|(_, k, v)| ("-D", *k, *v)).collect();
        op.update(&changelog_batch(&gone)).unwrap();
        let (refs, _) = snapshot(&mut op).await;
        assert_eq!(refs, 1, "the first checkpoint's batch is still referenced");
        // 100 more go: 2 000 rows held for 400 live, above 1 824.
        let gone: Vec<_> = added[1500..1600].iter().map(|(_, k, v)| ("-D", *k, *v)).collect();
        op.update(&changelog_batch(&gone)).unwrap();
        let (refs, state) = snapshot(&mut op).await;
        assert_eq!(refs, 0, "every live group is written again");
        let mut restored = GroupAggregateOperator::new(&spec, out).unwrap();
        restored.restore(Some((3, state))).await.unwrap();
        let live = restored.live_groups();
        assert_eq!(live.len(), 400);
        let batch = restored.snapshot_batch(&live, false).unwrap().unwrap();
        let keys = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let mut keys: Vec<i64> = keys.values().to_vec();
        keys.sort();
        assert_eq!(keys, (1600..2000).collect::<Vec<_>>());
        checkpoints.finish().await;
    }
}
