//! A fresh `sluice playground` process per run, driven over pgwire as a
//! user would, with its CPU time and resident memory read from `/proc`.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Longest a run may take before the benchmark gives up on it.
pub const RUN_DEADLINE: Duration = Duration::from_secs(1800);

/// A running server and a session on it.
pub struct Server {
    child: Child,
    pub client: Client,
    data_dir: PathBuf,
}

/// CPU seconds (user + system) and resident memory of a process.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcSample {
    pub cpu_s: f64,
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Reads `/proc/<pid>` (`self` for this process).
pub fn proc_sample(pid: &str) -> ProcSample {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at field 3.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu_s = (ticks(11) + ticks(12)) / clock_ticks_per_second();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    ProcSample {
        cpu_s,
        rss_bytes: kb("VmRSS:"),
        peak_rss_bytes: kb("VmHWM:"),
    }
}

impl Server {
    /// Starts `binary playground` on free ports with a fresh data directory.
    pub async fn start(binary: &Path) -> Result<Server> {
        let data_dir = std::env::temp_dir().join(format!(
            "sluice-bench-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ rand_suffix()
        ));
        let mut child = Command::new(binary)
            .args([
                "playground",
                "--pg-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&data_dir)
            // Quiet by default; SLUICE_BENCH_LOG sets the servers' log filter
            // (e.g. `sluice_dataflow::metrics=debug` logs polls over 5 ms).
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_BENCH_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let port: u16 = loop {
            if Instant::now() > deadline {
                bail!("server did not start within 60 s");
            }
            let line = lines.next().context("server exited early")??;
            if let Some(rest) = line.trim().strip_prefix("SQL:") {
                break rest
                    .rsplit("-p ")
                    .next()
                    .and_then(|s| s.split_whitespace().next())
                    .context("port")?
                    .parse()?;
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let (client, connection) =
            tokio_postgres::connect(&format!("host=127.0.0.1 port={port} user=sluice"), NoTls).await?;
        tokio::spawn(connection);
        Ok(Server {
            child,
            client,
            data_dir,
        })
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub fn sample(&self) -> ProcSample {
        proc_sample(&self.pid())
    }

    pub async fn exec(&self, sql: &str) -> Result<()> {
        self.client
            .batch_execute(sql)
            .await
            .map_err(|e| anyhow::anyhow!("{sql}\n  failed: {}", describe(&e)))
    }

    /// `SHOW PIPELINES` row of `name`: (state, rows_in, rows_out, error),
    /// columns 2, 4, 5 and 9 (docs/sql.md).
    pub async fn pipeline(&self, name: &str) -> Result<Option<(String, u64, u64, String)>> {
        for m in self.client.simple_query("SHOW PIPELINES").await? {
            if let SimpleQueryMessage::Row(r) = m
                && r.get(0) == Some(name)
            {
                let n = |i: usize| r.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
                return Ok(Some((
                    r.get(2).unwrap_or_default().to_string(),
                    n(4),
                    n(5),
                    r.get(9).unwrap_or_default().to_string(),
                )));
            }
        }
        Ok(None)
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// What one timed pipeline did.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub wall_s: f64,
    pub rows_in: u64,
    pub rows_out: u64,
    pub cpu_s: f64,
    pub peak_rss_bytes: u64,
    /// Resident memory sampled during the run: (seconds since start, bytes).
    pub rss_samples: Vec<(f64, u64)>,
}

impl RunStats {
    pub fn rows_per_s(&self) -> f64 {
        self.rows_in as f64 / self.wall_s.max(1e-9)
    }
    pub fn cores_used(&self) -> f64 {
        self.cpu_s / self.wall_s.max(1e-9)
    }
    pub fn rows_per_cpu_s(&self) -> f64 {
        self.rows_in as f64 / self.cpu_s.max(1e-9)
    }
}

/// Creates sink `name` over `query` and waits for the bounded pipeline to
/// finish; times it from the statement to the end.
pub async fn run_sink(server: &Server, name: &str, with: &str, query: &str) -> Result<RunStats> {
    let before = server.sample();
    let started = Instant::now();
    server
        .exec(&format!("CREATE SINK {name} WITH ({with}) AS {query}"))
        .await?;
    let mut samples = Vec::new();
    let mut last_sample = Instant::now();
    loop {
        if started.elapsed() > RUN_DEADLINE {
            bail!("{name} did not finish within {RUN_DEADLINE:?}");
        }
        if let Some((state, rows_in, rows_out, error)) = server.pipeline(name).await? {
            match state.as_str() {
                "finished" => {
                    let wall_s = started.elapsed().as_secs_f64();
                    let after = server.sample();
                    samples.push((wall_s, after.rss_bytes));
                    return Ok(RunStats {
                        wall_s,
                        rows_in,
                        rows_out,
                        cpu_s: after.cpu_s - before.cpu_s,
                        peak_rss_bytes: after.peak_rss_bytes,
                        rss_samples: samples,
                    });
                }
                "failed" | "stopped" => bail!("{name} {state}: {error}"),
                _ => {}
            }
        }
        if last_sample.elapsed() >= Duration::from_millis(250) {
            samples.push((started.elapsed().as_secs_f64(), server.sample().rss_bytes));
            last_sample = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
