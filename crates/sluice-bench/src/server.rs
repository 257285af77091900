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
    /// The REST API's port on 127.0.0.1.
    pub http_port: u16,
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

/// A fresh directory name under the system's temp directory (not created).
pub fn fresh_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "sluice-bench-{tag}{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ rand_suffix()
    ))
}

/// The servers' log filter: quiet by default; SLUICE_BENCH_LOG sets it
/// (e.g. `sluice_dataflow::metrics=debug` logs polls over 5 ms).
pub fn log_filter() -> String {
    std::env::var("SLUICE_BENCH_LOG").unwrap_or_else(|_| "error".into())
}

/// What a starting server prints: its pgwire and HTTP ports and (a cluster
/// master) the control address workers register at.
pub(crate) struct Addresses {
    pub pg_port: u16,
    pub http_port: u16,
    pub control: Option<String>,
}

pub(crate) fn read_addresses(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Result<Addresses> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut pg_port, mut http_port, mut control) = (0, 0, None);
    while pg_port == 0 || http_port == 0 {
        if Instant::now() > deadline {
            bail!("server did not start within 60 s");
        }
        let line = lines.next().context("server exited early")??;
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("SQL:") {
            pg_port = rest
                .rsplit("-p ")
                .next()
                .and_then(|s| s.split_whitespace().next())
                .context("port")?
                .parse()?;
        } else if let Some(rest) = line.strip_prefix("HTTP:") {
            http_port = rest
                .trim()
                .trim_end_matches("/health")
                .rsplit(':')
                .next()
                .context("HTTP port")?
                .parse()?;
        } else if let Some(rest) = line.strip_prefix("workers: sluice worker --masters ") {
            control = Some(rest.trim().to_string());
        }
    }
    Ok(Addresses {
        pg_port,
        http_port,
        control,
    })
}

/// `GET path` of the REST API at 127.0.0.1:`http_port`, parsed as JSON.
pub async fn rest_at(http_port: u16, path: &str) -> Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", http_port)).await?;
        c.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        c.read_to_string(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), get)
        .await
        .with_context(|| format!("GET {path} timed out"))??;
    let (head, body) = response.split_once("\r\n\r\n").context("an HTTP response")?;
    if head.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(serde_json::from_str(body)?)
}

impl Server {
    /// Starts `binary playground` on free ports with a fresh data directory.
    pub async fn start(binary: &Path) -> Result<Server> {
        let data_dir = fresh_dir("");
        let mut args: Vec<std::ffi::OsString> = [
            "playground",
            "--pg-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(data_dir.clone().into());
        Ok(Server::spawn(binary, &args, data_dir).await?.0)
    }

    /// Starts `binary args…` (a playground, or a cluster master, which also
    /// returns the control address workers register at), reads the ports
    /// it prints and connects; `data_dir` is removed when it is dropped.
    pub async fn spawn(
        binary: &Path,
        args: &[std::ffi::OsString],
        data_dir: PathBuf,
    ) -> Result<(Server, Option<String>)> {
        let mut child = Command::new(binary)
            .args(args)
            .env("RUST_LOG", log_filter())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let addresses = match read_addresses(&mut lines) {
            Ok(a) => a,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&data_dir);
                return Err(e);
            }
        };
        std::thread::spawn(move || for _ in lines {});
        // From here on the server is dropped (killed, its directory
        // removed) on any error.
        let connected =
            tokio_postgres::connect(&format!("host=127.0.0.1 port={} user=sluice", addresses.pg_port), NoTls).await;
        let (client, connection) = match connected {
            Ok(c) => c,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&data_dir);
                return Err(e.into());
            }
        };
        tokio::spawn(connection);
        Ok((
            Server {
                child,
                client,
                data_dir,
                http_port: addresses.http_port,
            },
            addresses.control,
        ))
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

    /// `GET path` of the REST API, parsed as JSON.
    pub async fn rest(&self, path: &str) -> Result<serde_json::Value> {
        rest_at(self.http_port, path).await
    }

    /// Every row of `sql`'s result as text (NULL as the empty string).
    pub async fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>> {
        let mut rows = Vec::new();
        for m in self.client.simple_query(sql).await? {
            if let SimpleQueryMessage::Row(r) = m {
                rows.push((0..r.len()).map(|i| r.get(i).unwrap_or_default().to_string()).collect());
            }
        }
        Ok(rows)
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
    /// State each stateful operator held at its peak, from the REST API's
    /// per-task `state_groups` sampled with the memory.
    pub state: Vec<OperatorState>,
    /// Most rows held by all operators together at one sample.
    pub state_rows_peak: u64,
    /// The pipeline's completed checkpoints (REST `checkpoints`: id,
    /// duration_ms, size_bytes), sampled with the memory.
    pub checkpoints: Vec<serde_json::Value>,
}

