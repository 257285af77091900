//! Side by side with Apache Flink on this machine: the six queries of the
//! Flink peer harness (`../shared/peers/flink`) over the same `datagen`
//! workload, each run on Flink and on Sluice alternately, in one command.
//! The DDL below is Flink's with `CREATE TABLE` spelled `CREATE STREAM`; the
//! query texts are Flink's.
//!
//! Flink runs through our own driver, `benches/flink/SluicePeer.java`, tuned
//! as a Flink user would tune it (object reuse, mini-batch for the
//! aggregates, the heap sized to the machine) in one long-lived JVM per
//! query, warmed by one unmeasured run. Beside every query runs a
//! generator-only baseline (`SELECT <the columns it reads> FROM bid`), so
//! that the report gives each engine's own cost per row, the generator's
//! subtracted, next to the raw ratio of rates ([`side_by_side`],
//! [`markdown`]).

use crate::server::{ProcSample, RunStats, Server, proc_sample, run_sink};
use crate::units::si;
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// (id, query) as in the harness's `FlinkSqlBench.java` (and in `SluicePeer.java`).
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
    // Updating queries (issue 27): their results change as rows come (a
    // changelog into the sink), except U3's.
    (
        "U1",
        "SELECT auction, COUNT(*) AS cnt, MAX(price) AS max_price FROM bid GROUP BY auction",
    ),
    (
        "U2",
        "SELECT auction, bidder, price, rn FROM (SELECT auction, bidder, price, \
         ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bid) WHERE rn <= 3",
    ),
    (
        "U3",
        "SELECT auction, price, AVG(price) OVER (PARTITION BY auction ORDER BY ts \
         ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_price FROM bid",
    ),
    (
        "U4",
        "SELECT max_price / 1000 AS bucket, COUNT(*) AS auctions \
         FROM (SELECT auction, MAX(price) AS max_price FROM bid GROUP BY auction) GROUP BY max_price / 1000",
    ),
];

/// What each query is, for the report.
pub fn describe(id: &str) -> &'static str {
    match id {
        "Q0" => "pass-through",
        "Q1" => "projection",
        "Q2" => "filter",
        "Q3" => "TUMBLE 10 s count, max per auction",
        "Q4" => "HOP 10 s / 2 s, the same",
        "Q5" => "TUMBLE 1 s sum, count",
        "U1" => "count, max per auction, no window (updating)",
        "U2" => "top 3 bids per auction (ROW_NUMBER, updating)",
        "U3" => "OVER: avg of each auction's last 11 bids",
        "U4" => "count of auctions per max-price bucket: an aggregate over U1's changelog",
        _ => "",
    }
}

/// Generator-only baselines: (id, query) reading exactly the columns of the
/// queries they stand beside ([`baseline_of`]); Q0 is the baseline of Q0
/// and Q1 (it reads auction, bidder, price, ts and does nothing else).
pub const BASELINES: &[(&str, &str)] = &[
    ("B2", "SELECT auction, price FROM bid"),
    ("B3", "SELECT auction, price, ts FROM bid"),
    ("B5", "SELECT price, ts FROM bid"),
    ("B6", "SELECT auction, bidder, price FROM bid"),
];

/// Sluice's baseline of query `q`: the generator-only query over the
/// columns `q` reads (Sluice's datagen generates only those). Flink's
/// datagen has no projection push-down (it generates all six columns for
/// every query: `results/plans.txt` of the harness), so Flink's baseline is
/// Q0 for every query.
pub fn baseline_of(q: &str) -> &'static str {
    match q {
        "Q2" | "U1" | "U4" => "B2",
        "Q3" | "Q4" | "U3" => "B3",
        "Q5" => "B5",
        "U2" => "B6",
        _ => "Q0",
    }
}

/// Flink's baseline of every query (see [`baseline_of`]).
pub const FLINK_BASELINE: &str = "Q0";

fn sql_of(id: &str) -> Option<&'static str> {
    QUERIES
        .iter()
        .chain(BASELINES)
        .find(|(i, _)| *i == id)
        .map(|(_, sql)| *sql)
}

