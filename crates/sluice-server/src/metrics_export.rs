//! `GET /metrics`: Prometheus text exposition of what a cluster operator
//! watches (Flink's and RisingWave's usual series):
//!
//! - per pipeline: rows in/out, late rows, the sink's watermark; its last
//!   checkpoint's duration and bytes, checkpoints completed and failed;
//! - per operator instance (labels `pipeline`, `operator`, `kind`,
//!   `instance`, `worker`): rows in/out, queued rows, backpressure and busy
//!   time, open window groups (state rows), the latest snapshot's bytes
//!   (state bytes), barrier alignment time, watermark lag, late rows,
//!   malformed records; per pipeline the longest alignment of any instance
//!   in its latest checkpoint;
//! - per worker (label `worker`; a cluster master only): slots, used slots,
//!   heartbeat age, data-plane bytes sent/received, time waiting for remote
//!   credits, resident memory and CPU time;
//! - this process: resident memory and CPU time.
//!
//! `deploy/grafana/sluice.json` is a Grafana dashboard over these series.

use sluice_cluster::Master;
use sluice_cluster::control::Cluster;
use sluice_types::now_ms;
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    format!("{{{}}}", inner.join(","))
}

/// A family of samples: `(labels, value)`.
fn family(out: &mut String, (name, kind, help): (&str, &str, &str), samples: &[(String, f64)]) {
    Family { out }.header(name, kind, help);
    for (l, v) in samples {
        let _ = writeln!(out, "{name}{l} {v}");
    }
}

/// The whole exposition.
pub fn render(master: &Master, cluster: Option<&Cluster>) -> String {
    let mut out = String::new();
    let now = now_ms();
    let pipelines = master.pipelines();
    let per_pipeline = |f: &dyn Fn(&sluice_cluster::status::PipelineInfo) -> Option<f64>| -> Vec<(String, f64)> {
        pipelines
            .iter()
            .filter_map(|p| f(p).map(|v| (labels(&[("pipeline", &p.name)]), v)))
            .collect()
    };
    if let Some((fetched, reused)) = master.view_reads() {
        family(
            &mut out,
            (
                "sluice_quorum_view_reads_total",
                "counter",
                "Reads of a materialized view on this master as a follower, by where the rows came from: taken from the leader, or a copy the leader said is still current.",
            ),
            &[
                (labels(&[("from", "leader")]), fetched as f64),
                (labels(&[("from", "copy")]), reused as f64),
            ],
        );
    }
    family(
        &mut out,
        (
            "sluice_session_queries",
            "gauge",
            "Continuous session queries this master runs now, for its own clients or, on a quorum's leader, a follower's.",
        ),
        &[(String::new(), master.session_queries() as f64)],
    );
    family(
        &mut out,
        (
            "sluice_pipeline_rows_in_total",
            "counter",
            "Rows read by a pipeline's sources.",
        ),
        &per_pipeline(&|p| Some(p.rows_in as f64)),
    );
    family(
        &mut out,
        (
            "sluice_pipeline_rows_out_total",
            "counter",
            "Rows that reached a pipeline's sink.",
        ),
        &per_pipeline(&|p| Some(p.rows_out as f64)),
    );
    family(
        &mut out,
        (
            "sluice_pipeline_late_rows_dropped_total",
            "counter",
            "Rows dropped as late.",
        ),
        &per_pipeline(&|p| Some(p.late_rows_dropped as f64)),
    );
    family(
        &mut out,
        (
            "sluice_pipeline_watermark_ms",
            "gauge",
            "Low watermark at the sink (epoch ms).",
        ),
        &per_pipeline(&|p| p.watermark_ms.filter(|w| *w != i64::MAX).map(|w| w as f64)),
    );
    family(
        &mut out,
        ("sluice_pipeline_restarts_total", "counter", "Restarts after failures."),
        &per_pipeline(&|p| Some(p.restarts as f64)),
    );
    family(
        &mut out,
        (
            "sluice_checkpoint_duration_seconds",
            "gauge",
            "The last completed checkpoint's duration (barrier to manifest).",
        ),
        &per_pipeline(&|p| p.checkpoints.last().map(|c| c.duration_ms as f64 / 1e3)),
    );
    family(
        &mut out,
        (
            "sluice_checkpoint_bytes",
            "gauge",
            "The last completed checkpoint's size.",
        ),
        &per_pipeline(&|p| p.checkpoints.last().map(|c| c.size_bytes as f64)),
    );
    family(
        &mut out,
        (
            "sluice_checkpoint_last_id",
            "gauge",
            "The id of the last completed checkpoint (it grows by one per checkpoint).",
        ),
        &per_pipeline(&|p| p.checkpoints.last().map(|c| c.id as f64)),
    );
    task_families(&mut out, master, &pipelines, now);
    if let Some(cluster) = cluster {
        worker_families(&mut out, cluster);
    }
    let (rss, cpu_ns) = sluice_cluster::process::usage();
    family(
        &mut out,
        (
            "sluice_process_resident_memory_bytes",
            "gauge",
            "This process's resident memory.",
        ),
        &[(String::new(), rss as f64)],
    );
    family(
        &mut out,
        (
            "sluice_process_cpu_seconds_total",
            "counter",
            "This process's CPU time (user + system).",
        ),
        &[(String::new(), cpu_ns as f64 / 1e9)],
    );
    out
}

