//! Test harness: starts the real `sluice` binary on free ports with its own
//! data directory, and stops it when dropped.

#![allow(dead_code)]

pub mod external;
pub mod netns;
pub mod views;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `sluice playground` — or, when `SLUICE_TEST_WORKERS=N` (N ≥ 1)
/// is set, a cluster: `sluice master` and N `sluice worker` processes on
/// free ports, so any test written against one process runs with its tasks
/// spread over worker processes.
pub struct TestServer {
    child: Option<Child>,
    /// A cluster's worker processes.
    workers: Vec<Child>,
    /// A cluster master's control address (workers connect there).
    pub control: Option<String>,
    /// Where clients reach it (127.0.0.1 unless in a network namespace).
    pub host: String,
    pub pg_port: u16,
    pub http_port: u16,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a server with a fresh data directory.
    pub fn start() -> TestServer {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut s = TestServer::start_in(tmp.path());
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server on an existing data directory (restart tests).
    pub fn start_in(data_dir: &Path) -> TestServer {
        TestServer::start_in_with_env(data_dir, &[])
    }

    /// Starts a server on `data_dir` with extra environment variables
    /// (e.g. the `SLUICE_FAULT_PANIC_AT` test hook).
    pub fn start_in_with_env(data_dir: &Path, env: &[(&str, &str)]) -> TestServer {
        TestServer::start_with(data_dir, &[], env)
    }

    /// Starts a server on `data_dir` with extra flags (`--auth …`) and
    /// environment variables; a cluster when `SLUICE_TEST_WORKERS` is set
    /// and there are no flags.
    pub fn start_with(data_dir: &Path, flags: &[&str], env: &[(&str, &str)]) -> TestServer {
        let workers: usize = std::env::var("SLUICE_TEST_WORKERS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if workers > 0 && flags.is_empty() {
            // Slots for the largest reference query (q8: 11 tasks at
            // parallelism 2) on either worker alone.
            let mut s = TestServer::start_master(data_dir, env);
            for i in 0..workers {
                s.add_worker(&format!("w{}", i + 1), 16, env);
            }
            s.wait_for_workers(workers);
            return s;
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "playground",
                "--pg-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .args(flags)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sluice");
        let (pg_port, http_port, _) = read_addresses(&mut child);
        TestServer {
            child: Some(child),
            workers: Vec::new(),
            control: None,
            host: "127.0.0.1".to_string(),
            pg_port,
            http_port,
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// Starts a cluster master (no workers yet) on `data_dir`.
    pub fn start_master(data_dir: &Path, env: &[(&str, &str)]) -> TestServer {
        TestServer::start_master_at(data_dir, env, None, "127.0.0.1")
    }

    /// Starts a cluster master listening on `ip`, inside network namespace
    /// `netns` when given (scripts/netns.sh).
    pub fn start_master_at(data_dir: &Path, env: &[(&str, &str)], netns: Option<&str>, ip: &str) -> TestServer {
        TestServer::spawn_master(data_dir, env, netns, ip, &[])
    }

    /// Starts master `id` of a quorum, its control plane on `listen`, with
    /// `peers` (`m2=HOST:PORT,…`).
    pub fn start_quorum_master(data_dir: &Path, id: &str, listen: &str, peers: &str) -> TestServer {
        TestServer::start_quorum_master_at(data_dir, id, listen, peers, (None, "127.0.0.1"))
    }

    /// A master of a quorum in network namespace `netns` (when given),
    /// listening on `ip`.
    pub fn start_quorum_master_at(
        data_dir: &Path,
        id: &str,
        listen: &str,
        peers: &str,
        (netns, ip): (Option<&str>, &str),
    ) -> TestServer {
        TestServer::spawn_master(
            data_dir,
            &[],
            netns,
            ip,
            &["--id", id, "--listen", listen, "--peers", peers],
        )
    }

    fn spawn_master(
        data_dir: &Path,
        env: &[(&str, &str)],
        netns: Option<&str>,
        ip: &str,
        flags: &[&str],
    ) -> TestServer {
        let any = format!("{ip}:0");
        let mut command = in_netns(netns);
        command.arg("master");
        if !flags.contains(&"--listen") {
            command.args(["--listen", &any]);
        }
        let mut child = command
            .args(flags)
            .args([
                "--data-listen",
                &any,
                "--pg-listen",
                &any,
                "--http-listen",
                &any,
                "--worker-timeout",
                "3s",
                // Private addresses only; the tests log in without passwords.
                "--auth",
                "trust",
                "--insecure",
                "--data-dir",
            ])
            .arg(data_dir)
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sluice master");
        let (pg_port, http_port, control) = read_addresses(&mut child);
        TestServer {
            child: Some(child),
            workers: Vec::new(),
            control,
            host: ip.to_string(),
            pg_port,
            http_port,
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// Starts worker `id` with `slots` slots, registered with this master.
    pub fn add_worker(&mut self, id: &str, slots: u32, env: &[(&str, &str)]) {
        self.add_worker_at(id, slots, env, None, "127.0.0.1");
    }

    /// Starts worker `id` listening on `ip`, inside network namespace
    /// `netns` when given.
    pub fn add_worker_at(&mut self, id: &str, slots: u32, env: &[(&str, &str)], netns: Option<&str>, ip: &str) {
        self.add_worker_with(id, slots, env, (netns, ip), &[]);
    }

    /// Holds worker processes apart from any master (a quorum's workers
    /// outlive the masters the test kills); add them with
    /// [`TestServer::add_worker_to`].
    pub fn workers_only(data_dir: &Path) -> TestServer {
        TestServer {
            child: None,
            workers: Vec::new(),
            control: None,
            host: "127.0.0.1".to_string(),
            pg_port: 0,
            http_port: 0,
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// Starts worker `id` registering with any of `masters` (a quorum's
    /// control addresses, comma-separated).
    pub fn add_worker_to(&mut self, id: &str, slots: u32, masters: &str) {
        self.add_worker_to_at(id, slots, masters, (None, "127.0.0.1"));
    }

    /// [`Self::add_worker_to`] in network namespace `netns`, on `ip`.
    pub fn add_worker_to_at(&mut self, id: &str, slots: u32, masters: &str, at: (Option<&str>, &str)) {
        let control = self.control.replace(masters.to_string());
        self.add_worker_with(id, slots, &[], at, &[]);
        self.control = control;
    }

    /// Starts worker `id` of a master quorum (`masters`: all of them) with
    /// environment `env` (a fault hook).
    pub fn add_worker_to_with_env(&mut self, id: &str, slots: u32, masters: &str, env: &[(&str, &str)]) {
        let control = self.control.replace(masters.to_string());
        self.add_worker_with(id, slots, env, (None, "127.0.0.1"), &[]);
        self.control = control;
    }

    /// Starts worker `id` with extra flags (`--labels zone=a`).
    pub fn add_worker_with(
        &mut self,
        id: &str,
        slots: u32,
        env: &[(&str, &str)],
        (netns, ip): (Option<&str>, &str),
        flags: &[&str],
    ) {
        let control = self.control.clone().expect("a cluster master");
        let child = in_netns(netns)
            .args([
                "worker",
                "--id",
                id,
                "--masters",
                &control,
                "--listen",
                &format!("{ip}:0"),
                "--slots",
            ])
            .arg(slots.to_string())
            .args(flags)
            .arg("--data-dir")
            .arg(self.data_dir.join(format!("worker-{id}")))
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sluice worker");
        self.workers.push(child);
    }

    /// The server's (a master's) process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The worker processes' ids (`kill -9` tests).
    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.iter().map(|c| c.id()).collect()
    }

    /// Kills worker process `i` (in start order, of those alive) with
    /// SIGKILL.
    pub fn kill_worker(&mut self, i: usize) {
        let mut w = self.workers.remove(i);
        let _ = w.kill();
        let _ = w.wait();
    }

    /// Stops worker process `i` with SIGTERM (it drains first) and waits
    /// for it to exit, at most `limit`.
    pub fn terminate_worker(&mut self, i: usize, limit: Duration) -> Option<std::process::ExitStatus> {
        let mut w = self.workers.remove(i);
        let _ = Command::new("kill").args(["-TERM", &w.id().to_string()]).status();
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = w.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = w.kill();
                let _ = w.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A cluster on `data_dir`: a master and `workers` workers of `slots`
    /// slots each, all registered.
    pub fn start_cluster_in(data_dir: &Path, workers: usize, slots: u32) -> TestServer {
        let mut s = TestServer::start_master(data_dir, &[]);
        for i in 0..workers {
            s.add_worker(&format!("w{}", i + 1), slots, &[]);
        }
        s.wait_for_workers(workers);
        s
    }

    /// Waits until `n` workers are registered (REST `/api/v1/cluster`).
    pub fn wait_for_workers(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let registered = self.cluster_json()["workers"].as_array().map_or(0, |w| w.len());
            if registered >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{registered} of {n} workers registered after 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET /api/v1/cluster`.
    pub fn cluster_json(&self) -> serde_json::Value {
        self.get_json("/api/v1/cluster")
    }

    /// `GET path` on the HTTP port (no credentials), as JSON (Null on any
    /// failure).
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let get = || -> std::io::Result<String> {
            let mut c = std::net::TcpStream::connect((self.host.as_str(), self.http_port))?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            write!(c, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut response = String::new();
            c.read_to_string(&mut response)?;
            Ok(response)
        };
        let response = get().unwrap_or_default();
        let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
    }

    /// Runs `sql` with the real `psql` binary as `sluice` (stopping at the
    /// first error); panics when it fails.
    pub fn psql(&self, sql: &str) {
        let output = Command::new("psql")
            .args(["-X", "-v", "ON_ERROR_STOP=1", "-U", "sluice", "-d", "sluice", "-h"])
            .arg(&self.host)
            .arg("-p")
            .arg(self.pg_port.to_string())
            .arg("-c")
            .arg(sql)
            .output()
            .expect("run psql");
        assert!(
            output.status.success(),
            "psql failed on {sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The dashboard's browser scripts (tests/dashboard), ready to run: the
/// browser is there and playwright-core installed (`npm ci`, once).
pub fn dashboard_scripts() -> PathBuf {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: apt-get install chromium (scripts/test.sh does)"
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard");
    if !dir.join("node_modules/playwright-core").exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .expect("npm is needed for the dashboard tests (apt-get install nodejs npm)");
        assert!(status.success(), "npm ci in {} failed", dir.display());
    }
    dir
}

/// Runs `node script args…` with extra environment variables, killed after
/// `deadline`; returns (exited with success, its stdout and stderr).
pub fn run_node_script(script: &Path, args: &[String], env: &[(&str, &str)], deadline: Duration) -> (bool, String) {
    let out_file = tempfile::NamedTempFile::new().expect("log file");
    let log = out_file.reopen().expect("open log file");
    let mut child = Command::new("node")
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::from(log.try_clone().expect("clone log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("node is needed for the dashboard tests");
    let until = Instant::now() + deadline;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = std::fs::read_to_string(out_file.path()).unwrap_or_default();
    (status.is_some_and(|s| s.success()), text)
}

/// The `sluice` binary, run inside network namespace `netns` when given
/// (`ip netns exec` execs it: the child's pid is the server's).
fn in_netns(netns: Option<&str>) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_sluice")]);
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_sluice")),
    }
}

/// Reads the ports a starting `sluice` prints: pgwire, HTTP and (a master)
/// the workers' control address; keeps draining its stdout afterwards.
fn read_addresses(child: &mut Child) -> (u16, u16, Option<String>) {
    {
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut pg_port, mut http_port, mut control) = (0, 0, None);
        let deadline = Instant::now() + Duration::from_secs(60);
        while pg_port == 0 || http_port == 0 {
            assert!(Instant::now() < deadline, "server did not start in time");
            let line = lines.next().expect("server exited early").expect("read stdout");
            if let Some(rest) = line.trim().strip_prefix("SQL:") {
                pg_port = rest
                    .rsplit("-p ")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
            }
            if let Some(rest) = line.trim().strip_prefix("workers: sluice worker --masters ") {
                control = Some(rest.trim().to_string());
            }
            if let Some(rest) = line.trim().strip_prefix("HTTP:") {
                let addr = rest.trim().trim_start_matches("http://").trim_end_matches("/health");
                http_port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        (pg_port, http_port, control)
    }
}

impl TestServer {
    /// A libpq-style connection string.
    pub fn conn_str(&self) -> String {
        format!(
            "host={} port={} user=sluice dbname=sluice connect_timeout=10",
            self.host, self.pg_port
        )
    }

    /// Connects as `user` with `password` (tokio-postgres negotiates SCRAM).
    pub async fn connect_as(
        &self,
        user: &str,
        password: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let conn = format!(
            "host={} port={} user={user} password='{password}' dbname=sluice connect_timeout=10",
            self.host, self.pg_port
        );
        let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Connects with tokio-postgres.
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.conn_str(), tokio_postgres::NoTls)
            .await
            .expect("connect to sluice");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// Stops the server (SIGKILL) and its workers, and waits for them.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for mut w in self.workers.drain(..) {
            let _ = w.kill();
            let _ = w.wait();
        }
    }

    /// Stops the server with SIGINT (Ctrl-C) and waits for a clean exit.
    pub fn interrupt(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill").args(["-INT", &c.id().to_string()]).status();
        c.wait().expect("wait")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `state` column of `name` in SHOW PIPELINES.
pub async fn pipeline_state(c: &tokio_postgres::Client, name: &str) -> Option<String> {
    let messages = c.simple_query("SHOW PIPELINES").await.ok()?;
    messages.into_iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => r.get("state").map(str::to_string),
        _ => None,
    })
}

/// The JSON rows an exactly-once file sink (`format = 'json'`) committed in
/// `dir`: its visible `.jsonl` files (in-progress files are hidden,
/// dot-prefixed).
pub fn committed_json(dir: &Path) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return rows;
    };
    // By name: one sink instance's files in the order it wrote them
    // (`part-<instance>-<start ms>-<sequence>…`), which a changelog needs.
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('.') || !name.ends_with(".jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            rows.push(serde_json::from_str(line).unwrap());
        }
    }
    rows
}

/// The rows `window_start, k, n` of a windowed count a file sink committed.
pub fn committed_windows(dir: &Path) -> Vec<(String, i64, i64)> {
    committed_json(dir)
        .iter()
        .map(|v| {
            (
                v["window_start"].to_string(),
                v["k"].as_i64().unwrap(),
                v["n"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// 1-second windows from second 0 on, each with `keys` keys counting `n`
/// rows: every window written once, none missing up to the last.
pub fn assert_windows_exact(rows: &[(String, i64, i64)], keys: usize, n: i64) {
    let mut seen = std::collections::BTreeMap::new();
    for (window, k, count) in rows {
        assert_eq!(*count, n, "window {window} key {k} counted {count} rows, {n} expected");
        *seen.entry((window.clone(), *k)).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "windows written more than once: {twice:?}");
    let seconds: std::collections::BTreeSet<i64> = seen
        .keys()
        .map(|(w, _)| {
            let hms = w.trim_matches('"').rsplit('T').next().unwrap().to_string();
            hms.split(':')
                .fold(0, |acc, part| acc * 60 + part.parse::<i64>().unwrap())
        })
        .collect();
    assert_eq!(seen.len(), seconds.len() * keys, "a window lacks a key");
    let last = *seconds.last().expect("no window committed");
    assert_eq!(
        seconds.len() as i64,
        last + 1,
        "windows 0..={last} not all committed: {seconds:?}"
    );
}
