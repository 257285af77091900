//! Authentication and privileges end to end: a server started with
//! `--auth scram-sha-256`, real clients (tokio-postgres, `psql`) logging
//! in with right and wrong passwords, roles, GRANT/REVOKE taking effect on
//! the next statement, ownership, and the file-writing privilege with
//! `--file-root`.

use crate::common::TestServer;
use crate::support::{describe, exec, simple_rows};
use std::path::Path;
use std::process::{Command, Stdio};

const PASSWORD: &str = "correct horse battery staple";

/// A SCRAM server with `sluice`'s password set through the environment.
fn scram_server(data_dir: &Path, flags: &[&str]) -> TestServer {
    let mut all = vec!["--auth", "scram-sha-256"];
    all.extend_from_slice(flags);
    TestServer::start_with(data_dir, &all, &[("SLUICE_SUPERUSER_PASSWORD", PASSWORD)])
}

/// The SQLSTATE of a failed connection or statement.
fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| describe(e))
}

/// `psql -c sql` as `user` with `password`, never prompting.
fn psql(server: &TestServer, user: &str, password: &str, sql: &str) -> (bool, String) {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.pg_port.to_string(),
            "-U",
            user,
            "-d",
            "sluice",
        ])
        .args(["-X", "-w", "-A", "-t", "-c", sql])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .output()
        .expect("run psql (install postgresql-client)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn scram_logs_in_with_the_right_password_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = scram_server(dir.path(), &[]);

    let client = server.connect_as("sluice", PASSWORD).await.expect("right password");
    let rows = simple_rows(&client, "SELECT 1 + 1").await;
    assert_eq!(rows, vec![vec![Some("2".to_string())]]);

    let wrong = server
        .connect_as("sluice", "wrong")
        .await
        .map(|_| ())
        .expect_err("wrong password refused");
    assert_eq!(code(&wrong), "28P01", "{}", describe(&wrong));
    let unknown = server
        .connect_as("nobody", PASSWORD)
        .await
        .map(|_| ())
        .expect_err("unknown role refused");
    assert_eq!(code(&unknown), "28000", "{}", describe(&unknown));

    let (ok, text) = psql(&server, "sluice", PASSWORD, "SELECT 40 + 2");
    assert!(ok && text.trim() == "42", "{text}");
    let (ok, text) = psql(&server, "sluice", "nope", "SELECT 1");
    assert!(!ok && text.contains("password authentication failed"), "{text}");

    // The catalog holds a SCRAM verifier, never the password.
    let catalog = std::fs::read_to_string(dir.path().join("catalog.json")).unwrap();
    assert!(catalog.contains("SCRAM-SHA-256$4096:"), "{catalog}");
    assert!(!catalog.contains(PASSWORD));

    // A user created with a password logs in with it, and its new password
    // replaces the old one at once.
    exec(&client, "CREATE USER alice WITH PASSWORD 'alice-1'").await;
    assert!(server.connect_as("alice", "alice-1").await.is_ok());
    exec(&client, "ALTER USER alice WITH PASSWORD 'alice-2'").await;
    let old = server
        .connect_as("alice", "alice-1")
        .await
        .map(|_| ())
        .expect_err("old password refused");
    assert_eq!(code(&old), "28P01");
    assert!(server.connect_as("alice", "alice-2").await.is_ok());
    exec(&client, "DROP USER alice").await;
    let gone = server
        .connect_as("alice", "alice-2")
        .await
        .map(|_| ())
        .expect_err("dropped role refused");
    assert_eq!(code(&gone), "28000");
}

