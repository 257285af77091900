//! Window operators driven directly: rows in, watermarks, rows out.
//! Expected rows are worked out by hand in the comments.

use super::fixed::FixedWindowOperator;
use super::session::SessionWindowOperator;
use arrow::array::{Array, Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use sluice_plan::{AggregateCall, WindowAggSpec, WindowKind};
use sluice_types::Watermark;
use std::sync::Arc;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("_time", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_arg0", DataType::Int64, false),
    ]))
}

fn output_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    Arc::new(Schema::new(vec![
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts, false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_a0", DataType::Int64, true),
        Field::new("_a1", DataType::Int64, true),
    ]))
}

fn spec(window: WindowKind, groups_max: usize) -> WindowAggSpec {
    WindowAggSpec {
        input_schema: input_schema(),
        window,
        time_column: 0,
        key_columns: vec![1],
        aggregates: vec![
            AggregateCall {
                function: "count".into(),
                args: vec![2],
                distinct: false,
            },
            AggregateCall {
                function: "sum".into(),
                args: vec![2],
                distinct: false,
            },
        ],
        groups_max,
    }
}

/// Rows of (time ms, key, value).
fn rows(rows: &[(i64, i64, i64)]) -> RecordBatch {
    let t = TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.0));
    let k = Int64Array::from_iter_values(rows.iter().map(|r| r.1));
    let v = Int64Array::from_iter_values(rows.iter().map(|r| r.2));
    RecordBatch::try_new(input_schema(), vec![Arc::new(t), Arc::new(k), Arc::new(v)]).unwrap()
}

/// (start, end, key, count, sum), sorted.
fn collect(batches: &[RecordBatch]) -> Vec<(i64, i64, i64, i64, i64)> {
    let mut out = Vec::new();
    for b in batches {
        let col = |i: usize| b.column(i).clone();
        let s = col(0);
        let s = s.as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        let e = col(1);
        let e = e.as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        let ints = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap().clone();
        let (k, c, sum) = (ints(2), ints(3), ints(4));
        for r in 0..b.num_rows() {
            out.push((s.value(r), e.value(r), k.value(r), c.value(r), sum.value(r)));
        }
    }
    out.sort();
    out
}

#[test]
fn tumble_fires_at_the_watermark_and_drops_late_rows() {
    let mut op = FixedWindowOperator::new(&spec(WindowKind::Tumble { size_ms: 10 }, 100), output_schema()).unwrap();
    // key 1: t=1 (v 5), t=9 (v 7) → [0,10); key 2: t=3 (v 1) → [0,10); key 1: t=12 (v 2) → [10,20).
    assert_eq!(
        op.update(&rows(&[(1, 1, 5), (9, 1, 7), (3, 2, 1), (12, 1, 2)]), Watermark::MIN)
            .unwrap(),
        0
    );
    assert!(op.fire(Watermark(9)).unwrap().is_empty(), "[0,10) is not complete at 9");
    let fired = collect(&op.fire(Watermark(10)).unwrap());
    assert_eq!(fired, vec![(0, 10, 1, 2, 12), (0, 10, 2, 1, 1)]);
    // t=4 belongs to [0,10), already fired at watermark 10: late.
    assert_eq!(op.update(&rows(&[(4, 1, 100), (15, 1, 3)]), Watermark(10)).unwrap(), 1);
    let fired = collect(&op.fire(Watermark::MAX).unwrap());
    assert_eq!(fired, vec![(10, 20, 1, 2, 5)]);
}

#[test]
fn hop_puts_a_row_in_every_window_containing_it() {
    let hop = WindowKind::Hop {
        slide_ms: 5,
        size_ms: 10,
    };
    let mut op = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    // t=7 is in [0,10) and [5,15); t=12 in [5,15) and [10,20).
    op.update(&rows(&[(7, 1, 1), (12, 1, 10)]), Watermark::MIN).unwrap();
    let fired = collect(&op.fire(Watermark::MAX).unwrap());
    assert_eq!(fired, vec![(0, 10, 1, 1, 1), (5, 15, 1, 2, 11), (10, 20, 1, 1, 10)]);
}

#[test]
fn open_groups_are_bounded() {
    let mut op = FixedWindowOperator::new(&spec(WindowKind::Tumble { size_ms: 10 }, 2), output_schema()).unwrap();
    op.update(&rows(&[(1, 1, 1), (2, 2, 1)]), Watermark::MIN).unwrap();
    let err = op.update(&rows(&[(3, 3, 1)]), Watermark::MIN).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    // The refused row left nothing behind; firing frees the groups again.
    let fired = collect(&op.fire(Watermark(10)).unwrap());
    assert_eq!(fired, vec![(0, 10, 1, 1, 1), (0, 10, 2, 1, 1)]);
    op.update(&rows(&[(13, 3, 1)]), Watermark(10)).unwrap();
}

