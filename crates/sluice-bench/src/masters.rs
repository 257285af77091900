//! The master quorum through `sluice master` processes (issue 25,
//! "Measured"), as a user meets it: DDL statements over pgwire, and a
//! leader killed with SIGKILL.
//!
//! - DDL latency (`--masters-ddl N`): 1, 3 and 5 masters on 127.0.0.1, each
//!   its own process with its own data directory; a client connected to the
//!   leader runs N `CREATE STREAM` statements one after another (each
//!   acknowledged only once a majority of masters hold it); the time from
//!   sending a statement to its `CommandComplete` is measured per statement.
//!   With one master there is no quorum (no `--peers`): its catalog write
//!   to its own disk is the whole cost.
//! - Failover (`--masters-failover-runs R`): three masters; a statement
//!   through the leader is acknowledged, the leader gets SIGKILL, and the
//!   time until a DDL statement is first accepted by a surviving master —
//!   tried every 10 ms through each survivor in turn, so a follower's
//!   forwarding counts as well as a new leader's own answer — is measured.
//!   The killed master is started again from its directory and the quorum
//!   waited for before the next run.

use crate::server::fresh_dir;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// One `sluice master` process of the quorum.
struct Master {
    id: String,
    listen: String,
    child: Option<Child>,
    pg_port: u16,
    http_port: u16,
}

/// N masters, their directories under one root (removed on drop).
struct Masters {
    binary: PathBuf,
    root: PathBuf,
    masters: Vec<Master>,
}

