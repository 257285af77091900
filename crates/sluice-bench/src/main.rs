//! `sluice-bench`: the Sluice benchmark suite (run by `scripts/bench.sh`).
//!
//! - Nexmark queries from `benches/nexmark/qN.sql` through the full engine
//!   (a fresh `sluice playground` per run, SQL over pgwire, a blackhole
//!   sink), with the generator-only rate of the tables each one reads;
//! - end-to-end latency at half the measured rate (q0, q7);
//! - SOL message throughput (100-byte messages, random shuffle, counting);
//! - the Flink peer harness's six queries, Flink and Sluice alternately;
//! - the cluster: Nexmark queries and SOL-like messages with their stages
//!   on two worker processes beside one process, and the time a pipeline
//!   takes to run again after `kill -9` of a worker.
//!
//! Writes `benches/results/latest.{json,md}` and `throughput.svg`
//! (`--results-dir` elsewhere).

mod alter;
mod cluster;
mod flink;
mod flink_nexmark;
mod masters;
mod nexmark;
mod partial;
mod report;
mod server;
mod sol;
mod units;

use anyhow::Result;
use clap::Parser;
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Sluice benchmarks: Nexmark, latency, SOL message throughput, Flink side by side")]
struct Args {
    /// Queries to run (files in benches/nexmark; '' for none, which also
    /// skips the generator-only runs).
    #[arg(long, value_delimiter = ',', default_value = "q0,q1,q2,q3,q5,q5_full,q7,q8,q22")]
    queries: Vec<String>,
    /// Instances per operator.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Runs of every throughput figure (median, with min and max).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Global Nexmark events per throughput run (Flink Nexmark's 100m suite).
    #[arg(long, default_value_t = 100_000_000)]
    events: u64,
    /// Global Nexmark events for the join queries that read only person and
    /// auction (8 % of the events).
    #[arg(long, default_value_t = 100_000_000)]
    join_events: u64,
    /// Events a second of event time in the throughput runs ('event.rate':
    /// Flink Nexmark's first-event.rate, which its suites set to their TPS,
    /// 10 M); 0: the connector's fixed 10 000 a second (the tests' model).
    #[arg(long, default_value_t = 10_000_000)]
    event_rate: u64,
    /// The throughput runs' watermark delay, s (Flink Nexmark's DDL: 4).
    #[arg(long, default_value_t = 4)]
    watermark_delay_s: u32,
    /// Seconds of each latency run at least (2 s of it, or two windows, are
    /// warm-up); a windowed query runs for LATENCY_WINDOWS windows more.
    #[arg(long, default_value_t = 60)]
    latency_seconds: u64,
    /// Queries whose latency is measured at half their measured rate, with
    /// wall-clock event time (q7_1s: q7 with 1-second windows).
    #[arg(long, value_delimiter = ',', default_value = "q0,q7_1s")]
    latency_queries: Vec<String>,
    /// Paced global events/s of the latency runs (0: half the measured rate).
    #[arg(long, default_value_t = 0)]
    latency_rate: u64,
    /// SOL messages per run (0: skip).
    #[arg(long, default_value_t = 200_000_000)]
    sol_messages: u64,
    /// Queries whose throughput is measured with checkpoints off, every 10 s
    /// and every 1 s (the cost of checkpointing).
    #[arg(long, value_delimiter = ',', default_value = "q5,q7")]
    checkpoint_queries: Vec<String>,
    /// Seconds each checkpoint-cost run lasts (its events: this many
    /// seconds at the query's measured median rate).
    #[arg(long, default_value_t = 60)]
    checkpoint_seconds: u64,
    /// Paces the checkpoint-cost runs at this many global events a second
    /// (0: unpaced, the runs sized by the query's measured median rate):
    /// a join's state then outgrows what one interval adds, as in a
    /// pipeline running below its capacity.
    #[arg(long, default_value_t = 0)]
    checkpoint_rate: u64,
    /// Runs of each checkpoint setting; the settings alternate (off, 10 s,
    /// 1 s, off, …) so each shares the machine's noise with the others.
    #[arg(long, default_value_t = 3)]
    checkpoint_runs: usize,
    /// ALTER PIPELINE switches on a q5-shaped pipeline at half q5's
    /// measured rate, and a rescale 1 → 2 → 1 (0: skip).
    #[arg(long, default_value_t = 20)]
    alter_switches: usize,
    /// Also run q5 over this many events and report its memory over time (0: skip).
    #[arg(long, default_value_t = 0)]
    q5_memory_events: u64,
    /// Flink side by side: the harness directory (with .venv), or empty to skip.
    #[arg(long, default_value = "")]
    flink: String,
    /// Flink queries to run (Q0..Q5, and the updating U1..U4).
    #[arg(long, value_delimiter = ',', default_value = "Q0,Q1,Q2,Q3,Q4,Q5,U1,U2,U3,U4")]
    flink_queries: Vec<String>,
    /// Rows per Flink and Sluice datagen run (0: per-query defaults, Flink's
    /// sized for runs of ~35 s, Sluice's 100 M).
    #[arg(long, default_value_t = 0)]
    flink_rows: u64,
    /// Nexmark queries (benches/nexmark) run on Flink and Sluice over the
    /// same rows (Flink's tables: NexmarkSource.java, Sluice's generator
    /// ported), with --flink ('' for none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "q4,q5_full,q6,q9,q11,q14,q15,q16,q17,q18,q19,q20,q21,q23"
    )]
    flink_nexmark: Vec<String>,
    /// Global events a run of --flink-nexmark, on both engines.
    #[arg(long, default_value_t = 10_000_000)]
    flink_nexmark_events: u64,
    /// Nexmark queries run with their stages on two worker processes
    /// (pack placement, p slots each: every row crosses the data plane)
    /// beside one process, over --events events ('' for none).
    #[arg(long, value_delimiter = ',', default_value = "q5,q0")]
    cluster_queries: Vec<String>,
    /// SOL-like messages (100-byte strings, shuffled by key and counted per
    /// window, in SQL) across two worker processes beside one process (0: skip).
    #[arg(long, default_value_t = 20_000_000)]
    cluster_sol_messages: u64,
    /// Repetitions of each cluster throughput comparison.
    #[arg(long, default_value_t = 1)]
    cluster_runs: usize,
    /// kill -9 failovers of a paced q5-shaped pipeline over three workers (0: skip).
    #[arg(long, default_value_t = 10)]
    failover_runs: usize,
    /// Failovers as above with the worker frozen (SIGSTOP: connections
    /// open, silent, as a host that drops off the network) (0: skip).
    #[arg(long, default_value_t = 10)]
    freeze_runs: usize,
    /// Paced global Nexmark events/s of the failover pipeline.
    #[arg(long, default_value_t = 200_000)]
    failover_rate: u64,
    /// The master's --worker-timeout in the failover runs.
    #[arg(long, default_value = "5s")]
    worker_timeout: String,
    /// The master quorum through `sluice master` processes: this many
    /// `CREATE STREAM` statements through the leader with 1, 3 and 5
    /// masters (0: skip). With it (or --masters-failover-runs) only the
    /// master measurements run, into RESULTS/quorum/masters.{md,json}.
    #[arg(long, default_value_t = 0)]
    masters_ddl: usize,
    /// Leader kill -9 → first DDL accepted, over this many runs of three
    /// masters (0: skip).
    #[arg(long, default_value_t = 0)]
    masters_failover_runs: usize,
    /// Where the results are written (default ROOT/benches/results).
    #[arg(long)]
    results_dir: Option<PathBuf>,
    /// The repository root (benches/ lives there).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// The sluice binary (default: next to this one).
    #[arg(long)]
    sluice: Option<PathBuf>,
}