#[test]
fn sessions_merge_when_a_row_bridges_the_gap() {
    let session = WindowKind::Session { gap_ms: 5 };
    let mut op = SessionWindowOperator::new(&spec(session, 100), 5, output_schema()).unwrap();
    // key 1: t=0 → [0,5); t=20 → [20,25); key 2: t=2 → [2,7).
    op.update(&rows(&[(0, 1, 1), (20, 1, 2), (2, 2, 4)]), Watermark::MIN)
        .unwrap();
    // t=3 extends [0,5) to [0,8); t=16 reaches [20,25) (16+5 > 20) → [16,25);
    // t=10 bridges [0,8) and [16,25)? 10 < 8 is false: 10 starts [10,15),
    // which does not touch [16,25) either (15 ≤ 16).
    op.update(&rows(&[(3, 1, 8), (16, 1, 16), (10, 1, 32)]), Watermark::MIN)
        .unwrap();
    let fired = collect(&op.fire(Watermark(8)).unwrap());
    assert_eq!(fired, vec![(0, 8, 1, 2, 9), (2, 7, 2, 1, 4)]);
    // t=13 bridges [10,15) and [16,25): merged [10,25) with 10, 13, 16, 20.
    op.update(&rows(&[(13, 1, 64)]), Watermark(8)).unwrap();
    let fired = collect(&op.fire(Watermark::MAX).unwrap());
    assert_eq!(fired, vec![(10, 25, 1, 4, 2 + 16 + 32 + 64)]);
    // Sessions that touch merge (as in Flink): t=30 → [30,35), t=35 → [35,40).
    op.update(&rows(&[(30, 3, 1), (35, 3, 2)]), Watermark(8)).unwrap();
    let fired = collect(&op.fire(Watermark::MAX).unwrap());
    assert_eq!(fired, vec![(30, 40, 3, 2, 3)]);
    // A row whose session would end at or before the watermark is late.
    assert_eq!(op.update(&rows(&[(1, 1, 1)]), Watermark(100)).unwrap(), 1);
}

/// Sessions of each key computed the plain way: the key's rows sorted by
/// time, a row starting a new session unless it comes within `gap` of the
/// last one's time (touching counts, as in Flink).
fn sessions_by_hand(all: &[(i64, i64, i64)], gap: i64) -> Vec<(i64, i64, i64, i64, i64)> {
    let mut sorted = all.to_vec();
    sorted.sort_by_key(|r| (r.1, r.0));
    let mut out: Vec<(i64, i64, i64, i64, i64)> = Vec::new();
    for (t, k, v) in sorted {
        match out.last_mut() {
            Some(s) if s.2 == k && t <= s.1 => {
                s.1 = s.1.max(t + gap);
                s.3 += 1;
                s.4 += v;
            }
            _ => out.push((t, t + gap, k, 1, v)),
        }
    }
    out.sort();
    out
}

#[test]
fn sessions_over_interleaved_keys_and_batches_equal_sessions_worked_out_by_hand() {
    // A hot key among cold ones, rows out of time order, cut into batches
    // of every size: runs of a key's rows share accumulator calls, merges
    // happen inside batches and across them.
    let gap = 5;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound) as i64
    };
    for round in 0..40 {
        let n = 50 + next(400) as usize;
        let all: Vec<(i64, i64, i64)> = (0..n)
            .map(|_| {
                let key = if next(4) > 0 { 0 } else { 1 + next(6) };
                (next(300), key, next(1000))
            })
            .collect();
        let mut op = SessionWindowOperator::new(
            &spec(WindowKind::Session { gap_ms: gap }, 100_000),
            gap,
            output_schema(),
        )
        .unwrap();
        let mut at = 0;
        while at < n {
            let len = (1 + next(64) as usize).min(n - at);
            op.update(&rows(&all[at..at + len]), Watermark::MIN).unwrap();
            at += len;
        }
        let mut fired = collect(&op.fire(Watermark::MAX).unwrap());
        fired.sort();
        assert_eq!(fired, sessions_by_hand(&all, gap), "round {round}");
        // All fired: a later watermark finds nothing more.
        assert!(op.fire(Watermark::MAX).unwrap().is_empty(), "round {round}");
    }
}

/// `op`'s snapshot for checkpoint `id` (its low watermark `low`, as the
/// task stores it) through the file format, its references resolved from
/// nothing (a first snapshot, or one after a restore, has none).
fn round_trip(op: &mut FixedWindowOperator, id: u64, low: Watermark) -> crate::checkpoint::TaskState {
    let mut state = op.snapshot_state(id).unwrap();
    state.put_bytes(crate::checkpoint::LOW_WATERMARK_KEY, low.0.to_le_bytes().to_vec());
    state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
    let mut state = crate::checkpoint::TaskState::decode(&state.encode().unwrap()).unwrap();
    assert!(state.referenced_checkpoints().unwrap().is_empty());
    crate::checkpoint::incremental::resolve(&mut state, &Default::default()).unwrap();
    state
}

#[test]
fn a_snapshot_restores_open_windows_and_the_original_keeps_going() {
    let hop = WindowKind::Hop {
        slide_ms: 5,
        size_ms: 10,
    };
    let mut op = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    op.update(&rows(&[(7, 1, 1), (12, 1, 10), (3, 2, 4)]), Watermark::MIN)
        .unwrap();
    // Through the file format, as recovery reads it.
    let state = round_trip(&mut op, 1, Watermark::MIN);
    let mut restored = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    restored.restore_state(&state).unwrap();
    // Both get the same later rows and must emit the same windows:
    // key 1: [0,10)=1 (v1), [5,15)=1+10+8 → (3, 19), [10,20)=10+8 → (2, 18), [15,25)=... none
    for o in [&mut op, &mut restored] {
        o.update(&rows(&[(13, 1, 8)]), Watermark::MIN).unwrap();
    }
    let a = collect(&op.fire(Watermark::MAX).unwrap());
    let b = collect(&restored.fire(Watermark::MAX).unwrap());
    assert_eq!(a, b);
    assert_eq!(
        a,
        vec![
            (-5, 5, 2, 1, 4),
            (0, 10, 1, 1, 1),
            (0, 10, 2, 1, 4),
            (5, 15, 1, 3, 19),
            (10, 20, 1, 2, 18)
        ]
    );
}

