//! Runtime tests: backpressure keeps queued rows bounded, and a failing
//! task fails only its own pipeline.

use super::*;
use crate::OperatorContext;
use crate::channel::InProcessTransport;
use crate::operator::Operator;
use crate::source::SourceEvent;
use crate::source::SourceReader;
use arrow::array::Int64Array;
use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_plan::{EdgeSpec, OperatorSpec, SinkSpec, SourceSpec};
use sluice_plan::{OperatorKind, Partitioning};
use sluice_types::{EdgeId, Watermark};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

const BATCH_ROWS: usize = 100;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]))
}

/// Emits `BATCH_ROWS`-row batches as fast as it is allowed to, `limit` of them.
struct CountingReader {
    next: i64,
    batches_left: Option<u64>,
}

#[async_trait]
impl SourceReader for CountingReader {
    fn partitions(&self) -> usize {
        1
    }
    async fn next(&mut self, _rows_max: usize) -> Result<SourceEvent> {
        if let Some(left) = self.batches_left.as_mut() {
            if *left == 0 {
                return Ok(SourceEvent::End);
            }
            *left -= 1;
        }
        let values = Int64Array::from_iter_values(self.next..self.next + BATCH_ROWS as i64);
        self.next += BATCH_ROWS as i64;
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(values)])?;
        Ok(SourceEvent::Data { partition: 0, batch })
    }
}

/// A sink that takes `delay` per batch, or panics at batch `panic_at`.
struct TestSink {
    delay: Duration,
    panic_at: Option<u64>,
    seen: Arc<AtomicU64>,
}

#[async_trait]
impl Operator for TestSink {
    async fn process_batch(
        &mut self,
        _batch: RecordBatch,
        _input: usize,
        _ctx: &mut OperatorContext<'_>,
    ) -> Result<()> {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.panic_at == Some(n) {
            panic!("injected fault at batch {n}");
        }
        tokio::time::sleep(self.delay).await;
        Ok(())
    }
    async fn process_watermark(&mut self, _w: Watermark, _ctx: &mut OperatorContext<'_>) -> Result<()> {
        Ok(())
    }
}

struct TestConnectors {
    batches: Option<u64>,
    delay: Duration,
    panic_at: Option<u64>,
    seen: Arc<AtomicU64>,
}

impl ConnectorFactory for TestConnectors {
    fn source(&self, _: &SourceSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(CountingReader {
            next: 0,
            batches_left: self.batches,
        }))
    }
    fn sink(&self, _: &SinkSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(TestSink {
            delay: self.delay,
            panic_at: self.panic_at,
            seen: self.seen.clone(),
        }))
    }
}

fn source_to_sink() -> PhysicalDag {
    let source = SourceSpec {
        stream: "t".into(),
        connector: "test".into(),
        options: BTreeMap::new(),
        watermark: None,
        idle_timeout_ms: 1000,
        computed: Vec::new(),
        unread: Vec::new(),
        alignment_max_drift_ms: None,
    };
    let sink = SinkSpec {
        changelog: false,
        connector: "test".into(),
        options: BTreeMap::new(),
        event_time_column: None,
    };
    PhysicalDag {
        key_groups: sluice_plan::KEY_GROUPS_DEFAULT,
        operators: vec![
            OperatorSpec {
                id: OperatorId(0),
                uid: sluice_types::OperatorUid::UNSET,
                kind: OperatorKind::Source(source),
                parallelism: 1,
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
            partitioning: Partitioning::Forward,
        }],
    }
}

fn metric<'a>(runtime: &'a PipelineRuntime, kind: &str) -> &'a Arc<TaskMetrics> {
    runtime.metrics.iter().find(|m| m.kind == kind).expect("task metrics")
}

