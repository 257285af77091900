//! Test harness: starts the real `sluice` binary on free ports with its own
//! data directory, and stops it when dropped.

#![allow(dead_code)]

pub mod external;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `sluice playground`.
pub struct TestServer {
    child: Option<Child>,
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
    /// environment variables.
    pub fn start_with(data_dir: &Path, flags: &[&str], env: &[(&str, &str)]) -> TestServer {
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
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut pg_port, mut http_port) = (0, 0);
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
            if let Some(rest) = line.trim().strip_prefix("HTTP:") {
                let addr = rest.trim().trim_start_matches("http://").trim_end_matches("/health");
                http_port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        TestServer {
            child: Some(child),
            pg_port,
            http_port,
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// A libpq-style connection string.
    pub fn conn_str(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=sluice dbname=sluice connect_timeout=10",
            self.pg_port
        )
    }

    /// Connects as `user` with `password` (tokio-postgres negotiates SCRAM).
    pub async fn connect_as(
        &self,
        user: &str,
        password: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let conn = format!(
            "host=127.0.0.1 port={} user={user} password='{password}' dbname=sluice connect_timeout=10",
            self.pg_port
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

    /// Stops the server (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
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