/// One operator's peak state in a run.
#[derive(Debug, Clone, Default)]
pub struct OperatorState {
    pub operator: u64,
    pub kind: String,
    pub detail: String,
    /// Most entries (window groups, join rows, top-N partitions, aggregate
    /// groups: the operators' `state_groups`) its instances held together
    /// at one sample.
    pub rows_peak: u64,
    /// Its instances' latest snapshots together, bytes (0: no checkpoint).
    pub snapshot_bytes: u64,
}

/// Samples a running pipeline's state through the REST API.
#[derive(Default)]
struct StateSampler {
    operators: Vec<OperatorState>,
    rows_peak: u64,
    checkpoints: Vec<serde_json::Value>,
}

impl StateSampler {
    async fn sample(&mut self, server: &Server, name: &str) {
        let Ok(v) = server.rest(&format!("/api/v1/pipelines/{name}")).await else {
            return;
        };
        let mut total = 0;
        for op in v["dag"]["operators"].as_array().into_iter().flatten() {
            let rows = op["metrics"]["state_groups"].as_u64().unwrap_or(0);
            let bytes: u64 = op["instances"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["state_bytes"].as_u64())
                .sum();
            total += rows;
            let id = op["id"].as_u64().unwrap_or(0);
            let entry = match self.operators.iter_mut().find(|o| o.operator == id) {
                Some(e) => e,
                None => {
                    self.operators.push(OperatorState {
                        operator: id,
                        kind: op["kind"].as_str().unwrap_or_default().to_string(),
                        detail: op["detail"].as_str().unwrap_or_default().to_string(),
                        ..Default::default()
                    });
                    self.operators.last_mut().expect("pushed")
                }
            };
            entry.rows_peak = entry.rows_peak.max(rows);
            entry.snapshot_bytes = entry.snapshot_bytes.max(bytes);
        }
        self.rows_peak = self.rows_peak.max(total);
        // The API keeps the latest few: merge them by id.
        for c in v["pipeline"]["checkpoints"].as_array().into_iter().flatten() {
            if !self.checkpoints.iter().any(|k| k["id"] == c["id"]) {
                self.checkpoints.push(c.clone());
            }
        }
    }
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
    run_sink_sampled(server, name, with, query, || server.sample()).await
}

/// [`run_sink`] with the CPU time and memory of the run read by `sample`
/// (a cluster: summed over its processes).
pub async fn run_sink_sampled(
    server: &Server,
    name: &str,
    with: &str,
    query: &str,
    sample: impl Fn() -> ProcSample,
) -> Result<RunStats> {
    let before = sample();
    let started = Instant::now();
    server
        .exec(&format!("CREATE SINK {name} WITH ({with}) AS {query}"))
        .await?;
    let mut samples = Vec::new();
    let mut sampler = StateSampler::default();
    let mut last_sample = Instant::now();
    loop {
        if started.elapsed() > RUN_DEADLINE {
            bail!("{name} did not finish within {RUN_DEADLINE:?}");
        }
        if let Some((state, rows_in, rows_out, error)) = server.pipeline(name).await? {
            match state.as_str() {
                "finished" => {
                    let wall_s = started.elapsed().as_secs_f64();
                    let after = sample();
                    samples.push((wall_s, after.rss_bytes));
                    sampler.sample(server, name).await;
                    return Ok(RunStats {
                        wall_s,
                        rows_in,
                        rows_out,
                        cpu_s: after.cpu_s - before.cpu_s,
                        peak_rss_bytes: after.peak_rss_bytes,
                        rss_samples: samples,
                        state: sampler.operators.into_iter().filter(|o| o.rows_peak > 0).collect(),
                        state_rows_peak: sampler.rows_peak,
                        checkpoints: sampler.checkpoints,
                    });
                }
                "failed" | "stopped" => bail!("{name} {state}: {error}"),
                _ => {}
            }
        }
        if last_sample.elapsed() >= Duration::from_millis(250) {
            samples.push((started.elapsed().as_secs_f64(), sample().rss_bytes));
            sampler.sample(server, name).await;
            last_sample = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
