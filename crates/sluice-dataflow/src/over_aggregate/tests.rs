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
            let in_frame = frame_rows(&part, at, frame, |r| r.1);
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

/// The rows of `part` (a partition's rows with their arrival numbers,
/// sorted by time then arrival) in row `at`'s frame, by the definition of
/// each frame; `ts` is a row's time.
pub(super) fn frame_rows<'a, T>(
    part: &[(usize, &'a T)],
    at: usize,
    frame: OverFrame,
    ts: impl Fn(&T) -> i64,
) -> Vec<&'a T> {
    let now = ts(part[at].1);
    let rows = part.iter().map(|(_, r)| *r);
    match frame {
        OverFrame::Rows { preceding } => part[at.saturating_sub(preceding as usize)..=at]
            .iter()
            .map(|(_, r)| *r)
            .collect(),
        OverFrame::Range { preceding_ms } => rows.filter(|r| ts(r) <= now && ts(r) >= now - preceding_ms).collect(),
        OverFrame::Unbounded { peers: false } => rows.take(at + 1).collect(),
        OverFrame::Unbounded { peers: true } => rows.filter(|r| ts(r) <= now).collect(),
    }
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
        assert_eq!(op.hold(&batch(chunk), i64::MIN).unwrap(), 0);
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
    op.hold(&batch(&[(1, 10, Some(1)), (1, 30, Some(3)), (1, 20, Some(2))]), 0)
        .unwrap();
    // Watermark 25: rows at 10 and 20 are complete, in time order; 30 waits
    // (its batch is kept for it).
    let out = rows_of(&op.release(25).unwrap().unwrap());
    assert_eq!(op.batches.len(), 1);
    assert_eq!(
        out,
        vec![
            (1, 10, Some(1), 1, Some(1), Some(1000), Some(1), Some(1)),
            (1, 20, Some(2), 2, Some(3), Some(1500), Some(1), Some(2)),
        ]
    );
    // A row at 15 is now behind the watermark: late.
    assert_eq!(op.hold(&batch(&[(1, 15, Some(9))]), 25).unwrap(), 1);
    let out = rows_of(&op.release(40).unwrap().unwrap());
    assert_eq!(out, vec![(1, 30, Some(3), 2, Some(5), Some(2500), Some(2), Some(3))]);
    // The frame keeps the last 2 rows; nothing waits, and no input batch
    // is kept.
    assert_eq!(op.held(), 2);
    assert!(op.batches.is_empty());
}

#[test]
fn a_range_frame_frees_rows_no_later_row_can_reach() {
    let mut op =
        OverAggregateOperator::new(&spec(OverFrame::Range { preceding_ms: 10 }, 100), output_schema()).unwrap();
    op.hold(&batch(&[(1, 10, Some(1)), (2, 12, Some(2))]), 0).unwrap();
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
    op.hold(&batch(&[(1, 1, Some(1)), (1, 2, Some(1)), (2, 3, Some(1))]), 0)
        .unwrap();
    let err = op.hold(&batch(&[(1, 4, Some(1))]), 0).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    assert!(err.to_string().contains("3 rows held"), "{err}");
}

#[tokio::test]
async fn a_restored_operator_goes_on_as_the_original() {
    for frame in [
        OverFrame::Rows { preceding: 2 },
        OverFrame::Range { preceding_ms: 50 },
        OverFrame::Unbounded { peers: true },
    ] {
        restored_goes_on(frame).await;
    }
}

