//! The cluster's measurements (issue 24, "Measured"): the same pipelines
//! with their stages forced onto two different `sluice worker` processes,
//! beside the same runs in one `sluice playground` process, and the time a
//! pipeline takes to run again after `kill -9` of a worker.
//!
//! A [`Cluster`] is one `sluice master` and its workers, each its own
//! process on 127.0.0.1 with a fresh data directory (all under one root,
//! removed at the end; every process is killed when it is dropped).
//!
//! Throughput (`--cluster-queries`, `--cluster-sol-messages`): the
//! pipeline is first planned in a playground (`EXPLAIN PIPELINE`): its
//! first stage is the sources with the operators chained into them. Two
//! workers are sized from that plan — w1 with as many slots as the first
//! stage has task instances, w2 with the rest — and the master places with
//! `--placement pack`, so the first stage (first in the DAG's order) fills
//! w1 and every other task lands on w2. The placement is read back from
//! REST (`/api/v1/pipelines/{name}`, `tasks[].worker`): a run fails unless,
//! for every edge out of the first stage that may cross workers (hash,
//! single, round robin), no worker runs both of its ends — then every row
//! the sources read crosses the data plane. A query whose first stage has
//! only forward edges out cannot cross and is reported as such, not run.
//! Reported per run: events/s, CPU seconds summed over every process of the
//! run (master and workers, `/proc`), the data-plane bytes the workers sent
//! (`/api/v1/cluster`, `data_bytes_sent`: encoded gRPC messages, from the
//! workers' heartbeats) and that payload per second.
//!
//! Failover (`--failover-runs`): three workers, spread placement, a paced
//! unbounded q5-shaped pipeline (HOP 10 s / 2 s count per auction over the
//! Nexmark bid stream, blackhole sink) checkpointed every second. Right
//! after a checkpoint completes, a worker running tasks is killed with
//! SIGKILL; measured from the kill: (a) until `SHOW PIPELINES` says
//! `running` with no task on the dead worker (its `workers` column, then
//! checked against REST), (b) until the sources read again (`rows_in` of the
//! new deployment grows). The killed worker is started again (same id) and
//! waited for before the next run.

use crate::nexmark::{self, StreamSetup, TimeModel};
use crate::server::{ProcSample, RunStats, Server, fresh_dir, log_filter, proc_sample, run_sink_sampled};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A worker process of the cluster (`None` while killed).
struct Worker {
    slots: u32,
    child: Option<Child>,
}

/// One master and its workers, each its own process on 127.0.0.1.
pub struct Cluster {
    binary: PathBuf,
    root: PathBuf,
    control: String,
    workers: BTreeMap<String, Worker>,
    /// The master's process and a session on it; dropped after the
    /// workers are killed (see `Drop`), it kills the master and removes
    /// the root directory.
    pub master: Server,
}

impl Cluster {
    /// A master with `placement` and `worker_timeout`, and `workers`
    /// (id, slots), all registered.
    pub async fn start(
        binary: &Path,
        workers: &[(&str, u32)],
        placement: &str,
        worker_timeout: &str,
    ) -> Result<Cluster> {
        let root = fresh_dir("cluster-");
        std::fs::create_dir_all(&root)?;
        let mut args: Vec<OsString> = [
            "master",
            "--id",
            "m1",
            "--listen",
            "127.0.0.1:0",
            "--data-listen",
            "127.0.0.1:0",
            "--pg-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--worker-timeout",
            worker_timeout,
            "--placement",
            placement,
            // Every listener is on 127.0.0.1; a master asks for passwords
            // unless told to trust, and calls that insecure.
            "--auth",
            "trust",
            "--insecure",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push("--data-dir".into());
        args.push(root.join("master").into());
        args.push("--checkpoint-dir".into());
        args.push(root.join("checkpoints").into());
        let (master, control) = Server::spawn(binary, &args, root.clone()).await?;
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            root,
            control: String::new(),
            workers: BTreeMap::new(),
            master,
        };
        cluster.control = control.context("the master printed no control address")?;
        for (id, slots) in workers {
            cluster.workers.insert(
                id.to_string(),
                Worker {
                    slots: *slots,
                    child: None,
                },
            );
            cluster.start_worker(id)?;
        }
        cluster.wait_for_workers().await?;
        Ok(cluster)
    }