/// Rows per measured Flink run: ~35 s at the highest rates Flink reached on
/// the 2-core machine (p = 2, tuned, warm JVM, 2026-12-04: Q0 0.54 M rows/s,
/// Q1 0.73 M, Q2 0.97 M, Q3 0.44 M, Q4 0.28 M, Q5 0.83 M; U1 1.07 M, U2
/// 0.96 M, U3 0.38 M), longer under load (the report gives the runs' net
/// runtimes and flags any under 30 s).
pub fn flink_rows(q: &str) -> u64 {
    match q {
        "Q0" => 20_000_000,
        "Q1" => 25_000_000,
        "Q2" => 32_000_000,
        "Q3" => 15_000_000,
        "Q4" => 10_000_000,
        "U1" | "U2" | "U4" => 35_000_000,
        "U3" => 15_000_000,
        _ => 28_000_000,
    }
}

/// Rows per measured Sluice run (its datagen runs 10–30 M rows/s, so runs
/// of 100 M events; the rule is "≥ 30 s or 100 M events").
pub const SLUICE_ROWS: u64 = 100_000_000;

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

/// The driver's source and logging configuration, written next to the
/// jars and compiled there (so the driver run is always this binary's).
const DRIVER_SOURCES: &[(&str, &str)] = &[
    (
        "SluicePeer.java",
        include_str!("../../../benches/flink/SluicePeer.java"),
    ),
    // The Nexmark tables: Sluice's generator ported to Java, as a connector.
    (
        "NexmarkSource.java",
        include_str!("../../../benches/flink/NexmarkSource.java"),
    ),
    (
        "NexmarkRows.java",
        include_str!("../../../benches/flink/NexmarkRows.java"),
    ),
];
const DRIVER_LOG4J: &str = include_str!("../../../benches/flink/log4j2.properties");

/// The `--add-opens/--add-exports` of PyFlink's `conf/config.yaml`
/// (`env.java.opts.all`), as the harness's `env.sh` passes them.
pub(crate) const JVM_MODULE_FLAGS: &[&str] = &[
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
];

/// The longest one Flink command (a run, or the JVM's start) may take.
const FLINK_DEADLINE: Duration = Duration::from_secs(1800);

/// The JVM's heap: half the machine's memory (whole GiB, at least 1), fixed
/// (`-Xms` = `-Xmx`). Sluice's server runs only while the JVM idles.
fn heap_gib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    ((kb / 1_048_576.0 / 2.0).round() as u64).max(1)
}

/// The JVM flags besides the module flags and the class path.
fn jvm_flags(driver_dir: &Path) -> Vec<String> {
    let heap = heap_gib();
    vec![
        format!("-Xms{heap}g"),
        format!("-Xmx{heap}g"),
        "-XX:+UseG1GC".into(),
        format!(
            "-Dlog4j.configurationFile={}",
            driver_dir.join("log4j2.properties").display()
        ),
    ]
}

/// The compiled driver: the `java` arguments before the parallelism.
pub(crate) struct Driver {
    args: Vec<String>,
    pub(crate) flags: Vec<String>,
}