#[tokio::test]
async fn a_fast_source_into_a_slow_sink_keeps_queued_rows_bounded() {
    let credits_max = 1_000u32;
    let transport = InProcessTransport { credits_max };
    let seen = Arc::new(AtomicU64::new(0));
    let connectors = TestConnectors {
        batches: None,
        delay: Duration::from_millis(2),
        panic_at: None,
        seen: seen.clone(),
    };
    let runtime = deploy(
        PipelineId(1),
        &source_to_sink(),
        &connectors,
        &transport,
        &DeployConfig::default(),
    )
    .unwrap();
    let (source, sink) = (metric(&runtime, "source"), metric(&runtime, "sink"));
    let mut max_in_flight = 0u64;
    let mut max_queued = 0u64;
    // Sample until the slow sink has taken 150 batches.
    while seen.load(Ordering::Relaxed) < 150 {
        let sent = source.rows_out.load(Ordering::Relaxed);
        let received = sink.rows_in.load(Ordering::Relaxed);
        max_in_flight = max_in_flight.max(sent.saturating_sub(received));
        max_queued = max_queued.max(sink.queued_rows.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    runtime.stop();
    assert_eq!(runtime.wait().await, PipelineStatus::Stopped);
    // The source could have produced millions of rows in this time; it was
    // held to the channel's credits plus the batch waiting to be sent.
    let bound = credits_max as u64 + BATCH_ROWS as u64;
    assert!(
        max_in_flight <= bound,
        "rows in flight {max_in_flight} exceed the bound {bound}"
    );
    assert!(
        max_queued <= credits_max as u64,
        "queued rows {max_queued} exceed the credits {credits_max}"
    );
    assert!(
        max_in_flight >= (credits_max as u64) / 2,
        "the source should have filled the channel: {max_in_flight}"
    );
}

#[tokio::test]
async fn a_panicking_task_fails_its_pipeline_only() {
    let transport = InProcessTransport::default();
    let healthy_seen = Arc::new(AtomicU64::new(0));
    let healthy = TestConnectors {
        batches: Some(50),
        delay: Duration::ZERO,
        panic_at: None,
        seen: healthy_seen.clone(),
    };
    let faulty = TestConnectors {
        batches: None,
        delay: Duration::ZERO,
        panic_at: Some(3),
        seen: Arc::new(AtomicU64::new(0)),
    };
    let config = DeployConfig::default();
    let bad = deploy(PipelineId(1), &source_to_sink(), &faulty, &transport, &config).unwrap();
    let good = deploy(PipelineId(2), &source_to_sink(), &healthy, &transport, &config).unwrap();
    match bad.wait().await {
        PipelineStatus::Failed { operator, error, .. } => {
            assert_eq!(operator, OperatorId(1));
            assert!(error.contains("injected fault at batch 3"), "{error}");
        }
        other => panic!("expected a failed pipeline, got {other:?}"),
    }
    assert_eq!(good.wait().await, PipelineStatus::Finished);
    assert_eq!(
        healthy_seen.load(Ordering::Relaxed),
        50,
        "the healthy pipeline saw every batch"
    );
}

#[test]
fn the_failing_task_is_reported_not_its_upstream_that_lost_its_downstream() {
    let failed = |s: &StatusCell| match s.get() {
        PipelineStatus::Failed { operator, error, .. } => Some((operator.0, error)),
        _ => None,
    };
    let consequence = Failure::of(&Error::DownstreamClosed);
    assert_eq!(consequence.error, "internal error: downstream channel closed");
    let cause = Failure::of(&Error::user(
        SqlCode::ConfigurationLimitExceeded,
        "a Kafka transaction would hold more than 100 rows",
    ));
    let other = Failure::of(&Error::internal("other"));
    // The upstream task notices first, then the sink's cause arrives
    // (after the pipeline was cancelled): the cause wins.
    let s = StatusCell::new();
    s.fail(OperatorId(1), 0, consequence.clone(), false);
    assert_eq!(failed(&s), Some((1, consequence.error.clone())));
    s.fail(OperatorId(3), 0, cause.clone(), true);
    assert_eq!(failed(&s), Some((3, cause.error.clone())));
    // A later consequence does not replace the cause.
    s.fail(OperatorId(2), 0, consequence.clone(), true);
    assert_eq!(failed(&s), Some((3, cause.error.clone())));
    // Nor does a second cause replace the first.
    s.fail(OperatorId(2), 0, other, true);
    assert_eq!(failed(&s), Some((3, cause.error.clone())));
    // Errors after a stop on request are no failure.
    let s = StatusCell::new();
    s.fail(OperatorId(3), 0, cause, true);
    assert_eq!(s.get(), PipelineStatus::Running);
}

#[test]
fn only_a_closed_downstream_is_a_consequence() {
    assert!(Failure::of(&Error::from(crate::channel::Closed)).consequence);
    // An internal error that merely says so is a cause.
    assert!(!Failure::of(&Error::internal("downstream channel closed")).consequence);
}

/// A sink that keeps every value of its first column.
struct CollectSink(Arc<Mutex<Vec<i64>>>);

#[async_trait]
impl Operator for CollectSink {
    async fn process_batch(&mut self, batch: RecordBatch, _: usize, _: &mut OperatorContext<'_>) -> Result<()> {
        let values = batch.column(0).as_any().downcast_ref::<Int64Array>().expect("int64");
        self.0.lock().unwrap().extend(values.values().iter().copied());
        Ok(())
    }
}

struct CollectConnectors {
    batches: u64,
    values: Arc<Mutex<Vec<i64>>>,
}

impl ConnectorFactory for CollectConnectors {
    fn source(&self, _: &SourceSpec, _: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        // Each instance counts from its own start: instance i emits
        // i·1_000_000 onwards.
        Ok(Box::new(CountingReader {
            next: ctx.instance as i64 * 1_000_000,
            batches_left: Some(self.batches),
        }))
    }
    fn sink(&self, _: &SinkSpec, _: &SchemaRef, _: &InstanceContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CollectSink(self.values.clone())))
    }
}