#[test]
fn a_session_snapshot_restores_open_sessions_and_the_original_keeps_going() {
    let session = WindowKind::Session { gap_ms: 5 };
    let mut op = SessionWindowOperator::new(&spec(session, 100), 5, output_schema()).unwrap();
    // key 1: [0,8) (t=0 v1, t=3 v8), [20,25) (t=20 v2); key 2: [2,7) (t=2 v4).
    op.update(&rows(&[(0, 1, 1), (20, 1, 2), (2, 2, 4), (3, 1, 8)]), Watermark::MIN)
        .unwrap();
    assert!(op.snapshot_batch().unwrap().is_some());
    let snap = op.snapshot_batch().unwrap().unwrap();
    assert_eq!(snap.num_rows(), 3, "one row per open session");
    let mut state = crate::checkpoint::TaskState::default();
    state.put_batch("s", snap);
    let state = crate::checkpoint::TaskState::decode(&state.encode().unwrap()).unwrap();
    let mut restored = SessionWindowOperator::new(&spec(session, 100), 5, output_schema()).unwrap();
    restored.restore_batch(state.batch("s").unwrap()).unwrap();
    // The rest: t=6 (key 1, v16) extends [0,8) to [0,11); t=15 (key 1, v32)
    // bridges [15,20) with [20,25) → [15,25); t=9 (key 2, v64) starts [9,14)
    // (2's session ended at 7 < 9).
    let rest = rows(&[(6, 1, 16), (15, 1, 32), (9, 2, 64)]);
    let mut out = Vec::new();
    for o in [&mut op, &mut restored] {
        o.update(&rest, Watermark::MIN).unwrap();
        let mut fired = collect(&o.fire(Watermark(8)).unwrap());
        fired.extend(collect(&o.fire(Watermark::MAX).unwrap()));
        fired.sort();
        out.push(fired);
    }
    let expected = vec![
        (0, 11, 1, 3, 1 + 8 + 16),
        (2, 7, 2, 1, 4),
        (9, 14, 2, 1, 64),
        (15, 25, 1, 2, 2 + 32),
    ];
    assert_eq!(out[0], expected, "the original keeps going after its snapshot");
    assert_eq!(out[1], expected, "the restored operator emits the same sessions");
}

/// The output schema without the key column (windows without GROUP BY keys).
fn unkeyed_output_schema() -> SchemaRef {
    let f = output_schema();
    let fields: Vec<_> = f
        .fields()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, f)| f.clone())
        .collect();
    Arc::new(Schema::new(fields))
}

/// (start, end, count, sum) of unkeyed windows, sorted.
fn collect_unkeyed(batches: &[RecordBatch]) -> Vec<(i64, i64, i64, i64)> {
    let mut out = Vec::new();
    for b in batches {
        let ts = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<TimestampMillisecondArray>()
                .unwrap()
                .clone()
        };
        let ints = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap().clone();
        let (s, e, c, sum) = (ts(0), ts(1), ints(2), ints(3));
        out.extend((0..b.num_rows()).map(|r| (s.value(r), e.value(r), c.value(r), sum.value(r))));
    }
    out.sort();
    out
}

/// Rows spread over many windows in one batch, out of time order: each
/// window's count and sum per key, worked out by brute force over every
/// window start.
fn brute_force(rows: &[(i64, i64, i64)], slide: i64, size: i64) -> Vec<(i64, i64, i64, i64, i64)> {
    let mut out = std::collections::BTreeMap::new();
    let max = rows.iter().map(|r| r.0).max().unwrap();
    let mut start = -size;
    while start <= max {
        for (t, k, v) in rows {
            if (start..start + size).contains(t) {
                let e: &mut (i64, i64) = out.entry((start, start + size, *k)).or_default();
                e.0 += 1;
                e.1 += v;
            }
        }
        start += slide;
    }
    out.into_iter().map(|((s, e, k), (c, sum))| (s, e, k, c, sum)).collect()
}

fn scattered_rows() -> Vec<(i64, i64, i64)> {
    // 500 rows over t in [0, 1000), in a scrambled order, 3 keys.
    (0..500i64).map(|i| ((i * 379) % 1000, i % 3, i)).collect()
}

#[test]
fn a_batch_over_many_windows_puts_each_row_in_each_of_its_windows() {
    let data = scattered_rows();
    // Tumble: 100 windows of 10 ms in one batch.
    let mut op = FixedWindowOperator::new(&spec(WindowKind::Tumble { size_ms: 10 }, 10_000), output_schema()).unwrap();
    op.update(&rows(&data), Watermark::MIN).unwrap();
    assert_eq!(collect(&op.fire(Watermark::MAX).unwrap()), brute_force(&data, 10, 10));
    // Hop: every row in 15 windows, 515 windows in all.
    let hop = WindowKind::Hop {
        slide_ms: 2,
        size_ms: 30,
    };
    let mut op = FixedWindowOperator::new(&spec(hop, 10_000), output_schema()).unwrap();
    op.update(&rows(&data), Watermark::MIN).unwrap();
    assert_eq!(collect(&op.fire(Watermark::MAX).unwrap()), brute_force(&data, 2, 30));
}

