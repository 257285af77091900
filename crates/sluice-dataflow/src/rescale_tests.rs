//! Restoring keyed state at another parallelism, and from a checkpoint
//! written before key groups: a keyed TUMBLE pipeline is checkpointed
//! half way through its input, stopped, and restored; what it emits before
//! and after equals, row for row, a hand computation over the whole input
//! (and so an uninterrupted run).

use super::*;
use crate::OperatorContext;
use crate::channel::InProcessTransport;
use crate::checkpoint::TaskState;
use crate::checkpoint::manifest::{self, MANIFEST_FILE, Manifest};
use crate::checkpoint::state::crc32;
use crate::checkpoint::{CheckpointStats, LocalStateStore, StateStore};
use crate::operator::Operator;
use crate::source::SourceEvent;
use crate::source::SourceReader;
use arrow::array::{Array, Int64Array, TimestampMillisecondArray};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_plan::{AggregateCall, EdgeSpec, SinkSpec, SourceSpec, WatermarkSpec, WindowAggSpec, WindowKind};
use sluice_plan::{OperatorKind, OperatorSpec, Partitioning};
use sluice_types::{EdgeId, OperatorUid, Watermark};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

const WINDOW_MS: i64 = 1_000;
const KEYS: i64 = 50;
const BATCHES: usize = 40;
const ROWS_PER_BATCH: i64 = 25;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]))
}

fn output_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    Arc::new(Schema::new(vec![
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts, false),
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Int64, true),
        Field::new("c", DataType::Int64, true),
    ]))
}

/// Row `i` of the input: times rise 40 ms a row, so a window holds 25
/// rows; keys and values vary.
fn row(i: i64) -> (i64, i64, i64) {
    (i * 40, (i * 7) % KEYS, i % 13)
}