    /// Starts (again) worker `id`.
    fn start_worker(&mut self, id: &str) -> Result<()> {
        let w = self.workers.get_mut(id).context("no such worker")?;
        ensure!(w.child.is_none(), "worker {id} runs already");
        let child = Command::new(&self.binary)
            .args([
                "worker",
                "--id",
                id,
                "--masters",
                self.control.as_str(),
                "--listen",
                "127.0.0.1:0",
                "--slots",
            ])
            .arg(w.slots.to_string())
            .arg("--data-dir")
            .arg(self.root.join(id))
            .env("RUST_LOG", log_filter())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting worker {id}"))?;
        w.child = Some(child);
        Ok(())
    }

    /// SIGKILL to worker `id` (and reaps it).
    fn kill_worker(&mut self, id: &str) -> Result<()> {
        let mut child = self
            .workers
            .get_mut(id)
            .and_then(|w| w.child.take())
            .with_context(|| format!("worker {id} is not running"))?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// SIGSTOP to worker `id`: frozen, its connections stay open and it
    /// says nothing — as a host that hangs or drops off the network.
    fn freeze_worker(&mut self, id: &str) -> Result<()> {
        let pid = self
            .workers
            .get(id)
            .and_then(|w| w.child.as_ref())
            .with_context(|| format!("worker {id} is not running"))?
            .id();
        let status = Command::new("kill").args(["-STOP", &pid.to_string()]).status()?;
        ensure!(status.success(), "kill -STOP {pid}: {status}");
        Ok(())
    }

    /// Waits until every started worker is registered and healthy.
    async fn wait_for_workers(&self) -> Result<()> {
        let want: BTreeSet<&str> = self
            .workers
            .iter()
            .filter(|(_, w)| w.child.is_some())
            .map(|(id, _)| id.as_str())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let cluster = self.master.rest("/api/v1/cluster").await?;
            let healthy: BTreeSet<&str> = cluster["workers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|w| w["health"] == "healthy")
                .filter_map(|w| w["id"].as_str())
                .collect();
            if want.iter().all(|id| healthy.contains(id)) {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "workers {want:?} not all registered after 60 s: {cluster}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process ids: the master's, then the running workers'.
    fn pids(&self) -> Vec<String> {
        let mut pids = vec![self.master.pid()];
        pids.extend(
            self.workers
                .values()
                .filter_map(|w| w.child.as_ref())
                .map(|c| c.id().to_string()),
        );
        pids
    }

    /// CPU time and memory summed over the cluster's processes (peak RSS:
    /// the sum of each process's peak).
    pub fn sample(&self) -> ProcSample {
        self.pids()
            .iter()
            .map(|p| proc_sample(p))
            .fold(ProcSample::default(), |a, s| ProcSample {
                cpu_s: a.cpu_s + s.cpu_s,
                rss_bytes: a.rss_bytes + s.rss_bytes,
                peak_rss_bytes: a.peak_rss_bytes + s.peak_rss_bytes,
            })
    }

    /// Bytes the workers have sent over the data plane (from their
    /// heartbeats, every second).
    async fn data_bytes_sent(&self) -> Result<u64> {
        let cluster = self.master.rest("/api/v1/cluster").await?;
        Ok(cluster["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w["data_bytes_sent"].as_u64())
            .sum())
    }

    /// The data-plane bytes once the last heartbeats are in: read until two
    /// reads a heartbeat and a half apart agree.
    async fn settled_data_bytes_sent(&self) -> Result<u64> {
        let mut last = self.data_bytes_sent().await?;
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = self.data_bytes_sent().await?;
            if now == last {
                return Ok(now);
            }
            last = now;
        }
        Ok(last)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for w in self.workers.values_mut() {
            if let Some(mut c) = w.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        // Then `master` drops: the master is killed and the root removed.
    }
}

/// What placement needs to know of a pipeline's DAG (`EXPLAIN PIPELINE`).
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Task instances (operators not chained into another's task, times
    /// their parallelism): the slots the pipeline takes.
    pub tasks: u32,
    /// Task instances of the first stage: the sources, with the operators
    /// chained into them.
    pub first_stage_tasks: u32,
    /// Edges out of the first stage that may cross workers (hash, single,
    /// round robin): (upstream operator, downstream operator).
    pub crossing: Vec<(u64, u64)>,
}

/// An operator's inputs: (upstream operator, partitioning as EXPLAIN says it).
type Inputs = Vec<(u64, String)>;

/// The plan of pipeline `name`, from `EXPLAIN PIPELINE` (columns
/// operator_id, uid, kind, parallelism, detail, inputs, schema; an input is
/// `op <id> <partitioning>`, `forward (chained)` when it runs in that
/// upstream's task).
pub async fn plan_of(server: &Server, name: &str) -> Result<Plan> {
    let mut ops: Vec<(u64, String, u32, Inputs)> = Vec::new();
    for row in server.rows(&format!("EXPLAIN PIPELINE {name}")).await? {
        let id: u64 = row.first().context("EXPLAIN row")?.parse()?;
        let kind = row.get(2).cloned().unwrap_or_default();
        let parallelism: u32 = row.get(3).context("EXPLAIN parallelism")?.parse()?;
        let mut inputs = Vec::new();
        for input in row.get(5).map(String::as_str).unwrap_or("").split("; ") {
            let mut words = input.splitn(3, ' ');
            if words.next() != Some("op") {
                continue;
            }
            let from: u64 = words.next().context("EXPLAIN input")?.parse()?;
            inputs.push((from, words.next().unwrap_or("").to_string()));
        }
        ops.push((id, kind, parallelism, inputs));
    }
    let chained = |inputs: &[(u64, String)]| inputs.iter().any(|(_, p)| p == "forward (chained)");
    // The first stage: sources and what is chained into them (in DAG order).
    let mut first: BTreeSet<u64> = BTreeSet::new();
    for (id, kind, _, inputs) in &ops {
        if kind == "source" || (chained(inputs) && inputs.iter().all(|(f, _)| first.contains(f))) {
            first.insert(*id);
        }
    }
    let mut plan = Plan::default();
    for (id, kind, parallelism, inputs) in &ops {
        if !chained(inputs) {
            plan.tasks += parallelism;
            if kind == "source" {
                plan.first_stage_tasks += parallelism;
            }
        }
        for (from, partitioning) in inputs {
            if first.contains(from) && !first.contains(id) && !partitioning.starts_with("forward") {
                plan.crossing.push((*from, *id));
            }
        }
    }
    Ok(plan)
}

/// The plan of `CREATE SINK bench … AS query` on `server` (a playground
/// plans as a master does).
async fn plan_sink(server: &Server, query: &str) -> Result<Plan> {
    server
        .exec(&format!("CREATE SINK bench WITH (connector = 'blackhole') AS {query}"))
        .await?;
    plan_of(server, "bench").await
}

/// Two workers sized so that pack placement puts the first stage (the
/// sources' tasks) on w1 and every other task on w2.
fn two_workers(plan: &Plan) -> [(&'static str, u32); 2] {
    [
        ("w1", plan.first_stage_tasks),
        ("w2", plan.tasks - plan.first_stage_tasks),
    ]
}

/// Which workers run each operator's instances (`tasks[].worker`), once
/// the pipeline has tasks; empty if it ended before they were seen.
async fn watch_placement(server: &Server, name: &str, done: &AtomicBool) -> BTreeMap<u64, BTreeSet<String>> {
    while !done.load(Ordering::Relaxed) {
        if let Ok(p) = server.rest(&format!("/api/v1/pipelines/{name}")).await {
            let mut placed: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
            for t in p["tasks"].as_array().into_iter().flatten() {
                if let (Some(op), Some(w)) = (t["operator"].as_u64(), t["worker"].as_str()) {
                    placed.entry(op).or_default().insert(w.to_string());
                }
            }
            if !placed.is_empty() {
                return placed;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    BTreeMap::new()
}

/// Runs `CREATE SINK name … AS query` on the cluster to the end and checks
/// that both ends of every crossing edge ran on different workers.
async fn run_across(cluster: &Cluster, name: &str, query: &str, plan: &Plan) -> Result<(RunStats, Value)> {
    let before_bytes = cluster.data_bytes_sent().await?;
    let done = AtomicBool::new(false);
    let run = async {
        let r = run_sink_sampled(&cluster.master, name, "connector = 'blackhole'", query, || {
            cluster.sample()
        })
        .await;
        done.store(true, Ordering::Relaxed);
        r
    };
    let (stats, placed) = tokio::join!(run, watch_placement(&cluster.master, name, &done));
    let mut stats = stats?;
    ensure!(
        !placed.is_empty(),
        "{name}: never saw its tasks' workers (REST tasks[].worker)"
    );
    let all: BTreeSet<&String> = placed.values().flatten().collect();
    ensure!(
        all.len() > 1,
        "{name}: every task ran on one worker ({all:?}): nothing crossed"
    );
    for (from, to) in &plan.crossing {
        let (Some(a), Some(b)) = (placed.get(from), placed.get(to)) else {
            bail!("{name}: no worker seen for operator {from} or {to}: {placed:?}");
        };
        ensure!(
            a.is_disjoint(b),
            "{name}: operators {from} (on {a:?}) and {to} (on {b:?}) share a worker: not every row crosses"
        );
    }
    // Counters and data-plane bytes arrive with the workers' heartbeats.
    let bytes = cluster.settled_data_bytes_sent().await?.saturating_sub(before_bytes);
    if let Some((_, rows_in, rows_out, _)) = cluster.master.pipeline(name).await? {
        stats.rows_in = stats.rows_in.max(rows_in);
        stats.rows_out = stats.rows_out.max(rows_out);
    }
    let placement: BTreeMap<String, Vec<&String>> = placed
        .iter()
        .map(|(op, w)| (op.to_string(), w.iter().collect()))
        .collect();
    Ok((stats, json!({ "data_bytes_sent": bytes, "placement": placement })))
}

/// Stats of one run with the per-event costs beside them.
fn run_json(s: &RunStats, data_bytes: Option<u64>) -> Value {
    let mut v = nexmark::stats_json(s);
    let rows = s.rows_in.max(1) as f64;
    v["cpu_ns_per_event"] = json!(s.cpu_s * 1e9 / rows);
    if let Some(b) = data_bytes {
        v["data_bytes_sent"] = json!(b);
        v["data_bytes_per_event"] = json!(b as f64 / rows);
        v["data_gb_per_s"] = json!(b as f64 / s.wall_s.max(1e-9) / 1e9);
    }
    v
}

/// The setup of a Nexmark run at full speed (as `nexmark::throughput`), at
/// the tests' fixed time model.
fn unpaced(events: u64) -> StreamSetup {
    StreamSetup::unpaced(events, TimeModel::FIXED)
}

/// Nexmark query `q` over `events` events: in one process, then across two
/// workers, `runs` times alternately.
pub async fn nexmark_across(binary: &Path, dir: &Path, q: &str, p: u32, events: u64, runs: usize) -> Result<Value> {
    let (sets, query) = nexmark::read_query(dir, q)?;
    // Which edges may cross workers, and the slots, from the plan.
    let plan = {
        let server = Server::start(binary).await?;
        nexmark::create_streams(&server, p, unpaced(1000)).await?;
        for s in &sets {
            server.exec(s).await?;
        }
        plan_sink(&server, &query).await?
    };
    if plan.crossing.is_empty() || plan.tasks <= plan.first_stage_tasks {
        return Ok(json!({
            "skipped": format!("no edge out of {q}'s sources may cross workers (EXPLAIN PIPELINE: all forward): nothing crosses"),
            "sql": query,
        }));
    }
    let mut out = Vec::new();
    for run in 0..runs {
        let local = nexmark::throughput(binary, dir, q, p, events, TimeModel::FIXED).await?;
        let cluster = Cluster::start(binary, &two_workers(&plan), "pack", "5s").await?;
        nexmark::create_streams(&cluster.master, p, unpaced(events)).await?;
        for s in &sets {
            cluster.master.exec(s).await?;
        }
        let (mut across, mut extra) = run_across(&cluster, "bench", &query, &plan).await?;
        drop(cluster);
        // A bounded run that finished read every event, as the one-process
        // run did (the cluster reports its own count too, kept beside it).
        extra["rows_in_reported"] = json!(across.rows_in);
        ensure!(
            across.rows_in <= local.rows_in,
            "{q}: the cluster read {} events, one process {}",
            across.rows_in,
            local.rows_in
        );
        across.rows_in = local.rows_in;
        let bytes = extra["data_bytes_sent"].as_u64();
        eprintln!(
            "  {q} run {}: one process {:.0} events/s, {:.0} ns CPU/event; two workers {:.0} events/s, {:.0} ns CPU/event, {:.3} GB/s over the data plane",
            run + 1,
            local.rows_per_s(),
            local.cpu_s * 1e9 / local.rows_in.max(1) as f64,
            across.rows_per_s(),
            across.cpu_s * 1e9 / across.rows_in.max(1) as f64,
            bytes.unwrap_or(0) as f64 / across.wall_s / 1e9
        );
        out.push(json!({
            "one_process": run_json(&local, None),
            "two_workers": run_json(&across, bytes),
            "two_workers_rows_in_reported": extra["rows_in_reported"],
            "placement": extra["placement"],
        }));
    }
    Ok(
        json!({ "global_events": events, "workers": two_workers(&plan), "crossing_edges": plan.crossing, "parallelism": p, "sql": query, "runs": out }),
    )
}

/// The message stream of the SOL-like runs: `count` rows of a sequence
/// number and a random 100-character (100-byte) string, with a key of
/// 1024 values and an event time 10 000 rows a millisecond.
async fn create_messages(server: &Server, p: u32, count: u64) -> Result<()> {
    server.exec(&format!("SET parallelism = {p}")).await?;
    server
        .exec(&format!(
            "CREATE STREAM sol (i BIGINT, msg VARCHAR, k AS i % 1024, ts AS TO_TIMESTAMP_LTZ(i / 10000, 3), \
             WATERMARK FOR ts AS ts) WITH (connector = 'datagen', 'number-of-rows' = '{count}', \
             'rows-per-second' = '0', 'fields.i.kind' = 'sequence', 'fields.i.start' = '0', \
             'fields.i.end' = '{}', 'fields.msg.kind' = 'random', 'fields.msg.length' = '{}')",
            count.saturating_sub(1),
            crate::sol::MESSAGE_BYTES
        ))
        .await
}

/// Every message to the instance of its key, which counts it (the message
/// travels: `count(msg)` reads it) per 1-s window — SOL's shuffle and
/// count, in SQL.
const SOL_QUERY: &str = "SELECT k, count(msg) AS n, window_start FROM TUMBLE(sol, ts, INTERVAL '1' SECOND) \
                         GROUP BY k, window_start, window_end";

/// SOL-like messages in SQL: the generator alone (one process), the
/// shuffle-and-count in one process, and across two workers.
pub async fn sol_across(binary: &Path, p: u32, messages: u64, runs: usize) -> Result<Value> {
    let plan = {
        let server = Server::start(binary).await?;
        create_messages(&server, p, 1000).await?;
        plan_sink(&server, SOL_QUERY).await?
    };
    ensure!(
        !plan.crossing.is_empty(),
        "the SOL query has no edge that may cross workers: {plan:?}"
    );
    let mut out = Vec::new();
    for run in 0..runs {
        let generator = {
            let server = Server::start(binary).await?;
            create_messages(&server, p, messages).await?;
            crate::server::run_sink(
                &server,
                "generator",
                "connector = 'blackhole'",
                "SELECT i, msg FROM sol",
            )
            .await?
        };
        let local = {
            let server = Server::start(binary).await?;
            create_messages(&server, p, messages).await?;
            crate::server::run_sink(&server, "bench", "connector = 'blackhole'", SOL_QUERY).await?
        };
        let cluster = Cluster::start(binary, &two_workers(&plan), "pack", "5s").await?;
        create_messages(&cluster.master, p, messages).await?;
        let (mut across, mut extra) = run_across(&cluster, "bench", SOL_QUERY, &plan).await?;
        drop(cluster);
        for (what, s) in [("generator", &generator), ("one process", &local)] {
            ensure!(
                s.rows_in == messages,
                "SOL {what}: read {} of {messages} messages",
                s.rows_in
            );
        }
        // Finished, so every message was read (rows_in may miss the last
        // heartbeat).
        extra["rows_in_reported"] = json!(across.rows_in);
        across.rows_in = messages;
        let bytes = extra["data_bytes_sent"].as_u64();
        eprintln!(
            "  SOL run {}: generator alone {:.0} messages/s; one process {:.0} messages/s, {:.0} ns CPU/message; two workers {:.0} messages/s, {:.0} ns CPU/message, {:.3} GB/s over the data plane",
            run + 1,
            generator.rows_per_s(),
            local.rows_per_s(),
            local.cpu_s * 1e9 / messages as f64,
            across.rows_per_s(),
            across.cpu_s * 1e9 / messages as f64,
            bytes.unwrap_or(0) as f64 / across.wall_s / 1e9
        );
        out.push(json!({
            "generator_only": run_json(&generator, None),
            "one_process": run_json(&local, None),
            "two_workers": run_json(&across, bytes),
            "two_workers_rows_in_reported": extra["rows_in_reported"],
            "placement": extra["placement"],
        }));
    }
    Ok(json!({
        "messages": messages, "message_bytes": crate::sol::MESSAGE_BYTES, "parallelism": p,
        "sql": SOL_QUERY, "workers": two_workers(&plan), "crossing_edges": plan.crossing, "runs": out,
    }))
}

/// One `SHOW PIPELINES` row: state, rows_in, the newest checkpoint's id,
/// and the workers running tasks (columns 2, 4, 11, 14; docs/sql.md).
struct Row {
    state: String,
    rows_in: u64,
    checkpoint: Option<u64>,
    workers: BTreeSet<String>,
}

async fn row(server: &Server, name: &str) -> Result<Row> {
    let rows = server.rows("SHOW PIPELINES").await?;
    let r = rows
        .into_iter()
        .find(|r| r.first().map(String::as_str) == Some(name))
        .with_context(|| format!("no pipeline {name}"))?;
    let col = |i: usize| r.get(i).cloned().unwrap_or_default();
    Ok(Row {
        state: col(2),
        rows_in: col(4).parse().unwrap_or(0),
        // `#<id> at <time>, <size> bytes, <ms> ms`
        checkpoint: col(11)
            .strip_prefix('#')
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok()),
        // `w1 (2), w2 (2)`
        workers: col(14)
            .split(", ")
            .filter_map(|w| w.split(" (").next())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `runs` kill -9 failovers of a paced q5-shaped pipeline over three
/// workers, `worker_timeout` the master's `--worker-timeout`.
/// How a failover run takes a worker out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9`: the kernel closes its sockets, so the master and its
    /// peers see the connections end at once.
    Kill,
    /// `kill -STOP`: frozen, connections open, silent — only the worker
    /// timeout tells the master (then it is killed and started again).
    Freeze,
}

pub async fn failover(
    binary: &Path,
    runs: usize,
    events_per_second: u64,
    worker_timeout: &str,
    fault: Fault,
) -> Result<Value> {
    const NAME: &str = "failover";
    let ids = ["w1", "w2", "w3"];
    let mut cluster = Cluster::start(binary, &ids.map(|id| (id, 4u32)), "spread", worker_timeout).await?;
    let c = &cluster.master;
    c.exec(&format!(
        "CREATE STREAM bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
         date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND) \
         WITH (connector = 'nexmark', table = 'bid', 'events.per.second' = '{events_per_second}')"
    ))
    .await?;
    c.exec("SET parallelism = 2").await?;
    c.exec(&format!(
        "CREATE SINK {NAME} WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS \
         SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime \
         FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
         GROUP BY auction, window_start, window_end"
    ))
    .await?;
    let mut results = Vec::new();
    let mut last_checkpoint = None;
    for run in 0..runs {
        // Running, on at least two workers, and a checkpoint newer than the
        // last one seen (after a failover: one of the new deployment).
        let deadline = Instant::now() + Duration::from_secs(120);
        let at_kill = loop {
            let r = row(&cluster.master, NAME).await?;
            if r.state == "running" && r.workers.len() >= 2 && r.checkpoint.is_some() && r.checkpoint > last_checkpoint
            {
                if last_checkpoint.is_some() || run > 0 {
                    break r;
                }
                // First run: wait for the next checkpoint, so the kill
                // comes right after one completes.
                last_checkpoint = r.checkpoint;
            }
            ensure!(
                Instant::now() < deadline,
                "failover run {}: no new checkpoint on 2+ workers in 120 s (state {}, workers {:?}, checkpoint {:?})",
                run + 1,
                r.state,
                r.workers,
                r.checkpoint
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // A worker running tasks, in turn.
        let victim = {
            let on: Vec<&String> = at_kill.workers.iter().collect();
            on[run % on.len()].clone()
        };
        let killed_at = Instant::now();
        match fault {
            Fault::Kill => cluster.kill_worker(&victim)?,
            Fault::Freeze => cluster.freeze_worker(&victim)?,
        }
        let mut running_s = None;
        let mut reading_s = None;
        // Sources read again: under the new placement, rows_in changes
        // from one poll to the next (it grows, or it starts over from 0
        // with the new deployment's counters and is already above 0).
        let mut previous = at_kill.rows_in;
        let mut trace: Vec<(f64, String, u64, String)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while reading_s.is_none() {
            let r = row(&cluster.master, NAME).await?;
            let t = killed_at.elapsed().as_secs_f64();
            let workers = format!("{:?}", r.workers);
            if trace.last().map(|(_, s, n, w)| (s, n, w)) != Some((&r.state, &r.rows_in, &workers)) {
                trace.push((t, r.state.clone(), r.rows_in, workers));
            }
            let moved = r.state == "running" && !r.workers.is_empty() && !r.workers.contains(&victim);
            if moved && running_s.is_none() {
                // Confirmed by REST: no task on the dead worker.
                let tasks = cluster.master.rest(&format!("/api/v1/pipelines/{NAME}")).await?;
                let on_victim = tasks["tasks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["worker"].as_str() == Some(victim.as_str()));
                if !on_victim {
                    running_s = Some(t);
                }
            }
            if running_s.is_some() && r.rows_in != previous && r.rows_in > 0 {
                reading_s = Some(t);
            }
            previous = r.rows_in;
            ensure!(
                Instant::now() < deadline,
                "failover run {}: {NAME} did not run again in 120 s after killing {victim}: {trace:?}",
                run + 1
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (running_s, reading_s) = (running_s.unwrap_or(0.0), reading_s.unwrap_or(0.0));
        eprintln!(
            "  failover run {} ({fault:?}): {victim} after checkpoint {:?}; running without it after {running_s:.2} s, sources reading after {reading_s:.2} s",
            run + 1,
            at_kill.checkpoint
        );
        if std::env::var_os("SLUICE_BENCH_TRACE").is_some() {
            for (t, s, n, w) in &trace {
                eprintln!("    {t:7.3} s  {s:10} rows_in {n:>12}  {w}");
            }
        }
        let after = row(&cluster.master, NAME).await?;
        results.push(json!({
            "victim": victim, "checkpoint_before_kill": at_kill.checkpoint,
            "rows_in_at_kill": at_kill.rows_in, "running_again_s": running_s, "reading_again_s": reading_s,
            "workers_after": after.workers,
        }));
        last_checkpoint = after.checkpoint.max(at_kill.checkpoint);
        if fault == Fault::Freeze {
            cluster.kill_worker(&victim)?;
        }
        cluster.start_worker(&victim)?;
        cluster.wait_for_workers().await?;
    }
    let mut running: Vec<f64> = results.iter().filter_map(|r| r["running_again_s"].as_f64()).collect();
    let mut reading: Vec<f64> = results.iter().filter_map(|r| r["reading_again_s"].as_f64()).collect();
    running.sort_by(f64::total_cmp);
    reading.sort_by(f64::total_cmp);
    let last = row(&cluster.master, NAME).await?;
    drop(cluster);
    if runs > 0 && running.len() < runs {
        bail!("failover: {} of {runs} runs measured", running.len());
    }
    eprintln!(
        "  failover ({fault:?}) over {runs} runs (worker timeout {worker_timeout}): running again p50 {:.2} s, max {:.2} s; reading again p50 {:.2} s, max {:.2} s",
        percentile(&running, 0.5),
        running.last().unwrap_or(&0.0),
        percentile(&reading, 0.5),
        reading.last().unwrap_or(&0.0)
    );
    Ok(json!({
        "fault": match fault { Fault::Kill => "kill -9", Fault::Freeze => "kill -STOP" },
        "worker_timeout": worker_timeout, "workers": ids.len(), "slots_per_worker": 4, "parallelism": 2,
        "events_per_s_paced": events_per_second, "checkpoint_interval_s": 1,
        "running_again_p50_s": percentile(&running, 0.5), "running_again_max_s": running.last(),
        "reading_again_p50_s": percentile(&reading, 0.5), "reading_again_max_s": reading.last(),
        "final_state": last.state,
        "runs": results,
    }))
}