/// Writes the driver into `flink_dir/sluice-peer` and compiles it against
/// the Flink jars of the venv's PyFlink wheel (`bench.sh` creates the venv).
pub(crate) fn build_driver(flink_dir: &Path) -> Result<Driver> {
    let lib_root = flink_dir.join(".venv/lib");
    let mut jars = Vec::new();
    for python in std::fs::read_dir(&lib_root)
        .with_context(|| format!("no venv at {} (scripts/bench.sh creates it)", lib_root.display()))?
    {
        let lib = python?.path().join("site-packages/pyflink/lib");
        if let Ok(entries) = std::fs::read_dir(&lib) {
            for e in entries {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == "jar") {
                    jars.push(p);
                }
            }
        }
    }
    ensure!(!jars.is_empty(), "no pyflink/lib/*.jar under {}", lib_root.display());
    jars.sort();
    let class_path = std::env::join_paths(&jars)?
        .into_string()
        .map_err(|_| anyhow::anyhow!("jar path"))?;

    let dir = flink_dir.join("sluice-peer");
    let build = dir.join("build");
    std::fs::create_dir_all(&build)?;
    let mut changed = false;
    let mut sources = Vec::new();
    for (name, text) in DRIVER_SOURCES {
        let source = dir.join(name);
        if std::fs::read_to_string(&source).ok().as_deref() != Some(*text) {
            std::fs::write(&source, text)?;
            changed = true;
        }
        sources.push(source);
    }
    if std::fs::read_to_string(dir.join("log4j2.properties")).ok().as_deref() != Some(DRIVER_LOG4J) {
        std::fs::write(dir.join("log4j2.properties"), DRIVER_LOG4J)?;
    }
    // The `sluice-nexmark` table connector, found by Flink's factory discovery.
    let services = build.join("META-INF/services");
    std::fs::create_dir_all(&services)?;
    std::fs::write(
        services.join("org.apache.flink.table.factories.Factory"),
        "NexmarkSource\n",
    )?;
    if changed || !build.join("SluicePeer.class").exists() {
        let out = Command::new("javac")
            .arg("-nowarn")
            .arg("-cp")
            .arg(&class_path)
            .arg("-d")
            .arg(&build)
            .args(&sources)
            .output()
            .context("running javac (a JDK 17 is needed)")?;
        if !out.status.success() {
            // Compiled again next time, not left stale beside a new source.
            for source in &sources {
                let _ = std::fs::remove_file(source);
            }
            bail!(
                "javac {} failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let flags = jvm_flags(&dir);
    let mut args = flags.clone();
    args.extend(JVM_MODULE_FLAGS.iter().map(|s| s.to_string()));
    args.push("-cp".into());
    args.push(format!("{}:{class_path}", build.display()));
    args.push("SluicePeer".into());
    Ok(Driver { args, flags })
}

/// `key=value …` after a line's first word.
fn key_values(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One Flink JVM running `SluicePeer`.
pub(crate) struct Jvm {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pid: String,
    log: PathBuf,
    /// `READY`'s and `CONFIG`'s key-values.
    pub(crate) ready: BTreeMap<String, String>,
    pub(crate) config: BTreeMap<String, String>,
}

/// What one Flink run did.
pub(crate) struct FlinkRun {
    pub(crate) rows: u64,
    pub(crate) net_s: f64,
    pub(crate) exec_wall_s: f64,
    setup_s: f64,
    cpu_s: f64,
    gc_ms: f64,
    other_cores: f64,
}

impl FlinkRun {
    pub(crate) fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.net_s.max(1e-9)
    }
    pub(crate) fn json(&self) -> Value {
        json!({
            "rows": self.rows, "rows_per_s": self.rows_per_s(), "net_s": self.net_s,
            "exec_wall_s": self.exec_wall_s, "setup_s": self.setup_s, "cpu_s": self.cpu_s,
            "gc_ms": self.gc_ms, "other_cores": self.other_cores,
        })
    }
}

impl Jvm {
    pub(crate) async fn start(driver: &Driver, parallelism: u32, log: PathBuf) -> Result<Jvm> {
        let stderr = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = tokio::process::Command::new("java")
            .args(&driver.args)
            .arg(parallelism.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .context("starting java")?;
        let pid = child.id().context("the JVM's pid")?.to_string();
        let stdin = child.stdin.take().context("stdin")?;
        let lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut jvm = Jvm {
            child,
            stdin,
            lines,
            pid,
            log,
            ready: BTreeMap::new(),
            config: BTreeMap::new(),
        };
        loop {
            let line = jvm.line().await?;
            if line.starts_with("CONFIG ") {
                jvm.config = key_values(&line);
            } else if line.starts_with("READY ") {
                jvm.ready = key_values(&line);
                return Ok(jvm);
            }
        }
    }

    async fn line(&mut self) -> Result<String> {
        match tokio::time::timeout(FLINK_DEADLINE, self.lines.next_line()).await {
            Err(_) => bail!(
                "the Flink JVM did not answer within {FLINK_DEADLINE:?} (log: {})",
                self.log.display()
            ),
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => bail!("the Flink JVM exited (log: {})", self.log.display()),
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// Sends `command`; its answer (the first `RESULT`, `SQL`, `DDL` or `ERROR` line).
    async fn command(&mut self, command: &str) -> Result<String> {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        loop {
            let line = self.line().await?;
            if line.starts_with("ERROR ") {
                bail!("Flink `{command}`: {line} (log: {})", self.log.display());
            }
            if ["RESULT ", "SQL ", "DDL "].iter().any(|p| line.starts_with(p)) {
                return Ok(line);
            }
        }
    }

    /// Fails unless the driver's text of `id`, and its DDL, are ours.
    async fn check_sql(&mut self, id: &str) -> Result<()> {
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let ddl_line = self.command("ddl 1000").await?;
        let theirs = words(ddl_line.strip_prefix("DDL ").unwrap_or_default());
        let ours = words(&ddl(1000).replacen("CREATE STREAM", "CREATE TABLE", 1));
        ensure!(
            theirs == ours,
            "SluicePeer.java's DDL is `{theirs}`, flink.rs's `{ours}`"
        );
        let ours = sql_of(id).with_context(|| format!("unknown query {id}"))?;
        let line = self.command(&format!("sql {id}")).await?;
        let theirs = line.strip_prefix(&format!("SQL {id} ")).unwrap_or_default();
        ensure!(
            theirs == ours,
            "SluicePeer.java's {id} is `{theirs}`, flink.rs's `{ours}`"
        );
        Ok(())
    }

    async fn run(&mut self, id: &str, rows: u64) -> Result<FlinkRun> {
        self.measured(&format!("run {id} {rows}"), rows).await
    }

    /// Runs `command` (`run …` or `nexmark …`, whose RESULT counts `rows`).
    pub(crate) async fn measured(&mut self, command: &str, rows: u64) -> Result<FlinkRun> {
        let (busy0, before) = (busy(), proc_sample(&self.pid));
        let started = Instant::now();
        let line = self.command(command).await?;
        let wall = started.elapsed().as_secs_f64();
        let (busy1, after) = (busy(), proc_sample(&self.pid));
        let kv = key_values(&line);
        let num = |k: &str| -> Result<f64> {
            kv.get(k)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no {k} in `{line}`"))
        };
        ensure!(
            num("rows")? as u64 == rows,
            "Flink ran `{command}` over other rows: {line}"
        );
        let cpu_s = after.cpu_s - before.cpu_s;
        Ok(FlinkRun {
            rows,
            net_s: num("net_runtime_ms")? / 1e3,
            exec_wall_s: num("exec_wall_ms")? / 1e3,
            setup_s: num("setup_ms")? / 1e3,
            cpu_s,
            gc_ms: num("gc_ms")?,
            other_cores: other_cores(busy0, busy1, cpu_s, wall),
        })
    }

    /// `quit`; the JVM's whole CPU time and peak RSS.
    pub(crate) async fn quit(mut self) -> Result<ProcSample> {
        let sample = proc_sample(&self.pid);
        self.stdin.write_all(b"quit\n").await?;
        self.stdin.flush().await?;
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(status) => ensure!(
                status?.success(),
                "the Flink JVM failed at quit (log: {})",
                self.log.display()
            ),
            Err(_) => bail!("the Flink JVM did not quit (log: {})", self.log.display()),
        }
        Ok(sample)
    }
}

/// (busy, total) jiffies of the machine (`/proc/stat`) and its CPUs.
pub(crate) fn busy() -> (f64, f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    let v: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: f64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    (total - idle, total, cpus as f64)
}

/// Cores other processes used while a run took `wall` s and `own_cpu` CPU s.
pub(crate) fn other_cores(a: (f64, f64, f64), b: (f64, f64, f64), own_cpu: f64, wall: f64) -> f64 {
    let total = b.1 - a.1;
    if total <= 0.0 || wall <= 0.0 {
        return 0.0;
    }
    ((b.0 - a.0) / total * a.2 - own_cpu / wall).max(0.0)
}

/// One Sluice run, as [`sluice`], with the other processes' load.
async fn sluice_run(binary: &Path, id: &str, parallelism: u32, rows: u64) -> Result<Value> {
    let sql = sql_of(id).with_context(|| format!("unknown query {id}"))?;
    let b0 = busy();
    let started = Instant::now();
    let s = sluice(binary, sql, parallelism, rows).await?;
    let wall = started.elapsed().as_secs_f64();
    let b1 = busy();
    ensure!(s.rows_in == rows, "Sluice read {} of {rows} rows for {id}", s.rows_in);
    Ok(json!({
        "rows": s.rows_in, "rows_per_s": s.rows_per_s(), "wall_s": s.wall_s, "cpu_s": s.cpu_s,
        "rows_in": s.rows_in, "rows_out": s.rows_out,
        "peak_rss_mib": s.peak_rss_bytes as f64 / (1 << 20) as f64,
        "other_cores": other_cores(b0, b1, s.cpu_s, wall),
    }))
}

/// Median, min and max (zeros if empty).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => (0.0, 0.0, 0.0),
        n if n % 2 == 1 => (v[n / 2], v[0], v[n - 1]),
        n => ((v[n / 2 - 1] + v[n / 2]) / 2.0, v[0], v[n - 1]),
    }
}

fn rates(runs: &[Value]) -> Vec<f64> {
    runs.iter().filter_map(|r| r["rows_per_s"].as_f64()).collect()
}

/// `runs` with their rate's median, min and max.
pub(crate) fn summarized(runs: Vec<Value>) -> Value {
    let (median, min, max) = spread(&rates(&runs));
    json!({ "runs": runs, "median": median, "min": min, "max": max })
}

/// An engine's own cost per row: the query's median ns/row minus its
/// baseline's, with the extremes the runs allow (`lo`, `hi`). `state`:
/// "baseline" (the query is its own), "noise" (the ranges overlap),
/// "below" (the query is cheaper than its baseline), or "cost".
fn engine_cost(query: &[f64], baseline: &[f64], is_baseline: bool) -> Value {
    let ns = |r: &[f64]| r.iter().map(|x| 1e9 / x.max(1e-9)).collect::<Vec<_>>();
    let (q, b) = (spread(&ns(query)), spread(&ns(baseline)));
    let (value, lo, hi) = (q.0 - b.0, q.1 - b.2, q.2 - b.1);
    let state = if is_baseline {
        "baseline"
    } else if lo <= 0.0 && hi >= 0.0 {
        "noise"
    } else if hi < 0.0 {
        "below"
    } else {
        "cost"
    };
    json!({
        "ns_per_row": value, "lo": lo, "hi": hi, "state": state,
        "query_ns_per_row": q.0, "baseline_ns_per_row": b.0,
    })
}

/// Flink's engine cost over Sluice's: a number where both are measurable, a
/// lower bound (Flink's smallest over Sluice's largest) where only Flink's
/// is, else nothing; and its text.
fn engine_ratio(flink: &Value, sluice: &Value) -> (Value, String) {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    match (flink["state"].as_str(), sluice["state"].as_str()) {
        (Some("baseline"), _) | (_, Some("baseline")) => (Value::Null, "–".into()),
        (Some("cost"), Some("cost")) => {
            let r = f(flink, "ns_per_row") / f(sluice, "ns_per_row");
            (json!(r), format!("{r:.1}×"))
        }
        (Some("cost"), Some("noise")) if f(sluice, "hi") > 0.0 => {
            let r = f(flink, "lo") / f(sluice, "hi");
            (json!({ "at_least": r }), format!("≥ {r:.1}× (Sluice's within noise)"))
        }
        (Some("cost"), _) => (Value::Null, "– (Sluice's below its baseline)".into()),
        (Some("noise"), _) => (Value::Null, "– (Flink's within noise)".into()),
        _ => (Value::Null, "– (Flink's below its baseline)".into()),
    }
}

/// Flink and Sluice side by side over `queries` (of [`QUERIES`]; Q0, every
/// Flink query's baseline, always runs first) at `parallelism`: per query
/// one JVM (`flink_dir` holds the venv with the Flink jars; the driver is
/// compiled there), one unmeasured warm-up run of a quarter of the rows,
/// then `runs` times a Flink run, a Sluice run and (where it is not yet
/// measured) a Sluice run of the query's baseline, alternately. `rows`
/// overrides the rows of every run of both engines (0: [`flink_rows`] and
/// [`SLUICE_ROWS`]). The JVMs' stderr goes to `out/<query>.jvm.log`.
pub async fn side_by_side(
    binary: &Path,
    flink_dir: &Path,
    out: &Path,
    parallelism: u32,
    queries: &[String],
    runs: usize,
    rows: u64,
) -> Result<Value> {
    if queries.iter().all(|q| q.is_empty()) {
        return Ok(json!({ "queries": [] }));
    }
    let runs = runs.max(1);
    let mut order: Vec<&str> = vec![FLINK_BASELINE];
    for q in queries.iter().filter(|q| !q.is_empty()) {
        let Some((id, _)) = QUERIES.iter().find(|(id, _)| id == q) else {
            bail!("unknown Flink query {q} (known: Q0..Q5, U1..U4)");
        };
        if !order.contains(id) {
            order.push(id);
        }
    }
    std::fs::create_dir_all(out)?;
    let driver = build_driver(flink_dir)?;
    let all_started = Instant::now();
    let mut flink_wall_s = 0.0;
    let mut flink_runs: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut sluice_runs: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut per_query: BTreeMap<&str, Value> = BTreeMap::new();
    let mut jvm_info = (BTreeMap::new(), BTreeMap::new());
    for &q in &order {
        let base = baseline_of(q);
        let measure_base = base != q && !sluice_runs.contains_key(base);
        let f_rows = if rows > 0 { rows } else { flink_rows(q) };
        let s_rows = if rows > 0 { rows } else { SLUICE_ROWS };
        let warmup_rows = (f_rows / 4).max(1);
        eprintln!(
            "  Flink {q}: a JVM, warm-up over {warmup_rows} rows, then {runs} × (Flink {f_rows} rows, Sluice {q}{} {s_rows} rows)",
            if measure_base {
                format!(" and {base}")
            } else {
                String::new()
            }
        );
        let jvm_started = Instant::now();
        let mut jvm = Jvm::start(&driver, parallelism, out.join(format!("{q}.jvm.log"))).await?;
        let jvm_start_s = jvm_started.elapsed().as_secs_f64();
        jvm.check_sql(q).await?;
        let warmup = jvm.run(q, warmup_rows).await?;
        eprintln!(
            "    warm-up: {:.0} rows/s (net {:.1} s, exec {:.1} s)",
            warmup.rows_per_s(),
            warmup.net_s,
            warmup.exec_wall_s
        );
        let (mut f_q, mut s_q, mut s_b) = (Vec::new(), Vec::new(), Vec::new());
        for r in 1..=runs {
            let f = jvm.run(q, f_rows).await?;
            let s = sluice_run(binary, q, parallelism, s_rows).await?;
            eprintln!(
                "    run {r}: Flink {:.0} rows/s (net {:.1} s, {:.1} CPU s), Sluice {:.0} rows/s ({:.1} s)",
                f.rows_per_s(),
                f.net_s,
                f.cpu_s,
                s["rows_per_s"].as_f64().unwrap_or(0.0),
                s["wall_s"].as_f64().unwrap_or(0.0)
            );
            f_q.push(f.json());
            s_q.push(s);
            if measure_base {
                let b = sluice_run(binary, base, parallelism, s_rows).await?;
                eprintln!(
                    "           Sluice {base} {:.0} rows/s",
                    b["rows_per_s"].as_f64().unwrap_or(0.0)
                );
                s_b.push(b);
            }
        }
        let ready = jvm.ready.clone();
        let config = jvm.config.clone();
        let whole = jvm.quit().await?;
        let jvm_wall_s = jvm_started.elapsed().as_secs_f64();
        flink_wall_s += jvm_wall_s;
        jvm_info = (ready, config);
        flink_runs.insert(q, f_q);
        sluice_runs.insert(q, s_q);
        if measure_base {
            sluice_runs.insert(base, s_b);
        }
        per_query.insert(
            q,
            json!({
                "flink_rows": f_rows, "flink_warmup_rows": warmup_rows, "sluice_rows": s_rows,
                "flink_warmup": warmup.json(),
                "flink_peak_rss_mib": whole.peak_rss_bytes as f64 / (1 << 20) as f64,
                "flink_jvm_cpu_s": whole.cpu_s, "flink_jvm_start_s": jvm_start_s, "flink_jvm_wall_s": jvm_wall_s,
            }),
        );
    }

    let mut results = Vec::new();
    for &q in &order {
        let base = baseline_of(q);
        let (f_q, s_q) = (&flink_runs[q], &sluice_runs[q]);
        let (f_b, s_b) = (&flink_runs[FLINK_BASELINE], &sluice_runs[base]);
        let flink = summarized(f_q.clone());
        let sluice = summarized(s_q.clone());
        let f_engine = engine_cost(&rates(f_q), &rates(f_b), q == FLINK_BASELINE);
        let s_engine = engine_cost(&rates(s_q), &rates(s_b), q == base);
        let (ratio, ratio_text) = engine_ratio(&f_engine, &s_engine);
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        let mut v = per_query.remove(q).unwrap_or_default();
        let extra = json!({
            "query": q, "sql": sql_of(q), "baseline": base, "baseline_sql": sql_of(base),
            "flink_baseline": FLINK_BASELINE,
            "flink": flink, "sluice": sluice,
            "flink_baseline_rows_per_s": summarized(f_b.clone())["median"],
            "sluice_baseline_rows_per_s": summarized(s_b.clone())["median"],
            "raw_ratio": f(&sluice, "median") / f(&flink, "median").max(1e-9),
            "raw_ratio_min": f(&sluice, "min") / f(&flink, "max").max(1e-9),
            "raw_ratio_max": f(&sluice, "max") / f(&flink, "min").max(1e-9),
            "engine_ns_per_row": { "flink": f_engine, "sluice": s_engine },
            "engine_ratio": ratio, "engine_ratio_text": ratio_text,
        });
        if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
            v.extend(extra);
        }
        results.push(v);
    }
    let baselines: Map<String, Value> = sluice_runs
        .iter()
        .filter(|(id, _)| BASELINES.iter().any(|(b, _)| b == *id))
        .map(|(id, r)| {
            (
                id.to_string(),
                json!({ "sql": sql_of(id), "sluice": summarized(r.clone()) }),
            )
        })
        .collect();
    let (ready, config) = jvm_info;
    Ok(json!({
        "parallelism": parallelism,
        "runs": runs,
        "flink_version": ready.get("flink"),
        "java_version": ready.get("java"),
        "jvm": ready.get("vm"),
        "jvm_max_heap_mib": ready.get("max_heap_mib").and_then(|v| v.parse::<f64>().ok()),
        "jvm_flags": driver.flags.iter().filter(|f| !f.starts_with("-Dlog4j")).collect::<Vec<_>>(),
        "jvm_module_flags": JVM_MODULE_FLAGS,
        "flink_config": config.iter().map(|(k, v)| (k.clone(), json!(v.replace('_', " ")))).collect::<Map<_, _>>(),
        "flink_config_note": "mini-batch (enabled, allow-latency 1 s, size 5000) on for the aggregates Q3–Q5, U1 and U4 only; it changes no other plan",
        "queries": results,
        "baselines": baselines,
        "flink_wall_s": flink_wall_s,
        "wall_s": all_started.elapsed().as_secs_f64(),
    }))
}

/// "median (min–max)" of a summarized side.
fn rate_cell(side: &Value) -> String {
    let f = |k: &str| side[k].as_f64().unwrap_or(0.0);
    format!("{} ({}–{})", si(f("median")), si(f("min")), si(f("max")))
}

/// An engine-cost cell.
fn engine_cell(e: &Value) -> String {
    let f = |k: &str| e[k].as_f64().unwrap_or(0.0);
    match e["state"].as_str() {
        Some("baseline") => "– (is the baseline)".into(),
        Some("noise") => format!("within noise (≤ {:.0})", f("hi").max(0.0)),
        Some("below") => format!("below baseline ({:.0})", f("ns_per_row")),
        _ => format!("{:.0} ({:.0}–{:.0})", f("ns_per_row"), f("lo"), f("hi")),
    }
}

/// The report's section on `v`, [`side_by_side`]'s result.
pub fn markdown(v: &Value) -> String {
    let mut md = String::from("## Flink side by side\n\n");
    let Some(queries) = v["queries"].as_array().filter(|q| !q.is_empty()) else {
        md.push_str("Not run.\n");
        return md;
    };
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let config: Vec<String> = v["flink_config"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with("table.exec.mini-batch"))
        .map(|(k, val)| format!("`{k}: {}`", s(val)))
        .collect();
    let rows: Vec<String> = queries
        .iter()
        .map(|q| {
            format!(
                "{} {} (warm-up {})",
                s(&q["query"]),
                si(q["flink_rows"].as_f64().unwrap_or(0.0)),
                si(q["flink_warmup_rows"].as_f64().unwrap_or(0.0))
            )
        })
        .collect();
    let sluice_rows = queries
        .first()
        .map_or(0.0, |q| q["sluice_rows"].as_f64().unwrap_or(0.0));
    let mut others: Vec<f64> = Vec::new();
    for q in queries {
        for side in ["flink", "sluice"] {
            others.extend(
                q[side]["runs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["other_cores"].as_f64()),
            );
        }
    }
    let (other_median, other_min, other_max) = spread(&others);
    let durations = |side: &str, key: &str| -> Vec<f64> {
        queries
            .iter()
            .flat_map(|q| q[side]["runs"].as_array().into_iter().flatten())
            .filter_map(|r| r[key].as_f64())
            .collect()
    };
    let (_, f_lo, f_hi) = spread(&durations("flink", "net_s"));
    let (_, s_lo, s_hi) = spread(&durations("sluice", "wall_s"));
    let short = if f_lo < 30.0 {
        ", some under the 30 s the method asks for"
    } else {
        ""
    };
    let flags: Vec<String> = v["jvm_flags"].as_array().into_iter().flatten().map(s).collect();
    let _ = write!(
        md,
        "Apache Flink {flink} (the jars of PyPI's `apache-flink=={flink}`, a local MiniCluster in the \
         driver's JVM, Java {java}, `benches/flink/SluicePeer.java`) beside Sluice, over the same \
         `datagen` table (Flink's DDL; Sluice's says `CREATE STREAM`) and the same SQL into a blackhole \
         sink, at parallelism {p}. Flink is tuned as its users would tune it: {config}, checkpointing off \
         (as for Sluice), state on the heap; mini-batch (`table.exec.mini-batch.enabled: true`, \
         `allow-latency: 1 s`, `size: 5000`) on for the aggregates Q3–Q5, U1 and U4 (it changes no other \
         plan); JVM \
         flags `{flags}` (the heap half the machine's memory), plus Flink's `--add-opens/--add-exports` \
         list. One JVM per query: one unmeasured warm-up run, then {runs} measured runs, each followed by \
         a Sluice run (a fresh `sluice playground` process; the JVM idles meanwhile), alternately, so that \
         both share the machine's noise; figures are the median (min–max) of the {runs} runs. Flink's rate \
         is rows over the job's net runtime (`JobExecutionResult.getNetRuntime`, without the planning, code \
         generation and MiniCluster start the JVM also spent each run); Sluice's is rows over the wall time \
         from `CREATE SINK` until the pipeline finished. Rows per Flink run: {rows} (net runtimes {f_lo:.0}–{f_hi:.0} s{short}); per \
         Sluice run: {sluice_rows} ({s_lo:.1}–{s_hi:.1} s). A generator-only baseline is `SELECT <the columns the query reads> FROM \
         bid` into the same sink, run the same way: Flink's datagen has no projection push-down and \
         generates all six columns (two of them random strings) whatever the query reads, so Q0 is its \
         baseline for every query; Sluice's generates only the columns read, so Q0 is its baseline for Q0 \
         and Q1, and B2, B3, B5 and B6 for the others (below; measured alternately with those queries' runs). An \
         engine's cost per row is its query's median ns/row minus its baseline's (in brackets the extremes \
         the runs allow); where the query's ns/row range overlaps its baseline's the difference is within \
         noise (≤ the largest it could be), and the engine ratio (Flink's cost over Sluice's) is then a \
         lower bound: Flink's smallest over Sluice's largest. Other processes used {other_median:.2} cores \
         (median; {other_min:.2}–{other_max:.2}) of the machine during the runs. The Flink JVMs ran \
         {flink_min:.1} min in all, the whole comparison {all_min:.1} min.\n\n",
        flink = s(&v["flink_version"]),
        java = s(&v["java_version"]),
        p = v["parallelism"],
        config = config.join(", "),
        flags = flags.join(" "),
        runs = v["runs"],
        rows = rows.join(", "),
        sluice_rows = si(sluice_rows),
        flink_min = v["flink_wall_s"].as_f64().unwrap_or(0.0) / 60.0,
        all_min = v["wall_s"].as_f64().unwrap_or(0.0) / 60.0,
    );
    md.push_str(
        "| query | Sluice rows/s | Flink rows/s | raw ratio | engine ns/row Sluice | engine ns/row Flink \
         | engine ratio | Flink peak RSS |\n|---|---|---|---|---|---|---|---|\n",
    );
    for q in queries {
        let f = |k: &str| q[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1}× ({:.1}–{:.1}) | {} | {} | {} | {:.1} GiB |",
            s(&q["query"]),
            rate_cell(&q["sluice"]),
            rate_cell(&q["flink"]),
            f("raw_ratio"),
            f("raw_ratio_min"),
            f("raw_ratio_max"),
            engine_cell(&q["engine_ns_per_row"]["sluice"]),
            engine_cell(&q["engine_ns_per_row"]["flink"]),
            s(&q["engine_ratio_text"]),
            f("flink_peak_rss_mib") / 1024.0
        );
    }
    md.push_str("\nThe queries:\n\n| query | what | SQL |\n|---|---|---|\n");
    for q in queries {
        let id = s(&q["query"]);
        let _ = writeln!(md, "| {id} | {} | `{}` |", describe(&id), s(&q["sql"]));
    }
    md.push_str("\nThe baselines (Sluice's generator-only rates; Flink's is Q0's row above):\n\n");
    md.push_str("| baseline | query | Sluice rows/s |\n|---|---|---|\n");
    if let Some(q0) = queries.iter().find(|q| q["query"] == "Q0") {
        let _ = writeln!(
            md,
            "| Q0 (for Q0, Q1) | `{}` | {} |",
            s(&q0["sql"]),
            rate_cell(&q0["sluice"])
        );
    }
    for (id, b) in v["baselines"].as_object().into_iter().flatten() {
        let users: Vec<&str> = QUERIES
            .iter()
            .map(|(q, _)| *q)
            .filter(|q| baseline_of(q) == id)
            .collect();
        let _ = writeln!(
            md,
            "| {id} (for {}) | `{}` | {} |",
            users.join(", "),
            s(&b["sql"]),
            rate_cell(&b["sluice"])
        );
    }
    md
}