fn input() -> Vec<RecordBatch> {
    (0..BATCHES as i64)
        .map(|b| {
            let rows: Vec<_> = (b * ROWS_PER_BATCH..(b + 1) * ROWS_PER_BATCH).map(row).collect();
            RecordBatch::try_new(
                input_schema(),
                vec![
                    Arc::new(TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.0))),
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// (window start, key, sum(v), count(v)), by hand.
type Out = (i64, i64, i64, i64);

fn expected() -> Vec<Out> {
    let mut groups: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    for i in 0..BATCHES as i64 * ROWS_PER_BATCH {
        let (ts, k, v) = row(i);
        let g = groups.entry((ts.div_euclid(WINDOW_MS) * WINDOW_MS, k)).or_default();
        g.0 += v;
        g.1 += 1;
    }
    groups.into_iter().map(|((w, k), (s, c))| (w, k, s, c)).collect()
}

/// Reads the script from its position; holds (pending, cancel-safe) at
/// `hold_at` until the test stops the pipeline.
struct ScriptReader {
    next: usize,
    hold_at: Option<usize>,
    held: Arc<AtomicBool>,
}

#[async_trait]
impl SourceReader for ScriptReader {
    fn partitions(&self) -> usize {
        1
    }
    async fn next(&mut self, _rows_max: usize) -> Result<SourceEvent> {
        if Some(self.next) == self.hold_at {
            self.held.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        let Some(batch) = input().get(self.next).cloned() else {
            return Ok(SourceEvent::End);
        };
        self.next += 1;
        Ok(SourceEvent::Data { partition: 0, batch })
    }
    fn snapshot(&mut self) -> Result<TaskState> {
        let mut s = TaskState::default();
        s.put_bytes("next", (self.next as u64).to_le_bytes().to_vec());
        Ok(s)
    }
    fn restore(&mut self, state: &TaskState) -> Result<()> {
        if let Some(b) = state.bytes("next") {
            self.next = u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
        }
        Ok(())
    }
}

struct CollectSink(Arc<Mutex<Vec<Out>>>);

#[async_trait]
impl Operator for CollectSink {
    async fn process_batch(&mut self, batch: RecordBatch, _: usize, _: &mut OperatorContext<'_>) -> Result<()> {
        let col = |i: usize| -> Vec<i64> {
            let c = batch.column(i);
            match c.as_any().downcast_ref::<TimestampMillisecondArray>() {
                Some(t) => t.values().to_vec(),
                None => c.as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec(),
            }
        };
        let (w, k, s, c) = (col(0), col(2), col(3), col(4));
        let mut out = self.0.lock().unwrap();
        out.extend((0..batch.num_rows()).map(|i| (w[i], k[i], s[i], c[i])));
        Ok(())
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
}

struct Connectors {
    hold_at: Option<usize>,
    held: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Out>>>,
}

/// A sink stuck in its first batch (a barrier never gets through it).
struct StuckSink;

#[async_trait]
impl Operator for StuckSink {
    async fn process_batch(&mut self, _: RecordBatch, _: usize, _: &mut OperatorContext<'_>) -> Result<()> {
        std::future::pending().await
    }
}

/// [`Connectors`] whose sink is stuck.
struct StuckConnectors(Connectors);

impl ConnectorFactory for StuckConnectors {
    fn source(&self, spec: &SourceSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        self.0.source(spec, schema, ctx)
    }
    fn sink(&self, _: &SinkSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(StuckSink))
    }
}

impl ConnectorFactory for Connectors {
    fn source(&self, _: &SourceSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(ScriptReader {
            next: 0,
            hold_at: self.hold_at,
            held: self.held.clone(),
        }))
    }
    fn sink(&self, _: &SinkSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CollectSink(self.out.clone())))
    }
}

/// source (1) → hash(k) → TUMBLE 1 s sum(v), count(v) by k (`parallelism`)
/// → single → sink (1).
fn keyed_window(parallelism: u32) -> PhysicalDag {
    let source = SourceSpec {
        stream: "t".into(),
        connector: "script".into(),
        options: BTreeMap::new(),
        watermark: Some(WatermarkSpec { column: 0, delay_ms: 0 }),
        idle_timeout_ms: 60_000,
        computed: vec![],
        unread: vec![],
        alignment_max_drift_ms: None,
    };
    let agg = |function: &str| AggregateCall {
        function: function.into(),
        args: vec![2],
        distinct: false,
    };
    let window = WindowAggSpec {
        input_schema: input_schema(),
        window: WindowKind::Tumble { size_ms: WINDOW_MS },
        time_column: 0,
        key_columns: vec![1],
        aggregates: vec![agg("sum"), agg("count")],
        groups_max: 100_000,
    };
    let sink = SinkSpec {
        changelog: false,
        connector: "collect".into(),
        options: BTreeMap::new(),
        event_time_column: None,
    };
    let op = |id: u32, kind, parallelism, output_schema| OperatorSpec {
        id: OperatorId(id),
        uid: OperatorUid::UNSET,
        kind,
        parallelism,
        output_schema,
    };
    let edge = |id: u32, partitioning| EdgeSpec {
        id: EdgeId(id),
        from: OperatorId(id),
        to: OperatorId(id + 1),
        partitioning,
    };
    let mut dag = PhysicalDag::new(
        vec![
            op(0, OperatorKind::Source(source), 1, input_schema()),
            op(1, OperatorKind::WindowAggregate(window), parallelism, output_schema()),
            op(2, OperatorKind::Sink(sink), 1, output_schema()),
        ],
        vec![edge(0, Partitioning::Hash(vec![1])), edge(1, Partitioning::Single)],
    );
    dag.assign_uids();
    dag
}

fn sorted(out: &Arc<Mutex<Vec<Out>>>) -> Vec<Out> {
    let mut rows = out.lock().unwrap().clone();
    rows.sort_unstable();
    rows
}

/// Runs the pipeline at `parallelism` to the end of its input, restored
/// from `restored` when given; returns what it emitted.
async fn run_to_end(parallelism: u32, dir: &std::path::Path, restored: Option<RestoredCheckpoint>) -> Vec<Out> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let connectors = Connectors {
        hold_at: None,
        held: Arc::default(),
        out: out.clone(),
    };
    let highest_id = restored.as_ref().map_or(0, |r| r.id);
    let plan = CheckpointPlan {
        config: CheckpointConfig::new(
            Duration::from_secs(3600),
            Arc::new(LocalStateStore::new(dir)),
            Arc::new(CheckpointStats::default()),
        ),
        restored,
        highest_id,
        handoff: None,
    };
    let runtime = deploy(parallelism, &connectors, plan);
    let status = tokio::time::timeout(Duration::from_secs(30), runtime.wait())
        .await
        .expect("finishes");
    assert_eq!(status, PipelineStatus::Finished);
    sorted(&out)
}