/// source (p=2) → filter/project → project → sink (p=1): both projects sit
/// behind forward edges, so they are chained into the source tasks.
fn source_project_project_sink(second_expr: &str) -> PhysicalDag {
    let mut dag = source_to_sink();
    let project = |filter: Option<&str>, expr: &str| {
        OperatorKind::Project(sluice_plan::ProjectSpec {
            input_schema: schema(),
            filter: filter.map(String::from),
            exprs: vec![expr.to_string()],
        })
    };
    dag.operators[0].parallelism = 2;
    let sink = dag.operators.pop().unwrap();
    dag.operators.push(OperatorSpec {
        id: OperatorId(1),
        uid: sluice_types::OperatorUid::UNSET,
        kind: project(Some("x % 3 <> 0"), "x * 2"),
        parallelism: 2,
        output_schema: schema(),
    });
    dag.operators.push(OperatorSpec {
        id: OperatorId(2),
        uid: sluice_types::OperatorUid::UNSET,
        kind: project(None, second_expr),
        parallelism: 2,
        output_schema: schema(),
    });
    dag.operators.push(OperatorSpec {
        id: OperatorId(3),
        uid: sluice_types::OperatorUid::UNSET,
        ..sink
    });
    let edge = |id: u32, from: u32, to: u32, partitioning| EdgeSpec {
        id: EdgeId(id),
        from: OperatorId(from),
        to: OperatorId(to),
        partitioning,
    };
    dag.edges = vec![
        edge(0, 0, 1, Partitioning::Forward),
        edge(1, 1, 2, Partitioning::Forward),
        edge(2, 2, 3, Partitioning::Single),
    ];
    dag
}

#[tokio::test]
async fn chained_operators_give_the_rows_unchained_ones_give_with_fewer_tasks() {
    let dag = source_project_project_sink("x + 1");
    assert_eq!(dag.chained_into(OperatorId(1)), Some(OperatorId(0)));
    assert_eq!(dag.chained_into(OperatorId(2)), Some(OperatorId(1)));
    assert_eq!(dag.chained_into(OperatorId(3)), None, "a sink is never chained");
    let batches = 30u64;
    // Computed here, not by the engine: each source instance's values,
    // filtered and mapped as the two projects say.
    let mut expected: Vec<i64> = (0..2i64)
        .flat_map(|i| i * 1_000_000..i * 1_000_000 + batches as i64 * BATCH_ROWS as i64)
        .filter(|x| x % 3 != 0)
        .map(|x| x * 2 + 1)
        .collect();
    expected.sort_unstable();
    for chain_operators in [true, false] {
        let values = Arc::new(Mutex::new(Vec::new()));
        let connectors = CollectConnectors {
            batches,
            values: values.clone(),
        };
        let config = DeployConfig {
            chain_operators,
            ..DeployConfig::default()
        };
        let runtime = deploy(
            PipelineId(1),
            &dag,
            &connectors,
            &InProcessTransport::default(),
            &config,
        )
        .unwrap();
        assert_eq!(runtime.wait().await, PipelineStatus::Finished);
        let mut got = values.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, expected, "chaining {chain_operators}");
        // Two source tasks and the sink; unchained, two tasks per project more.
        assert_eq!(runtime.tasks, if chain_operators { 3 } else { 7 });
        assert_eq!(runtime.metrics.len(), 7, "every operator instance keeps its metrics");
        let rows = |op: u32, f: fn(&TaskMetrics) -> u64| -> u64 {
            runtime
                .metrics
                .iter()
                .filter(|m| m.operator == OperatorId(op))
                .map(|m| f(m))
                .sum()
        };
        let all = 2 * batches * BATCH_ROWS as u64;
        assert_eq!(rows(1, |m| m.rows_in.load(Ordering::Relaxed)), all);
        assert_eq!(rows(2, |m| m.rows_in.load(Ordering::Relaxed)), expected.len() as u64);
        assert_eq!(rows(2, |m| m.rows_out.load(Ordering::Relaxed)), expected.len() as u64);
        for m in runtime.metrics.iter().filter(|m| m.kind == "project") {
            assert_eq!(
                m.watermark_ms.load(Ordering::Relaxed),
                Watermark::MAX.0,
                "end of input reached it"
            );
        }
    }
}

#[tokio::test]
async fn a_failing_chained_operator_is_the_one_reported() {
    // Source row 751 passes the filter and reaches the second project as
    // 1502, which it divides by zero.
    let dag = source_project_project_sink("10 / (x - 1502)");
    let connectors = CollectConnectors {
        batches: 100,
        values: Arc::new(Mutex::new(Vec::new())),
    };
    let runtime = deploy(
        PipelineId(1),
        &dag,
        &connectors,
        &InProcessTransport::default(),
        &DeployConfig::default(),
    )
    .unwrap();
    match runtime.wait().await {
        PipelineStatus::Failed {
            operator, error, code, ..
        } => {
            assert_eq!(operator, OperatorId(2), "{error}");
            assert!(error.contains("division by zero"), "{error}");
            assert_eq!(code, Some(SqlCode::DivisionByZero), "{error}");
        }
        other => panic!("expected a failed pipeline, got {other:?}"),
    }
}
