//! Metric history for the REST API and the dashboard: a sampler copies every
//! running pipeline's task counters into bounded rings once a second, and
//! rates (rows/s, the share of time spent in backpressure) are computed from
//! the deltas between samples.
//!
//! Everything is bounded: `SAMPLES_MAX` samples per task (five minutes at
//! one per second), `ERRORS_MAX` recorded errors per pipeline, and only
//! pipelines in the catalog are tracked (dropped ones are forgotten at the
//! next tick). The counters themselves stay in `sluice-dataflow`'s
//! `TaskMetrics`; this module only reads them.

use serde::Serialize;
use sluice_dataflow::deploy::{PipelineRuntime, PipelineStatus};
use sluice_dataflow::metrics::TaskMetrics;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the sampler reads the counters.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Samples kept per task: five minutes at one per second.
pub const SAMPLES_MAX: usize = 300;
/// Recent errors kept per pipeline.
pub const ERRORS_MAX: usize = 20;
/// Rates are averaged over at most this many sample intervals.
pub const RATE_WINDOW_SAMPLES: usize = 3;

/// A bounded ring: pushing past `capacity` drops the oldest element.
#[derive(Debug, Clone)]
pub struct Ring<T> {
    items: VecDeque<T>,
    capacity: usize,
}

impl<T> Ring<T> {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a ring holds at least one element");
        Ring {
            items: VecDeque::with_capacity(capacity.min(64)),
            capacity,
        }
    }

    pub fn push(&mut self, item: T) {
        if self.items.len() == self.capacity {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.items.iter()
    }

    pub fn last(&self) -> Option<&T> {
        self.items.back()
    }
}

/// The counters of one task instance at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sample {
    pub t_ms: i64,
    pub rows_in: u64,
    pub rows_out: u64,
    pub late_rows_dropped: u64,
    pub backpressure_us: u64,
    pub busy_us: u64,
    pub queued_rows: u64,
    pub state_groups: u64,
    /// None before the task's first watermark.
    pub watermark_ms: Option<i64>,
}

impl Sample {
    /// Reads `m` now.
    pub fn read(m: &TaskMetrics, t_ms: i64) -> Sample {
        let watermark = m.watermark_ms.load(Ordering::Relaxed);
        Sample {
            t_ms,
            rows_in: m.rows_in.load(Ordering::Relaxed),
            rows_out: m.rows_out.load(Ordering::Relaxed),
            late_rows_dropped: m.late_rows_dropped.load(Ordering::Relaxed),
            backpressure_us: m.backpressure_us.load(Ordering::Relaxed),
            busy_us: m.busy_us.load(Ordering::Relaxed),
            queued_rows: m.queued_rows.load(Ordering::Relaxed),
            state_groups: m.state_groups.load(Ordering::Relaxed),
            watermark_ms: (watermark != i64::MIN).then_some(watermark),
        }
    }
}

/// Rates between two samples of one task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rates {
    pub rows_in_per_s: f64,
    pub rows_out_per_s: f64,
    /// Share of the interval spent waiting for downstream credits, 0..=1.
    pub backpressure_share: f64,
    /// Share of the interval the task ran on a worker (chained operators
    /// included), 0..=1: near 1 the task is the bottleneck.
    pub busy_share: f64,
}

/// Rates from `older` to `newer`; zero when no time passed. Counters only
/// grow, so a smaller newer value (never expected) counts as no change.
pub fn rates(older: &Sample, newer: &Sample) -> Rates {
    let dt_ms = newer.t_ms - older.t_ms;
    if dt_ms <= 0 {
        return Rates::default();
    }
    let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 * 1000.0 / dt_ms as f64;
    let share = |a: u64, b: u64| (b.saturating_sub(a) as f64 / (dt_ms as f64 * 1000.0)).clamp(0.0, 1.0);
    Rates {
        rows_in_per_s: per_s(older.rows_in, newer.rows_in),
        rows_out_per_s: per_s(older.rows_out, newer.rows_out),
        backpressure_share: share(older.backpressure_us, newer.backpressure_us),
        busy_share: share(older.busy_us, newer.busy_us),
    }
}

/// Current rates of a task: over the last `RATE_WINDOW_SAMPLES` intervals.
pub fn current_rates(samples: &Ring<Sample>) -> Rates {
    let n = samples.len();
    if n < 2 {
        return Rates::default();
    }
    let older = samples
        .iter()
        .nth(n - 1 - (n - 1).min(RATE_WINDOW_SAMPLES))
        .expect("in range");
    rates(older, samples.last().expect("non-empty"))
}

