//! Nexmark queries from `benches/nexmark/qN.sql`, each in a fresh server:
//! the bounded built-in generator → the query's DAG → a blackhole sink.

use crate::server::{RunStats, Server, run_sink};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::Path;

/// The Nexmark tables a query reads (for its generator-only baseline).
pub fn tables_of(sql: &str) -> Vec<&'static str> {
    // Words that precede a relation: FROM t, JOIN t, TUMBLE(t, HOP(t.
    let lower = sql.to_ascii_lowercase().replace('(', " ( ");
    let words: Vec<&str> = lower.split_whitespace().collect();
    let mut tables = Vec::new();
    for t in ["person", "auction", "bid"] {
        let reads = words
            .windows(2)
            .any(|w| w[1].trim_end_matches(',') == t && matches!(w[0], "from" | "join" | "("));
        if reads {
            tables.push(t);
        }
    }
    tables
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

/// How the streams are declared for a run.
#[derive(Debug, Clone, Copy)]
pub struct StreamSetup {
    pub events: u64,
    /// Paced global events per second (0 = unpaced).
    pub events_per_second: u64,
    /// Event time is wall-clock (latency runs).
    pub wall_clock: bool,
    pub watermark_delay_s: u32,
}

pub async fn create_streams(server: &Server, parallelism: u32, s: StreamSetup) -> Result<()> {
    server.exec(&format!("SET parallelism = {parallelism}")).await?;
    let base = if s.wall_clock { ", 'base.time' = 'now'" } else { "" };
    let delay = match s.watermark_delay_s {
        0 => String::new(),
        d => format!(" - INTERVAL '{d}' SECOND"),
    };
    for table in ["person", "auction", "bid"] {
        server
            .exec(&format!(
                "CREATE STREAM {table} (WATERMARK FOR date_time AS date_time{delay}) \
                 WITH (connector = 'nexmark', table = '{table}', 'events.max' = {}, 'events.per.second' = {}{base})",
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
    })
}

/// Runs one query at full speed (checkpoints at the server's default).
pub async fn throughput(binary: &Path, dir: &Path, name: &str, parallelism: u32, events: u64) -> Result<RunStats> {
    throughput_checkpointed(binary, dir, name, parallelism, events, None).await
}

/// Runs one query at full speed with `SET checkpoint_interval = '<interval>'`
/// (`None`: the default, 10 s; `Some("off")`: no checkpoints).
pub async fn throughput_checkpointed(
    binary: &Path,
    dir: &Path,
    name: &str,
    parallelism: u32,
    events: u64,
    checkpoint_interval: Option<&str>,
) -> Result<RunStats> {
    let (mut sets, query) = read_query(dir, name)?;
    if let Some(interval) = checkpoint_interval {
        sets.push(format!("SET checkpoint_interval = '{interval}'"));
    }
    let server = Server::start(binary).await?;
    let setup = StreamSetup {
        events,
        events_per_second: 0,
        wall_clock: false,
        watermark_delay_s: 2,
    };
    create_streams(&server, parallelism, setup).await?;
    for s in &sets {
        server.exec(s).await?;
    }
    run_sink(&server, "bench", "connector = 'blackhole'", &query).await
}

/// The generator alone: every row of `table` straight into a blackhole.
pub async fn generator_only(binary: &Path, table: &str, parallelism: u32, events: u64) -> Result<RunStats> {
    let server = Server::start(binary).await?;
    let setup = StreamSetup {
        events,
        events_per_second: 0,
        wall_clock: false,
        watermark_delay_s: 2,
    };
    create_streams(&server, parallelism, setup).await?;
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
    }
}