/// Per operator instance, of every running named pipeline.
fn task_families(out: &mut String, master: &Master, pipelines: &[sluice_cluster::status::PipelineInfo], now: i64) {
    type Get = fn(&sluice_dataflow::metrics::TaskMetrics, i64) -> Option<f64>;
    let families: [(&str, &str, &str, Get); 11] = [
        (
            "sluice_task_rows_in_total",
            "counter",
            "Rows an operator instance received.",
            |m, _| Some(m.rows_in.load(Ordering::Relaxed) as f64),
        ),
        (
            "sluice_task_rows_out_total",
            "counter",
            "Rows an operator instance emitted.",
            |m, _| Some(m.rows_out.load(Ordering::Relaxed) as f64),
        ),
        (
            "sluice_task_queued_rows",
            "gauge",
            "Rows queued on an instance's input channels.",
            |m, _| Some(m.queued_rows.load(Ordering::Relaxed) as f64),
        ),
        (
            "sluice_task_backpressure_seconds_total",
            "counter",
            "Time an instance waited for downstream credits.",
            |m, _| Some(m.backpressure_us.load(Ordering::Relaxed) as f64 / 1e6),
        ),
        (
            "sluice_task_busy_seconds_total",
            "counter",
            "Time an instance's task ran.",
            |m, _| Some(m.busy_us.load(Ordering::Relaxed) as f64 / 1e6),
        ),
        (
            "sluice_task_state_groups",
            "gauge",
            "Open window groups an instance holds (its state rows).",
            |m, _| Some(m.state_groups.load(Ordering::Relaxed) as f64),
        ),
        (
            "sluice_task_state_bytes",
            "gauge",
            "Size of an instance's latest stored snapshot (its state).",
            |m, _| Some(m.state_bytes.load(Ordering::Relaxed) as f64),
        ),
        (
            "sluice_task_checkpoint_alignment_seconds_total",
            "counter",
            "Time an instance spent aligning checkpoint barriers (first barrier to last).",
            |m, _| Some(m.checkpoint_alignment_us.load(Ordering::Relaxed) as f64 / 1e6),
        ),
        (
            "sluice_task_watermark_lag_seconds",
            "gauge",
            "Wall clock minus an instance's low watermark.",
            |m, now| {
                let w = m.watermark_ms.load(Ordering::Relaxed);
                (w != i64::MIN && w != i64::MAX).then(|| (now - w) as f64 / 1e3)
            },
        ),
        (
            "sluice_task_late_rows_total",
            "counter",
            "Rows an instance dropped as late.",
            |m, _| Some(m.late_rows_dropped.load(Ordering::Relaxed) as f64),
        ),
        (
            "sluice_task_malformed_records_total",
            "counter",
            "Records a source instance could not decode.",
            |m, _| Some(m.records_malformed.load(Ordering::Relaxed) as f64),
        ),
    ];
    let runtimes: Vec<_> = pipelines
        .iter()
        .filter_map(|p| master.runtime(&p.name).map(|r| (p.name.clone(), r)))
        .collect();
    for (name, kind, help, get) in families {
        let mut samples = Vec::new();
        for (pipeline, r) in &runtimes {
            for m in &r.metrics {
                let Some(v) = get(m, now) else { continue };
                let worker = r
                    .placement
                    .worker_of(m.operator, m.instance)
                    .map(|w| w.0.clone())
                    .unwrap_or_default();
                let l = labels(&[
                    ("pipeline", pipeline),
                    ("operator", &m.operator.0.to_string()),
                    ("kind", m.kind),
                    ("instance", &m.instance.to_string()),
                    ("worker", &worker),
                ]);
                samples.push((l, v));
            }
        }
        family(out, (name, kind, help), &samples);
    }
    let longest: Vec<(String, f64)> = runtimes
        .iter()
        .map(|(pipeline, r)| {
            let us = r
                .metrics
                .iter()
                .map(|m| m.last_checkpoint_alignment_us.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            (labels(&[("pipeline", pipeline)]), us as f64 / 1e6)
        })
        .collect();
    family(
        out,
        (
            "sluice_checkpoint_alignment_seconds",
            "gauge",
            "The longest barrier alignment of any instance in its latest checkpoint.",
        ),
        &longest,
    );
}

/// Per worker of a cluster.
fn worker_families(out: &mut String, cluster: &Cluster) {
    let workers = cluster.workers();
    type Get = fn(&sluice_cluster::control::WorkerInfo) -> f64;
    let families: [(&str, &str, &str, Get); 8] = [
        ("sluice_worker_slots", "gauge", "Task slots a worker offers.", |w| {
            f64::from(w.slots)
        }),
        ("sluice_worker_used_slots", "gauge", "Task slots in use.", |w| {
            f64::from(w.used_slots)
        }),
        (
            "sluice_worker_heartbeat_age_seconds",
            "gauge",
            "Time since the worker's last heartbeat.",
            |w| w.heartbeat_age_ms as f64 / 1e3,
        ),
        (
            "sluice_worker_data_bytes_sent_total",
            "counter",
            "Bytes the worker's data plane sent.",
            |w| w.data_bytes_sent as f64,
        ),
        (
            "sluice_worker_data_bytes_received_total",
            "counter",
            "Bytes the worker's data plane received.",
            |w| w.data_bytes_received as f64,
        ),
        (
            "sluice_worker_credit_wait_seconds_total",
            "counter",
            "Time the worker's senders waited for remote credits.",
            |w| w.credit_wait_ns as f64 / 1e9,
        ),
        (
            "sluice_worker_resident_memory_bytes",
            "gauge",
            "The worker process's resident memory.",
            |w| w.rss_bytes as f64,
        ),
        (
            "sluice_worker_cpu_seconds_total",
            "counter",
            "The worker process's CPU time.",
            |w| w.cpu_ns as f64 / 1e9,
        ),
    ];
    for (name, kind, help, get) in families {
        let samples: Vec<(String, f64)> = workers.iter().map(|w| (labels(&[("worker", &w.id)]), get(w))).collect();
        family(out, (name, kind, help), &samples);
    }
}
