//! What `ALTER PIPELINE` costs a running pipeline: a q5-shaped pipeline
//! (HOP 10 s / 2 s count per auction over a paced, unbounded Nexmark bid
//! stream, a filter above the window, a blackhole sink) is switched
//! `switches` times between two filters that pass the same rows (the
//! window is kept with its state; the filter and the sink are replaced),
//! and a second one is rescaled 1 → 2 → 1 (its window state redistributed
//! by key group).
//!
//! Measured per switch: the `ALTER PIPELINE` statement's wall time seen by
//! the client — from the request, through the stop at a barrier (the stop
//! checkpoint written), the catalog write, to the new version restored and
//! running. Sources read nothing from the barrier until the new version's
//! sources start, so this bounds how long rows wait at the switch; rows
//! read before the barrier flow on meanwhile. The stop checkpoint's size is
//! the state the switch carried over.

use crate::server::Server;
use anyhow::{Result, ensure};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn query(min: u32) -> String {
    format!(
        "SELECT * FROM (SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime \
         FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
         GROUP BY auction, window_start, window_end) WHERE num >= {min}"
    )
}

/// Size in bytes of the newest completed checkpoint of `name`.
async fn newest_checkpoint_bytes(server: &Server, name: &str) -> Result<u64> {
    for m in server
        .client
        .simple_query(&format!("SHOW CHECKPOINTS FOR {name}"))
        .await?
    {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            return Ok(r.get("size_bytes").and_then(|v| v.parse().ok()).unwrap_or(0));
        }
    }
    Ok(0)
}

/// Runs `sql` (an ALTER) and returns its wall time in ms and the state the
/// switch carried (the stop checkpoint's bytes).
async fn timed_alter(server: &Server, name: &str, sql: &str) -> Result<(f64, u64)> {
    let started = Instant::now();
    server.exec(sql).await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let (state, ..) = server.pipeline(name).await?.unwrap_or_default();
    ensure!(
        state == "running" || state == "starting",
        "{name} is {state} after {sql}"
    );
    Ok((ms, newest_checkpoint_bytes(server, name).await?))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// The switch and rescale runs at `events_per_second` (global Nexmark
/// events), `switches` ALTERs `gap` apart.
pub async fn run(binary: &Path, events_per_second: u64, switches: usize, gap: Duration) -> Result<Value> {
    let server = Server::start(binary).await?;
    server
        .exec(&format!(
            "CREATE STREAM bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
             date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND) \
             WITH (connector = 'nexmark', table = 'bid', 'events.per.second' = '{events_per_second}')"
        ))
        .await?;
    server.exec("SET parallelism = 2").await?;
    server
        .exec(&format!(
            "CREATE SINK q5_alter WITH (connector = 'blackhole', 'checkpoint.interval' = '10s') AS {}",
            query(0)
        ))
        .await?;
    // Let the windows fill. Event time follows Nexmark's default model
    // (10 000 events a second of event time), not the pace: at millions of
    // events a second a 10 s window spans milliseconds of wall time.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut times = Vec::new();
    let mut bytes = Vec::new();
    for i in 0..switches {
        let sql = format!("ALTER PIPELINE q5_alter AS {}", query(1 - (i as u32 % 2)));
        let (ms, b) = timed_alter(&server, "q5_alter", &sql).await?;
        times.push(ms);
        bytes.push(b);
        tokio::time::sleep(gap).await;
    }
    let (_, rows_in, _, _) = server.pipeline("q5_alter").await?.unwrap_or_default();
    ensure!(rows_in > 0, "q5_alter reads after its last switch");
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let mut sorted_bytes = bytes.clone();
    sorted_bytes.sort_unstable();
    let median_bytes = sorted_bytes.get(sorted_bytes.len() / 2).copied().unwrap_or(0);
    let switch = json!({
        "switches": switches,
        "events_per_s_paced": events_per_second,
        "gap_s": gap.as_secs_f64(),
        "p50_ms": percentile(&sorted, 0.5),
        "p99_ms": percentile(&sorted, 0.99),
        "max_ms": sorted.last().copied().unwrap_or(0.0),
        "state_bytes_median": median_bytes,
        "times_ms": times,
    });
    server.exec("DROP SINK q5_alter").await?;

    server.exec("SET parallelism = 1").await?;
    server
        .exec(&format!(
            "CREATE SINK q5_rescale WITH (connector = 'blackhole', 'checkpoint.interval' = '10s') AS {}",
            query(0)
        ))
        .await?;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut rescale = Vec::new();
    for p in [2, 1] {
        let sql = format!("ALTER PIPELINE q5_rescale SET PARALLELISM {p}");
        let (ms, b) = timed_alter(&server, "q5_rescale", &sql).await?;
        rescale.push(json!({ "to": p, "ms": ms, "state_bytes": b }));
        tokio::time::sleep(gap).await;
    }
    Ok(json!({ "switch": switch, "rescale": rescale }))
}
