//! Nexmark queries from `benches/nexmark/qN.sql`, each in a fresh server:
//! the bounded built-in generator → the query's DAG → a blackhole sink.

use crate::server::{RunStats, Server, run_sink};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::Path;

/// The Nexmark tables a query reads (for its generator-only baseline, and
/// the rows the Flink peer's rate counts).
pub fn tables_of(sql: &str) -> Vec<&'static str> {
    // Words that precede a relation: FROM t, JOIN t, TUMBLE(t, HOP(t, and
    // in a FROM list, `a, t`.
    let lower = sql.to_ascii_lowercase().replace('(', " ( ").replace(')', " ) ");
    let words: Vec<&str> = lower.split_whitespace().collect();
    let mut read = [false; 3];
    let mut in_from = false;
    for w in words.windows(2) {
        match w[0] {
            "from" => in_from = true,
            "where" | "group" | "on" | "select" | ")" | "order" | "having" => in_from = false,
            _ => {}
        }
        let relation = matches!(w[0], "from" | "join" | "(" | "table") || (in_from && w[0].ends_with(','));
        if let Some(i) = ["person", "auction", "bid"]
            .iter()
            .position(|t| w[1].trim_end_matches(',') == *t)
            && relation
        {
            read[i] = true;
        }
    }
    ["person", "auction", "bid"]
        .into_iter()
        .zip(read)
        .filter_map(|(t, r)| r.then_some(t))
        .collect()
}

/// The SET statements and the query of a benchmark file.
pub fn read_query(dir: &Path, name: &str) -> Result<(Vec<String>, String)> {
    let path = dir.join(format!("{name}.sql"));
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let text: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("--")).collect();
    let mut statements: Vec<String> = text
        .join("\n")
        .split(';')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let query = statements.pop().context("no query in the file")?;
    Ok((statements, query))
}

/// How event time advances in the generator, and the streams' watermark.
#[derive(Debug, Clone, Copy)]
pub struct TimeModel {
    /// `'event.rate'`: events a second of event time, whatever the
    /// generation rate (Flink Nexmark's `first-event.rate`, which its
    /// suites set to their TPS, 10 M); 0: the connector's fixed model for
    /// tests (10 000 events a second).
    pub event_rate: u64,
    /// `WATERMARK FOR date_time AS date_time - INTERVAL 'd' SECOND`
    /// (Flink Nexmark's DDL: 4 s).
    pub watermark_delay_s: u32,
}

impl TimeModel {
    /// The connector's fixed model the tests use: 10 000 events a second of
    /// event time at any generation rate, watermarks 2 s behind (small
    /// windows: the cluster runs measure the data plane, not state).
    pub const FIXED: TimeModel = TimeModel {
        event_rate: 0,
        watermark_delay_s: 2,
    };
}

/// How the streams are declared for a run.
#[derive(Debug, Clone, Copy)]
pub struct StreamSetup {
    pub events: u64,
    /// Paced global events per second (0 = unpaced).
    pub events_per_second: u64,
    /// Event time is wall-clock (latency runs).
    pub wall_clock: bool,
    pub watermark_delay_s: u32,
    /// `'event.rate'` (0: not set).
    pub event_rate: u64,
}

impl StreamSetup {
    /// Unpaced: the generator as fast as it goes, event time by `model`.
    pub fn unpaced(events: u64, model: TimeModel) -> StreamSetup {
        StreamSetup {
            events,
            events_per_second: 0,
            wall_clock: false,
            watermark_delay_s: model.watermark_delay_s,
            event_rate: model.event_rate,
        }
    }
}

pub async fn create_streams(server: &Server, parallelism: u32, s: StreamSetup) -> Result<()> {
    server.exec(&format!("SET parallelism = {parallelism}")).await?;
    let base = if s.wall_clock { ", 'base.time' = 'now'" } else { "" };
    let delay = match s.watermark_delay_s {
        0 => String::new(),
        d => format!(" - INTERVAL '{d}' SECOND"),
    };
    let rate = match s.event_rate {
        0 => String::new(),
        r => format!(", 'event.rate' = {r}"),
    };
    for table in ["person", "auction", "bid"] {
        server
            .exec(&format!(
                "CREATE STREAM {table} (WATERMARK FOR date_time AS date_time{delay}) \
                 WITH (connector = 'nexmark', table = '{table}', 'events.max' = {}, 'events.per.second' = {}{base}{rate})",
                s.events, s.events_per_second
            ))
            .await?;
    }
    Ok(())
}

