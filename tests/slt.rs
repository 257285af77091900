//! The SQL behaviour suite: every `sql/*.slt` file, in sorted order, run by
//! the `sqllogictest` crate against one live `sluice` server over pgwire
//! (simple query protocol), each file on a fresh connection.
//!
//! Values are rendered as text the way Postgres sends them (`NULL` for null,
//! `(empty)` for the empty string). Errors read
//! `db error: ERROR: <message> (SQLSTATE <code>)`, so `statement error` and
//! `query error` regexes can match the message and the SQLSTATE at once; the
//! bare `statement error (42P01)` form works too.
//!
//! Every statement has a deadline: a continuous query that would never end
//! (a missing or too large LIMIT) is cancelled with a CancelRequest and
//! reported as a failure naming the file and line, instead of hanging.

mod common;

use async_trait::async_trait;
use common::TestServer;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// How long one statement may take before it is cancelled.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// An error from Sluice (or the connection), as the `.slt` files match it.
#[derive(Debug)]
struct SltError {
    message: String,
    sqlstate: Option<String>,
}

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SltError {}

impl From<tokio_postgres::Error> for SltError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => {
                // One line, so that `.` in an expected-error regex spans it all.
                let mut message = format!("db error: {}: {}", db.severity(), db.message().replace('\n', " "));
                if let Some(detail) = db.detail() {
                    message.push_str(&format!(" DETAIL: {}", detail.replace('\n', " ")));
                }
                if let Some(hint) = db.hint() {
                    message.push_str(&format!(" HINT: {}", hint.replace('\n', " ")));
                }
                let code = db.code().code().to_string();
                message.push_str(&format!(" (SQLSTATE {code})"));
                SltError {
                    message,
                    sqlstate: Some(code),
                }
            }
            None => {
                let sqlstate = e.code().map(|c| c.code().to_string());
                let mut message = e.to_string();
                if let Some(code) = &sqlstate {
                    message.push_str(&format!(" (SQLSTATE {code})"));
                }
                SltError { message, sqlstate }
            }
        }
    }
}

/// One connection to the server under test.
struct Sluice {
    client: tokio_postgres::Client,
}

impl Sluice {
    async fn connect(conn_str: String) -> Result<Sluice, SltError> {
        let (client, connection) = tokio_postgres::connect(&conn_str, NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Sluice { client })
    }

    /// Runs `sql` (one or several statements) and renders what it returns:
    /// the rows of every statement that returns rows, in order, or else the
    /// count of the last command.
    async fn simple(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let messages = self.client.simple_query(sql).await?;
        let mut columns = None;
        let mut rows = Vec::new();
        let mut count = 0;
        for message in messages {
            match message {
                SimpleQueryMessage::RowDescription(c) => columns = Some(c.len()),
                SimpleQueryMessage::Row(row) => {
                    let values = (0..row.len())
                        .map(|i| match row.get(i) {
                            None => "NULL".to_string(),
                            Some("") => "(empty)".to_string(),
                            Some(v) => v.to_string(),
                        })
                        .collect();
                    rows.push(values);
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        Ok(match columns {
            Some(n) => DBOutput::Rows {
                types: vec![DefaultColumnType::Any; n],
                rows,
            },
            None => DBOutput::StatementComplete(count),
        })
    }
}

#[async_trait]
impl AsyncDB for Sluice {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        match tokio::time::timeout(STATEMENT_TIMEOUT, self.simple(sql)).await {
            Ok(result) => result,
            Err(_) => {
                // Stop the query so the session stays usable for the next record.
                let cancelled = self.client.cancel_token().cancel_query(NoTls).await;
                let mut message = format!(
                    "timed out after {}s (a continuous query without a reachable LIMIT?); CancelRequest sent",
                    STATEMENT_TIMEOUT.as_secs()
                );
                if let Err(e) = cancelled {
                    message.push_str(&format!(" but failed: {e}"));
                }
                Err(SltError {
                    message,
                    sqlstate: None,
                })
            }
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "sluice"
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await;
    }

    async fn run_command(command: std::process::Command) -> std::io::Result<std::process::Output> {
        tokio::process::Command::from(command).output().await
    }

    fn error_sql_state(err: &SltError) -> Option<String> {
        err.sqlstate.clone()
    }
}

/// Drops every pipeline and stream still on the server; returns their
/// names. Each file must clean up after itself, so anything found here is a
/// failure of that file; dropping it keeps the next files independent.
async fn drop_leftovers(server: &TestServer) -> Result<Vec<String>, SltError> {
    let db = Sluice::connect(server.conn_str()).await?;
    let names = async |show: &str| -> Result<Vec<String>, SltError> {
        Ok(match db.simple(show).await? {
            DBOutput::Rows { rows, .. } => rows.into_iter().map(|r| r[0].clone()).collect(),
            _ => Vec::new(),
        })
    };
    let mut left = Vec::new();
    // Pipelines first (they read streams; dropping a derived stream's
    // pipeline drops the stream too). A drop refused because another
    // pipeline still reads the stream succeeds in a later round.
    for _round in 0..5 {
        let (pipelines, streams) = (names("SHOW PIPELINES").await?, names("SHOW STREAMS").await?);
        if pipelines.is_empty() && streams.is_empty() {
            break;
        }
        for name in pipelines {
            if db.simple(&format!("DROP PIPELINE \"{name}\"")).await.is_ok() {
                left.push(format!("pipeline {name}"));
            }
        }
        for name in names("SHOW STREAMS").await? {
            if db.simple(&format!("DROP STREAM \"{name}\"")).await.is_ok() {
                left.push(format!("stream {name}"));
            }
        }
    }
    Ok(left)
}

/// The `.slt` files, sorted by name.
fn slt_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_logic_tests() {
    let server = TestServer::start();
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files under sql/");
    // A file may be chosen with SLT_FILTER=<substring of its name>.
    let filter = std::env::var("SLT_FILTER").ok();
    let mut failures = Vec::new();
    let mut ran = 0;
    for file in &files {
        let name = file.file_name().expect("file name").to_string_lossy().into_owned();
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        ran += 1;
        let conn_str = server.conn_str();
        let mut runner = Runner::new(move || Sluice::connect(conn_str.clone()));
        let started = std::time::Instant::now();
        let result = runner.run_file_async(file).await;
        drop(runner);
        let left = drop_leftovers(&server)
            .await
            .unwrap_or_else(|e| vec![format!("(cleanup failed: {e})")]);
        match (result, left.is_empty()) {
            (Ok(()), true) => eprintln!("ok     {name} ({:.1}s)", started.elapsed().as_secs_f64()),
            (Ok(()), false) => {
                let failure = format!("{name}: passed but left behind: {}", left.join(", "));
                eprintln!("FAILED {failure}");
                failures.push(failure);
            }
            (Err(e), _) => {
                let failure = format!("{name}: {}", e.display(false));
                eprintln!("FAILED {failure}");
                failures.push(failure);
            }
        }
    }
    assert!(ran > 0, "SLT_FILTER={filter:?} matched no file");
    assert!(
        failures.is_empty(),
        "{} of {ran} .slt files failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
