//! The join operator driven directly; expected rows come from a nested loop
//! over the same inputs or are worked out by hand in the comments.

use super::side::*;
use super::*;
use crate::exchange::{Output, OutputEdge};
use crate::message::Message;
use crate::metrics::TaskMetrics;
use crate::operator::{Operator, OperatorContext};
use arrow::array::{AsArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::row::{RowConverter, SortField};
use sluice_plan::{JoinSide, JoinSpec, Partitioning};
use sluice_types::{OperatorId, Watermark};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A side's rows: (time ms, key, value); output columns: time, value.
fn side_schema(prefix: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            format!("{prefix}_t"),
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new(format!("{prefix}_v"), DataType::Int64, false),
        Field::new(format!("{prefix}_k"), DataType::Int64, true),
    ]))
}

fn side(prefix: &str, windowed: bool) -> JoinSide {
    JoinSide {
        schema: side_schema(prefix),
        keys: if windowed { vec![2, 0] } else { vec![2] },
        time_column: Some(0),
        output_columns: 2,
        op_column: None,
    }
}

fn spec(windowed: bool, ttl: Option<i64>, rows_max: usize) -> JoinSpec {
    JoinSpec {
        left: side("l", windowed),
        right: side("r", windowed),
        kind: sluice_plan::JoinKind::Inner,
        windowed,
        interval_ms: None,
        state_ttl_ms: ttl,
        state_rows_max: rows_max,
        filter: None,
    }
}

#[test]
fn a_watermark_sets_each_kind_of_joins_cutoffs() {
    use super::expiry::watermark_cutoffs;
    let w = Watermark(10_000);
    // Windowed: everything before the watermark, on both sides.
    assert_eq!(watermark_cutoffs(&spec(true, None, 10), w), Some([10_000; 2]));
    // TTL only: the watermark minus the TTL.
    assert_eq!(watermark_cutoffs(&spec(false, Some(3_000), 10), w), Some([7_000; 2]));
    assert_eq!(watermark_cutoffs(&spec(false, None, 10), w), None);
    // Interval: per side, the watermark minus that side's interval; a
    // TTL frees earlier where it is shorter.
    let interval = JoinSpec {
        interval_ms: Some([1_000, 5_000]),
        ..spec(false, None, 10)
    };
    assert_eq!(watermark_cutoffs(&interval, w), Some([9_000, 5_000]));
    let both = JoinSpec {
        state_ttl_ms: Some(2_000),
        ..interval
    };
    assert_eq!(watermark_cutoffs(&both, w), Some([9_000, 8_000]));
}

fn output_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    Arc::new(Schema::new(vec![
        Field::new("l_t", ts.clone(), false),
        Field::new("l_v", DataType::Int64, false),
        Field::new("r_t", ts, false),
        Field::new("r_v", DataType::Int64, false),
    ]))
}

fn rows(prefix: &str, rows: &[(i64, Option<i64>, i64)]) -> RecordBatch {
    let t = TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.0));
    let k = Int64Array::from_iter(rows.iter().map(|r| r.1));
    let v = Int64Array::from_iter_values(rows.iter().map(|r| r.2));
    RecordBatch::try_new(side_schema(prefix), vec![Arc::new(t), Arc::new(v), Arc::new(k)]).unwrap()
}

/// Drives the operator: one input channel per side (input 0 left, 1 right).
struct Harness {
    op: JoinOperator,
    output: Output,
    rx: crate::channel::ChannelReceiver,
    metrics: Arc<TaskMetrics>,
    watermark: Watermark,
}

impl Harness {
    fn new(spec: JoinSpec) -> Self {
        let (tx, rx) = crate::channel::channel(1 << 30);
        let metrics = TaskMetrics::new(OperatorId(0), 0, "join");
        Harness {
            op: JoinOperator::new(&spec, output_schema(), 1).unwrap(),
            output: Output::new(
                vec![OutputEdge::new(
                    Partitioning::Forward,
                    vec![tx],
                    0,
                    sluice_plan::KEY_GROUPS_DEFAULT,
                )],
                metrics.clone(),
            ),
            rx,
            metrics,
            watermark: Watermark::MIN,
        }
    }

    async fn send(&mut self, input: usize, batch: RecordBatch) -> Result<Vec<(i64, i64, i64, i64)>> {
        let mut ctx = OperatorContext {
            output: &mut self.output,
            metrics: &self.metrics,
            watermark: self.watermark,
        };
        self.op.process_batch(batch, input, &mut ctx).await?;
        Ok(self.drain())
    }

    async fn watermark(&mut self, w: i64) {
        self.watermark = Watermark(w);
        let mut ctx = OperatorContext {
            output: &mut self.output,
            metrics: &self.metrics,
            watermark: self.watermark,
        };
        self.op.process_watermark(Watermark(w), &mut ctx).await.unwrap();
        self.drain();
    }

    /// (l_t, l_v, r_t, r_v) of the emitted rows, sorted.
    fn drain(&mut self) -> Vec<(i64, i64, i64, i64)> {
        let mut out = Vec::new();
        while let Ok(m) = self.rx.try_recv() {
            let Message::Data(b) = m else { continue };
            let ts = |c: usize| {
                b.column(c)
                    .as_any()
                    .downcast_ref::<TimestampMillisecondArray>()
                    .unwrap()
                    .clone()
            };
            let iv = |c: usize| b.column(c).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            let (lt, lv, rt, rv) = (ts(0), iv(1), ts(2), iv(3));
            for r in 0..b.num_rows() {
                out.push((lt.value(r), lv.value(r), rt.value(r), rv.value(r)));
            }
        }
        out.sort_unstable();
        out
    }
}

