//! Per-task metrics, shared between a running task and whoever watches it
//! (SHOW PIPELINES, the REST API). Plain atomics: tasks update them on the
//! data path without locks.

use sluice_types::OperatorId;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters of one task instance.
#[derive(Debug)]
pub struct TaskMetrics {
    pub operator: OperatorId,
    pub instance: u32,
    pub kind: &'static str,
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    /// Rows dropped because they arrived after their windows had fired.
    pub late_rows_dropped: AtomicU64,
    /// The task's current low watermark (ms; `i64::MIN` when none yet).
    pub watermark_ms: AtomicI64,
    /// Time spent waiting for credits to send downstream (backpressure), µs.
    pub backpressure_us: AtomicU64,
    /// Time a source instance read nothing because it was ahead of its
    /// siblings by more than the alignment drift, µs.
    pub alignment_held_us: AtomicU64,
    /// Rows (credits) queued on this task's input channels, last seen.
    pub queued_rows: AtomicU64,
    /// Open window groups held (window aggregates).
    pub state_groups: AtomicU64,
    /// Input records a source could not decode (skipped or dead-lettered).
    pub records_malformed: AtomicU64,
    /// A problem the task is working around right now (e.g. "broker
    /// unreachable, retrying"); cleared when it passes.
    condition: Mutex<Option<String>>,
}

impl TaskMetrics {
    pub fn new(operator: OperatorId, instance: u32, kind: &'static str) -> Arc<Self> {
        Arc::new(TaskMetrics {
            operator,
            instance,
            kind,
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            late_rows_dropped: AtomicU64::new(0),
            watermark_ms: AtomicI64::new(i64::MIN),
            backpressure_us: AtomicU64::new(0),
            alignment_held_us: AtomicU64::new(0),
            queued_rows: AtomicU64::new(0),
            state_groups: AtomicU64::new(0),
            records_malformed: AtomicU64::new(0),
            condition: Mutex::new(None),
        })
    }

    pub fn add_rows_in(&self, n: usize) {
        self.rows_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn add_rows_out(&self, n: usize) {
        self.rows_out.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Reports (Some) or clears (None) a transient problem.
    pub fn set_condition(&self, condition: Option<String>) {
        *self.condition.lock().expect("condition lock") = condition;
    }

    /// The transient problem reported last, if it has not passed.
    pub fn condition(&self) -> Option<String> {
        self.condition.lock().expect("condition lock").clone()
    }
}