#[test]
fn an_unbounded_frame_keeps_running_values_not_rows() {
    let mut op =
        OverAggregateOperator::new(&spec(OverFrame::Unbounded { peers: false }, 100), output_schema()).unwrap();
    let rows: Vec<In> = (0..50).map(|i| (i % 2, i, Some(i))).collect();
    op.hold(&batch(&rows), 0).unwrap();
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
        a.hold(&batch(chunk), i64::MIN).unwrap();
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
    op.hold(&batch(&[(1, 10, Some(5)), (2, 10, Some(7))]), 0).unwrap();
    // Partition 2 waits for the watermark: kept whatever its age.
    op.release(11).unwrap();
    op.hold(&batch(&[(2, 20, Some(1))]), 11).unwrap();
    assert_eq!(op.held(), 3, "two running values, one waiting row");
    let now = sluice_types::now_ms();
    assert_eq!(op.expire(now), 0, "nothing is idle for a second yet");
    // A second and more later: partition 1 is forgotten; 2 has a waiting row.
    assert_eq!(op.expire(now + 2_000), 1);
    assert_eq!(op.held(), 2);
    // Partition 1 again: its running sum starts afresh (not 5 + 3).
    op.hold(&batch(&[(1, 30, Some(3))]), 11).unwrap();
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

/// A snapshot of the layout before frames kept only their arguments:
/// frame rows as whole input rows in `rows`, marked not waiting. Restored,
/// the operator goes on as the nested loop over all the rows says.
#[tokio::test]
async fn a_snapshot_with_frame_rows_among_the_waiting_rows_restores() {
    let frame = OverFrame::Rows { preceding: 2 };
    let mut seed = 23;
    let rows = random_rows(120, &mut seed);
    let (first, second) = rows.split_at(60);
    // After a release at 200: per partition, the last 3 rows before 200
    // (by time, then arrival) are its frame; rows at 200 or later wait.
    let mut kept: Vec<(usize, In, bool)> = Vec::new();
    for k in 0..3 {
        let mut before: Vec<(usize, &In)> = first
            .iter()
            .enumerate()
            .filter(|(_, r)| r.0 == k && r.1 < 200)
            .collect();
        before.sort_by_key(|(i, r)| (r.1, *i));
        let from = before.len().saturating_sub(3);
        kept.extend(before[from..].iter().map(|(i, r)| (*i, **r, false)));
    }
    kept.extend(
        first
            .iter()
            .enumerate()
            .filter(|(_, r)| r.1 >= 200)
            .map(|(i, r)| (i, *r, true)),
    );
    let fields = vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("v", DataType::Int64, true),
        Field::new("__seq", DataType::UInt64, false),
        Field::new("__waiting", DataType::Boolean, false),
    ];
    let old = RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        vec![
            Arc::new(Int64Array::from_iter_values(kept.iter().map(|r| r.1.0))),
            Arc::new(TimestampMillisecondArray::from_iter_values(kept.iter().map(|r| r.1.1))),
            Arc::new(Int64Array::from_iter(kept.iter().map(|r| r.1.2))),
            Arc::new(UInt64Array::from_iter_values(kept.iter().map(|r| r.0 as u64))),
            Arc::new(BooleanArray::from_iter(kept.iter().map(|r| Some(r.2)))),
        ],
    )
    .unwrap();
    let mut state = TaskState::default();
    state.put_rows(ROWS_KEY, old, vec![0]);
    let mut op = OverAggregateOperator::new(&spec(frame, 10_000), output_schema()).unwrap();
    op.restore(Some((1, state))).await.unwrap();
    assert_eq!(op.held(), kept.len());
    let second: Vec<In> = second.iter().copied().filter(|r| r.1 >= 200).collect();
    let got = run(&mut op, &second);
    let all: Vec<In> = first.iter().copied().chain(second.iter().copied()).collect();
    let want: Vec<Out> = expected(&all, frame).into_iter().filter(|r| r.1 >= 200).collect();
    assert_eq!(got, want);
    assert!(!got.is_empty());
}