/// Windows a windowed query's latency run measures: it emits about one row
/// per window (q7: the bid with the highest price), so this is its sample size.
const LATENCY_WINDOWS: u64 = 50;
/// Windows of a windowed query's latency run that are warm-up: its state
/// (q7's join holds a window of bids) fills during the first and is first
/// expired at the second; latency is measured in the steady state after
/// them, as Nexmark's Flink harness waits (`nexmark.metric.monitor.delay`)
/// before it measures. The worst row of the warm-up is still reported.
const LATENCY_WARMUP_WINDOWS: u64 = 2;
/// Warm-up of a latency run without windows (the sink's default).
const LATENCY_WARMUP_S: u64 = 2;

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let binary = match &args.sluice {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("sluice"),
    };
    let dir = args.root.join("benches/nexmark");
    let out_dir = args
        .results_dir
        .clone()
        .unwrap_or_else(|| args.root.join("benches/results"));
    let queries_to_run: Vec<&String> = args.queries.iter().filter(|q| !q.is_empty()).collect();
    std::fs::create_dir_all(&out_dir)?;
    if args.masters_ddl > 0 || args.masters_failover_runs > 0 {
        eprintln!("== the master quorum through sluice master processes");
        return masters::run(
            &binary,
            &out_dir.join("quorum"),
            args.masters_ddl,
            args.masters_failover_runs,
        )
        .await;
    }
    let p = args.parallelism;
    let mut results = json!({
        "machine": report::machine(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "parallelism": p,
        "started_utc": report::utc_now(),
    });

    let model = nexmark::TimeModel {
        event_rate: args.event_rate,
        watermark_delay_s: args.watermark_delay_s,
    };
    let runs = args.runs.max(1);
    results["time_model"] = json!({
        "event_rate": args.event_rate, "watermark_delay_s": args.watermark_delay_s, "runs": runs,
    });
    eprintln!("== generator-only rates ({runs} runs each)");
    let mut generators = serde_json::Map::new();
    let tables: &[&str] = if queries_to_run.is_empty() {
        &[]
    } else {
        &["bid", "auction", "person"]
    };
    for &table in tables {
        let events = if table == "bid" { args.events } else { args.join_events };
        let mut all = Vec::new();
        for _ in 0..runs {
            all.push(nexmark::generator_only(&binary, table, p, events, model, None).await?);
        }
        let v = nexmark::runs_json(&all);
        eprintln!("  {table}: {:.0} rows/s (median)", f64_of(&v["events_per_s_median"]));
        generators.insert(table.into(), v);
    }
    results["generator_only"] = Value::Object(generators.clone());

    eprintln!("== Nexmark throughput ({runs} runs each)");
    let mut queries = serde_json::Map::new();
    for q in queries_to_run {
        let (_, sql) = nexmark::read_query(&dir, q)?;
        let tables = nexmark::tables_of(&sql);
        let events = if tables.contains(&"bid") {
            args.events
        } else {
            args.join_events
        };
        let mut all = Vec::new();
        for _ in 0..runs {
            let s = nexmark::throughput(&binary, &dir, q, p, events, model).await?;
            eprintln!(
                "  {q}: {:.0} events/s ({:.0}/core, {:.2} cores), peak RSS {:.0} MiB, state {} rows",
                s.rows_per_s(),
                s.rows_per_cpu_s(),
                s.cores_used(),
                s.peak_rss_bytes as f64 / (1 << 20) as f64,
                s.state_rows_peak,
            );
            all.push(s);
        }
        // The generator-only rate of the same tables: rows over summed time
        // (each table's median run).
        let (rows, secs) = tables.iter().fold((0.0, 0.0), |(r, t), table| {
            let g = &generators[*table];
            (r + f64_of(&g["rows_in"]), t + f64_of(&g["wall_s"]))
        });
        let mut v = nexmark::runs_json(&all);
        v["global_events"] = json!(events);
        v["tables"] = json!(tables);
        v["generator_only_events_per_s"] = json!(rows / f64::max(secs, 1e-9));
        v["sql"] = json!(sql);
        queries.insert(q.clone(), v);
        results["nexmark"] = json!(queries);
        partial::write_partial(&out_dir, &results)?;
    }

    eprintln!("== latency at a fixed rate");
    for q in args.latency_queries.iter().filter(|q| !q.is_empty()) {
        // q7_1s is paced at half q7's measured rate.
        let measured = queries.get(q).or_else(|| queries.get(q.trim_end_matches("_1s")));
        let rows_per_s = measured.map_or(0.0, |v| f64_of(&v["events_per_s_median"]));
        if rows_per_s == 0.0 && args.latency_rate == 0 {
            eprintln!("  {q}: skipped, its throughput was not measured in this run");
            continue;
        }
        let (_, sql) = nexmark::read_query(&dir, q)?;
        let tables = nexmark::tables_of(&sql);
        // Pacing counts global events; a bid stream carries 92 % of them.
        // rows_in counts distinct events: a stream read twice in a query
        // (q7's self-join) has one shared source.
        let share = if tables == ["bid"] { 0.92 } else { 1.0 };
        let rate = match args.latency_rate {
            0 => ((rows_per_s / share) / 2.0).max(1000.0) as u64,
            fixed => fixed,
        };
        let window_ms = match q.as_str() {
            "q7" => 10_000,
            "q7_1s" => 1_000,
            _ => 0,
        };
        // A windowed query emits once per window: run long enough for
        // several windows to close after the warm-up.
        let warmup_s = LATENCY_WARMUP_S + LATENCY_WARMUP_WINDOWS * window_ms / 1000;
        let seconds = args.latency_seconds.max(warmup_s + LATENCY_WINDOWS * window_ms / 1000);
        let run = nexmark::LatencyRun {
            events_per_second: rate,
            seconds,
            window_ms,
            warmup_s,
        };
        let (s, summary) = nexmark::latency(&binary, &dir, q, p, run).await?;
        eprintln!("  {q} at {rate} events/s: {summary}");
        let entry = queries.entry(q.clone()).or_insert_with(|| json!({ "sql": sql }));
        entry["latency"] = json!({
            "events_per_s_paced": rate,
            "rows_in": s.rows_in,
            "measured_from": if window_ms > 0 { "window end" } else { "event creation" },
            "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"], "max_ms": summary["max_ms"],
            "warmup_s": summary["warmup_s"], "warmup_max_ms": summary["warmup_max_ms"],
            "rows_measured": summary["rows"],
            "worst_slots": summary["worst_slots"],
        });
    }

    eprintln!(
        "== checkpoint cost: {} s runs with checkpoints off, every 10 s and every 1 s",
        args.checkpoint_seconds
    );
    let mut overhead = serde_json::Map::new();
    for q in args.checkpoint_queries.iter().filter(|q| !q.is_empty()) {
        let events = if args.checkpoint_rate > 0 {
            args.checkpoint_rate * args.checkpoint_seconds
        } else {
            let Some(rate) = queries.get(q).map(|v| f64_of(&v["events_per_s_median"])) else {
                eprintln!("  {q}: skipped, its throughput was not measured in this run");
                continue;
            };
            // Global events for the run to last about checkpoint_seconds (rows_in
            // counts bids only where a query reads only bids: 92 % of events).
            let tables = nexmark::tables_of(queries[q]["sql"].as_str().unwrap_or(""));
            let share = if tables == ["bid"] { 0.92 } else { 1.0 };
            (rate / share * args.checkpoint_seconds as f64) as u64
        };
        const INTERVALS: [&str; 3] = ["off", "10s", "1s"];
        let mut stats: [Vec<server::RunStats>; 3] = Default::default();
        for run in 0..args.checkpoint_runs.max(1) {
            for (i, interval) in INTERVALS.into_iter().enumerate() {
                let setup = nexmark::StreamSetup {
                    events_per_second: args.checkpoint_rate,
                    ..nexmark::StreamSetup::unpaced(events, model)
                };
                let s = nexmark::throughput_checkpointed(&binary, &dir, q, p, setup, Some(interval)).await?;
                let durations: Vec<f64> = s.checkpoints.iter().map(|c| f64_of(&c["duration_ms"])).collect();
                let (d50, _, dmax) = nexmark::spread(&durations);
                eprintln!(
                    "  {q} checkpoints {interval}, run {}: {:.0} events/s over {:.0} s, {} checkpoints (duration median {d50:.0} ms, max {dmax:.0} ms)",
                    run + 1,
                    s.rows_per_s(),
                    s.wall_s,
                    s.checkpoints.len()
                );
                stats[i].push(s);
            }
        }
        let mut runs = serde_json::Map::new();
        for (interval, s) in INTERVALS.into_iter().zip(&stats) {
            runs.insert(interval.into(), nexmark::checkpoint_runs_json(s));
        }
        overhead.insert(
            q.clone(),
            json!({ "global_events": events, "events_per_s_paced": args.checkpoint_rate, "runs": runs }),
        );
        results["checkpoint_overhead"] = json!(overhead);
        partial::write_partial(&out_dir, &results)?;
    }
    results["checkpoint_overhead"] = Value::Object(overhead);

    if args.q5_memory_events > 0 {
        eprintln!("== q5 memory over {} events", args.q5_memory_events);
        let s = nexmark::throughput(&binary, &dir, "q5", p, args.q5_memory_events, model).await?;
        results["q5_memory"] = nexmark::stats_json(&s);
        results["q5_memory"]["global_events"] = json!(args.q5_memory_events);
    }
    if args.alter_switches > 0 {
        // Half q5's measured rate (global events: a bid stream carries 92 %).
        let q5 = queries.get("q5").map_or(0.0, |v| f64_of(&v["events_per_s_median"]));
        let rate = ((q5 / 0.92) / 2.0).max(100_000.0) as u64;
        eprintln!("== ALTER PIPELINE: {} switches at {rate} events/s", args.alter_switches);
        let a = alter::run(&binary, rate, args.alter_switches, std::time::Duration::from_secs(2)).await?;
        eprintln!(
            "  switch p50 {:.1} ms, p99 {:.1} ms; rescale {}",
            a["switch"]["p50_ms"].as_f64().unwrap_or(0.0),
            a["switch"]["p99_ms"].as_f64().unwrap_or(0.0),
            a["rescale"]
        );
        results["alter"] = a;
    }
    results["nexmark"] = Value::Object(queries);

    let cluster_queries: Vec<&String> = args.cluster_queries.iter().filter(|q| !q.is_empty()).collect();
    if !cluster_queries.is_empty() || args.cluster_sol_messages > 0 || args.failover_runs > 0 || args.freeze_runs > 0 {
        eprintln!("== cluster: stages on two worker processes, and kill -9 failover");
        let mut across = serde_json::Map::new();
        for q in cluster_queries {
            let v = cluster::nexmark_across(&binary, &dir, q, p, args.events, args.cluster_runs).await?;
            if let Some(why) = v["skipped"].as_str() {
                eprintln!("  {q}: skipped, {why}");
            }
            across.insert(q.clone(), v);
        }
        let mut c = json!({ "nexmark": across });
        if args.cluster_sol_messages > 0 {
            c["sol"] = cluster::sol_across(&binary, p, args.cluster_sol_messages, args.cluster_runs).await?;
        }
        for (key, runs, fault) in [
            ("failover", args.failover_runs, cluster::Fault::Kill),
            ("freeze", args.freeze_runs, cluster::Fault::Freeze),
        ] {
            if runs > 0 {
                c[key] = cluster::failover(&binary, runs, args.failover_rate, &args.worker_timeout, fault).await?;
            }
        }
        results["cluster"] = c;
    }

    if args.sol_messages > 0 {
        eprintln!("== SOL message throughput");
        let sol = sol::run(args.sol_messages, p).await?;
        anyhow::ensure!(
            sol.counted == sol.messages,
            "SOL counted {} of {} messages",
            sol.counted,
            sol.messages
        );
        eprintln!("  {:.0} messages/s", sol.messages as f64 / sol.wall_s);
        results["sol"] = json!({
            "messages": sol.messages, "message_bytes": sol::MESSAGE_BYTES, "stages": 2, "parallelism": p,
            "wall_s": sol.wall_s, "cpu_s": sol.cpu_s,
            "messages_per_s": sol.messages as f64 / sol.wall_s,
            "messages_per_cpu_s": sol.messages as f64 / sol.cpu_s.max(1e-9),
            "cores_used": sol.cpu_s / sol.wall_s,
        });
    }

    if !args.flink.is_empty() {
        eprintln!("== Flink side by side (tuned, warm JVM, alternating runs)");
        results["flink"] = flink::side_by_side(
            &binary,
            std::path::Path::new(&args.flink),
            &out_dir.join("flink"),
            p,
            &args.flink_queries,
            runs,
            args.flink_rows,
        )
        .await?;
        if args.flink_nexmark.iter().any(|q| !q.is_empty()) {
            eprintln!("== Flink side by side over the Nexmark queries (the same rows)");
            results["flink_nexmark"] = flink_nexmark::side_by_side(
                &binary,
                &args.root,
                std::path::Path::new(&args.flink),
                &out_dir.join("flink_nexmark"),
                p,
                &args.flink_nexmark,
                runs,
                args.flink_nexmark_events,
                model,
            )
            .await?;
        }
    }
    results["finished_utc"] = json!(report::utc_now());
    report::write(&out_dir, &results)?;
    eprintln!("wrote {}", out_dir.join("latest.md").display());
    Ok(())
}