/// Deploys the keyed window pipeline at `parallelism` with checkpoints.
fn deploy(parallelism: u32, connectors: &Connectors, plan: CheckpointPlan) -> crate::deploy::PipelineRuntime {
    let dag = keyed_window(parallelism);
    deploy_with(
        PipelineId(1),
        &dag,
        connectors,
        &InProcessTransport::default(),
        &DeployConfig::default(),
        Some(plan),
    )
    .expect("deploys")
}

/// Runs the pipeline at `parallelism` until its source has read half the
/// input and a checkpoint was taken after that; stops it and returns what
/// it emitted (every window the watermark closed before the hold).
async fn run_half_and_checkpoint(parallelism: u32, dir: &std::path::Path) -> Vec<Out> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::new(AtomicBool::new(false));
    let connectors = Connectors {
        hold_at: Some(BATCHES / 2),
        held: held.clone(),
        out: out.clone(),
    };
    let stats = Arc::new(CheckpointStats::default());
    let plan = CheckpointPlan {
        config: CheckpointConfig::new(
            Duration::from_millis(30),
            Arc::new(LocalStateStore::new(dir)),
            stats.clone(),
        ),
        restored: None,
        highest_id: 0,
        handoff: None,
    };
    let runtime = deploy(parallelism, &connectors, plan);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !held.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the source never reached the hold"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Two more complete checkpoints: the second began after the hold.
    let seen = stats.completed().len();
    while stats.completed().len() < seen + 2 {
        assert!(tokio::time::Instant::now() < deadline, "no checkpoint after the hold");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    runtime.stop();
    runtime.wait().await;
    sorted(&out)
}

async fn latest(dir: &std::path::Path) -> RestoredCheckpoint {
    let store = LocalStateStore::new(dir);
    let (c, _) = manifest::load_latest(&store, PipelineId(1)).await.unwrap();
    c.expect("a complete checkpoint")
}

#[test]
fn a_rescale_keeps_the_uids() {
    let uids = |p| keyed_window(p).operators.iter().map(|o| o.uid).collect::<Vec<_>>();
    assert_eq!(uids(2), uids(1));
    assert_eq!(uids(2), uids(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninterrupted_run_gives_the_hand_computed_windows() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run_to_end(2, dir.path(), None).await, expected());
}

/// Checkpointed at parallelism 2, restored at 1, 2 and 4: the windows
/// emitted before and after the restore are exactly the hand-computed ones
/// (each key's open windows moved to the instance its rows now go to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_window_state_restores_at_another_parallelism() {
    for restored_at in [1, 2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let before = run_half_and_checkpoint(2, dir.path()).await;
        let checkpoint = latest(dir.path()).await;
        assert!(
            checkpoint
                .tasks
                .iter()
                .any(|(t, s)| { t.parallelism == Some(2) && s.entries.contains_key("panes") })
        );
        assert!(!before.is_empty() && before.len() < expected().len());
        let after = run_to_end(restored_at, dir.path(), Some(checkpoint)).await;
        let mut all = [before, after].concat();
        all.sort_unstable();
        assert_eq!(all, expected(), "restored at parallelism {restored_at}");
    }
}