#[tokio::test]
async fn matches_a_nested_loop_over_interleaved_batches() {
    // Pseudo-random rows on both sides, keys 0..7 (some null), no expiry.
    let mut seed = 42u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as i64
    };
    // Each side indexed or scanned, and switching in the middle.
    for (flip_at, start) in [
        (99, [true, true]),
        (99, [false, true]),
        (99, [true, false]),
        (10, [false, false]),
        (10, [true, true]),
    ] {
        for filtered in [false, true] {
            nested_loop_rounds(&mut next, flip_at, start, filtered).await;
        }
    }
}

/// 20 rounds of random batches on random sides, the sides indexed as in
/// `start` (`true`: indexed, `false`: scanned), each flipped at round
/// `flip_at`; the joined rows must be the nested loop's (`filtered`: the
/// pairs where `l_v < r_v`, a condition of the join's own).
async fn nested_loop_rounds(next: &mut impl FnMut() -> i64, flip_at: i64, start: [bool; 2], filtered: bool) {
    let mut h = Harness::new(JoinSpec {
        filter: filtered.then(|| "l_v < r_v".to_string()),
        ..spec(false, None, 1_000_000)
    });
    let set = |h: &mut Harness, modes: [bool; 2]| {
        let JoinState { sides, hasher, .. } = &mut h.op.state;
        for (side, indexed) in sides.iter_mut().zip(modes) {
            side.force_strategy(indexed, hasher);
        }
    };
    set(&mut h, start);
    let (mut left, mut right) = (Vec::new(), Vec::new());
    let mut got = Vec::new();
    for round in 0..20 {
        if round == flip_at {
            set(&mut h, start.map(|i| !i));
        }
        let batch: Vec<(i64, Option<i64>, i64)> = (0..(next() % 9))
            .map(|i| (round * 100 + i, Some(next() % 8).filter(|k| *k != 7), next() % 1000))
            .collect();
        let input = (next() % 2) as usize;
        got.extend(
            h.send(input, rows(if input == 0 { "l" } else { "r" }, &batch))
                .await
                .unwrap(),
        );
        if input == 0 {
            left.extend(batch)
        } else {
            right.extend(batch)
        }
    }
    let mut expected = Vec::new();
    for l in &left {
        for r in &right {
            if l.1.is_some() && l.1 == r.1 && (!filtered || l.2 < r.2) {
                expected.push((l.0, l.2, r.0, r.2));
            }
        }
    }
    expected.sort_unstable();
    got.sort_unstable();
    assert!(!expected.is_empty());
    assert_eq!(
        got, expected,
        "sides indexed {start:?}, flipped at round {flip_at}, filtered {filtered}"
    );
}

#[tokio::test]
async fn pairs_the_join_condition_rejects_are_never_emitted_and_nulls_reject() {
    // The condition reads columns of each side: those are gathered for the
    // candidates, then only passing pairs are built. It is NULL for the
    // left row of value 13: not true, so that pair is not joined.
    let mut h = Harness::new(JoinSpec {
        filter: Some("CASE WHEN l_v = 13 THEN NULL ELSE r_t >= l_t END AND r_v - l_v < 100".to_string()),
        ..spec(false, None, 1_000)
    });
    let left: Vec<(i64, Option<i64>, i64)> = (0..50).map(|i| (i * 10, Some(i % 5), i)).collect();
    assert_eq!(h.send(0, rows("l", &left)).await.unwrap(), vec![]);
    // Earlier than every left row of its key, or 100 more: no pair passes,
    // and no batch (not even an empty one) goes out.
    let right: Vec<(i64, Option<i64>, i64)> = vec![(-1, Some(1), 5), (1_000, Some(2), 500)];
    let mut ctx = OperatorContext {
        output: &mut h.output,
        metrics: &h.metrics,
        watermark: h.watermark,
    };
    h.op.process_batch(rows("r", &right), 1, &mut ctx).await.unwrap();
    assert!(h.rx.try_recv().is_err(), "a batch went out");
    // Some pass: those of key 3 at or before 250, whose value is within
    // 100, but the one whose condition is NULL.
    let out = h.send(1, rows("r", &[(250, Some(3), 110)])).await.unwrap();
    let expected: Vec<(i64, i64, i64, i64)> = left
        .iter()
        .filter(|l| l.1 == Some(3) && l.0 <= 250 && 110 - l.2 < 100 && l.2 != 13)
        .map(|l| (l.0, l.2, 250, 110))
        .collect();
    assert_eq!(expected.len(), 2, "left rows 18, 23");
    assert_eq!(out, expected);
}

#[tokio::test]
async fn ttl_frees_rows_older_than_the_watermark_minus_ttl() {
    let mut h = Harness::new(spec(false, Some(100), 1_000));
    // left k=1 at t=0 and t=150.
    h.send(0, rows("l", &[(0, Some(1), 10), (150, Some(1), 11)]))
        .await
        .unwrap();
    assert_eq!(h.op.state.rows(), 2);
    // Watermark 200: cutoff 100 frees t=0, keeps t=150.
    h.watermark(200).await;
    assert_eq!(h.op.state.rows(), 1);
    let out = h.send(1, rows("r", &[(210, Some(1), 20)])).await.unwrap();
    assert_eq!(out, vec![(150, 11, 210, 20)]);
}

