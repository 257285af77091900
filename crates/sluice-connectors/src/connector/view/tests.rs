use super::*;
use arrow::array::{Int64Array, StringArray};
use sluice_dataflow::checkpoint::testing::CheckpointLoop;
use sluice_dataflow::checkpoint::{LocalStateStore, StateStore};

fn input(changelog: bool) -> SchemaRef {
    let mut fields = Vec::new();
    if changelog {
        fields.push(Field::new("op", DataType::Utf8, false));
    }
    fields.push(Field::new("k", DataType::Int64, true));
    fields.push(Field::new("n", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

fn changes(rows: &[(&str, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        input(true),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// The published rows of `name`, sorted.
fn shown(views: &Views, name: &str) -> Vec<(i64, i64)> {
    let view = views.get(name).expect("published");
    let mut rows = Vec::new();
    for b in view.rows().unwrap() {
        let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let n = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        rows.extend((0..b.num_rows()).map(|i| (k.value(i), n.value(i))));
    }
    assert_eq!(rows.len(), view.num_rows());
    rows.sort_unstable();
    rows
}

/// Readers see the rows as of the last barrier: a batch applied after it
/// shows only at the next snapshot, and then with its update pairs whole.
#[tokio::test]
async fn rows_are_published_at_barriers_only() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.restore(None).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![], "a fresh view is empty at once");
    assert_eq!(views.get("v").unwrap().schema.fields().len(), 2, "no op column");
    sink.apply(&changes(&[("+I", 1, 1), ("+I", 2, 1)])).unwrap();
    assert_eq!(shown(&views, "v"), vec![], "nothing shows before the barrier");
    sink.snapshot(1).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 1), (2, 1)]);
    assert_eq!(views.get("v").unwrap().checkpoint, Some(1));
    sink.apply(&changes(&[("-U", 1, 1), ("+U", 1, 2), ("-D", 2, 1)]))
        .unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 1), (2, 1)]);
    sink.snapshot(2).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 2)]);
}

/// A result is a multiset: a row added twice and taken back once stays
/// once; a retraction of a row the view never held changes nothing.
#[tokio::test]
async fn duplicate_rows_are_counted() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.apply(&changes(&[
        ("+I", 7, 7),
        ("+I", 7, 7),
        ("+I", 8, 8),
        ("-D", 7, 7),
        ("-D", 9, 9),
    ]))
    .unwrap();
    sink.snapshot(1).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(7, 7), (8, 8)]);
    assert_eq!(sink.len, 2);
}

/// The checkpoint holds the rows of its barrier: a sink restored from it
/// publishes them before it reads anything, duplicates included.
#[tokio::test]
async fn a_restored_view_publishes_its_checkpoint() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.apply(&changes(&[("+I", 1, 10), ("+I", 1, 10), ("+I", 2, 20)]))
        .unwrap();
    let mut state = sink.snapshot(4).await.unwrap();
    sink.apply(&changes(&[("+I", 3, 30)])).unwrap();
    // As the state writer does before it encodes (the rows are keyed
    // state, incremental; this first snapshot references nothing).
    state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
    let state = TaskState::decode(&state.encode().unwrap()).unwrap();
    let fresh = Arc::new(Views::default());
    let mut restored = ViewSink::new("v", &input(true), true, 100, fresh.clone()).unwrap();
    restored.restore(Some((4, state))).await.unwrap();
    assert_eq!(shown(&fresh, "v"), vec![(1, 10), (1, 10), (2, 20)]);
    restored.apply(&changes(&[("-U", 1, 10), ("+U", 1, 11)])).unwrap();
    restored.snapshot(5).await.unwrap();
    assert_eq!(shown(&fresh, "v"), vec![(1, 10), (1, 11), (2, 20)]);
}

/// An append-only query's rows (no op column) only add; at `'rows.max'`
/// the next row fails with 53400, and the rows before it stay.
#[tokio::test]
async fn rows_max_is_enforced() {
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(false), false, 3, views.clone()).unwrap();
    let rows = |from: i64, to: i64| {
        RecordBatch::try_new(
            input(false),
            vec![
                Arc::new(Int64Array::from_iter_values(from..to)),
                Arc::new(Int64Array::from_iter_values(from..to)),
            ],
        )
        .unwrap()
    };
    sink.apply(&rows(0, 3)).unwrap();
    let err = sink.apply(&rows(3, 4)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::User {
                code: SqlCode::ConfigurationLimitExceeded,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("more than 3 rows ('rows.max')"), "{err}");
    sink.snapshot(1).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(0, 0), (1, 1), (2, 2)]);
}

