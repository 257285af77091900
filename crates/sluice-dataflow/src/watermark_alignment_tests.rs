//! Watermark alignment through a deployed pipeline: two source instances,
//! one racing ahead in event time, the other slow.

use super::*;
use crate::OperatorContext;
use crate::channel::InProcessTransport;
use crate::checkpoint::CheckpointStats;
use crate::checkpoint::store::LocalStateStore;
use crate::operator::Operator;
use crate::source::SourceEvent;
use crate::source::SourceReader;
use arrow::array::TimestampMillisecondArray;
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_plan::{EdgeSpec, OperatorSpec, SinkSpec, SourceSpec, WatermarkSpec};
use sluice_plan::{OperatorKind, Partitioning};
use sluice_types::EdgeId;
use std::sync::atomic::Ordering;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
use std::time::Instant;

const DRIFT_MS: u64 = 1_000;
const ROWS: i64 = 10;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Millisecond, None),
        false,
    )]))
}

/// What the readers see of each other, from outside the engine.
struct Progress {
    /// Largest event time each instance's reader has returned.
    max: [AtomicI64; 2],
    ended: [AtomicBool; 2],
    /// Instance 0 is inside its stall.
    stalled: AtomicBool,
    /// Reads that happened while the reader was more than the drift ahead
    /// of a sibling that still counts.
    violations: Mutex<Vec<String>>,
}

/// Instance `me` returns `batches` batches of `ROWS` rows, batch k at event
/// times `k * step_ms ..`, sleeping `pause` before each but the first
/// (instance 1 starts once instance 0 has data); instance 0 may stall
/// once (deadline-based, so a dropped read does not restart it).
impl Default for Progress {
    fn default() -> Self {
        Progress {
            max: [AtomicI64::new(i64::MIN), AtomicI64::new(i64::MIN)],
            ended: Default::default(),
            stalled: AtomicBool::new(false),
            violations: Mutex::default(),
        }
    }
}

struct StepReader {
    me: usize,
    step_ms: i64,
    batches: i64,
    next: i64,
    pause: Duration,
    stall: Option<(i64, Duration)>,
    stall_until: Option<Instant>,
    progress: Arc<Progress>,
}

#[async_trait]
impl SourceReader for StepReader {
    fn partitions(&self) -> usize {
        1
    }

    async fn next(&mut self, _rows_max: usize) -> Result<SourceEvent> {
        if let Some((at, how_long)) = self.stall
            && self.next == at
        {
            let until = *self.stall_until.get_or_insert_with(|| Instant::now() + how_long);
            self.progress.stalled.store(true, Ordering::SeqCst);
            tokio::time::sleep_until(until.into()).await;
            self.progress.stalled.store(false, Ordering::SeqCst);
            self.stall = None;
        }
        if self.next > 0 {
            tokio::time::sleep(self.pause).await;
        } else if self.me == 1 {
            // Alignment starts once a sibling has a watermark: let instance
            // 0 publish its first before instance 1 reads.
            while self.progress.max[0].load(Ordering::SeqCst) == i64::MIN {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.next == self.batches {
            self.progress.ended[self.me].store(true, Ordering::SeqCst);
            return Ok(SourceEvent::End);
        }
        let other = 1 - self.me;
        let mine = self.progress.max[self.me].load(Ordering::SeqCst);
        let theirs = self.progress.max[other].load(Ordering::SeqCst);
        let counts = theirs != i64::MIN && !self.progress.ended[other].load(Ordering::SeqCst);
        if counts && mine > theirs + DRIFT_MS as i64 {
            self.progress.violations.lock().unwrap().push(format!(
                "instance {} read at {mine} with its sibling at {theirs}",
                self.me
            ));
        }
        let start = self.next * self.step_ms;
        let values: Vec<i64> = (0..ROWS).map(|i| start + i * self.step_ms / ROWS).collect();
        self.next += 1;
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(TimestampMillisecondArray::from(values))])?;
        self.progress.max[self.me].store(start + (ROWS - 1) * self.step_ms / ROWS, Ordering::SeqCst);
        Ok(SourceEvent::Data { partition: 0, batch })
    }
}

struct CountingSink {
    rows: Arc<AtomicU64>,
}

#[async_trait]
impl Operator for CountingSink {
    async fn process_batch(&mut self, batch: RecordBatch, _: usize, _: &mut OperatorContext<'_>) -> Result<()> {
        self.rows.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Instance 0: 100 ms of event time per batch, slowly; instance 1: 1 s per
/// batch, as fast as it may.
struct Readers {
    batches: [i64; 2],
    stall: Option<(i64, Duration)>,
    progress: Arc<Progress>,
    rows: Arc<AtomicU64>,
}

impl ConnectorFactory for Readers {
    fn source(&self, _: &SourceSpec, _: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        let me = ctx.instance as usize;
        Ok(Box::new(StepReader {
            me,
            step_ms: if me == 0 { 100 } else { 1_000 },
            batches: self.batches[me],
            next: 0,
            pause: if me == 0 {
                Duration::from_millis(2)
            } else {
                Duration::ZERO
            },
            stall: if me == 0 { self.stall } else { None },
            stall_until: None,
            progress: self.progress.clone(),
        }))
    }
    fn sink(&self, _: &SinkSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CountingSink {
            rows: self.rows.clone(),
        }))
    }
}