#[tokio::test]
async fn windowed_join_frees_a_time_at_the_watermark_and_drops_late_rows() {
    let mut h = Harness::new(spec(true, None, 1_000));
    // Keys are (k, t): only equal times match.
    h.send(0, rows("l", &[(10, Some(1), 1), (20, Some(1), 2)]))
        .await
        .unwrap();
    let out = h
        .send(1, rows("r", &[(10, Some(1), 3), (30, Some(1), 4)]))
        .await
        .unwrap();
    assert_eq!(out, vec![(10, 1, 10, 3)]);
    // Watermark 20 frees time 10 on both sides (t < 20), keeps 20 and 30.
    h.watermark(20).await;
    assert_eq!(h.op.state.rows(), 2);
    // A left row at t=10 is now late: dropped, matches nothing.
    let out = h
        .send(0, rows("l", &[(10, Some(1), 5), (30, Some(1), 6)]))
        .await
        .unwrap();
    assert_eq!(out, vec![(30, 6, 30, 4)]);
    assert_eq!(h.metrics.late_rows_dropped.load(Ordering::Relaxed), 1);
    h.watermark(i64::MAX).await;
    assert_eq!(h.op.state.rows(), 0, "the end of time frees everything");
}

#[tokio::test]
async fn state_is_bounded_at_rows_max() {
    let mut h = Harness::new(spec(false, Some(10), 3));
    h.send(0, rows("l", &[(0, Some(1), 1), (1, Some(2), 1), (2, Some(3), 1)]))
        .await
        .unwrap();
    assert_eq!(h.op.state.rows(), 3, "exactly at the limit is fine");
    let err = h.send(1, rows("r", &[(3, Some(1), 1)])).await.unwrap_err();
    assert_eq!(err.sqlstate(), "53400");
    // Null keys are never stored, so they do not count.
    h.send(1, rows("r", &[(3, None, 1)])).await.unwrap();
    // Expiry makes room again.
    h.watermark(12).await;
    assert_eq!(h.op.state.rows(), 1);
    h.send(1, rows("r", &[(13, Some(1), 1)])).await.unwrap();
}

/// Row-encoded Int64 join keys (as the operator encodes them).
fn encoded(keys: &[i64]) -> Rows {
    let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
    converter
        .convert_columns(&[Arc::new(Int64Array::from(keys.to_vec())) as ArrayRef])
        .unwrap()
}

/// Keys too long to be kept in the index (two Int64 columns: 18 bytes), so
/// lookups compare them in the stored batches.
fn encoded_wide(keys: &[i64]) -> Rows {
    let converter = RowConverter::new(vec![SortField::new(DataType::Int64); 2]).unwrap();
    let column = Arc::new(Int64Array::from(keys.to_vec())) as ArrayRef;
    let rows = converter.convert_columns(&[column.clone(), column]).unwrap();
    assert!(rows.row(0).data().len() > INLINE_KEY_MAX);
    rows
}

/// Stores rows (time, key) on the left, one batch; returns the matches.
fn store_left(s: &mut JoinState, rows_in: &[(i64, i64)]) -> Matches {
    store_left_with(s, rows_in, encoded)
}

fn store_left_with(s: &mut JoinState, rows_in: &[(i64, i64)], encode: fn(&[i64]) -> Rows) -> Matches {
    let b = rows("l", &rows_in.iter().map(|(t, k)| (*t, Some(*k), 0)).collect::<Vec<_>>());
    let keys = encode(&rows_in.iter().map(|r| r.1).collect::<Vec<_>>());
    let times: Vec<i64> = rows_in.iter().map(|r| r.0).collect();
    s.probe_and_store(0, &b, keys, times, &vec![true; rows_in.len()])
        .unwrap()
}

/// Times of the left rows a right row with key `k` matches.
fn left_times_matching(s: &JoinState, k: i64) -> Vec<i64> {
    left_times_matching_with(s, k, encoded)
}

fn left_times_matching_with(s: &JoinState, k: i64, encode: fn(&[i64]) -> Rows) -> Vec<i64> {
    let keys = encode(&[k]);
    let hashes = s.hashes(&keys, &[true]);
    let mut out = Vec::new();
    if s.sides[0].indexed {
        s.sides[0].probe(keys.row(0).data(), hashes[0], s.cutoffs[0], 0, &mut out);
    } else {
        s.sides[0].scan(&keys, &[(hashes[0], 0)], s.cutoffs[0], &mut out);
    }
    out.iter()
        .map(|(_, e)| s.sides[0].batch(e.batch).unwrap().times.value(e.row as usize))
        .collect()
}

#[test]
fn stored_batches_are_released_when_their_last_row_expires() {
    let mut s = JoinState::new(100);
    store_left(&mut s, &[(0, 1), (5, 2)]);
    assert_eq!(s.sides[0].batches.len(), 1);
    assert_eq!(s.expire(3), 1);
    assert_eq!(s.sides[0].batches.len(), 1, "row at t=5 still lives in it");
    assert_eq!(s.sides[0].keys(), 1, "key 1 left the index with its last row");
    assert_eq!(s.expire(6), 1);
    assert!(s.sides[0].batches.is_empty() && s.sides[0].keys() == 0);
}