/// `WITH (…)` of CREATE MATERIALIZED VIEW: unknown keys are listed,
/// checkpoints cannot be off, `'rows.max'` is at least 1.
#[test]
fn options_are_checked() {
    let opts = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    validate(&opts(&[("rows.max", "5"), ("checkpoint.interval", "2s")])).unwrap();
    let err = validate(&opts(&[("colour", "red")])).unwrap_err().to_string();
    assert!(
        err.contains("unknown option 'colour' for a materialized view; known options: checkpoint.dir, checkpoint.interval, placement, rows.max"),
        "{err}"
    );
    let err = validate(&opts(&[("checkpoint.interval", "off")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be 'off'"), "{err}");
    let err = validate(&opts(&[("rows.max", "0")])).unwrap_err().to_string();
    assert!(err.contains("at least 1"), "{err}");
}

/// A small LCG: the test's changes, reproducible.
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

/// The rows a sink holds in its batches, dead ones included.
fn held(sink: &ViewSink) -> usize {
    sink.batches.iter().map(|b| b.batch.num_rows()).sum::<usize>() + sink.tail.as_ref().map_or(0, |t| t.rows)
}

/// A random changelog over a few thousand keys — duplicates, retractions
/// of rows added earlier in the same batch and long before, retractions of
/// rows never held — first growing, then shrinking the result. After every
/// barrier the published rows are the reference multiset's; dead rows are
/// compacted away (the rows held stay under twice the result plus 64 Ki);
/// and every checkpoint goes through the real writer, manifest and
/// pruning: a sink restored from the files (references resolved from the
/// checkpoints that wrote the batches) publishes the same rows and, fed
/// more changes, the reference's result.
#[tokio::test]
async fn incremental_checkpoints_and_compaction_keep_the_result() {
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(LocalStateStore::new(tmp.path()));
    let mut checkpoints = CheckpointLoop::new(store, 1);
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 1_000_000, views.clone()).unwrap();
    sink.restore(None).await.unwrap();
    // The reference: the result's rows, each as often as it is held.
    let mut want: Vec<(i64, i64)> = Vec::new();
    let mut rng = Lcg(11);
    let (mut referencing, mut compacted) = (0, false);
    let round_changes = |rng: &mut Lcg, want: &mut Vec<(i64, i64)>, round: u64| {
        let mut batches = Vec::new();
        for _ in 0..4 {
            let mut rows: Vec<(&str, i64, i64)> = Vec::new();
            for _ in 0..2_500 {
                let add_percent = if round < 10 { 85 } else { 25 };
                if want.is_empty() || rng.below(100) < add_percent {
                    let row = (rng.below(3_000) as i64, rng.below(3) as i64);
                    rows.push(("+I", row.0, row.1));
                    want.push(row);
                } else if rng.below(50) == 0 {
                    // Never held: ignored.
                    rows.push(("-D", -1, -1));
                } else {
                    let row = want.swap_remove(rng.below(want.len() as u64) as usize);
                    rows.push((if rng.below(2) == 0 { "-D" } else { "-U" }, row.0, row.1));
                }
            }
            batches.push(changes(&rows));
        }
        batches
    };
    for round in 0..30 {
        for batch in round_changes(&mut rng, &mut want, round) {
            let dead_before = sink.dead;
            sink.apply(&batch).unwrap();
            assert!(
                held(&sink) <= 2 * sink.len as usize + COMPACT_DEAD_MIN,
                "dead rows are bounded"
            );
            // A compaction leaves no dead row (dropping whole dead
            // batches alone would not take tens of thousands at once).
            compacted |= dead_before > COMPACT_DEAD_MIN / 2 && sink.dead == 0 && sink.len > 0;
        }
        let id = checkpoints.start();
        let state = sink.snapshot(id).await.unwrap();
        let m = checkpoints.complete(id, state).await.unwrap();
        referencing += usize::from(!m.tasks[0].references.is_empty());
        let mut sorted = want.clone();
        sorted.sort_unstable();
        assert_eq!(shown(&views, "v"), sorted, "round {round}: the published rows");
        assert_eq!(sink.len as usize, want.len());

        if round % 4 != 3 {
            continue;
        }
        let fresh = Arc::new(Views::default());
        let mut restored = ViewSink::new("v", &input(true), true, 1_000_000, fresh.clone()).unwrap();
        restored
            .restore(Some((id, checkpoints.read(id).await.unwrap())))
            .await
            .unwrap();
        assert_eq!(
            shown(&fresh, "v"),
            sorted,
            "round {round}: restored from checkpoint {id}"
        );
        // The restored sink goes on: fed changes, it holds what the
        // reference does.
        let mut probe = Lcg(1_000 + round);
        let mut next = want.clone();
        for batch in round_changes(&mut probe, &mut next, round) {
            restored.apply(&batch).unwrap();
        }
        restored.snapshot(id + 1_000).await.unwrap();
        next.sort_unstable();
        assert_eq!(shown(&fresh, "v"), next, "round {round}: the restored sink goes on");
    }
    assert!(compacted, "dead rows were compacted away");
    assert!(
        referencing >= 20,
        "most checkpoints referenced earlier ones ({referencing})"
    );
    checkpoints.finish().await;
}

/// A checkpoint from before incremental view snapshots — the rows as one
/// batch of the view's columns, duplicates repeated — restores as it did.
#[tokio::test]
async fn a_checkpoint_of_the_rows_as_one_batch_restores() {
    let mut state = TaskState::default();
    let columns = RecordBatch::try_new(
        input(false),
        vec![
            Arc::new(Int64Array::from(vec![1, 1, 2])),
            Arc::new(Int64Array::from(vec![10, 10, 20])),
        ],
    )
    .unwrap();
    state.put_batch(ROWS_KEY, columns);
    let state = TaskState::decode(&state.encode().unwrap()).unwrap();
    let views = Arc::new(Views::default());
    let mut sink = ViewSink::new("v", &input(true), true, 100, views.clone()).unwrap();
    sink.restore(Some((3, state))).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 10), (1, 10), (2, 20)]);
    sink.apply(&changes(&[("-D", 1, 10)])).unwrap();
    sink.snapshot(4).await.unwrap();
    assert_eq!(shown(&views, "v"), vec![(1, 10), (2, 20)]);
}