/// A port for a master's `--listen`, which its peers must know before it
/// starts: below the kernel's ephemeral range, so no port-0 bind of
/// another listener takes it first.
fn free_port(next: &mut u16) -> u16 {
    loop {
        let port = *next;
        *next += 1;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Masters {
    async fn start(binary: &Path, n: usize) -> Result<Masters> {
        let root = fresh_dir("masters-");
        std::fs::create_dir_all(&root)?;
        let mut next = 21_000 + (std::process::id() % 5_000) as u16;
        let masters = (1..=n)
            .map(|i| Master {
                id: format!("m{i}"),
                listen: format!("127.0.0.1:{}", free_port(&mut next)),
                child: None,
                pg_port: 0,
                http_port: 0,
            })
            .collect();
        let mut q = Masters {
            binary: binary.to_path_buf(),
            root,
            masters,
        };
        for i in 0..n {
            q.spawn(i)?;
        }
        q.leader(Duration::from_secs(30)).await?;
        Ok(q)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let peers: Vec<String> = self
            .masters
            .iter()
            .filter(|m| m.id != self.masters[i].id)
            .map(|m| format!("{}={}", m.id, m.listen))
            .collect();
        let m = &self.masters[i];
        let dir = self.root.join(&m.id);
        std::fs::create_dir_all(&dir)?;
        let mut command = Command::new(&self.binary);
        command.args(["master", "--id", &m.id, "--listen", &m.listen]);
        if !peers.is_empty() {
            command.args(["--peers", &peers.join(",")]);
        }
        let mut child = command
            .args([
                "--data-listen",
                "127.0.0.1:0",
                "--pg-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--auth",
                "trust",
                "--insecure",
                "--data-dir",
            ])
            .arg(&dir)
            .arg("--checkpoint-dir")
            .arg(self.root.join("checkpoints"))
            .env("RUST_LOG", crate::server::log_filter())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let addresses = match crate::server::read_addresses(&mut lines) {
            Ok(a) => a,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let m = &mut self.masters[i];
        m.child = Some(child);
        m.pg_port = addresses.pg_port;
        m.http_port = addresses.http_port;
        Ok(())
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.masters[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// This master's own entry of `/api/v1/cluster` (None: no answer).
    async fn me(&self, i: usize) -> Option<Value> {
        let m = &self.masters[i];
        m.child.as_ref()?;
        let v = crate::server::rest_at(m.http_port, "/api/v1/cluster").await.ok()?;
        Some(v["masters"][0].clone())
    }

    /// The one live master that leads with a quorum (a lone master without
    /// `--peers` leads itself), once every live master lets a client in.
    async fn leader(&self, within: Duration) -> Result<usize> {
        let deadline = Instant::now() + within;
        loop {
            let mut leading = Vec::new();
            for i in 0..self.masters.len() {
                if self.masters.len() == 1 {
                    if self.me(i).await.is_some() {
                        leading.push(i);
                    }
                } else if let Some(me) = self.me(i).await
                    && me["role"] == "leader"
                    && me["has_quorum"] == true
                {
                    leading.push(i);
                }
            }
            if leading.len() == 1 {
                let mut ready = true;
                for i in 0..self.masters.len() {
                    if self.masters[i].child.is_some() && self.connect(i).await.is_err() {
                        ready = false;
                    }
                }
                if ready {
                    return Ok(leading[0]);
                }
            }
            if Instant::now() > deadline {
                bail!("no single leader within {within:?}: {leading:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn connect(&self, i: usize) -> Result<tokio_postgres::Client> {
        let m = &self.masters[i];
        let (client, connection) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={} user=sluice connect_timeout=2", m.pg_port),
            NoTls,
        )
        .await?;
        tokio::spawn(connection);
        Ok(client)
    }
}

impl Drop for Masters {
    fn drop(&mut self) {
        for i in 0..self.masters.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn create(name: &str) -> String {
    format!("CREATE STREAM {name} (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '1')")
}

/// Percentile `p` (0–100) of sorted `ms`, nearest rank.
fn percentile(ms: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * ms.len() as f64).ceil().max(1.0) as usize;
    ms[rank.min(ms.len()) - 1]
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "n": ms.len(),
        "p50_ms": percentile(&ms, 50.0),
        "p99_ms": percentile(&ms, 99.0),
        "min_ms": ms.first(),
        "max_ms": ms.last(),
    })
}

/// DDL latency through the leader with 1, 3 and 5 masters.
pub async fn ddl_latency(binary: &Path, statements: usize) -> Result<Value> {
    let mut rows = serde_json::Map::new();
    for n in [1usize, 3, 5] {
        let q = Masters::start(binary, n).await?;
        let leader = q.leader(Duration::from_secs(30)).await?;
        let c = q.connect(leader).await?;
        // Warm-up: the first statements open files and connections.
        for k in 0..5 {
            c.batch_execute(&create(&format!("warm_{k}"))).await?;
        }
        let mut ms = Vec::with_capacity(statements);
        for k in 0..statements {
            let sql = create(&format!("s_{k}"));
            let t = Instant::now();
            c.batch_execute(&sql).await.with_context(|| sql.clone())?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let s = summary(ms);
        eprintln!(
            "  {n} master(s): CREATE STREAM p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({statements} statements)",
            s["p50_ms"].as_f64().unwrap_or(0.0),
            s["p99_ms"].as_f64().unwrap_or(0.0),
            s["max_ms"].as_f64().unwrap_or(0.0)
        );
        rows.insert(n.to_string(), s);
    }
    Ok(Value::Object(rows))
}

/// Leader SIGKILL → first DDL statement accepted by a survivor, `runs` times.
pub async fn failover(binary: &Path, runs: usize) -> Result<Value> {
    let mut q = Masters::start(binary, 3).await?;
    let mut ms = Vec::with_capacity(runs);
    for run in 0..runs {
        let leader = q.leader(Duration::from_secs(60)).await?;
        let c = q.connect(leader).await?;
        c.batch_execute(&create(&format!("before_{run}"))).await?;
        drop(c);
        let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
        let mut clients = Vec::new();
        for i in &survivors {
            clients.push(q.connect(*i).await?);
        }
        q.kill(leader);
        let killed = Instant::now();
        let sql = create(&format!("after_{run}"));
        let mut attempt = 0usize;
        let took = loop {
            let c = &clients[attempt % clients.len()];
            attempt += 1;
            if tokio::time::timeout(Duration::from_secs(2), c.batch_execute(&sql))
                .await
                .is_ok_and(|r| r.is_ok())
            {
                break killed.elapsed();
            }
            if killed.elapsed() > Duration::from_secs(60) {
                bail!("run {run}: no DDL accepted within 60 s of killing the leader");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        eprintln!(
            "  failover run {}: leader m{} killed, DDL accepted after {:.2} s",
            run + 1,
            leader + 1,
            took.as_secs_f64()
        );
        ms.push(took.as_secs_f64() * 1e3);
        q.spawn(leader)?;
    }
    let s = summary(ms.clone());
    eprintln!(
        "  failover: p50 {:.2} s, p99 {:.2} s over {runs} runs",
        s["p50_ms"].as_f64().unwrap_or(0.0) / 1e3,
        s["p99_ms"].as_f64().unwrap_or(0.0) / 1e3
    );
    Ok(json!({ "summary": s, "runs_ms": ms }))
}

/// Both measurements, written as `masters.json` and `masters.md` in `dir`.
pub async fn run(binary: &Path, dir: &Path, statements: usize, failover_runs: usize) -> Result<()> {
    let started = crate::report::utc_now();
    let mut v = json!({ "started_utc": started, "machine": crate::report::machine() });
    let mut md = format!(
        "Measured {started}; `sluice master` processes on 127.0.0.1, each its own data directory on the machine's disk (quorum.json fsync'd), pgwire clients with `--auth trust`.\n\n"
    );
    if statements > 0 {
        let ddl = ddl_latency(binary, statements).await?;
        md += &format!(
            "`CREATE STREAM` through the leader, one after another, {statements} per row after 5 unmeasured:\n\n| masters | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n"
        );
        for n in ["1", "3", "5"] {
            let r = &ddl[n];
            md += &format!(
                "| {n} | {:.2} | {:.2} | {:.2} |\n",
                r["p50_ms"].as_f64().unwrap_or(0.0),
                r["p99_ms"].as_f64().unwrap_or(0.0),
                r["max_ms"].as_f64().unwrap_or(0.0)
            );
        }
        v["ddl"] = ddl;
    }
    if failover_runs > 0 {
        let f = failover(binary, failover_runs).await?;
        let s = &f["summary"];
        md += &format!(
            "\nLeader SIGKILL → first `CREATE STREAM` accepted through a surviving master (3 masters), {failover_runs} runs: p50 {:.2} s, p99 {:.2} s, min {:.2} s, max {:.2} s.\n",
            s["p50_ms"].as_f64().unwrap_or(0.0) / 1e3,
            s["p99_ms"].as_f64().unwrap_or(0.0) / 1e3,
            s["min_ms"].as_f64().unwrap_or(0.0) / 1e3,
            s["max_ms"].as_f64().unwrap_or(0.0) / 1e3
        );
        v["failover"] = f;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("masters.json"), serde_json::to_string_pretty(&v)?)?;
    std::fs::write(dir.join("masters.md"), &md)?;
    eprintln!("wrote {}", dir.join("masters.md").display());
    Ok(())
}
