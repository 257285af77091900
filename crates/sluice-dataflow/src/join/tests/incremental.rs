//! Incremental join checkpoints through the real writer, manifest, pruning
//! and reader: a join restored from any of a run of checkpoints — each
//! writing only the batches stored since the previous one — answers the
//! next input exactly as the join that was never stopped.

use super::*;
use crate::checkpoint::testing::CheckpointLoop;
use crate::checkpoint::{LocalStateStore, StateStore};
use arrow::array::Array;

/// A deterministic stream of numbers (no RNG crate in the tests' deps).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Round `round`'s batches: per side a few batches of rows around time
/// `round * 100` (disordered by up to 60 ms), keys 0..8 with some nulls.
fn round_batches(rng: &mut Lcg, round: i64) -> Vec<(usize, RecordBatch)> {
    let mut out = Vec::new();
    for _ in 0..3 {
        for (input, prefix) in [(0, "l"), (1, "r")] {
            let n = 1 + rng.below(20) as usize;
            let r: Vec<(i64, Option<i64>, i64)> = (0..n)
                .map(|_| {
                    let t = round * 100 + rng.below(100) as i64 - 60;
                    let k = (rng.below(10) < 9).then(|| rng.below(8) as i64);
                    (t, k, rng.below(1_000) as i64)
                })
                .collect();
            out.push((input, rows(prefix, &r)));
        }
    }
    out
}

/// Each side's live rows as a full snapshot lists them: (time, value, key).
fn live_rows(state: &JoinState) -> [Vec<(i64, i64, Option<i64>)>; 2] {
    [0, 1].map(|side| {
        let mut out = Vec::new();
        for b in state.snapshot_batches(side).unwrap() {
            let live = b
                .column(b.schema().index_of(SNAPSHOT_LIVE).unwrap())
                .as_boolean()
                .clone();
            let t = b
                .column(0)
                .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                .clone();
            let v = b.column(1).as_primitive::<arrow::datatypes::Int64Type>().clone();
            let k = b.column(2).as_primitive::<arrow::datatypes::Int64Type>().clone();
            for r in (0..b.num_rows()).filter(|r| live.value(*r)) {
                out.push((t.value(r), v.value(r), k.is_valid(r).then(|| k.value(r))));
            }
        }
        out.sort_unstable();
        out
    })
}

#[tokio::test]
async fn a_join_restored_from_incremental_checkpoints_matches_the_one_never_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
    // Keep one checkpoint (and what it references).
    let mut checkpoints = CheckpointLoop::new(store, 1);
    let mut referencing = 0;

    // A TTL join (300 ms): rows expire, whole batches and parts of them,
    // while later checkpoints still reference older batches.
    let spec = spec(false, Some(300), 1_000_000);
    let mut h = Harness::new(spec.clone());
    let mut rng = Lcg(7);
    for round in 0..24 {
        for (input, batch) in round_batches(&mut rng, round) {
            h.send(input, batch).await.unwrap();
        }
        h.watermark(round * 100 - 100).await;
        if round % 3 != 2 {
            continue;
        }
        // A checkpoint: the task's snapshot through the writer.
        let id = checkpoints.start();
        let state = h.op.snapshot(id).await.unwrap();
        let m = checkpoints.complete(id, state).await.unwrap();
        let entry = &m.tasks[0];
        if !entry.references.is_empty() {
            referencing += 1;
            assert!(entry.references.iter().all(|r| r.checkpoint < id));
        }
        let kept = checkpoints.kept().await.unwrap();
        let mut wanted: Vec<u64> = m.referenced().chain([id]).collect();
        wanted.sort_unstable();
        wanted.dedup();
        assert_eq!(
            kept, wanted,
            "checkpoint {id}: pruning keeps it and what it references, only"
        );

        // Restore a copy from the files and feed both the next round.
        let state = checkpoints.read(id).await.unwrap();
        let mut copy = Harness::new(spec.clone());
        copy.watermark = h.watermark;
        copy.op.restore(Some((id, state))).await.unwrap();
        assert_eq!(
            live_rows(&copy.op.state),
            live_rows(&h.op.state),
            "checkpoint {id}: live rows"
        );
        let mut probe = Lcg(1000 + id);
        let next = round_batches(&mut probe, round + 1);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for (input, batch) in &next {
            want.extend(h.send(*input, batch.clone()).await.unwrap());
            got.extend(copy.send(*input, batch.clone()).await.unwrap());
        }
        want.sort_unstable();
        got.sort_unstable();
        assert!(!want.is_empty(), "checkpoint {id}: the probe finds matches");
        assert_eq!(got, want, "checkpoint {id}: the restored join answers as the original");
    }
    assert!(referencing >= 5, "most checkpoints were incremental ({referencing})");
    checkpoints.finish().await;
}