#[test]
fn a_key_chains_its_rows_and_expired_ones_never_match() {
    // Key 1 arrives at times 50, 10, 100, 70 (out of order), key 2 at 60,
    // each row in its own batch; a probe sees a key's rows oldest first.
    let mut s = JoinState::new(100);
    for (t, k) in [(50, 1), (10, 1), (60, 2), (100, 1), (70, 1)] {
        store_left(&mut s, &[(t, k)]);
    }
    assert_eq!(left_times_matching(&s, 1), [50, 10, 100, 70]);
    assert_eq!(left_times_matching(&s, 2), [60]);
    assert!(left_times_matching(&s, 3).is_empty());
    // Cutoff 60: 50 and 10 are freed (the oldest arrivals); 60 (key 2)
    // lives; 100 and 70 live.
    assert_eq!(s.expire(60), 2);
    assert_eq!(left_times_matching(&s, 1), [100, 70]);
    // Cutoff 71: key 2's 60 is freed; 70 has expired and no longer
    // matches, but is held until 100 (which arrived before it) expires.
    assert_eq!(s.expire(71), 1);
    assert_eq!(left_times_matching(&s, 1), [100]);
    assert!(left_times_matching(&s, 2).is_empty());
    assert_eq!(s.rows(), 2);
    // A snapshot leaves out the held but expired row's batch.
    let live = |s: &JoinState| -> Vec<Vec<bool>> {
        s.snapshot_batches(0)
            .unwrap()
            .iter()
            .map(|b| b.column(b.num_columns() - 1).as_boolean().values().iter().collect())
            .collect()
    };
    assert_eq!(live(&s), [vec![true]]);
    // A batch only partly expired is kept with its expired rows marked dead.
    store_left(&mut s, &[(60, 3), (200, 3)]);
    assert_eq!(live(&s), [vec![true], vec![false, true]]);
    assert_eq!(
        s.expire(81),
        0,
        "the t=80 row waits for the t=100 row that came before it"
    );
    assert_eq!(s.expire(201), 4);
    assert_eq!(s.rows(), 0);
    assert!(s.sides[0].keys() == 0 && s.sides[0].batches.is_empty());
}

#[test]
fn expired_rows_are_freed_a_step_at_a_time_and_never_match_meanwhile() {
    for indexed in [true, false] {
        let mut s = JoinState::new(10_000);
        // 40 batches of 100 rows, key = time % 10, times 0..4000.
        let input: Vec<(i64, i64)> = (0..4_000).map(|t| (t, t % 10)).collect();
        for chunk in input.chunks(100) {
            store_left(&mut s, chunk);
        }
        let JoinState { sides, hasher, .. } = &mut s;
        sides[0].force_strategy(indexed, hasher);
        // Cutoff 3000 expires 30 batches; nothing is freed yet.
        s.advance([3_000, i64::MIN]);
        assert_eq!(s.rows(), 4_000);
        let expected: Vec<i64> = (3_000..4_000).filter(|t| t % 10 == 3).collect();
        assert_eq!(left_times_matching(&s, 3), expected, "indexed: {indexed}");
        assert_eq!(s.snapshot_batches(0).unwrap().len(), 10, "expired batches are left out");
        // Each step frees whole batches until its budget is reached.
        assert_eq!(s.free(250), 300);
        assert_eq!(s.free(250), 300);
        assert_eq!(s.rows(), 3_400);
        assert_eq!(left_times_matching(&s, 3), expected);
        // The state limit counts only rows not yet expired: a batch that
        // fits once the expired rows are freed is accepted (and frees them).
        s.rows_max = 1_100;
        store_left(&mut s, &[(5_000, 3)]);
        assert_eq!(s.rows(), 1_001);
        assert_eq!(s.free(usize::MAX), 0);
        let mut with_new = expected.clone();
        with_new.push(5_000);
        assert_eq!(left_times_matching(&s, 3), with_new);
    }
}

#[test]
fn keys_that_collide_in_one_batch_chain_to_each_other() {
    // Two rows of one key in the same batch: the second points at the
    // first even though their batch is not stored yet when it is indexed.
    let mut s = JoinState::new(100);
    store_left(&mut s, &[(1, 7), (2, 8), (3, 7)]);
    assert_eq!(left_times_matching(&s, 7), [1, 3]);
    assert_eq!(s.sides[0].keys(), 2);
    // Many distinct and repeated keys against a nested loop.
    let mut s = JoinState::new(100_000);
    let input: Vec<(i64, i64)> = (0..5_000).map(|i| (i, (i * 7919) % 613)).collect();
    for chunk in input.chunks(333) {
        store_left(&mut s, chunk);
    }
    s.expire(1_000);
    // Stored and never probed, the side went from its index to scans;
    // the index rebuilt from the held rows must chain them as well.
    assert!(!s.sides[0].indexed);
    for indexed in [false, true] {
        let JoinState { sides, hasher, .. } = &mut s;
        sides[0].force_strategy(indexed, hasher);
        for k in [0, 1, 17, 612] {
            let expected: Vec<i64> = input
                .iter()
                .filter(|(t, kk)| *kk == k && *t >= 1_000)
                .map(|r| r.0)
                .collect();
            assert!(!expected.is_empty());
            assert_eq!(left_times_matching(&s, k), expected, "key {k}, indexed {indexed}");
        }
    }
    assert_eq!(s.rows(), 4_000);
}