#[test]
fn unkeyed_windows_have_one_group_each_and_count_against_the_bound() {
    let mut s = spec(WindowKind::Tumble { size_ms: 100 }, 10);
    s.key_columns.clear();
    let data = scattered_rows();
    let mut op = FixedWindowOperator::new(&s, unkeyed_output_schema()).unwrap();
    op.update(&rows(&data), Watermark::MIN).unwrap();
    // The same rows with every key the same: one group per window.
    let one_key: Vec<_> = data.iter().map(|(t, _, v)| (*t, 0, *v)).collect();
    let expected: Vec<_> = brute_force(&one_key, 100, 100)
        .into_iter()
        .map(|(s, e, _, c, sum)| (s, e, c, sum))
        .collect();
    assert_eq!(expected.len(), 10);
    assert_eq!(collect_unkeyed(&op.fire(Watermark::MAX).unwrap()), expected);
    // Ten windows open fill a bound of ten groups: an eleventh is refused.
    let mut op = FixedWindowOperator::new(&s, unkeyed_output_schema()).unwrap();
    op.update(&rows(&data), Watermark::MIN).unwrap();
    let err = op.update(&rows(&[(1000, 0, 1)]), Watermark::MIN).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    // A snapshot restores the one group of each window.
    let state = round_trip(&mut op, 1, Watermark::MIN);
    let mut restored = FixedWindowOperator::new(&s, unkeyed_output_schema()).unwrap();
    restored.restore_state(&state).unwrap();
    assert_eq!(collect_unkeyed(&restored.fire(Watermark::MAX).unwrap()), expected);
}

#[test]
fn an_unkeyed_session_snapshot_round_trips() {
    let mut s = spec(WindowKind::Session { gap_ms: 5 }, 100);
    s.key_columns.clear();
    let out_schema = unkeyed_output_schema();
    let mut op = SessionWindowOperator::new(&s, 5, out_schema.clone()).unwrap();
    op.update(&rows(&[(0, 1, 1), (3, 2, 2)]), Watermark::MIN).unwrap();
    let snap = op.snapshot_batch().unwrap().unwrap();
    let mut restored = SessionWindowOperator::new(&s, 5, out_schema).unwrap();
    restored.restore_batch(&snap).unwrap();
    restored.update(&rows(&[(6, 3, 4)]), Watermark::MIN).unwrap();
    let b = &restored.fire(Watermark::MAX).unwrap()[0];
    let ints = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
    // One session [0, 11) over all three rows: count 3, sum 7.
    assert_eq!((b.num_rows(), ints(2), ints(3)), (1, 3, 7));
}

#[test]
fn open_sessions_are_bounded_and_the_error_names_the_bound() {
    let session = WindowKind::Session { gap_ms: 5 };
    let mut op = SessionWindowOperator::new(&spec(session, 2), 5, output_schema()).unwrap();
    // Two keys, one session each: at the bound.
    op.update(&rows(&[(1, 1, 1), (2, 2, 1)]), Watermark::MIN).unwrap();
    // A row joining an open session opens none: still accepted at the bound.
    op.update(&rows(&[(4, 1, 1)]), Watermark::MIN).unwrap();
    // A third session is refused, naming the bound.
    let err = op.update(&rows(&[(3, 3, 1)]), Watermark::MIN).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    assert!(err.to_string().contains("2 open sessions"), "{err}");
    // Firing closes them: room again.
    op.fire(Watermark::MAX).unwrap();
    op.update(&rows(&[(100, 3, 1)]), Watermark::MIN).unwrap();
}

/// Accumulators rebuilt under new group ids (what a snapshot does when
/// keys put back into their table get other ids, as colliding hashes can)
/// carry each group's values to its new id.
#[test]
fn regrouped_accumulators_follow_their_new_ids() {
    let mut op = FixedWindowOperator::new(&spec(WindowKind::Tumble { size_ms: 10 }, 100), output_schema()).unwrap();
    op.update(&rows(&[(1, 1, 1), (2, 2, 5), (3, 2, 7)]), Watermark::MIN)
        .unwrap();
    // Group 0 (key 1) becomes 1 and group 1 (key 2) becomes 0: the keys
    // stay, so each now shows the other's count and sum.
    op.regroup_window(0, &[1, 0]).unwrap();
    let fired = collect(&op.fire(Watermark(10)).unwrap());
    assert_eq!(fired, vec![(0, 10, 1, 2, 12), (0, 10, 2, 1, 1)]);
}

/// Rows (time, key, value) with the watermark each came under, and the
/// 20 000 rows in time order over 3 000 keys (time = row / 10 ms), with a
/// late row (up to 400 ms back) every 7th.
fn rows_with_late_ones() -> Vec<(i64, i64, i64)> {
    let mut state = 11u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    (0..20_000i64)
        .map(|i| {
            let late = if i % 7 == 3 { (next() % 400) as i64 } else { 0 };
            (i / 10 - late, (next() % 3_000) as i64, i)
        })
        .collect()
}

