//! The OVER aggregate driven directly; expected rows come from a nested
//! loop over each partition's rows sorted by time.

use super::*;
use arrow::array::{AsArray, Float64Array, Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{Float64Type, Int64Type, TimeUnit};
use sluice_plan::OverAggregateCall;

/// Input: (k, ts, v); output: k, ts, v, count(*), sum(v), avg(v), min(v), max(v).
pub(super) fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        Field::new("v", DataType::Int64, true),
    ]))
}

pub(super) fn output_schema() -> SchemaRef {
    let mut fields: Vec<Field> = input_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("n", DataType::Int64, true));
    fields.push(Field::new("s", DataType::Int64, true));
    fields.push(Field::new("a", DataType::Float64, true));
    fields.push(Field::new("lo", DataType::Int64, true));
    fields.push(Field::new("hi", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

pub(super) fn spec(frame: OverFrame, rows_max: usize) -> OverAggSpec {
    let call = |f: &str, arg: Option<usize>| OverAggregateCall {
        function: f.into(),
        arg,
    };
    OverAggSpec {
        input_schema: input_schema(),
        output_columns: 3,
        partition_columns: vec![0],
        time_column: 1,
        frame,
        aggregates: vec![
            call("count", None),
            call("sum", Some(2)),
            call("avg", Some(2)),
            call("min", Some(2)),
            call("max", Some(2)),
        ],
        rows_max,
        state_ttl_ms: None,
        op_column: None,
    }
}

fn batch(rows: &[(i64, i64, Option<i64>)]) -> RecordBatch {
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// An input row: (k, ts, v).
pub(super) type In = (i64, i64, Option<i64>);

/// (k, ts, v, count, sum, avg × 1000 rounded, min, max).
pub(super) type Out = (
    i64,
    i64,
    Option<i64>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

pub(super) fn rows_of(b: &RecordBatch) -> Vec<Out> {
    let i = |c: usize| b.column(c).as_primitive::<Int64Type>().clone();
    let (k, v, n, s, lo, hi) = (i(0), i(2), i(3), i(4), i(6), i(7));
    let ts = b.column(1).as_primitive::<arrow::datatypes::TimestampMillisecondType>();
    let a: &Float64Array = b.column(5).as_primitive::<Float64Type>();
    let opt = |a: &Int64Array, r: usize| (!a.is_null(r)).then(|| a.value(r));
    (0..b.num_rows())
        .map(|r| {
            (
                k.value(r),
                ts.value(r),
                opt(&v, r),
                n.value(r),
                opt(&s, r),
                (!a.is_null(r)).then(|| (a.value(r) * 1000.0).round() as i64),
                opt(&lo, r),
                opt(&hi, r),
            )
        })
        .collect()
}

use arrow::array::Array;

/// The expected output of all `rows` (arrival order), by nested loops.
pub(super) fn expected(rows: &[(i64, i64, Option<i64>)], frame: OverFrame) -> Vec<Out> {
    let mut out = Vec::new();
    let mut keys: Vec<i64> = rows.iter().map(|r| r.0).collect();
    keys.sort_unstable();
    keys.dedup();
    for k in keys {
        let mut part: Vec<(usize, &In)> = rows.iter().enumerate().filter(|(_, r)| r.0 == k).collect();
        part.sort_by_key(|(i, r)| (r.1, *i));
        for (at, (_, row)) in part.iter().enumerate() {
            let in_frame: Vec<&In> = match frame {
                OverFrame::Rows { preceding } => part[at.saturating_sub(preceding as usize)..=at]
                    .iter()
                    .map(|(_, r)| *r)
                    .collect(),
                OverFrame::Range { preceding_ms } => part
                    .iter()
                    .map(|(_, r)| *r)
                    .filter(|r| r.1 <= row.1 && r.1 >= row.1 - preceding_ms)
                    .collect(),
                OverFrame::Unbounded { peers: false } => part[..=at].iter().map(|(_, r)| *r).collect(),
                OverFrame::Unbounded { peers: true } => part.iter().map(|(_, r)| *r).filter(|r| r.1 <= row.1).collect(),
            };
            let values: Vec<i64> = in_frame.iter().filter_map(|r| r.2).collect();
            let sum = (!values.is_empty()).then(|| values.iter().sum::<i64>());
            let avg = (!values.is_empty())
                .then(|| (values.iter().sum::<i64>() as f64 / values.len() as f64 * 1000.0).round() as i64);
            out.push((
                k,
                row.1,
                row.2,
                in_frame.len() as i64,
                sum,
                avg,
                values.iter().min().copied(),
                values.iter().max().copied(),
            ));
        }
    }
    out.sort_unstable();
    out
}

/// Pseudo-random rows: keys 0..3, times 0..400 with ties, some NULL values.
fn random_rows(n: usize, seed: &mut u64) -> Vec<(i64, i64, Option<i64>)> {
    let mut next = || {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*seed >> 33) as i64
    };
    (0..n)
        .map(|_| {
            let v = next() % 100;
            (next() % 3, next() % 400, (v % 7 != 0).then_some(v))
        })
        .collect()
}

/// Feeds `rows` in batches of 7 with no watermark, then the end of time;
/// returns the output rows, sorted.
fn run(op: &mut OverAggregateOperator, rows: &[(i64, i64, Option<i64>)]) -> Vec<Out> {
    for chunk in rows.chunks(7) {
        assert_eq!(op.hold(&batch(chunk), i64::MIN, None, None).unwrap(), 0);
    }
    let mut out = op.release(i64::MAX).unwrap().map(|b| rows_of(&b)).unwrap_or_default();
    out.sort_unstable();
    out
}

#[test]
fn rows_and_range_frames_match_a_nested_loop() {
    let mut seed = 7;
    for frame in [
        OverFrame::Rows { preceding: 0 },
        OverFrame::Rows { preceding: 3 },
        OverFrame::Range { preceding_ms: 0 },
        OverFrame::Range { preceding_ms: 50 },
        OverFrame::Unbounded { peers: false },
        OverFrame::Unbounded { peers: true },
    ] {
        let rows = random_rows(200, &mut seed);
        let mut op = OverAggregateOperator::new(&spec(frame, 10_000), output_schema()).unwrap();
        let got = run(&mut op, &rows);
        assert_eq!(got.len(), rows.len(), "{frame:?}: one output row per input row");
        // (Equal times in a ROWS frame are taken in arrival order, as the
        // nested loop takes them.)
        assert_eq!(got, expected(&rows, frame), "{frame:?}");
    }
}

#[test]
fn rows_wait_for_the_watermark_and_late_rows_are_dropped() {
    let mut op = OverAggregateOperator::new(&spec(OverFrame::Rows { preceding: 1 }, 100), output_schema()).unwrap();
    op.hold(
        &batch(&[(1, 10, Some(1)), (1, 30, Some(3)), (1, 20, Some(2))]),
        0,
        None,
        None,
    )
    .unwrap();
    // Watermark 25: rows at 10 and 20 are complete, in time order; 30 waits.
    let out = rows_of(&op.release(25).unwrap().unwrap());
    assert_eq!(
        out,
        vec![
            (1, 10, Some(1), 1, Some(1), Some(1000), Some(1), Some(1)),
            (1, 20, Some(2), 2, Some(3), Some(1500), Some(1), Some(2)),
        ]
    );
    // A row at 15 is now behind the watermark: late.
    assert_eq!(op.hold(&batch(&[(1, 15, Some(9))]), 25, None, None).unwrap(), 1);
    let out = rows_of(&op.release(40).unwrap().unwrap());
    assert_eq!(out, vec![(1, 30, Some(3), 2, Some(5), Some(2500), Some(2), Some(3))]);
    // The frame keeps the last 2 rows; nothing waits.
    assert_eq!(op.held(), 2);
}

#[test]
fn a_range_frame_frees_rows_no_later_row_can_reach() {
    let mut op =
        OverAggregateOperator::new(&spec(OverFrame::Range { preceding_ms: 10 }, 100), output_schema()).unwrap();
    op.hold(&batch(&[(1, 10, Some(1)), (2, 12, Some(2))]), 0, None, None)
        .unwrap();
    op.release(15).unwrap();
    assert_eq!(op.held(), 2);
    // At watermark 30 a later row is at 30 or after: rows before 20 go,
    // and their partitions with them.
    op.release(30).unwrap();
    assert_eq!(op.held(), 0);
    assert!(op.partitions.is_empty());
}

#[test]
fn state_is_bounded_at_rows_max() {
    let mut op = OverAggregateOperator::new(&spec(OverFrame::Rows { preceding: 5 }, 3), output_schema()).unwrap();
    op.hold(
        &batch(&[(1, 1, Some(1)), (1, 2, Some(1)), (2, 3, Some(1))]),
        0,
        None,
        None,
    )
    .unwrap();
    let err = op.hold(&batch(&[(1, 4, Some(1))]), 0, None, None).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    assert!(err.to_string().contains("3 rows held"), "{err}");
}

#[tokio::test]
async fn a_restored_operator_goes_on_as_the_original() {
    for frame in [OverFrame::Rows { preceding: 2 }, OverFrame::Unbounded { peers: true }] {
        restored_goes_on(frame).await;
    }
}

#[test]
fn an_unbounded_frame_keeps_running_values_not_rows() {
    let mut op =
        OverAggregateOperator::new(&spec(OverFrame::Unbounded { peers: false }, 100), output_schema()).unwrap();
    let rows: Vec<In> = (0..50).map(|i| (i % 2, i, Some(i))).collect();
    op.hold(&batch(&rows), 0, None, None).unwrap();
    assert_eq!(op.held(), 50);
    let out = rows_of(&op.release(1_000).unwrap().unwrap());
    // One running value per partition is all that is held.
    assert_eq!(op.held(), 2);
    // Partition 1's last row (t = 49): every odd value 1..49.
    let last = out.iter().find(|r| r.1 == 49).unwrap();
    assert_eq!(last.3, 25);
    assert_eq!(last.4, Some((1..50).step_by(2).sum()));
    assert_eq!((last.6, last.7), (Some(1), Some(49)));
}

async fn restored_goes_on(frame: OverFrame) {
    let mut seed = 11;
    let rows = random_rows(120, &mut seed);
    let (first, second) = rows.split_at(60);
    // Half, a release at 200 (frames hold rows, others wait), a snapshot,
    // and a new operator restored from it takes the rest.
    let mut a = OverAggregateOperator::new(&spec(frame, 10_000), output_schema()).unwrap();
    for chunk in first.chunks(7) {
        a.hold(&batch(chunk), i64::MIN, None, None).unwrap();
    }
    let mut got = a.release(200).unwrap().map(|b| rows_of(&b)).unwrap_or_default();
    let snapshot = a.snapshot(1).await.unwrap();
    let mut b = OverAggregateOperator::new(&spec(frame, 10_000), output_schema()).unwrap();
    b.restore(Some((1, snapshot))).await.unwrap();
    // Rows of the second half before 200 would be late after that release;
    // the uninterrupted run had no watermark, so compare only when none is.
    let late = second.iter().filter(|r| r.1 < 200).count();
    let second: Vec<_> = second.iter().copied().filter(|r| r.1 >= 200).collect();
    got.extend(run(&mut b, &second));
    got.sort_unstable();
    let kept: Vec<(i64, i64, Option<i64>)> = first.iter().copied().chain(second.iter().copied()).collect();
    let mut again = OverAggregateOperator::new(&spec(frame, 10_000), output_schema()).unwrap();
    // The same rows without the interruption give the same output.
    assert_eq!(
        got,
        run(&mut again, &kept),
        "restored run ({late} late rows left out of both)"
    );
    assert_eq!(got.len(), kept.len());
}

#[test]
fn state_ttl_forgets_idle_partitions_and_a_later_row_starts_afresh() {
    let spec = OverAggSpec {
        state_ttl_ms: Some(1_000),
        ..spec(OverFrame::Unbounded { peers: false }, 100)
    };
    let mut op = OverAggregateOperator::new(&spec, output_schema()).unwrap();
    op.hold(&batch(&[(1, 10, Some(5)), (2, 10, Some(7))]), 0, None, None)
        .unwrap();
    // Partition 2 waits for the watermark: kept whatever its age.
    op.release(11).unwrap();
    op.hold(&batch(&[(2, 20, Some(1))]), 11, None, None).unwrap();
    assert_eq!(op.held(), 3, "two running values, one waiting row");
    let now = sluice_types::now_ms();
    assert_eq!(op.expire(now), 0, "nothing is idle for a second yet");
    // A second and more later: partition 1 is forgotten; 2 has a waiting row.
    assert_eq!(op.expire(now + 2_000), 1);
    assert_eq!(op.held(), 2);
    // Partition 1 again: its running sum starts afresh (not 5 + 3).
    op.hold(&batch(&[(1, 30, Some(3))]), 11, None, None).unwrap();
    let out = rows_of(&op.release(40).unwrap().unwrap());
    let one = out.iter().find(|r| r.0 == 1).unwrap();
    assert_eq!(one.4, Some(3));
    let two = out.iter().find(|r| r.0 == 2).unwrap();
    assert_eq!(two.4, Some(8), "partition 2 kept its running sum: 7 + 1");
}

/// The integer and float fast paths give what `ScalarValue` arithmetic
/// gives, NULLs and empty frames included, and sum's overflow is the same
/// data exception.
#[test]
fn number_fast_paths_agree_with_scalar_arithmetic() {
    let i64s = |v: &[Option<i64>]| v.iter().map(|x| ScalarValue::Int64(*x)).collect::<Vec<_>>();
    let i32s = |v: &[Option<i32>]| v.iter().map(|x| ScalarValue::Int32(*x)).collect::<Vec<_>>();
    let f64s = |v: &[Option<f64>]| v.iter().map(|x| ScalarValue::Float64(*x)).collect::<Vec<_>>();
    let frames = [
        i64s(&[Some(3), None, Some(-7), Some(11)]),
        i64s(&[None, None]),
        i64s(&[]),
        i32s(&[Some(5), Some(i32::MAX), None]),
        f64s(&[Some(0.1), Some(0.2), None, Some(0.3)]),
    ];
    let mut fast = 0;
    for frame in &frames {
        for (function, out) in [
            ("sum", DataType::Int64),
            ("avg", DataType::Float64),
            ("min", DataType::Int64),
            ("max", DataType::Int64),
            ("min", DataType::Int32),
        ] {
            let general = aggregate_scalars(function, &out, frame.iter());
            let Some(got) = aggregate_numbers(function, &out, frame.iter()) else {
                continue;
            };
            fast += 1;
            match (got, general) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{function} -> {out} of {frame:?}"),
                (a, b) => panic!("{function} of {frame:?}: {a:?} vs {b:?}"),
            }
        }
    }
    assert!(fast >= 15, "the fast paths ran ({fast})");
    let overflow = aggregate("sum", &DataType::Int64, i64s(&[Some(i64::MAX), Some(1)]).iter()).unwrap_err();
    assert_eq!(overflow.sqlstate(), SqlCode::DataException.sqlstate(), "{overflow}");
    // The running values of an unbounded frame likewise.
    let mut running = Running::default();
    for v in i64s(&[Some(i64::MAX), Some(1)]) {
        let r = running.add("sum", &DataType::Int64, &v);
        if v == ScalarValue::Int64(Some(1)) {
            assert!(r.unwrap_err().to_string().contains("overflowed"));
        }
    }
}