#[tokio::test]
async fn a_restored_join_matches_what_the_original_would() {
    // Both sides hold rows (one expired, one with a null key) when the
    // snapshot is taken; the rest goes to the original and to a fresh
    // operator restored from the snapshot, which must emit the same rows —
    // the pairs a nested loop finds between the rest and what was live.
    let mut h = Harness::new(spec(false, Some(100), 1_000));
    h.send(0, rows("l", &[(0, Some(1), 10), (150, Some(1), 11), (160, None, 12)]))
        .await
        .unwrap();
    h.send(1, rows("r", &[(170, Some(2), 20), (180, Some(1), 21)]))
        .await
        .unwrap();
    h.watermark(200).await; // cutoff 100 frees the left row at t=0
    let live = h.op.state.rows();
    assert_eq!(live, 3);
    let mut snapshot = h.op.snapshot(1).await.unwrap();
    // Through the file format, as recovery reads it (the task sets the
    // key group count its keyed rows are labelled by).
    snapshot.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
    let snapshot = crate::checkpoint::TaskState::decode(&snapshot.encode().unwrap()).unwrap();
    let mut restored = Harness::new(spec(false, Some(100), 1_000));
    restored.watermark = Watermark(200);
    restored.op.restore(Some((1, snapshot))).await.unwrap();
    assert_eq!(restored.op.state.rows(), live);
    let rest = [
        (0, rows("l", &[(210, Some(2), 13), (220, Some(3), 14)])),
        (1, rows("r", &[(230, Some(1), 22), (240, Some(3), 23)])),
    ];
    // By hand: l(210,k2,13)×r(170,k2,20); r(230,k1,22)×l(150,k1,11);
    // r(240,k3,23)×l(220,k3,14).
    let expected = vec![(150, 11, 230, 22), (210, 13, 170, 20), (220, 14, 240, 23)];
    for h in [&mut h, &mut restored] {
        let mut got = Vec::new();
        for (input, batch) in &rest {
            got.extend(h.send(*input, batch.clone()).await.unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, expected);
    }
}

#[tokio::test]
async fn an_empty_join_snapshots_nothing_and_restores_from_none() {
    let mut h = Harness::new(spec(true, None, 10));
    assert!(h.op.snapshot(1).await.unwrap().is_empty());
    h.op.restore(None).await.unwrap();
    assert_eq!(h.op.state.rows(), 0);
}

#[tokio::test]
async fn a_snapshot_shares_the_stored_arrays_instead_of_copying_rows() {
    let mut h = Harness::new(spec(false, Some(100), 1_000));
    let batch = rows("l", &[(10, Some(1), 10), (20, None, 11), (30, Some(2), 12)]);
    h.send(0, batch.clone()).await.unwrap();
    let snapshot = h.op.snapshot(1).await.unwrap();
    let stored = snapshot.rows("join.left.batches");
    assert_eq!(stored.len(), 1);
    let n = batch.num_columns();
    for c in 0..n {
        assert_eq!(
            stored[0].column(c).to_data().buffers()[0].as_ptr(),
            batch.column(c).to_data().buffers()[0].as_ptr(),
            "column {c} is the stored array, not a copy"
        );
    }
    // Event times are read back from the batch's time column: only the
    // live column is added. The null-key row is not live: restore skips it.
    assert_eq!(stored[0].num_columns(), n + 1);
    let live = stored[0].column(n).as_boolean().values().iter().collect::<Vec<_>>();
    assert_eq!(live, [true, false, true]);
    assert!(snapshot.rows("join.right.batches").is_empty());
}

#[tokio::test]
async fn checkpoints_that_stored_the_times_still_restore() {
    // The layout before event times were read back from the batch: the
    // times beside the columns (here deliberately not the event times, to
    // see that the stored ones are used), then the live column.
    let batch = rows("l", &[(10, Some(1), 10), (20, Some(2), 11), (30, Some(1), 12)]);
    let times = Int64Array::from(vec![500, 10, 520]);
    let live = BooleanBuffer::from(&[true, false, true][..]);
    let old = snapshot_batch(snapshot_schema(&batch.schema(), true), &batch, Some(&times), live).unwrap();
    let mut state = crate::checkpoint::TaskState::default();
    state.put_batches("join.left.batches", vec![old]);
    let state = crate::checkpoint::TaskState::decode(&state.encode().unwrap()).unwrap();
    let mut h = Harness::new(spec(false, Some(100), 1_000));
    h.op.restore(Some((1, state))).await.unwrap();
    assert_eq!(h.op.state.rows(), 2);
    // Watermark 550: cutoff 450 keeps both (stored times 500 and 520, not
    // the event times 10 and 30).
    h.watermark(550).await;
    let out = h
        .send(1, rows("r", &[(560, Some(1), 20), (560, Some(2), 21)]))
        .await
        .unwrap();
    assert_eq!(out, vec![(10, 10, 560, 20), (30, 12, 560, 20)]);
}

#[test]
fn freed_keys_leave_the_index_in_sweeps_and_never_match() {
    for encode in [encoded as fn(&[i64]) -> Rows, encoded_wide] {
        let mut s = JoinState::new(100_000);
        // 1000 distinct keys at times 0..1000, in batches of 100.
        let input: Vec<(i64, i64)> = (0..1_000).map(|i| (i, i)).collect();
        for chunk in input.chunks(100) {
            store_left_with(&mut s, chunk, encode);
        }
        assert_eq!(s.sides[0].index_len(), 1_000);
        // Freeing 500 rows earns a sweep of 1000 entries: every shard is
        // visited once and exactly the 500 freed keys leave the index.
        assert_eq!(s.expire(500), 500);
        assert_eq!(s.sides[0].index_len(), 500);
        assert_eq!(s.sides[0].keys(), 500);
        assert!(left_times_matching_with(&s, 499, encode).is_empty());
        assert_eq!(left_times_matching_with(&s, 500, encode), [500]);
        // A freed key stored again starts a new chain; its freed rows never
        // come back, whether or not its stale head was swept yet.
        store_left_with(&mut s, &[(2_000, 7), (2_001, 700)], encode);
        assert_eq!(left_times_matching_with(&s, 7, encode), [2_000]);
        assert_eq!(left_times_matching_with(&s, 700, encode), [700, 2_001]);
        assert_eq!(s.expire(1_500), 500);
        assert_eq!(left_times_matching_with(&s, 700, encode), [2_001]);
        assert_eq!(s.expire(3_000), 2);
        assert_eq!(s.sides[0].index_len(), 0, "an empty side leaves an empty index");
    }
}

#[test]
fn long_keys_chain_like_short_ones() {
    let mut s = JoinState::new(100);
    for (t, k) in [(50, 1), (10, 1), (60, 2), (100, 1), (70, 1)] {
        store_left_with(&mut s, &[(t, k)], encoded_wide);
    }
    assert_eq!(left_times_matching_with(&s, 1, encoded_wide), [50, 10, 100, 70]);
    assert_eq!(left_times_matching_with(&s, 2, encoded_wide), [60]);
    assert_eq!(s.expire(60), 2);
    assert_eq!(left_times_matching_with(&s, 1, encoded_wide), [100, 70]);
}

#[test]
fn row_numbers_split_into_batch_and_row() {
    let batches_max = 1u64 << (64 - ROW_BITS);
    for (batch, row) in [
        (0, 0),
        (1, 5),
        (12_345, STORED_BATCH_ROWS_MAX - 1),
        (batches_max - 2, 7),
    ] {
        assert_eq!(split(seq(batch, row)), (batch, row));
    }
    assert_ne!(split(seq(3, 0)), split(seq(2, STORED_BATCH_ROWS_MAX - 1)));
}

#[tokio::test]
async fn interval_join_matches_a_nested_loop_and_frees_rows_behind_the_interval() {
    // Left indexed; left scanned (q7's shape); left switching to scanned
    // and back while rows expire.
    for switches in [vec![], vec![0], vec![17, 41]] {
        interval_join_rounds(&switches).await;
    }
}

/// The interval join over 60 rounds, flipping the left side between
/// indexed and scanned at the rounds in `switches`.
async fn interval_join_rounds(switches: &[i64]) {
    // R.t - 30 <= L.t <= R.t + 10: a left row can match right rows up to
    // 30 ms after it, a right row left rows up to 10 ms after it.
    let (a, b) = (30, 10);
    let mut join = spec(false, None, 1_000_000);
    join.interval_ms = Some([a, b]);
    let mut h = Harness::new(join);
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as i64
    };
    let (mut left, mut right, mut got) = (Vec::new(), Vec::new(), Vec::new());
    let mut late = 0;
    for round in 0..60 {
        if switches.contains(&round) {
            let JoinState { sides, hasher, .. } = &mut h.op.state;
            let indexed = !sides[0].indexed;
            sides[0].force_strategy(indexed, hasher);
        }
        let watermark = round * 10;
        h.watermark(watermark).await;
        for input in [0, 1] {
            // Up to 20 ms of disorder ahead of the watermark, and now and
            // then a row behind it (late: dropped and counted).
            let mut batch: Vec<(i64, Option<i64>, i64)> = (0..(next() % 6))
                .map(|_| (round * 10 + next() % 20, Some(next() % 4), next() % 1000))
                .collect();
            if next() % 5 == 0 {
                batch.push((watermark - 1 - next() % 40, Some(next() % 4), -1));
                late += 1;
            }
            let prefix = if input == 0 { "l" } else { "r" };
            got.extend(h.send(input, rows(prefix, &batch)).await.unwrap());
            let on_time = batch.into_iter().filter(|r| r.0 >= watermark);
            if input == 0 {
                left.extend(on_time)
            } else {
                right.extend(on_time)
            }
        }
        if round == 30 {
            // Rows more than 30 ms (left) or 10 ms (right) behind the
            // watermark are freed (rows arrive in time order up to the
            // 20 ms disorder, so a few older ones may still be held).
            let held = h.op.state.rows();
            let needed = left.iter().filter(|l| l.0 >= watermark - a).count()
                + right.iter().filter(|r| r.0 >= watermark - b).count();
            assert!(held < left.len() + right.len(), "nothing was freed");
            assert!(held >= needed && held <= needed + 12, "held {held}, needed {needed}");
        }
    }
    assert!(late > 0);
    assert_eq!(h.metrics.late_rows_dropped.load(Ordering::Relaxed), late);
    // The planner filters the joined rows by the interval; do the same.
    got.retain(|(lt, _, rt, _)| rt - a <= *lt && *lt <= rt + b);
    let mut expected = Vec::new();
    for l in &left {
        for r in &right {
            if l.1 == r.1 && r.0 - a <= l.0 && l.0 <= r.0 + b {
                expected.push((l.0, l.2, r.0, r.2));
            }
        }
    }
    expected.sort_unstable();
    got.sort_unstable();
    assert!(expected.len() > 50, "{} matches", expected.len());
    assert_eq!(got, expected, "left flipped at rounds {switches:?}");
    h.watermark(i64::MAX).await;
    assert_eq!(h.op.state.rows(), 0);
}