/// The watermark batch `i` of [`rows_with_late_ones`] comes under, 150
/// rows a batch: 30 ms behind the batch's first row.
fn batch_watermark(i: usize, chunk: &[(i64, i64, i64)]) -> Watermark {
    Watermark(chunk[0].0.max(i as i64 * 15) - 30)
}

/// Windows as (slide, size): HOPs whose slide divides the size (panes of
/// the slide), does not (panes of their gcd) and leaves gaps; a TUMBLE
/// (slide = size, one pane a window) and a HOP of the same shape.
const WINDOWS: [(i64, i64); 6] = [(20, 100), (30, 100), (40, 30), (25, 50), (100, 100), (60, 60)];

/// The window of `(slide, size)`: a TUMBLE when the slide is the size
/// but for the HOP of 60 ms (of the same shape).
fn window_of((slide, size): (i64, i64)) -> WindowKind {
    if slide == size && size != 60 {
        WindowKind::Tumble { size_ms: size }
    } else {
        WindowKind::Hop {
            slide_ms: slide,
            size_ms: size,
        }
    }
}

/// windows (slide, size) of a HOP: each window's count and sum per key,
/// worked out row by row — a row counts in every window that holds its
/// time and ends after the watermark it came under.
fn hop_by_rule(rows: &[((i64, i64, i64), i64)], slide: i64, size: i64) -> Vec<(i64, i64, i64, i64, i64)> {
    let mut out: std::collections::BTreeMap<(i64, i64), (i64, i64)> = Default::default();
    for ((t, k, v), watermark) in rows {
        // Window starts are the multiples of the slide.
        let mut start = t - t.rem_euclid(slide);
        while start + size > *t {
            if start + size > *watermark {
                let e = out.entry((start, *k)).or_default();
                e.0 += 1;
                e.1 += v;
            }
            start -= slide;
        }
    }
    out.into_iter()
        .map(|((s, k), (c, sum))| (s, s + size, k, c, sum))
        .collect()
}

#[test]
fn windows_from_panes_equal_the_rule_through_late_rows_and_a_restore() {
    // The rows with late ones, fired after each batch; halfway the
    // operator's snapshot goes through the file format into a fresh one,
    // which goes on from the windows the stored watermark had fired.
    let data = rows_with_late_ones();
    for (slide, size) in WINDOWS {
        let hop = window_of((slide, size));
        let mut op = FixedWindowOperator::new(&spec(hop, 1_000_000), output_schema()).unwrap();
        let mut fired = Vec::new();
        let mut seen = Vec::new();
        let mut low = Watermark::MIN;
        for (i, chunk) in data.chunks(150).enumerate() {
            let watermark = batch_watermark(i, chunk);
            if i == 66 {
                let state = round_trip(&mut op, 1, low);
                op = FixedWindowOperator::new(&spec(hop, 1_000_000), output_schema()).unwrap();
                op.restore_state(&state).unwrap();
            }
            low = watermark;
            op.update(&rows(chunk), watermark).unwrap();
            seen.extend(chunk.iter().map(|r| (*r, watermark.0)));
            fired.extend(op.fire(watermark).unwrap());
        }
        fired.extend(op.fire(Watermark::MAX).unwrap());
        let got = collect(&fired);
        let want = hop_by_rule(&seen, slide, size);
        assert!(want.len() > 10_000, "slide {slide} size {size}: {} groups", want.len());
        assert_eq!(got, want, "slide {slide} size {size}");
    }
}

#[test]
fn a_snapshot_of_panes_far_apart_in_time_holds_the_panes() {
    // A row a year ahead of the others: the snapshot holds the two panes,
    // and the restored operator fires the 5 windows over each, not every
    // window between them.
    let hop = WindowKind::Hop {
        slide_ms: 2,
        size_ms: 10,
    };
    let year = 365 * 24 * 3_600_000;
    let mut op = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    op.update(&rows(&[(1, 1, 1), (year, 2, 5)]), Watermark::MIN).unwrap();
    let state = round_trip(&mut op, 1, Watermark::MIN);
    let panes: usize = state.rows("panes").iter().map(|b| b.num_rows()).sum();
    assert_eq!(panes, 2);
    let mut restored = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    restored.restore_state(&state).unwrap();
    let fired = collect(&restored.fire(Watermark::MAX).unwrap());
    assert_eq!(fired.len(), 10);
    assert_eq!(fired[0], (-8, 2, 1, 1, 1));
    assert_eq!(fired[9], (year, year + 10, 2, 1, 5));
}

/// The rows of `batch` whose key (column 1) is in `range`'s key groups.
fn of_key_groups(batch: &RecordBatch, range: sluice_plan::KeyGroupRange) -> RecordBatch {
    let groups = crate::checkpoint::keyed::label(batch, &[1], sluice_plan::KEY_GROUPS_DEFAULT).unwrap();
    let mine: arrow::array::BooleanArray = groups
        .values()
        .iter()
        .map(|g| Some(range.contains(u32::from(*g))))
        .collect();
    arrow::compute::filter_record_batch(batch, &mine).unwrap()
}

/// A window operator fed and fired by the copies of a checkpoint test.
trait Windowed {
    fn update(&mut self, batch: &RecordBatch, watermark: Watermark) -> sluice_types::Result<u64>;
    fn fire(&mut self, watermark: Watermark) -> sluice_types::Result<Vec<RecordBatch>>;
}

