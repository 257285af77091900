//! Side by side with Apache Flink on this machine: the six queries of the
//! Flink peer harness (`../shared/peers/flink`, run through its own
//! `bench.py`), each run on Flink and then on Sluice over the same `datagen`
//! workload, alternately, in one command. The DDL below is Flink's with
//! `CREATE TABLE` spelled `CREATE STREAM`; the query texts are Flink's.

use crate::server::{RunStats, Server, run_sink};
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// (id, query) as in the harness's `FlinkSqlBench.java`.
pub const QUERIES: &[(&str, &str)] = &[
    ("Q0", "SELECT auction, bidder, price, ts FROM bid"),
    (
        "Q1",
        "SELECT auction, bidder, price * 908 / 1000 AS price_eur, ts FROM bid",
    ),
    ("Q2", "SELECT auction, price FROM bid WHERE auction % 123 = 0"),
    (
        "Q3",
        "SELECT window_start, window_end, auction, COUNT(*) AS cnt, MAX(price) AS max_price \
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)) \
         GROUP BY window_start, window_end, auction",
    ),
    (
        "Q4",
        "SELECT window_start, window_end, auction, COUNT(*) AS cnt, MAX(price) AS max_price \
         FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
         GROUP BY window_start, window_end, auction",
    ),
    (
        "Q5",
        "SELECT window_start, SUM(price) AS sum_price, COUNT(*) AS cnt \
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
         GROUP BY window_start, window_end",
    ),
];

/// Rows per run, as the harness's defaults.
pub fn default_rows(q: &str) -> u64 {
    match q {
        "Q3" | "Q5" => 6_000_000,
        "Q4" => 3_000_000,
        _ => 8_000_000,
    }
}

/// The harness's `bid` table, as a Sluice stream.
pub fn ddl(n: u64) -> String {
    format!(
        "CREATE STREAM bid (
  seq BIGINT, auction BIGINT, bidder BIGINT, price BIGINT,
  channel VARCHAR(10), extra VARCHAR(40),
  ts AS TO_TIMESTAMP_LTZ(seq, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '{n}',
  'rows-per-second' = '1000000000000',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '1', 'fields.seq.end' = '{n}',
  'fields.auction.kind' = 'random', 'fields.auction.min' = '1000', 'fields.auction.max' = '1999',
  'fields.bidder.kind'  = 'random', 'fields.bidder.min'  = '1',    'fields.bidder.max'  = '100000',
  'fields.price.kind'   = 'random', 'fields.price.min'   = '1',    'fields.price.max'   = '10000',
  'fields.channel.kind' = 'random', 'fields.channel.length' = '10',
  'fields.extra.kind'   = 'random', 'fields.extra.length'   = '40'
)"
    )
}

/// Sluice over the harness's workload.
pub async fn sluice(binary: &Path, query: &str, parallelism: u32, n: u64) -> Result<RunStats> {
    let server = Server::start(binary).await?;
    server.exec(&format!("SET parallelism = {parallelism}")).await?;
    server.exec(&ddl(n)).await?;
    run_sink(&server, "flink_peer", "connector = 'blackhole'", query).await
}

/// Flink through the harness's own orchestrator (one fresh JVM per run);
/// its result record (`rows_per_s_net`, `max_rss_kb`, `user_s`, …).
pub fn flink(harness: &Path, out: &Path, q: &str, parallelism: u32, n: u64) -> Result<Value> {
    let status = Command::new("python3")
        .current_dir(harness)
        .arg("bench.py")
        .args(["--reps", "1", "--max-wait", "0", "--no-summary"])
        .arg("--configs")
        .arg(format!("{q}:{parallelism}"))
        .arg("--n")
        .arg(format!("{q}={n}"))
        .arg("--out")
        .arg(out)
        .status()
        .context("running the Flink harness (python3 bench.py)")?;
    anyhow::ensure!(status.success(), "Flink harness failed for {q}");
    let raw = std::fs::read_to_string(out.join("raw.jsonl"))?;
    let last = raw.lines().last().context("no Flink result")?;
    let rec: Value = serde_json::from_str(last)?;
    anyhow::ensure!(rec["rc"].as_i64() == Some(0), "Flink run for {q} failed: {rec}");
    Ok(rec)
}
