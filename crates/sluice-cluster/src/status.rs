//! A pipeline's status as users see it (SHOW PIPELINES, the REST API),
//! computed from its tasks' metrics.

use serde::Serialize;
use sluice_dataflow::deploy::{PipelineRuntime, PipelineStatus};
use sluice_types::Watermark;
use std::sync::atomic::Ordering;

/// One row of SHOW PIPELINES.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PipelineInfo {
    pub name: String,
    pub id: u64,
    pub kind: String,
    pub state: String,
    pub since_ms: i64,
    pub rows_in: u64,
    pub rows_out: u64,
    pub late_rows_dropped: u64,
    /// Input records the sources could not decode (skipped or dead-lettered).
    pub records_malformed: u64,
    /// Low watermark at the sink, ms (None before the first one).
    pub watermark_ms: Option<i64>,
    pub error: Option<String>,
    /// A transient problem a task is working around (e.g. a broker that is
    /// down), while the pipeline keeps running.
    pub condition: Option<String>,
    pub sql: String,
    /// Restarts after task failures (since the server started).
    pub restarts: u64,
    /// The checkpoint the running deployment was restored from.
    pub restored_from: Option<u64>,
    /// The latest completed checkpoints, oldest first.
    pub checkpoints: Vec<sluice_dataflow::checkpoint::CheckpointInfo>,
    /// The running version (1 until the first `ALTER PIPELINE … AS`).
    pub version: u32,
    /// When the running version started (its creation for version 1), ms.
    pub changed_ms: i64,
    /// The workers running its tasks, with their task instances
    /// (`w1 (2), w2 (2)`; `local` in the playground).
    pub workers: String,
}

/// Counters summed over a runtime's tasks.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub rows_in: u64,
    pub rows_out: u64,
    pub late_rows_dropped: u64,
    pub records_malformed: u64,
    pub watermark: Option<Watermark>,
    /// The first transient condition a task reports.
    pub condition: Option<String>,
}

/// Rows in = rows the sources emitted; rows out = rows the sinks received;
/// watermark = the lowest among the sink instances.
pub fn totals(runtime: &PipelineRuntime) -> Totals {
    let mut t = Totals::default();
    let mut sink_watermark: Option<i64> = None;
    for m in &runtime.metrics {
        match m.kind {
            "source" => t.rows_in += m.rows_out.load(Ordering::Relaxed),
            "sink" => {
                t.rows_out += m.rows_in.load(Ordering::Relaxed);
                let w = m.watermark_ms.load(Ordering::Relaxed);
                sink_watermark = Some(sink_watermark.map_or(w, |s| s.min(w)));
            }
            _ => {}
        }
        t.late_rows_dropped += m.late_rows_dropped.load(Ordering::Relaxed);
        t.records_malformed += m.records_malformed.load(Ordering::Relaxed);
        if t.condition.is_none() {
            t.condition = m.condition();
        }
    }
    t.watermark = sink_watermark.filter(|w| *w != i64::MIN).map(Watermark);
    t
}

/// `running`, … and the error text of a failed pipeline.
pub fn describe_status(status: &PipelineStatus) -> (String, Option<String>) {
    match status {
        PipelineStatus::Failed {
            operator,
            instance,
            error,
            ..
        } => (
            "failed".to_string(),
            Some(format!("operator {operator} instance {instance}: {error}")),
        ),
        other => (other.name().to_string(), None),
    }
}