impl Windowed for FixedWindowOperator {
    fn update(&mut self, batch: &RecordBatch, watermark: Watermark) -> sluice_types::Result<u64> {
        FixedWindowOperator::update(self, batch, watermark)
    }
    fn fire(&mut self, watermark: Watermark) -> sluice_types::Result<Vec<RecordBatch>> {
        FixedWindowOperator::fire(self, watermark)
    }
}

impl Windowed for SessionWindowOperator {
    fn update(&mut self, batch: &RecordBatch, watermark: Watermark) -> sluice_types::Result<u64> {
        SessionWindowOperator::update(self, batch, watermark)
    }
    fn fire(&mut self, watermark: Watermark) -> sluice_types::Result<Vec<RecordBatch>> {
        SessionWindowOperator::fire(self, watermark)
    }
}

/// Feeds `batch` (if any) to every copy — each of its instances the rows
/// of its key groups — fires them at `watermark` and checks that each
/// copy fires `want`, what the operator that never stopped fired.
fn copies_fire<W: Windowed>(
    copies: &mut [Vec<(sluice_plan::KeyGroupRange, W)>],
    batch: Option<&RecordBatch>,
    watermark: Watermark,
    want: &[RecordBatch],
    at: &str,
) {
    for (c, copy) in copies.iter_mut().enumerate() {
        let mut got = Vec::new();
        for (range, o) in copy.iter_mut() {
            if let Some(batch) = batch {
                o.update(&of_key_groups(batch, *range), watermark).unwrap();
            }
            got.extend(o.fire(watermark).unwrap());
        }
        assert_eq!(collect(&got), collect(want), "copy {c}, {at}");
    }
}