#[tokio::test]
async fn batches_larger_than_a_stored_batch_are_stored_in_slices_and_restore() {
    // 1300 left rows in one batch: more than two stored batches' worth (512
    // rows in tests). Keys i % 7 at time i; the right side probes keys 0..7.
    let left: Vec<(i64, Option<i64>, i64)> = (0..1_300).map(|i| (i, Some(i % 7), i)).collect();
    assert!(left.len() > 2 * STORED_BATCH_ROWS_MAX);
    let right: Vec<(i64, Option<i64>, i64)> = (0..7).map(|k| (2_000, Some(k), 100 + k)).collect();
    let expected = |cutoff: i64| {
        let mut e: Vec<_> = left
            .iter()
            .filter(|l| l.0 >= cutoff)
            .flat_map(|l| right.iter().filter(|r| r.1 == l.1).map(|r| (l.0, l.2, r.0, r.2)))
            .collect();
        e.sort_unstable();
        e
    };
    let mut h = Harness::new(spec(false, Some(1_000), 10_000));
    h.send(0, rows("l", &left)).await.unwrap();
    assert_eq!(h.op.state.sides[0].batches.len(), 3);
    assert_eq!(h.op.state.rows(), 1_300);
    // Watermark 1_600: cutoff 600 frees the first stored batch (rows 0..512)
    // and 88 rows of the second.
    h.watermark(1_600).await;
    assert_eq!(h.op.state.rows(), 700);
    let mut snapshot = h.op.snapshot(1).await.unwrap();
    snapshot.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
    let snapshot = crate::checkpoint::TaskState::decode(&snapshot.encode().unwrap()).unwrap();
    let mut restored = Harness::new(spec(false, Some(1_000), 10_000));
    restored.watermark = Watermark(1_600);
    restored.op.restore(Some((1, snapshot))).await.unwrap();
    assert_eq!(restored.op.state.rows(), 700);
    for h in [&mut h, &mut restored] {
        let got = h.send(1, rows("r", &right)).await.unwrap();
        assert_eq!(got, expected(600));
    }
}

