//! Message throughput modelled on the Storm/Gearpump "SOL" test: p source
//! instances emit 100-byte messages, every message goes to a random one of
//! p processor instances (hash of a random key: a per-message shuffle, so
//! batches are split and the messages copied), and the processors only
//! count. Runs the real runtime (`sluice-dataflow::deploy`, credit
//! channels, exchange) in this process; only the spout is special: like
//! SOL's, it emits pre-generated random messages.

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use sluice_connectors::factory::Connectors;
use sluice_dataflow::Operator;
use sluice_dataflow::channel::InProcessTransport;
use sluice_dataflow::deploy::{ConnectorFactory, DeployConfig, InstanceContext, PipelineStatus, deploy};
use sluice_dataflow::source::{SourceEvent, SourceReader};
use sluice_plan::{EdgeSpec, OperatorKind, OperatorSpec, Partitioning, PhysicalDag, SinkSpec, SourceSpec};
use sluice_types::{EdgeId, OperatorId, PipelineId, Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

pub const MESSAGE_BYTES: usize = 100;
const BATCH_ROWS: usize = 8192;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, false),
    ]))
}

/// A batch of random keys and random 100-byte messages.
fn message_batch(seed: u64) -> RecordBatch {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let keys = Int64Array::from_iter_values((0..BATCH_ROWS).map(|_| next() as i64));
    let msgs = StringArray::from_iter_values((0..BATCH_ROWS).map(|_| {
        (0..MESSAGE_BYTES)
            .map(|_| char::from(b'a' + (next() % 26) as u8))
            .collect::<String>()
    }));
    RecordBatch::try_new(schema(), vec![Arc::new(keys), Arc::new(msgs)]).expect("schema")
}

struct Spout {
    batch: RecordBatch,
    left: u64,
}

#[async_trait]
impl SourceReader for Spout {
    fn partitions(&self) -> usize {
        1
    }
    async fn next(&mut self, _batch_rows_max: usize) -> Result<SourceEvent> {
        if self.left == 0 {
            return Ok(SourceEvent::End);
        }
        let rows = (self.left as usize).min(self.batch.num_rows());
        self.left -= rows as u64;
        Ok(SourceEvent::Data {
            partition: 0,
            batch: self.batch.slice(0, rows),
        })
    }
}

struct SolConnectors {
    per_instance: u64,
    inner: Connectors,
}

impl ConnectorFactory for SolConnectors {
    fn source(&self, _spec: &SourceSpec, _schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(Spout {
            batch: message_batch(0x5eed + ctx.instance as u64),
            left: self.per_instance,
        }))
    }
    fn sink(&self, spec: &SinkSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn Operator>> {
        self.inner.sink(spec, schema, ctx)
    }
}

/// Result of one SOL run.
#[derive(Debug, Clone)]
pub struct SolResult {
    pub messages: u64,
    pub counted: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
}

/// Runs `messages` messages through a 2-stage DAG at `parallelism`.
pub async fn run(messages: u64, parallelism: u32) -> anyhow::Result<SolResult> {
    let p = parallelism.max(1);
    let source = SourceSpec {
        stream: "sol".into(),
        connector: "sol".into(),
        options: BTreeMap::new(),
        watermark: None,
        idle_timeout_ms: 60_000,
        computed: Vec::new(),
        unread: Vec::new(),
        alignment_max_drift_ms: None,
    };
    let sink = SinkSpec {
        changelog: false,
        connector: "blackhole".into(),
        options: BTreeMap::new(),
        event_time_column: None,
    };
    let dag = PhysicalDag {
        key_groups: sluice_plan::KEY_GROUPS_DEFAULT,
        operators: vec![
            OperatorSpec {
                id: OperatorId(0),
                uid: sluice_types::OperatorUid::UNSET,
                kind: OperatorKind::Source(source),
                parallelism: p,
                output_schema: schema(),
            },
            OperatorSpec {
                id: OperatorId(1),
                uid: sluice_types::OperatorUid::UNSET,
                kind: OperatorKind::Sink(sink),
                parallelism: p,
                output_schema: schema(),
            },
        ],
        edges: vec![EdgeSpec {
            id: EdgeId(0),
            from: OperatorId(0),
            to: OperatorId(1),
            partitioning: Partitioning::Hash(vec![0]),
        }],
    };
    let connectors = SolConnectors {
        per_instance: messages / p as u64,
        inner: Connectors::default(),
    };
    let transport = InProcessTransport::default();
    let before = crate::server::proc_sample("self");
    let started = Instant::now();
    let runtime = deploy(PipelineId(1), &dag, &connectors, &transport, &DeployConfig::default())?;
    let status = runtime.wait().await;
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = crate::server::proc_sample("self").cpu_s - before.cpu_s;
    anyhow::ensure!(status == PipelineStatus::Finished, "SOL pipeline ended {status:?}");
    let counted = runtime
        .metrics
        .iter()
        .filter(|m| m.operator == OperatorId(1))
        .map(|m| m.rows_in.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    Ok(SolResult {
        messages: connectors.per_instance * p as u64,
        counted,
        wall_s,
        cpu_s,
    })
}