#[tokio::test]
async fn panes_restored_from_incremental_checkpoints_fire_as_the_operator_never_stopped() {
    // The rows with late ones; every 3rd batch the operator checkpoints
    // through the real writer, manifest, pruning and reader (keeping one
    // checkpoint and what it references). A copy restored from each
    // checkpoint, and from one of them two instances of a rescale (each
    // given the rows of its key groups), go on beside the operator, which
    // is checked against the rule; every copy must fire what it fires.
    use crate::checkpoint::testing::{CheckpointLoop, Incrementality, restored_copies};
    use crate::checkpoint::{LOW_WATERMARK_KEY, LocalStateStore, StateStore};
    use crate::operator::Operator;
    let data = rows_with_late_ones();
    for (slide, size) in WINDOWS {
        let hop = window_of((slide, size));
        let new_op = || FixedWindowOperator::new(&spec(hop, 1_000_000), output_schema()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
        let mut checkpoints = CheckpointLoop::new(store, 1);
        let mut op = new_op();
        // Copies: each a list of instances with their key groups.
        let mut copies: Vec<Vec<(sluice_plan::KeyGroupRange, FixedWindowOperator)>> = Vec::new();
        let (mut fired, mut seen, mut low) = (Vec::new(), Vec::new(), Watermark::MIN);
        let mut counted = Incrementality::default();
        for (i, chunk) in data.chunks(150).enumerate() {
            let watermark = batch_watermark(i, chunk);
            if i % 3 == 2 {
                let id = checkpoints.start();
                let mut state = op.snapshot(id).await.unwrap();
                state.put_bytes(LOW_WATERMARK_KEY, low.0.to_le_bytes().to_vec());
                let (entry, restored) = checkpoints.complete_and_read(id, state).await.unwrap();
                let rescales: &[u32] = if i == 68 { &[1, 2] } else { &[1] };
                let more = restored_copies(id, &entry, &restored, rescales, |_| new_op(), (&mut counted, 0)).await;
                copies.extend(more);
            }
            low = watermark;
            let batch = rows(chunk);
            op.update(&batch, watermark).unwrap();
            seen.extend(chunk.iter().map(|r| (*r, watermark.0)));
            let want = op.fire(watermark).unwrap();
            copies_fire(
                &mut copies,
                Some(&batch),
                watermark,
                &want,
                &format!("{slide}/{size} batch {i}"),
            );
            fired.extend(want);
        }
        let want = op.fire(Watermark::MAX).unwrap();
        copies_fire(
            &mut copies,
            None,
            Watermark::MAX,
            &want,
            &format!("{slide}/{size} at the end"),
        );
        fired.extend(want);
        assert_eq!(collect(&fired), hop_by_rule(&seen, slide, size), "{slide}/{size}");
        // 44 checkpoints; the first has nothing to reference, and with
        // 30-ms windows a part is often gone by the next.
        assert!(counted.referencing >= 20, "{slide}/{size}: {counted:?}");
        checkpoints.finish().await;
    }
}

/// A task's state holding open windows in the layout before panes —
/// columns start, key, count's state, sum's state — through the file
/// format.
fn old_open_windows(columns: [Vec<i64>; 4]) -> crate::checkpoint::TaskState {
    let fields: Vec<Field> = (0..4)
        .map(|i| Field::new(format!("c{i}"), DataType::Int64, true))
        .collect();
    let columns = columns
        .into_iter()
        .map(|v| Arc::new(Int64Array::from(v)) as arrow::array::ArrayRef)
        .collect();
    let windows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let mut old = crate::checkpoint::TaskState::default();
    old.put_batch("windows", windows);
    crate::checkpoint::TaskState::decode(&old.encode().unwrap()).unwrap()
}

#[test]
fn a_checkpoint_of_open_windows_from_before_incremental_panes_still_restores() {
    // The layout HOP snapshots had before panes were written: a row per
    // (window, group) — start, key, count's state, sum's state. Rows seen:
    // (7, k1, 1) and (12, k1, 10); slide 5, size 10, nothing fired.
    let hop = WindowKind::Hop {
        slide_ms: 5,
        size_ms: 10,
    };
    let old = old_open_windows([vec![0, 5, 10], vec![1, 1, 1], vec![1, 2, 1], vec![1, 11, 10]]);
    let mut op = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    op.restore_state(&old).unwrap();
    // A later row in pane [10, 15): windows [5, 15) and [10, 20).
    op.update(&rows(&[(13, 1, 8)]), Watermark::MIN).unwrap();
    // Checkpointed again (the restored windows as they were, the new row's
    // pane as a pane) and restored once more.
    let state = round_trip(&mut op, 1, Watermark::MIN);
    let mut op = FixedWindowOperator::new(&spec(hop, 100), output_schema()).unwrap();
    op.restore_state(&state).unwrap();
    assert_eq!(
        collect(&op.fire(Watermark::MAX).unwrap()),
        vec![(0, 10, 1, 1, 1), (5, 15, 1, 3, 19), (10, 20, 1, 2, 18)]
    );
}

#[test]
fn a_tumbling_checkpoint_of_open_windows_from_before_panes_still_restores() {
    // The layout TUMBLE snapshots had before they were panes: a row per
    // (window, group) — start, key, count's state, sum's state. Rows seen:
    // (7, k1, 1), (12, k1, 10) and (14, k2, 5); size 10, nothing fired.
    let tumble = WindowKind::Tumble { size_ms: 10 };
    let old = old_open_windows([vec![0, 10, 10], vec![1, 1, 2], vec![1, 1, 1], vec![1, 10, 5]]);
    let mut op = FixedWindowOperator::new(&spec(tumble, 100), output_schema()).unwrap();
    op.restore_state(&old).unwrap();
    // Later rows in [10, 20) for k1 and a new key, and one in [20, 30).
    op.update(&rows(&[(13, 1, 8), (15, 3, 2), (21, 1, 4)]), Watermark::MIN)
        .unwrap();
    // Checkpointed again (the restored windows as they were, the new rows
    // as panes) and restored once more: the watermark 20 fires the first
    // two windows, the rest at the end.
    let state = round_trip(&mut op, 1, Watermark::MIN);
    let mut op = FixedWindowOperator::new(&spec(tumble, 100), output_schema()).unwrap();
    op.restore_state(&state).unwrap();
    assert_eq!(
        collect(&op.fire(Watermark(20)).unwrap()),
        vec![
            (0, 10, 1, 1, 1),
            (10, 20, 1, 2, 18),
            (10, 20, 2, 1, 5),
            (10, 20, 3, 1, 2)
        ]
    );
    assert_eq!(collect(&op.fire(Watermark::MAX).unwrap()), vec![(20, 30, 1, 1, 4)]);
}

/// A tumbling window's table fires as it is without checkpoints; after
/// one, the rows since are a second table, merged with the first's part
/// when the window fires — and the bound counts the groups held, a key in
/// both once in each.
#[test]
fn a_tumbling_window_checkpointed_midway_merges_its_parts_and_bounds_the_groups_held() {
    let tumble = WindowKind::Tumble { size_ms: 10 };
    let mut op = FixedWindowOperator::new(&spec(tumble, 3), output_schema()).unwrap();
    op.update(&rows(&[(1, 1, 1), (2, 2, 5)]), Watermark::MIN).unwrap();
    round_trip(&mut op, 1, Watermark::MIN);
    // k1 again: a second group of k1 held, three in all (at the bound).
    op.update(&rows(&[(3, 1, 7)]), Watermark::MIN).unwrap();
    let err = op.update(&rows(&[(4, 2, 1)]), Watermark::MIN).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    // The refused batch left nothing behind; the window merges its parts.
    assert_eq!(
        collect(&op.fire(Watermark(10)).unwrap()),
        vec![(0, 10, 1, 2, 8), (0, 10, 2, 1, 5)]
    );
    // Fired: its groups are free again.
    op.update(&rows(&[(11, 1, 1), (12, 2, 1), (13, 3, 1)]), Watermark(10))
        .unwrap();
}

/// A window keyed by two columns (`k`, `v`; DataFusion's multi-column
/// group table, whose `emit(All)` keeps its hash map in 55.2: a table
/// interned into again after it reads groups it no longer has — out of
/// bounds, a segfault in a release build, as q8's TUMBLE by (id, name) did
/// at its first checkpoint). A batch refused at the bound leaves the
/// window as it was, and rows for its groups still go in.
#[test]
fn a_window_keyed_by_two_columns_refuses_a_batch_at_the_bound_and_goes_on() {
    let mut s = spec(WindowKind::Tumble { size_ms: 10 }, 3);
    s.key_columns = vec![1, 2];
    s.aggregates.truncate(1);
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    let out = Arc::new(Schema::new(vec![
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts, false),
        Field::new("_k0", DataType::Int64, false),
        Field::new("_k1", DataType::Int64, false),
        Field::new("_a0", DataType::Int64, true),
    ]));
    let mut op = FixedWindowOperator::new(&s, out.clone()).unwrap();
    op.update(&rows(&[(1, 1, 10), (2, 1, 20), (3, 2, 10)]), Watermark::MIN)
        .unwrap();
    // (1, 10) is held, (3, 30) would be a fourth group.
    let err = op.update(&rows(&[(4, 1, 10), (5, 3, 30)]), Watermark::MIN).unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    op.update(&rows(&[(6, 1, 20), (7, 2, 10)]), Watermark::MIN).unwrap();
    let state = round_trip(&mut op, 1, Watermark::MIN);
    // Restored under a bound of 4: a row for a restored group after the
    // checkpoint is a group of a second part (see the next test).
    s.groups_max = 4;
    let mut restored = FixedWindowOperator::new(&s, out).unwrap();
    restored.restore_state(&state).unwrap();
    restored.update(&rows(&[(8, 1, 10)]), Watermark::MIN).unwrap();
    let fired = restored.fire(Watermark(10)).unwrap();
    let ints = |b: &RecordBatch, i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap().clone();
    let mut got: Vec<(i64, i64, i64)> = Vec::new();
    for b in &fired {
        let (k, v, c) = (ints(b, 2), ints(b, 3), ints(b, 4));
        got.extend((0..b.num_rows()).map(|r| (k.value(r), v.value(r), c.value(r))));
    }
    got.sort();
    assert_eq!(got, vec![(1, 10, 2), (1, 20, 2), (2, 10, 2)]);
}