/// A frame's integer sum past BIGINT is a data exception (a wider frame
/// sum is never wrapped); a frame of one row never overflows.
#[test]
fn a_frame_sum_past_bigint_fails_the_row() {
    let max = i64::MAX;
    let mut one = OverAggregateOperator::new(&spec(OverFrame::Rows { preceding: 0 }, 100), output_schema()).unwrap();
    one.hold(&batch(&[(1, 1, Some(max)), (1, 2, Some(max))]), 0).unwrap();
    let out = rows_of(&one.release(10).unwrap().unwrap());
    assert_eq!(out[1].4, Some(max));
    assert_eq!((out[1].6, out[1].7), (Some(max), Some(max)));
    let mut two = OverAggregateOperator::new(&spec(OverFrame::Rows { preceding: 1 }, 100), output_schema()).unwrap();
    two.hold(&batch(&[(1, 1, Some(max)), (1, 2, Some(1))]), 0).unwrap();
    let err = two.release(10).unwrap_err();
    assert_eq!(err.sqlstate(), SqlCode::DataException.sqlstate(), "{err}");
    assert!(err.to_string().contains("overflowed"), "{err}");
}

/// Arguments of other types than BIGINT — INT (cast once a batch), DOUBLE
/// (summed in frame order), a string (min through ScalarValue), `count(x)`
/// of a string, and `max` of a DOUBLE (the general path) — against a
/// nested loop, in every frame.
#[test]
fn arguments_of_every_kind_match_a_nested_loop() {
    // (k, ts, v INT, f DOUBLE, s TEXT)
    type Row = (i64, i64, Option<i32>, Option<f64>, Option<String>);
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        Field::new("v", DataType::Int32, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
    ]));
    let calls = [
        ("count", 2, DataType::Int64),
        ("sum", 2, DataType::Int64),
        ("min", 2, DataType::Int32),
        ("max", 2, DataType::Int32),
        ("avg", 2, DataType::Float64),
        ("sum", 3, DataType::Float64),
        ("avg", 3, DataType::Float64),
        ("max", 3, DataType::Float64),
        ("min", 4, DataType::Utf8),
        ("count", 4, DataType::Int64),
    ];
    let mut fields = vec![input.field(0).clone(), input.field(1).clone()];
    fields.extend(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("a{i}"), c.2.clone(), true)),
    );
    let output = Arc::new(Schema::new(fields));
    let mut seed = 5u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as i64
    };
    let rows: Vec<Row> = (0..300)
        .map(|_| {
            let (k, ts, x) = (next() % 3, next() % 300, next() % 1000);
            (
                k,
                ts,
                (x % 5 != 0).then_some(x as i32 - 500),
                (x % 7 != 0).then_some(x as f64 / 8.0 - 40.3),
                (x % 4 != 0).then(|| format!("s{}", x % 37)),
            )
        })
        .collect();
    let batch_of = |rows: &[Row]| {
        RecordBatch::try_new(
            input.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(arrow::array::Int32Array::from_iter(rows.iter().map(|r| r.2))),
                Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.3))),
                Arc::new(arrow::array::StringArray::from_iter(rows.iter().map(|r| r.4.clone()))),
            ],
        )
        .unwrap()
    };
    // Every result as a string (floats by their bits): exact comparison.
    let show = |b: &RecordBatch, r: usize, c: usize| -> String {
        let a = b.column(c);
        if a.is_null(r) {
            return "NULL".into();
        }
        match a.data_type() {
            DataType::Float64 => format!("{:x}", a.as_primitive::<Float64Type>().value(r).to_bits()),
            _ => arrow::util::display::array_value_to_string(a, r).unwrap(),
        }
    };
    let float = |x: Option<f64>| x.map_or("NULL".to_string(), |x| format!("{:x}", x.to_bits()));
    let int = |x: Option<i64>| x.map_or("NULL".to_string(), |x| x.to_string());
    for frame in [
        OverFrame::Rows { preceding: 0 },
        OverFrame::Rows { preceding: 4 },
        OverFrame::Range { preceding_ms: 30 },
        OverFrame::Unbounded { peers: false },
        OverFrame::Unbounded { peers: true },
    ] {
        let spec = OverAggSpec {
            input_schema: input.clone(),
            output_columns: 2,
            partition_columns: vec![0],
            time_column: 1,
            frame,
            aggregates: calls
                .iter()
                .map(|c| OverAggregateCall {
                    function: c.0.into(),
                    arg: Some(c.1),
                })
                .collect(),
            rows_max: 10_000,
            state_ttl_ms: None,
            op_column: None,
        };
        let mut op = OverAggregateOperator::new(&spec, output.clone()).unwrap();
        for chunk in rows.chunks(11) {
            op.hold(&batch_of(chunk), i64::MIN).unwrap();
        }
        let out = op.release(i64::MAX).unwrap().unwrap();
        let mut got: Vec<Vec<String>> = (0..out.num_rows())
            .map(|r| (0..out.num_columns()).map(|c| show(&out, r, c)).collect())
            .collect();
        got.sort();
        let mut want = Vec::new();
        for k in 0..3 {
            let mut part: Vec<(usize, &Row)> = rows.iter().enumerate().filter(|(_, r)| r.0 == k).collect();
            part.sort_by_key(|(i, r)| (r.1, *i));
            for (at, (_, row)) in part.iter().enumerate() {
                let f = frame_rows(&part, at, frame, |r| r.1);
                let v: Vec<i64> = f.iter().filter_map(|r| r.2).map(i64::from).collect();
                let x: Vec<f64> = f.iter().filter_map(|r| r.3).collect();
                let s: Vec<&String> = f.iter().filter_map(|r| r.4.as_ref()).collect();
                // Floats added one by one in the frame's order.
                let fsum = x.iter().copied().reduce(|a, b| a + b);
                want.push(vec![
                    k.to_string(),
                    arrow::util::display::array_value_to_string(
                        &(Arc::new(TimestampMillisecondArray::from(vec![row.1])) as ArrayRef),
                        0,
                    )
                    .unwrap(),
                    v.len().to_string(),
                    int((!v.is_empty()).then(|| v.iter().sum())),
                    int(v.iter().min().copied()),
                    int(v.iter().max().copied()),
                    float((!v.is_empty()).then(|| v.iter().sum::<i64>() as f64 / v.len() as f64)),
                    float(fsum),
                    float(fsum.map(|t| t / x.len() as f64)),
                    float(x.iter().copied().reduce(f64::max)),
                    s.iter().min().map_or("NULL".to_string(), |s| s.to_string()),
                    s.len().to_string(),
                ]);
            }
        }
        want.sort();
        assert_eq!(got.len(), rows.len(), "{frame:?}");
        assert_eq!(got, want, "{frame:?}");
    }
}