/// Rewrites checkpoint `c` as Sluice wrote it before operator uids and key
/// groups: manifest version 1 naming tasks by operator number
/// (`task-<operator>-<instance>.state`), state files of format version 2
/// (no keyed values: the window's rows as a plain batch, in the layout of
/// open windows — a TUMBLE's panes are its windows, without the liveness
/// column), and the window's keys on the instance the old routing sent
/// them to (`hash % parallelism`, the same hash).
async fn write_as_before_key_groups(c: &RestoredCheckpoint, dag: &PhysicalDag, dir: &std::path::Path) {
    let store = LocalStateStore::new(dir);
    let chk = manifest::checkpoint_dir(PipelineId(1), c.id + 1);
    let window = dag.operators[1].clone();
    let number = |uid: OperatorUid| dag.operator_by_uid(uid).expect("an operator of the DAG").id.0;
    // The window's rows, re-split by the old routing.
    let rows: Vec<RecordBatch> = c.tasks.iter().flat_map(|(_, s)| s.rows("panes")).collect();
    let all = arrow::compute::concat_batches(&rows[0].schema(), &rows).unwrap();
    let all = all.project(&(0..all.num_columns() - 1).collect::<Vec<_>>()).unwrap();
    let hashes = crate::exchange::key_hashes(&[all.column(1).clone()], all.num_rows()).unwrap();
    let mut entries = Vec::new();
    for (t, state) in &c.tasks {
        let mut old = TaskState::default();
        for (key, value) in &state.entries {
            if !matches!(value, crate::checkpoint::state::StateValue::Keyed(_)) && !key.starts_with("panes") {
                old.entries.insert(key.clone(), value.clone());
            }
        }
        if t.uid == window.uid {
            let p = u64::from(window.parallelism);
            let mine: arrow::array::BooleanArray =
                hashes.iter().map(|h| Some(h % p == u64::from(t.instance))).collect();
            let part = arrow::compute::filter_record_batch(&all, &mine).unwrap();
            if part.num_rows() > 0 {
                old.put_batch("windows", part);
            }
        }
        let mut bytes = old.encode().unwrap();
        // The layout of format 2 is format 3's without keyed values.
        bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
        let n = bytes.len() - 4;
        let crc = crc32(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        let file = format!("task-{}-{}.state", number(t.uid), t.instance);
        entries.push(serde_json::json!({
            "operator": number(t.uid),
            "instance": t.instance,
            "file": file,
            "bytes": bytes.len(),
            "crc32": crc32(&bytes),
        }));
        store.put(&format!("{chk}/{file}"), bytes).await.unwrap();
    }
    let m = serde_json::json!({
        "format_version": 1,
        "pipeline": 1,
        "checkpoint_id": c.id + 1,
        "started_ms": 0,
        "completed_ms": 0,
        "size_bytes": 0,
        "tasks": entries,
    });
    let json = serde_json::to_vec_pretty(&m).unwrap();
    let mut text = json.clone();
    text.extend_from_slice(format!("\n#crc32 {:08x}\n", crc32(&json)).as_bytes());
    assert!(Manifest::decode(&text).is_ok(), "a version-1 manifest still reads");
    store.put(&format!("{chk}/{MANIFEST_FILE}"), text).await.unwrap();
}

/// A checkpoint written before key groups (its keys split by the old
/// routing) restores after the change with the same results, at its own
/// parallelism and at another: the window's rows are migrated to key
/// groups on restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_from_before_key_groups_still_restores() {
    for restored_at in [2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let before = run_half_and_checkpoint(2, dir.path()).await;
        let current = latest(dir.path()).await;
        write_as_before_key_groups(&current, &keyed_window(2), dir.path()).await;
        let old = latest(dir.path()).await;
        assert_eq!(
            old.manifest.as_ref().unwrap().format_version,
            1,
            "the old checkpoint is the newest"
        );
        let after = run_to_end(restored_at, dir.path(), Some(old)).await;
        let mut all = [before, after].concat();
        all.sort_unstable();
        assert_eq!(all, expected(), "restored at parallelism {restored_at}");
    }
}