pub fn stats_json(s: &RunStats) -> Value {
    json!({
        "wall_s": s.wall_s,
        "rows_in": s.rows_in,
        "rows_out": s.rows_out,
        "events_per_s": s.rows_per_s(),
        "cpu_s": s.cpu_s,
        "cores_used": s.cores_used(),
        "events_per_cpu_s": s.rows_per_cpu_s(),
        "peak_rss_mib": s.peak_rss_bytes as f64 / (1 << 20) as f64,
        "rss_mib_samples": s.rss_samples.iter().map(|(t, b)| json!([t, *b as f64 / (1 << 20) as f64])).collect::<Vec<_>>(),
        "state_rows_peak": s.state_rows_peak,
        "state": s.state.iter().map(|o| json!({
            "operator": o.operator, "kind": o.kind, "detail": o.detail,
            "rows_peak": o.rows_peak, "snapshot_bytes": o.snapshot_bytes,
        })).collect::<Vec<_>>(),
        "checkpoints": s.checkpoints,
    })
}

/// Median, min and max of `values` (NaN-free), or zeros.
pub fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => (0.0, 0.0, 0.0),
        n if n % 2 == 1 => (v[n / 2], v[0], v[n - 1]),
        n => ((v[n / 2 - 1] + v[n / 2]) / 2.0, v[0], v[n - 1]),
    }
}

/// Several runs of one measurement: every run's figures under `runs`, the
/// median run's figures at the top (the run whose rate is the median: its
/// state, memory and checkpoints go together), and `events_per_s_min` /
/// `_max` / `_median` over the runs.
pub fn runs_json(runs: &[RunStats]) -> Value {
    let rates: Vec<f64> = runs.iter().map(RunStats::rows_per_s).collect();
    let (median, min, max) = spread(&rates);
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| rates[*a].total_cmp(&rates[*b]));
    let mut v = runs
        .get(order[order.len() / 2])
        .map(stats_json)
        .unwrap_or_else(|| json!({}));
    v["events_per_s_median"] = json!(median);
    v["events_per_s_min"] = json!(min);
    v["events_per_s_max"] = json!(max);
    v["peak_rss_mib_max"] = json!(runs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0) as f64 / (1 << 20) as f64);
    v["runs"] = json!(
        runs.iter()
            .map(|r| json!({
                "wall_s": r.wall_s, "rows_in": r.rows_in, "events_per_s": r.rows_per_s(), "cpu_s": r.cpu_s,
                "peak_rss_mib": r.peak_rss_bytes as f64 / (1 << 20) as f64, "state_rows_peak": r.state_rows_peak,
            }))
            .collect::<Vec<_>>()
    );
    v
}

/// Several runs of one checkpoint setting: [`runs_json`], and every run's
/// checkpoints pooled (`checkpoints_all`) with how many each run took
/// (`checkpoints_taken`) and the bytes each wrote in all
/// (`checkpoint_bytes_written`).
pub fn checkpoint_runs_json(runs: &[RunStats]) -> Value {
    let mut v = runs_json(runs);
    v["checkpoints_all"] = json!(
        runs.iter()
            .flat_map(|r| r.checkpoints.iter().cloned())
            .collect::<Vec<_>>()
    );
    v["checkpoints_taken"] = json!(runs.iter().map(|r| r.checkpoints.len()).collect::<Vec<_>>());
    v["checkpoint_bytes_written"] = json!(
        runs.iter()
            .map(|r| r
                .checkpoints
                .iter()
                .filter_map(|c| c["size_bytes"].as_f64())
                .sum::<f64>())
            .collect::<Vec<_>>()
    );
    v
}

/// Runs one query at full speed (checkpoints at the server's default).
pub async fn throughput(
    binary: &Path,
    dir: &Path,
    name: &str,
    parallelism: u32,
    events: u64,
    model: TimeModel,
) -> Result<RunStats> {
    throughput_checkpointed(
        binary,
        dir,
        name,
        parallelism,
        StreamSetup::unpaced(events, model),
        None,
    )
    .await
}