/// Sessions (gap 40 ms) over the rows with late ones, checkpointed every
/// third batch through the real state writer, manifest, pruning and reader
/// (one checkpoint kept, and what it references): a copy restored from
/// each — and two instances of a rescale from one — go on beside the
/// operator and must fire what it fires, batch for batch. Most checkpoints
/// reference earlier ones (cold keys' sessions stay where they were
/// written) and are smaller than a full snapshot of the same sessions;
/// every row not dropped as late is in exactly one fired session.
#[tokio::test]
async fn sessions_restored_from_incremental_checkpoints_fire_as_the_operator_never_stopped() {
    use crate::checkpoint::testing::{CheckpointLoop, Incrementality, restored_copies};
    use crate::checkpoint::{LocalStateStore, StateStore};
    use crate::operator::Operator;
    let gap = 40;
    let session = WindowKind::Session { gap_ms: gap };
    let new_op = || SessionWindowOperator::new(&spec(session, 1_000_000), gap, output_schema()).unwrap();
    let data = rows_with_late_ones();
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
    let mut checkpoints = CheckpointLoop::new(store, 1);
    let mut op = new_op();
    let mut copies: Vec<Vec<(sluice_plan::KeyGroupRange, SessionWindowOperator)>> = Vec::new();
    let (mut fired, mut late, mut counted) = (Vec::new(), 0, Incrementality::default());
    for (i, chunk) in data.chunks(150).enumerate() {
        let watermark = batch_watermark(i, chunk);
        if i % 3 == 2 {
            let id = checkpoints.start();
            let state = op.snapshot(id).await.unwrap();
            let (entry, restored) = checkpoints.complete_and_read(id, state).await.unwrap();
            let rescales: &[u32] = if i == 68 { &[1, 2] } else { &[1] };
            let more = restored_copies(id, &entry, &restored, rescales, |_| new_op(), (&mut counted, 5)).await;
            copies.extend(more);
        }
        let batch = rows(chunk);
        late += op.update(&batch, watermark).unwrap();
        let want = op.fire(watermark).unwrap();
        copies_fire(&mut copies, Some(&batch), watermark, &want, &format!("batch {i}"));
        fired.extend(want);
    }
    let want = op.fire(Watermark::MAX).unwrap();
    copies_fire(&mut copies, None, Watermark::MAX, &want, "at the end");
    fired.extend(want);
    let in_sessions: i64 = collect(&fired).iter().map(|s| s.3).sum();
    assert!(late > 0);
    assert_eq!(
        in_sessions,
        data.len() as i64 - late as i64,
        "every row kept is in one session"
    );
    assert!(counted.taken >= 40, "{counted:?}");
    assert!(counted.referencing * 2 >= counted.taken, "{counted:?}");
    checkpoints.finish().await;
}

/// With checkpoints off, a keyed SESSION keeps no mark of the keys it saw:
/// once every session fired, it holds nothing (the marks of changed keys
/// held every key ever seen until a checkpoint, which never came).
#[test]
fn sessions_without_checkpoints_keep_no_marks() {
    let gap = 40;
    let session = WindowKind::Session { gap_ms: gap };
    let mut op = SessionWindowOperator::new(&spec(session, 1_000_000), gap, output_schema()).unwrap();
    let data = rows_with_late_ones();
    for (i, chunk) in data.chunks(150).enumerate() {
        let watermark = batch_watermark(i, chunk);
        op.update(&rows(chunk), watermark).unwrap();
        op.fire(watermark).unwrap();
    }
    let fired = op.fire(Watermark::MAX).unwrap();
    assert!(!collect(&fired).is_empty() || data.is_empty());
    assert_eq!(
        op.keys_and_marks(),
        (0, 0),
        "every session fired, no marks without a checkpoint"
    );
}