fn two_sources_into_a_sink(alignment_max_drift_ms: Option<u64>) -> PhysicalDag {
    let source = SourceSpec {
        stream: "t".into(),
        connector: "test".into(),
        options: Default::default(),
        watermark: Some(WatermarkSpec { column: 0, delay_ms: 0 }),
        idle_timeout_ms: 10_000,
        computed: Vec::new(),
        unread: Vec::new(),
        alignment_max_drift_ms,
    };
    let sink = SinkSpec {
        changelog: false,
        connector: "test".into(),
        options: Default::default(),
        event_time_column: Some(0),
    };
    PhysicalDag {
        key_groups: sluice_plan::KEY_GROUPS_DEFAULT,
        operators: vec![
            OperatorSpec {
                id: OperatorId(0),
                uid: sluice_types::OperatorUid::UNSET,
                kind: OperatorKind::Source(source),
                parallelism: 2,
                output_schema: schema(),
            },
            OperatorSpec {
                id: OperatorId(1),
                uid: sluice_types::OperatorUid::UNSET,
                kind: OperatorKind::Sink(sink),
                parallelism: 1,
                output_schema: schema(),
            },
        ],
        edges: vec![EdgeSpec {
            id: EdgeId(0),
            from: OperatorId(0),
            to: OperatorId(1),
            partitioning: Partitioning::Single,
        }],
    }
}

fn held_us(runtime: &PipelineRuntime, instance: u32) -> u64 {
    runtime
        .metrics
        .iter()
        .find(|m| m.kind == "source" && m.instance == instance)
        .expect("source metrics")
        .alignment_held_us
        .load(Ordering::Relaxed)
}

/// Runs instance 0 (200 slow batches) and instance 1 (20 fast ones) to the
/// end, aligned by `drift` or not.
async fn run_to_end(drift: Option<u64>) -> (Readers, PipelineRuntime) {
    let readers = Readers {
        batches: [200, 20],
        stall: None,
        progress: Arc::default(),
        rows: Arc::default(),
    };
    let dag = two_sources_into_a_sink(drift);
    let runtime = deploy(
        PipelineId(1),
        &dag,
        &readers,
        &InProcessTransport::default(),
        &DeployConfig::default(),
    )
    .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), runtime.wait())
        .await
        .unwrap();
    assert_eq!(status, PipelineStatus::Finished);
    assert_eq!(readers.rows.load(Ordering::Relaxed), (200 + 20) * ROWS as u64);
    (readers, runtime)
}

#[tokio::test]
async fn the_instance_ahead_waits_for_its_sibling_and_every_row_arrives() {
    let (readers, runtime) = run_to_end(Some(DRIFT_MS)).await;
    let violations = readers.progress.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "read too far ahead: {violations:?}");
    assert!(held_us(&runtime, 1) > 0, "the fast instance was held");
    assert_eq!(held_us(&runtime, 0), 0, "the slow instance never is");
}

#[tokio::test]
async fn without_alignment_the_fast_instance_runs_ahead() {
    // The check above can fail: the same readers, not aligned.
    let (readers, runtime) = run_to_end(None).await;
    assert!(!readers.progress.violations.lock().unwrap().is_empty());
    assert_eq!(held_us(&runtime, 1), 0);
}

#[tokio::test]
async fn a_held_instance_still_takes_part_in_checkpoints() {
    // Instance 0 stalls for 3 s at 2 s of event time (not long enough to
    // turn idle), so instance 1 is held the whole time; checkpoints every
    // 50 ms must still complete, which needs instance 1's barriers.
    let readers = Readers {
        batches: [40, 20],
        stall: Some((20, Duration::from_secs(3))),
        progress: Arc::default(),
        rows: Arc::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(CheckpointStats::default());
    let plan = CheckpointPlan {
        config: CheckpointConfig::new(
            Duration::from_millis(50),
            Arc::new(LocalStateStore::new(dir.path())),
            stats.clone(),
        ),
        restored: None,
        highest_id: 0,
        handoff: None,
    };
    let dag = two_sources_into_a_sink(Some(DRIFT_MS));
    let runtime = deploy_with(
        PipelineId(1),
        &dag,
        &readers,
        &InProcessTransport::default(),
        &DeployConfig::default(),
        Some(plan),
    )
    .unwrap();
    let progress = readers.progress.clone();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !progress.stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("instance 0 stalls");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = stats.completed().len();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let after = stats.completed().len();
    assert!(progress.stalled.load(Ordering::SeqCst), "still inside the stall");
    assert!(held_us(&runtime, 1) > 0, "instance 1 is held");
    assert!(
        after >= before + 3,
        "checkpoints completed while held: {before} then {after}"
    );
    let status = tokio::time::timeout(Duration::from_secs(30), runtime.wait())
        .await
        .unwrap();
    assert_eq!(status, PipelineStatus::Finished);
    assert_eq!(readers.rows.load(Ordering::Relaxed), (40 + 20) * ROWS as u64);
    assert!(readers.progress.violations.lock().unwrap().is_empty());
}