/// Runs one query at full speed with `SET checkpoint_interval = '<interval>'`
/// (`None`: the default, 10 s; `Some("off")`: no checkpoints).
pub async fn throughput_checkpointed(
    binary: &Path,
    dir: &Path,
    name: &str,
    parallelism: u32,
    setup: StreamSetup,
    checkpoint_interval: Option<&str>,
) -> Result<RunStats> {
    let (mut sets, query) = read_query(dir, name)?;
    if let Some(interval) = checkpoint_interval {
        sets.push(format!("SET checkpoint_interval = '{interval}'"));
    }
    let server = Server::start(binary).await?;
    create_streams(&server, parallelism, setup).await?;
    for s in &sets {
        server.exec(s).await?;
    }
    run_sink(&server, "bench", "connector = 'blackhole'", &query).await
}

/// The generator alone: every row of `table` straight into a blackhole
/// (`checkpoint_interval` as in [`throughput_checkpointed`]).
pub async fn generator_only(
    binary: &Path,
    table: &str,
    parallelism: u32,
    events: u64,
    model: TimeModel,
    checkpoint_interval: Option<&str>,
) -> Result<RunStats> {
    let server = Server::start(binary).await?;
    let setup = StreamSetup::unpaced(events, model);
    create_streams(&server, parallelism, setup).await?;
    if let Some(interval) = checkpoint_interval {
        server.exec(&format!("SET checkpoint_interval = '{interval}'")).await?;
    }
    run_sink(
        &server,
        "generator",
        "connector = 'blackhole'",
        &format!("SELECT * FROM {table}"),
    )
    .await
}

/// One latency run's pacing and length.
pub struct LatencyRun {
    /// Global events per second.
    pub events_per_second: u64,
    /// How long the input lasts.
    pub seconds: u64,
    /// The query's window (0: none): latency is measured from its end.
    pub window_ms: u64,
    /// Seconds after the first row at the sink before measuring starts.
    pub warmup_s: u64,
}

/// End-to-end latency at a fixed rate: event time is the event's creation
/// time (wall clock), measured at the sink; for windowed queries from the
/// end of the row's window.
pub async fn latency(
    binary: &Path,
    dir: &Path,
    name: &str,
    parallelism: u32,
    run: LatencyRun,
) -> Result<(RunStats, Value)> {
    let LatencyRun {
        events_per_second,
        seconds,
        window_ms,
        warmup_s,
    } = run;
    let (sets, query) = read_query(dir, name)?;
    let server = Server::start(binary).await?;
    let setup = StreamSetup {
        events: events_per_second * seconds,
        events_per_second,
        wall_clock: true,
        watermark_delay_s: 0,
        event_rate: 0,
    };
    create_streams(&server, parallelism, setup).await?;
    for s in &sets {
        server.exec(s).await?;
    }
    let file = std::env::temp_dir().join(format!("sluice-bench-latency-{}-{name}.json", std::process::id()));
    let window = if window_ms > 0 {
        format!(", 'latency.window' = '{window_ms}ms'")
    } else {
        String::new()
    };
    let with = format!(
        "connector = 'blackhole', 'latency.column' = 'date_time', 'latency.file' = '{}', 'latency.warmup' = '{warmup_s}s'{window}",
        file.display()
    );
    let stats = run_sink(&server, "bench_latency", &with, &query).await?;
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)?;
    let _ = std::fs::remove_file(&file);
    Ok((stats, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_the_tables_named_in_from_join_and_windows() {
        assert_eq!(tables_of("SELECT * FROM bid"), vec!["bid"]);
        let q7 = include_str!("../../../benches/nexmark/q7.sql");
        assert_eq!(tables_of(q7), vec!["bid"]);
        let q8 = include_str!("../../../benches/nexmark/q8.sql");
        assert_eq!(tables_of(q8), vec!["person", "auction"]);
        // Flink's table-function syntax: HOP(TABLE bid, …).
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/nexmark");
        let (_, q5_full) = read_query(&dir, "q5_full").unwrap();
        assert_eq!(tables_of(&q5_full), vec!["bid"]);
        // A FROM list: `FROM auction AS a, bid AS b`; a select list is not one.
        let (_, q4) = read_query(&dir, "q4").unwrap();
        assert_eq!(tables_of(&q4), vec!["auction", "bid"]);
        let (_, q23) = read_query(&dir, "q23").unwrap();
        assert_eq!(tables_of(&q23), vec!["person", "auction", "bid"]);
        assert_eq!(tables_of("SELECT price, auction FROM bid"), vec!["bid"]);
    }
}
