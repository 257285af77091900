//! Per-task metrics, shared between a running task and whoever watches it
//! (SHOW PIPELINES, the REST API). Plain atomics: tasks update them on the
//! data path without locks.

use sluice_types::OperatorId;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

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
    /// Time the task's future spent being polled (running on a worker,
    /// chained operators included), µs: busy over elapsed is the share of a
    /// core the task uses (Flink's busy time).
    pub busy_us: AtomicU64,
    /// The longest single poll of the task, µs: how long it held a worker
    /// thread without yielding (every other task on that worker waited).
    pub poll_max_us: AtomicU64,
    /// Time a source instance read nothing because it was ahead of its
    /// siblings by more than the alignment drift, µs.
    pub alignment_held_us: AtomicU64,
    /// Rows (credits) queued on this task's input channels, last seen.
    pub queued_rows: AtomicU64,
    /// Open window groups held (window aggregates).
    pub state_groups: AtomicU64,
    /// Input records a source could not decode (skipped or dead-lettered).
    pub records_malformed: AtomicU64,
    /// Time spent aligning checkpoint barriers (from a checkpoint's first
    /// barrier on one input to its last), all checkpoints, µs; inputs whose
    /// barrier arrived wait meanwhile.
    pub checkpoint_alignment_us: AtomicU64,
    /// The same, of the task's latest checkpoint only, µs.
    pub last_checkpoint_alignment_us: AtomicU64,
    /// Size of the task's latest stored snapshot (its state), bytes.
    pub state_bytes: AtomicU64,
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
            busy_us: AtomicU64::new(0),
            poll_max_us: AtomicU64::new(0),
            alignment_held_us: AtomicU64::new(0),
            queued_rows: AtomicU64::new(0),
            state_groups: AtomicU64::new(0),
            records_malformed: AtomicU64::new(0),
            checkpoint_alignment_us: AtomicU64::new(0),
            last_checkpoint_alignment_us: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
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

/// A poll longer than this is logged (at debug level): a task that holds a
/// worker this long delays every task queued behind it on that worker.
pub const LONG_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// A task's future, timed: each poll's duration adds to the task's busy
/// time and the longest poll is kept (two clock reads per poll).
pub struct Timed<F> {
    future: F,
    metrics: Arc<TaskMetrics>,
}

impl<F> Timed<F> {
    pub fn new(future: F, metrics: Arc<TaskMetrics>) -> Self {
        Timed { future, metrics }
    }
}

impl<F: Future + Unpin> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = Instant::now();
        let outcome = Pin::new(&mut self.future).poll(cx);
        let took = started.elapsed();
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let m = &self.metrics;
        m.busy_us.fetch_add(us, Ordering::Relaxed);
        m.poll_max_us.fetch_max(us, Ordering::Relaxed);
        if took >= LONG_POLL {
            tracing::debug!(operator = %m.operator, instance = m.instance, kind = m.kind, poll_us = us, "long poll");
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_types::OperatorId;

    /// Busy time counts the time spent inside polls, not the time the task
    /// waited between them; the longest poll is kept.
    #[tokio::test]
    async fn busy_time_counts_polls_not_waits() {
        let m = TaskMetrics::new(OperatorId(1), 0, "test");
        let task = Box::pin(async {
            std::thread::sleep(std::time::Duration::from_millis(30)); // busy
            tokio::time::sleep(std::time::Duration::from_secs(1)).await; // waiting
            std::thread::sleep(std::time::Duration::from_millis(10)); // busy
        });
        Timed::new(task, m.clone()).await;
        let busy = m.busy_us.load(Ordering::Relaxed);
        assert!((40_000..1_000_000).contains(&busy), "busy {busy} µs");
        let longest = m.poll_max_us.load(Ordering::Relaxed);
        assert!(
            (30_000..busy).contains(&longest),
            "longest poll {longest} µs, busy {busy} µs"
        );
    }
}