/// Deploys the keyed window at `parallelism`, restored from `restored`,
/// checkpointing only on demand; waits until its source holds at batch
/// `hold_at`, then stops it at a barrier. Returns what it emitted and the
/// barrier's checkpoint.
async fn run_until_stopped_at_barrier(
    parallelism: u32,
    dir: &std::path::Path,
    restored: Option<RestoredCheckpoint>,
    hold_at: usize,
) -> (Vec<Out>, RestoredCheckpoint) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::new(AtomicBool::new(false));
    let connectors = Connectors {
        hold_at: Some(hold_at),
        held: held.clone(),
        out: out.clone(),
    };
    let store = Arc::new(LocalStateStore::new(dir));
    let highest_id = restored.as_ref().map_or(0, |r| r.id);
    let plan = CheckpointPlan {
        config: CheckpointConfig::on_demand(store, Arc::new(CheckpointStats::default())),
        restored,
        highest_id,
        handoff: None,
    };
    let runtime = deploy(parallelism, &connectors, plan);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !held.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the source never reached the hold"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let id = runtime
        .stop_at_barrier(Duration::from_secs(30))
        .await
        .expect("stops at a barrier");
    assert_eq!(id, highest_id + 1, "the stop is the next checkpoint");
    assert_eq!(runtime.status(), PipelineStatus::Stopped);
    let checkpoint = latest(dir).await;
    assert_eq!(checkpoint.id, id);
    (sorted(&out), checkpoint)
}

/// ALTER … SET PARALLELISM's mechanism: stopped at a barrier mid-stream
/// at parallelism 1, resumed at 4 from that barrier's snapshot, stopped
/// again, resumed at 2 to the end. Every window is emitted exactly once
/// with the hand-computed sums: nothing read before a barrier is lost,
/// nothing is read twice, and stopping fires no window early (a stop is
/// not an end of input).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_at_barriers_and_rescaling_1_4_2_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (first, at_third) = run_until_stopped_at_barrier(1, dir.path(), None, BATCHES / 3).await;
    let (second, at_two_thirds) = run_until_stopped_at_barrier(4, dir.path(), Some(at_third), 2 * BATCHES / 3).await;
    assert!(
        at_two_thirds.tasks.iter().any(|(t, _)| t.parallelism == Some(4)),
        "the second version ran at 4"
    );
    let third = run_to_end(2, dir.path(), Some(at_two_thirds)).await;
    assert!(!first.is_empty() && !second.is_empty() && !third.is_empty());
    let mut all = [first, second, third].concat();
    all.sort_unstable();
    assert_eq!(all, expected());
}

/// A deployment without a checkpoint coordinator cannot stop at a
/// barrier: a clear error, and the pipeline runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_pipeline_without_checkpoints_at_a_barrier_is_refused() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let connectors = Connectors {
        hold_at: Some(1),
        held: Arc::default(),
        out,
    };
    let runtime = deploy_with(
        PipelineId(1),
        &keyed_window(1),
        &connectors,
        &InProcessTransport::default(),
        &DeployConfig::default(),
        None,
    )
    .unwrap();
    let err = runtime.stop_at_barrier(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.to_string().contains("no checkpoint coordinator"), "{err}");
    assert_eq!(runtime.status(), PipelineStatus::Running);
    runtime.stop();
    runtime.wait().await;
}

/// A stop whose barrier cannot get through (a stuck sink) gives up at its
/// deadline: an error, and the pipeline is marked failed and cancelled
/// (its supervisor restarts it from its last checkpoint) rather than left
/// half stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_at_a_barrier_that_cannot_complete_fails_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let connectors = StuckConnectors(Connectors {
        hold_at: Some(BATCHES / 2),
        held: Arc::default(),
        out: Arc::default(),
    });
    let plan = CheckpointPlan {
        config: CheckpointConfig::on_demand(
            Arc::new(LocalStateStore::new(dir.path())),
            Arc::new(CheckpointStats::default()),
        ),
        restored: None,
        highest_id: 0,
        handoff: None,
    };
    let runtime = deploy_with(
        PipelineId(1),
        &keyed_window(1),
        &connectors,
        &InProcessTransport::default(),
        &DeployConfig::default(),
        Some(plan),
    )
    .unwrap();
    // Windows close and reach the stuck sink.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = runtime.stop_at_barrier(Duration::from_millis(500)).await.unwrap_err();
    assert!(err.to_string().contains("did not stop at a barrier within"), "{err}");
    // Failed at once (its tasks are cancelled; the stuck sink only ends
    // when its batch does, so the test does not wait for it).
    assert!(
        matches!(runtime.status(), PipelineStatus::Failed { ref error, .. } if error.contains("barrier")),
        "{:?}",
        runtime.status()
    );
}