/// Rates between consecutive samples, stamped with the later sample's time.
pub fn rate_series(samples: &Ring<Sample>) -> Vec<(i64, Rates)> {
    let all: Vec<&Sample> = samples.iter().collect();
    all.windows(2).map(|w| (w[1].t_ms, rates(w[0], w[1]))).collect()
}

/// A pipeline error as the dashboard lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedError {
    pub time_ms: i64,
    pub operator: u32,
    pub instance: u32,
    pub message: String,
}

/// The samples of one task instance.
#[derive(Debug, Clone)]
pub struct TaskHistory {
    pub operator: u32,
    pub instance: u32,
    pub kind: &'static str,
    pub samples: Ring<Sample>,
}

/// What is kept about one pipeline.
#[derive(Debug, Clone)]
pub struct PipelineHistory {
    /// Which deployment the samples belong to (a re-created pipeline starts over).
    pub pipeline_id: u64,
    pub tasks: Vec<TaskHistory>,
    pub errors: Ring<RecordedError>,
    failure_recorded: bool,
}

impl PipelineHistory {
    fn new(pipeline_id: u64, metrics: &[Arc<TaskMetrics>]) -> Self {
        PipelineHistory {
            pipeline_id,
            tasks: metrics
                .iter()
                .map(|m| TaskHistory {
                    operator: m.operator.0,
                    instance: m.instance,
                    kind: m.kind,
                    samples: Ring::new(SAMPLES_MAX),
                })
                .collect(),
            errors: Ring::new(ERRORS_MAX),
            failure_recorded: false,
        }
    }

    /// Records one sample of every task, and the pipeline's failure once.
    pub fn record(&mut self, metrics: &[Arc<TaskMetrics>], status: &PipelineStatus, t_ms: i64) {
        for (task, m) in self.tasks.iter_mut().zip(metrics) {
            task.samples.push(Sample::read(m, t_ms));
        }
        match status {
            PipelineStatus::Failed {
                operator,
                instance,
                error,
                ..
            } if !self.failure_recorded => {
                self.errors.push(RecordedError {
                    time_ms: t_ms,
                    operator: operator.0,
                    instance: *instance,
                    message: error.clone(),
                });
                self.failure_recorded = true;
            }
            _ => {}
        }
    }
}

/// The histories of every named pipeline, and the last time the sampler ran
/// (the local worker's heartbeat).
#[derive(Debug, Default)]
pub struct MetricsHistory {
    pipelines: Mutex<HashMap<String, PipelineHistory>>,
    last_tick_ms: AtomicI64,
}

impl MetricsHistory {
    /// Samples `runtimes` (name → runtime of each running named pipeline)
    /// and forgets pipelines that are not in `names` any more.
    pub fn tick(&self, names: &[String], runtimes: &[(String, Arc<PipelineRuntime>)], t_ms: i64) {
        let mut pipelines = self.pipelines.lock().expect("history lock");
        pipelines.retain(|name, _| names.contains(name));
        for (name, runtime) in runtimes {
            let history = pipelines
                .entry(name.clone())
                .or_insert_with(|| PipelineHistory::new(runtime.id.0, &runtime.metrics));
            if history.pipeline_id != runtime.id.0 || history.tasks.len() != runtime.metrics.len() {
                *history = PipelineHistory::new(runtime.id.0, &runtime.metrics);
            }
            history.record(&runtime.metrics, &runtime.status(), t_ms);
        }
        self.last_tick_ms.store(t_ms, Ordering::Relaxed);
    }

    /// A copy of one pipeline's history.
    pub fn pipeline(&self, name: &str) -> Option<PipelineHistory> {
        self.pipelines.lock().expect("history lock").get(name).cloned()
    }

    /// When the sampler last ran (epoch ms; 0 before the first run).
    pub fn last_tick_ms(&self) -> i64 {
        self.last_tick_ms.load(Ordering::Relaxed)
    }
}