#[test]
fn unsafe_start_up_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // scram without any password for `sluice`: nobody could log in.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "playground",
            "--pg-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--auth", "scram-sha-256", "--data-dir"])
        .arg(dir.path())
        .env_remove("SLUICE_SUPERUSER_PASSWORD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("SLUICE_SUPERUSER_PASSWORD"),
        "{stderr}"
    );
    // trust beyond loopback without --insecure.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["playground", "--pg-listen", "0.0.0.0:0", "--http-listen", "127.0.0.1:0"])
        .args(["--auth", "trust", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--insecure"), "{stderr}");
}

/// SELECT and INSERT need their privilege; GRANT and REVOKE take effect on
/// the next statement; a non-owner cannot drop or alter a pipeline.
#[tokio::test]
async fn grants_decide_what_a_role_may_read_write_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let server = scram_server(dir.path(), &[]);
    let admin = server.connect_as("sluice", PASSWORD).await.unwrap();
    exec(&admin, "CREATE USER bob WITH PASSWORD 'bob'").await;
    exec(
        &admin,
        "CREATE STREAM clicks (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
    )
    .await;
    exec(&admin, "INSERT INTO clicks VALUES (7, '2026-01-01 00:00:00')").await;
    let bob = server.connect_as("bob", "bob").await.unwrap();

    let denied = bob.simple_query("SELECT id FROM clicks LIMIT 1").await.unwrap_err();
    assert_eq!(code(&denied), "42501");
    assert!(describe(&denied).contains("clicks"), "{}", describe(&denied));
    // Explaining needs what running needs, as in Postgres.
    let denied = bob.simple_query("EXPLAIN SELECT id FROM clicks").await.unwrap_err();
    assert_eq!(code(&denied), "42501");
    assert!(describe(&denied).contains("clicks"), "{}", describe(&denied));
    let denied = bob
        .simple_query("INSERT INTO clicks VALUES (8, '2026-01-01 00:00:01')")
        .await
        .unwrap_err();
    assert_eq!(code(&denied), "42501");

    exec(&admin, "GRANT SELECT ON STREAM clicks TO bob").await;
    assert_eq!(
        simple_rows(&bob, "SELECT id FROM clicks LIMIT 1").await,
        vec![vec![Some("7".to_string())]]
    );
    assert!(!simple_rows(&bob, "EXPLAIN SELECT id FROM clicks").await.is_empty());
    // SELECT does not give INSERT.
    let denied = bob
        .simple_query("INSERT INTO clicks VALUES (8, '2026-01-01 00:00:01')")
        .await
        .unwrap_err();
    assert_eq!(code(&denied), "42501");
    exec(&admin, "GRANT INSERT ON clicks TO bob").await;
    exec(&bob, "INSERT INTO clicks VALUES (8, '2026-01-01 00:00:01')").await;

    // A pipeline reading a stream needs SELECT on it; its creator owns it.
    exec(&bob, "CREATE STREAM bob_ids AS SELECT id FROM clicks").await;
    exec(&admin, "CREATE STREAM admin_ids AS SELECT id FROM clicks").await;
    let denied = bob.simple_query("DROP STREAM admin_ids").await.unwrap_err();
    assert_eq!(code(&denied), "42501");
    let denied = bob.simple_query("ALTER PIPELINE admin_ids PAUSE").await.unwrap_err();
    assert_eq!(code(&denied), "42501");
    let denied = bob.simple_query("GRANT SELECT ON admin_ids TO bob").await.unwrap_err();
    assert_eq!(code(&denied), "42501");
    let denied = bob.simple_query("CREATE USER eve WITH PASSWORD 'x'").await.unwrap_err();
    assert_eq!(code(&denied), "42501");

    exec(&admin, "REVOKE SELECT ON STREAM clicks FROM bob").await;
    let denied = bob.simple_query("SELECT id FROM clicks LIMIT 1").await.unwrap_err();
    assert_eq!(code(&denied), "42501");
    let denied = bob
        .simple_query("CREATE STREAM again AS SELECT id FROM clicks")
        .await
        .unwrap_err();
    assert_eq!(code(&denied), "42501");
    // The owner drops its own; the superuser drops anyone's.
    exec(&bob, "DROP STREAM bob_ids").await;
    exec(&admin, "DROP STREAM admin_ids").await;
}

/// A file sink needs superuser or pg_write_server_files, and with
/// --file-root its path must resolve under the root; a refused statement
/// creates nothing on disk.
#[tokio::test]
async fn file_sinks_need_the_privilege_and_stay_under_the_file_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let outside = dir.path().join("outside");
    let root_flag = root.to_str().unwrap().to_string();
    let server = scram_server(&dir.path().join("data"), &["--file-root", &root_flag]);
    let admin = server.connect_as("sluice", PASSWORD).await.unwrap();
    exec(&admin, "CREATE USER carol WITH PASSWORD 'carol'").await;
    exec(&admin, "CREATE STREAM s (id BIGINT)").await;
    exec(&admin, "GRANT SELECT ON s TO carol").await;
    let carol = server.connect_as("carol", "carol").await.unwrap();

    let sink = |path: &Path, name: &str| {
        format!(
            "CREATE SINK {name} WITH (connector = 'file', path = '{}', format = 'json') AS SELECT id FROM s",
            path.display()
        )
    };
    let inside = root.join("carol");
    let denied = carol.simple_query(&sink(&inside, "c1")).await.unwrap_err();
    assert_eq!(code(&denied), "42501", "{}", describe(&denied));
    assert!(!inside.exists());

    exec(&admin, "GRANT pg_write_server_files TO carol").await;
    let escape = carol.simple_query(&sink(&outside, "c2")).await.unwrap_err();
    assert_eq!(code(&escape), "42501", "{}", describe(&escape));
    let dotdot = root.join("..").join("outside");
    let escape = carol.simple_query(&sink(&dotdot, "c3")).await.unwrap_err();
    assert_eq!(code(&escape), "42501");
    std::os::unix::fs::symlink(dir.path(), root.join("link")).unwrap();
    let escape = carol
        .simple_query(&sink(&root.join("link/outside"), "c4"))
        .await
        .unwrap_err();
    assert_eq!(code(&escape), "42501");
    assert!(!outside.exists(), "a refused sink created its directory");
    // Not even a superuser writes outside the root.
    let escape = admin.simple_query(&sink(&outside, "c5")).await.unwrap_err();
    assert_eq!(code(&escape), "42501");

    exec(&carol, &sink(&inside, "c6")).await;
    let names: Vec<_> = simple_rows(&carol, "SHOW PIPELINES")
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(names.contains(&Some("c6".to_string())), "{names:?}");
}
