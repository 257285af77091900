//! Passwords and API tokens never come back: after CREATE USER … PASSWORD,
//! ALTER USER … PASSWORD (over pgwire and over REST), CREATE TOKEN and a
//! few failing statements that carry a password, none of the secrets
//! appears in SHOW output, EXPLAIN, the catalog tables, pipeline history,
//! any REST endpoint the dashboard reads, `/metrics`, the files of the
//! data directory, or the server's log at debug level.

use crate::support::{describe, simple_rows};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A playground whose stderr (its log, at `debug`) goes to `log`.
pub(crate) struct LoggedServer {
    child: Child,
    pub(crate) pg_port: u16,
    http_port: u16,
}

impl LoggedServer {
    pub(crate) fn start(data_dir: &Path, log: &Path) -> LoggedServer {
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
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("start sluice");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let (mut pg_port, mut http_port) = (0u16, 0u16);
        let deadline = Instant::now() + Duration::from_secs(60);
        while pg_port == 0 || http_port == 0 {
            assert!(Instant::now() < deadline, "server did not start in time");
            let line = lines.next().expect("server exited early").expect("read stdout");
            if let Some(rest) = line.trim().strip_prefix("SQL:") {
                let port = rest.rsplit("-p ").next().unwrap().split_whitespace().next().unwrap();
                pg_port = port.parse().unwrap();
            }
            if let Some(rest) = line.trim().strip_prefix("HTTP:") {
                let addr = rest.trim().trim_start_matches("http://").trim_end_matches("/health");
                http_port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
        std::thread::spawn(move || for _ in lines {});
        LoggedServer {
            child,
            pg_port,
            http_port,
        }
    }

    pub(crate) async fn connect(&self) -> tokio_postgres::Client {
        let conn = format!(
            "host=127.0.0.1 port={} user=sluice dbname=sluice connect_timeout=10",
            self.pg_port
        );
        let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under `dir`, read as bytes.
fn files_under(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn passwords_and_tokens_appear_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let server = LoggedServer::start(&data, &log);
    let client = server.connect().await;
    let http = reqwest::Client::new();

    // Secrets, each distinctive enough that a hit is a leak.
    let created = "pw-created-4f1c9a";
    let altered = "pw-altered-9b2e71";
    let over_rest = "pw-rest-c3d8e2";
    let in_error = "pw-error-77aa10";
    let in_syntax_error = "pw-syntax-e5e5e5";
    let mut secrets: Vec<String> = [created, altered, over_rest, in_error, in_syntax_error]
        .iter()
        .map(|s| s.to_string())
        .collect();

    client
        .batch_execute(&format!("CREATE USER red_u WITH PASSWORD '{created}'"))
        .await
        .unwrap();
    client
        .batch_execute(&format!("ALTER USER red_u WITH PASSWORD '{altered}'"))
        .await
        .unwrap();
    let token = simple_rows(&client, "CREATE TOKEN red_t FOR USER red_u").await;
    let token = token[0]
        .iter()
        .flatten()
        .find(|cell| cell.starts_with("sluice_"))
        .cloned()
        .unwrap_or_else(|| panic!("no secret in {token:?}"));
    secrets.push(token.clone());

    // Failing statements that carry a password: their errors do not echo it.
    let mut errors = Vec::new();
    for sql in [
        format!("CREATE USER red_u WITH PASSWORD '{in_error}'"),
        format!("CREATE USER red_v WITH PASSWORD '{in_syntax_error}' NONSENSE"),
        format!("EXPLAIN CREATE USER red_x WITH PASSWORD '{in_error}'"),
    ] {
        let e = client.batch_execute(&sql).await.expect_err(&sql);
        errors.push(describe(&e));
    }

    // Over REST.
    let response = http
        .post(server.url("/api/v1/sql"))
        .json(&json!({ "sql": format!("CREATE USER red_w WITH PASSWORD '{over_rest}'") }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    let mut seen: Vec<(String, String)> = vec![("POST /api/v1/sql".into(), body)];
    let response = http
        .post(server.url("/api/v1/explain"))
        .json(&json!({ "sql": format!("CREATE USER red_y WITH PASSWORD '{in_error}'") }))
        .send()
        .await
        .unwrap();
    seen.push(("POST /api/v1/explain".into(), response.text().await.unwrap()));
    for (i, e) in errors.into_iter().enumerate() {
        seen.push((format!("error {i}"), e));
    }

    // A pipeline, so the pipeline views have content.
    client.batch_execute("CREATE STREAM red_s (id BIGINT)").await.unwrap();
    client
        .batch_execute("CREATE STREAM red_d AS SELECT id FROM red_s")
        .await
        .unwrap();

    for sql in [
        "SHOW ALL",
        "SHOW STREAMS",
        "SHOW PIPELINES",
        "SHOW PIPELINE HISTORY red_d",
        "EXPLAIN PIPELINE red_d",
        "SELECT * FROM pg_roles",
        "SELECT * FROM pg_user",
        "SELECT * FROM pg_settings",
        "SELECT * FROM pg_auth_members",
    ] {
        let rows = simple_rows(&client, sql).await;
        seen.push((sql.into(), format!("{rows:?}")));
    }
    // The SCRAM verifier is not shown either: rolpassword is a mask.
    let rows = simple_rows(&client, "SELECT rolpassword FROM pg_roles WHERE rolname = 'red_u'").await;
    assert_eq!(rows, vec![vec![Some("********".to_string())]]);

    for path in [
        "/api/v1/pipelines",
        "/api/v1/pipelines/red_d",
        "/api/v1/pipelines/red_d/history",
        "/api/v1/streams",
        "/api/v1/streams/red_s",
        "/api/v1/cluster",
        "/api/v1/openapi.json",
        "/metrics",
        "/health",
    ] {
        let response = http.get(server.url(path)).send().await.unwrap();
        seen.push((format!("GET {path}"), response.text().await.unwrap()));
    }
    for (place, text) in &seen {
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "{secret} leaked in {place}: {text}");
        }
        assert!(!text.contains("SCRAM-SHA-256$"), "a verifier leaked in {place}");
    }
    // The REST and pgwire views did show the objects (so the checks above
    // looked at real content).
    assert!(
        seen.iter()
            .any(|(p, t)| p == "SELECT * FROM pg_roles" && t.contains("red_w"))
    );
    assert!(
        seen.iter()
            .any(|(p, t)| p == "GET /api/v1/pipelines" && t.contains("red_d"))
    );

    // The log at debug level and every file the server wrote.
    drop(client);
    drop(server);
    let log_text = std::fs::read(&log).unwrap();
    assert!(!log_text.is_empty(), "the server logged nothing at debug level");
    let mut files = vec![("server.log".to_string(), log_text)];
    files_under(&data, &mut files);
    assert!(files.len() > 1, "no data files");
    for (file, bytes) in &files {
        for secret in &secrets {
            assert!(!contains(bytes, secret), "{secret} leaked in {file}");
        }
    }
}