/// Samples the master's running pipelines every `SAMPLE_INTERVAL` until `shutdown`.
pub async fn run_sampler(
    master: Arc<sluice_cluster::Master>,
    history: Arc<MetricsHistory>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut interval = tokio::time::interval(SAMPLE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let names: Vec<String> = master.pipelines().into_iter().map(|p| p.name).collect();
        let runtimes: Vec<(String, Arc<PipelineRuntime>)> = names
            .iter()
            .filter_map(|n| master.runtime(n).map(|r| (n.clone(), r)))
            .collect();
        history.tick(&names, &runtimes, sluice_types::now_ms());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64, rows_in: u64, rows_out: u64, backpressure_us: u64) -> Sample {
        Sample {
            t_ms,
            rows_in,
            rows_out,
            backpressure_us,
            ..Sample::default()
        }
    }

    #[test]
    fn a_ring_keeps_the_newest_items_up_to_its_capacity() {
        let mut ring = Ring::new(3);
        for i in 0..10 {
            ring.push(i);
        }
        assert_eq!(ring.iter().copied().collect::<Vec<_>>(), vec![7, 8, 9]);
        assert_eq!(ring.len(), 3);
    }

    #[test]
    fn rates_come_from_deltas_over_elapsed_time() {
        // 2 s apart: 400 rows in, 100 out, 0.5 s of 2 s waiting for credits,
        // 1.5 s of 2 s running.
        let older = Sample {
            busy_us: 1_000_000,
            ..sample(1_000, 100, 50, 0)
        };
        let newer = Sample {
            busy_us: 2_500_000,
            ..sample(3_000, 500, 150, 500_000)
        };
        assert_eq!(
            rates(&older, &newer),
            Rates {
                rows_in_per_s: 200.0,
                rows_out_per_s: 50.0,
                backpressure_share: 0.25,
                busy_share: 0.75,
            }
        );
        // No time passed, or counters that went backwards: no rate.
        assert_eq!(
            rates(&sample(1_000, 0, 0, 0), &sample(1_000, 9, 9, 9)),
            Rates::default()
        );
        assert_eq!(rates(&sample(0, 10, 10, 0), &sample(1_000, 5, 5, 0)).rows_in_per_s, 0.0);
        // More backpressure than wall time (several waits overlap) is capped at 1.
        assert_eq!(
            rates(&sample(0, 0, 0, 0), &sample(1_000, 0, 0, 5_000_000)).backpressure_share,
            1.0
        );
    }

    #[test]
    fn current_rates_average_over_the_last_few_intervals() {
        let mut ring = Ring::new(SAMPLES_MAX);
        assert_eq!(current_rates(&ring), Rates::default());
        // 10 rows/s for a long time, then 40 rows/s for the last 3 seconds.
        let mut rows = 0;
        for t in 0..10 {
            ring.push(sample(t * 1000, rows, rows, 0));
            rows += 10;
        }
        rows -= 10;
        for t in 10..13 {
            rows += 40;
            ring.push(sample(t * 1000, rows, rows, 0));
        }
        assert_eq!(current_rates(&ring).rows_in_per_s, 40.0);
        let series = rate_series(&ring);
        assert_eq!(series.len(), 12);
        assert_eq!(series[0], (1000, rates(&sample(0, 0, 0, 0), &sample(1000, 10, 10, 0))));
    }

    #[test]
    fn a_failure_is_recorded_once_with_its_operator() {
        let metrics = vec![TaskMetrics::new(sluice_types::OperatorId(2), 1, "project")];
        let mut history = PipelineHistory::new(7, &metrics);
        let failed = PipelineStatus::Failed {
            operator: sluice_types::OperatorId(2),
            instance: 1,
            error: "division by zero".into(),
            code: None,
        };
        for t in 0..3 {
            history.record(&metrics, &failed, t);
        }
        assert_eq!(history.errors.len(), 1);
        assert_eq!(history.errors.last().map(|e| (e.operator, e.instance)), Some((2, 1)));
        assert_eq!(history.tasks[0].samples.len(), 3);
    }

    #[test]
    fn dropped_pipelines_are_forgotten_and_samples_stay_bounded() {
        let history = MetricsHistory::default();
        {
            let mut p = history.pipelines.lock().unwrap();
            p.insert("gone".into(), PipelineHistory::new(1, &[]));
        }
        history.tick(&["kept".to_string()], &[], 5);
        assert!(history.pipeline("gone").is_none());
        assert_eq!(history.last_tick_ms(), 5);

        let metrics = vec![TaskMetrics::new(sluice_types::OperatorId(0), 0, "source")];
        let mut p = PipelineHistory::new(1, &metrics);
        for t in 0..(SAMPLES_MAX as i64 + 50) {
            p.record(&metrics, &PipelineStatus::Running, t);
        }
        assert_eq!(p.tasks[0].samples.len(), SAMPLES_MAX);
        assert_eq!(p.tasks[0].samples.iter().next().map(|s| s.t_ms), Some(50));
    }
}