#[test]
fn a_side_stored_often_and_probed_rarely_is_scanned_and_goes_back_when_probed_often() {
    let mut s = JoinState::new(1 << 30);
    let window = STRATEGY_WINDOW_ROWS as i64;
    // Left: keys 0..100 at times 0.., 512-row batches; the right side
    // probes it with one key per 8192 rows stored (a window's result).
    let probe_right = |s: &mut JoinState, k: i64| {
        let b = rows("r", &[(0, Some(k), 0)]);
        s.probe_and_store(1, &b, encoded(&[k]), vec![0], &[true]).unwrap().len()
    };
    for t in (0..2 * window).step_by(512) {
        let batch: Vec<(i64, i64)> = (t..t + 512).map(|i| (i, i % 100)).collect();
        store_left(&mut s, &batch);
        if (t + 512) % 8192 == 0 {
            probe_right(&mut s, 7);
        }
    }
    assert!(!s.sides[0].indexed, "rarely probed: scanned");
    assert_eq!(s.sides[0].index_len(), 0, "the index was dropped");
    assert!(s.sides[1].indexed, "the right side is probed by every left batch");
    // A scanned side answers as the index would: key 7 every 100 rows.
    let held = s.sides[0].rows as i64;
    assert_eq!(probe_right(&mut s, 7) as i64, (held + 92) / 100);
    assert_eq!(left_times_matching(&s, 7).len() as i64, (held + 92) / 100);
    // Probed by every batch of many keys: scanning would cost more than
    // indexing, so it indexes again, and probes agree with a scan's.
    let mut probes = 0;
    while !s.sides[0].indexed {
        let b = rows("r", &(0..64).map(|k| (0, Some(k), 0)).collect::<Vec<_>>());
        let keys: Vec<i64> = (0..64).collect();
        s.probe_and_store(1, &b, encoded(&keys), vec![0; 64], &[true; 64])
            .unwrap();
        probes += 1;
        assert!(probes < 100, "never went back to the index");
    }
    assert_eq!(left_times_matching(&s, 7).len() as i64, (held + 92) / 100);
    assert_eq!(s.sides[0].keys(), 100);
}

#[test]
fn rows_not_stored_never_match_whether_indexed_or_scanned() {
    for indexed in [true, false] {
        let mut s = JoinState::new(100);
        // The second row (late, say) is in the stored batch but not stored.
        let b = rows("l", &[(1, Some(5), 0), (2, Some(5), 0), (3, Some(6), 0)]);
        s.probe_and_store(0, &b, encoded(&[5, 5, 6]), vec![1, 2, 3], &[true, false, true])
            .unwrap();
        // Flip away and back: the index or the tags are rebuilt from the
        // held batch, the unstored row included in it.
        let JoinState { sides, hasher, .. } = &mut s;
        sides[0].force_strategy(!indexed, hasher);
        sides[0].force_strategy(indexed, hasher);
        assert_eq!(left_times_matching(&s, 5), [1], "indexed {indexed}");
        assert_eq!(left_times_matching(&s, 6), [3], "indexed {indexed}");
    }
}

#[test]
fn key_prefixes_sort_as_the_keys_do() {
    // Zones compare the first 8 bytes of row-encoded keys: never out of
    // order (equal for keys that differ only further on), negatives first.
    let values = [i64::MIN, -300, -5, -1, 0, 1, 255, 256, 1 << 40, i64::MAX];
    for encode in [encoded, encoded_wide] {
        let keys = encode(&values);
        let prefixes: Vec<u64> = (0..values.len()).map(|r| key_prefix(keys.row(r).data())).collect();
        assert!(prefixes.windows(2).all(|w| w[0] <= w[1]), "{prefixes:?}");
        assert!(prefixes[0] < prefixes[values.len() - 1]);
    }
    // A batch's zone spans its stored rows only.
    let keys = encoded(&[7, 1_000_000, 3]);
    let zone = Zone::of(0, &keys, 0, |r| r != 1);
    assert_eq!(
        (zone.min, zone.max),
        (key_prefix(keys.row(2).data()), key_prefix(keys.row(0).data()))
    );
}

/// An outer join's output may hold NULLs: (l_t, l_v, r_t, r_v), each
/// `None` where padded.
type OuterRow = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

fn nullable_output_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    Arc::new(Schema::new(vec![
        Field::new("l_t", ts.clone(), true),
        Field::new("l_v", DataType::Int64, true),
        Field::new("r_t", ts, true),
        Field::new("r_v", DataType::Int64, true),
    ]))
}