/// A row far ahead of the watermark does not keep its whole batch: once
/// the kept batches hold far more rows than wait, the batches mostly
/// released keep only their waiting rows.
#[test]
fn a_batch_keeps_only_its_waiting_rows_once_most_have_gone() {
    let n = COMPACT_ROWS_MIN as i64 + 1_000;
    let frame = OverFrame::Rows { preceding: 1 };
    let mut op = OverAggregateOperator::new(&spec(frame, 1_000_000), output_schema()).unwrap();
    // Rows at 0..n, and two far ahead.
    let mut rows: Vec<In> = (0..n).map(|i| (i % 2, i, Some(i % 1_000))).collect();
    rows.push((0, 1_000_000_000, Some(7)));
    rows.push((1, 1_000_000_001, Some(8)));
    op.hold(&batch(&rows), 0).unwrap();
    let mut got = rows_of(&op.release(n).unwrap().unwrap());
    assert_eq!(got.len(), n as usize);
    assert_eq!(op.batches.len(), 1);
    assert_eq!(
        op.batches.values().next().unwrap().batch.num_rows(),
        2,
        "the batch keeps only its 2 waiting rows"
    );
    got.extend(rows_of(&op.release(i64::MAX).unwrap().unwrap()));
    got.sort_unstable();
    assert_eq!(got, expected(&rows, frame));
    assert!(op.batches.is_empty());
}