fn outer_harness(spec: JoinSpec) -> Harness {
    let mut h = Harness::new(JoinSpec {
        kind: sluice_plan::JoinKind::Inner,
        ..spec.clone()
    });
    h.op = JoinOperator::new(&spec, nullable_output_schema(), 1).unwrap();
    h
}

impl Harness {
    async fn send_outer(&mut self, input: usize, batch: RecordBatch) -> Vec<OuterRow> {
        let mut ctx = OperatorContext {
            output: &mut self.output,
            metrics: &self.metrics,
            watermark: self.watermark,
        };
        self.op.process_batch(batch, input, &mut ctx).await.unwrap();
        self.drain_outer()
    }

    async fn watermark_outer(&mut self, w: i64) -> Vec<OuterRow> {
        self.watermark = Watermark(w);
        let mut ctx = OperatorContext {
            output: &mut self.output,
            metrics: &self.metrics,
            watermark: self.watermark,
        };
        self.op.process_watermark(Watermark(w), &mut ctx).await.unwrap();
        self.drain_outer()
    }

    fn drain_outer(&mut self) -> Vec<OuterRow> {
        let mut out = Vec::new();
        while let Ok(m) = self.rx.try_recv() {
            let Message::Data(b) = m else { continue };
            let ts = |c: usize| {
                b.column(c)
                    .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                    .clone()
            };
            let iv = |c: usize| b.column(c).as_primitive::<arrow::datatypes::Int64Type>().clone();
            let (lt, lv, rt, rv) = (ts(0), iv(1), ts(2), iv(3));
            let get = |a: &dyn arrow::array::Array, r: usize, v: i64| (!a.is_null(r)).then_some(v);
            for r in 0..b.num_rows() {
                out.push((
                    get(&lt, r, lt.value(r)),
                    get(&lv, r, lv.value(r)),
                    get(&rt, r, rt.value(r)),
                    get(&rv, r, rv.value(r)),
                ));
            }
        }
        out.sort_unstable();
        out
    }
}

#[tokio::test]
async fn a_left_outer_windowed_join_pads_unmatched_left_rows_when_their_window_closes() {
    let spec = JoinSpec {
        kind: sluice_plan::JoinKind::Left,
        ..spec(true, None, 1_000)
    };
    let mut h = outer_harness(spec);
    // Left k=1 and k=2 at time 10; right k=1 at 10 (matches) and k=3 at 10
    // (no left: a right row, not preserved, never appears alone).
    assert_eq!(
        h.send_outer(0, rows("l", &[(10, Some(1), 1), (10, Some(2), 2)])).await,
        vec![]
    );
    assert_eq!(
        h.send_outer(1, rows("r", &[(10, Some(1), 3), (10, Some(3), 4)])).await,
        vec![(Some(10), Some(1), Some(10), Some(3))]
    );
    // Before the window closes nothing is padded; once the watermark
    // passes time 10, k=2 comes out alone, once.
    assert_eq!(h.watermark_outer(10).await, vec![]);
    assert_eq!(h.watermark_outer(20).await, vec![(Some(10), Some(2), None, None)]);
    assert_eq!(h.watermark_outer(30).await, vec![]);
    // A left row with a NULL key can never match: out at once.
    assert_eq!(
        h.send_outer(0, rows("l", &[(40, None, 9)])).await,
        vec![(Some(40), Some(9), None, None)]
    );
}

#[tokio::test]
async fn a_full_outer_interval_join_matches_only_pairs_within_the_interval() {
    // |right.t - left.t| <= 5.
    let spec = JoinSpec {
        kind: sluice_plan::JoinKind::Full,
        interval_ms: Some([5, 5]),
        ..spec(false, None, 1_000)
    };
    let mut h = outer_harness(spec);
    assert_eq!(h.send_outer(0, rows("l", &[(0, Some(1), 1)])).await, vec![]);
    // Same key, 10 ms apart: not a match (an inner join's filter would drop
    // it after the join; an outer join must not count it).
    assert_eq!(h.send_outer(1, rows("r", &[(10, Some(1), 2)])).await, vec![]);
    assert_eq!(
        h.send_outer(0, rows("l", &[(8, Some(1), 3)])).await,
        vec![(Some(8), Some(3), Some(10), Some(2))]
    );
    // Right k=2 at 12 matches nothing.
    h.send_outer(1, rows("r", &[(12, Some(2), 4)])).await;
    // Watermark 100: everything expires; unmatched rows of both sides come
    // out padded, each once: left t=0 and right t=12.
    assert_eq!(
        h.watermark_outer(100).await,
        vec![(None, None, Some(12), Some(4)), (Some(0), Some(1), None, None)]
    );
    assert_eq!(h.watermark_outer(200).await, vec![]);
}

#[tokio::test]
async fn a_restored_outer_join_remembers_which_rows_matched() {
    let spec = JoinSpec {
        kind: sluice_plan::JoinKind::Left,
        ..spec(true, None, 1_000)
    };
    let mut h = outer_harness(spec.clone());
    h.send_outer(0, rows("l", &[(10, Some(1), 1), (10, Some(2), 2)])).await;
    assert_eq!(h.send_outer(1, rows("r", &[(10, Some(1), 3)])).await.len(), 1);
    let snapshot = h.op.snapshot(1).await.unwrap();
    let mut restored = outer_harness(spec);
    restored.op.restore(Some((1, snapshot))).await.unwrap();
    // Only the row that never matched is padded.
    assert_eq!(
        restored.watermark_outer(20).await,
        vec![(Some(10), Some(2), None, None)]
    );
}

mod incremental;
