//! The real `psql` client against the server: scripts, `-c`, errors with
//! and without ON_ERROR_STOP, FETCH_COUNT (cursors), meta-commands.

use crate::common::TestServer;
use crate::support::create_bid_stream;
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one psql run may take.
const PSQL_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `psql` against `server` with `args`, failing the test on a hang.
fn psql(server: &TestServer, args: &[&str]) -> Output {
    let port = server.pg_port.to_string();
    let mut command = Command::new("psql");
    command
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "sluice",
            "-d",
            "sluice",
            "-X",
            "-P",
            "pager=off",
        ])
        .args(args)
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("`psql` is not installed: install postgresql-client (apt-get install postgresql-client)")
        }
        Err(e) => panic!("could not run psql: {e}"),
    };
    // Drain both pipes on threads so a chatty psql never blocks.
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + PSQL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for psql") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("psql {args:?} did not finish within {PSQL_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out_thread.join().expect("stdout"),
        stderr: err_thread.join().expect("stderr"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `sql` to a script file in a fresh temp dir.
fn script(sql: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("script.sql");
    std::fs::write(&path, sql).expect("write script");
    let path = path.to_str().expect("utf-8 path").to_string();
    (dir, path)
}

#[test]
fn psql_is_installed() {
    match Command::new("psql").arg("--version").output() {
        Ok(o) => assert!(
            text(&o.stdout).contains("PostgreSQL"),
            "psql --version: {}",
            text(&o.stdout)
        ),
        Err(e) => panic!("`psql` is needed by these tests: install postgresql-client ({e})"),
    }
}

#[test]
fn script_creates_inserts_and_selects() {
    let server = TestServer::start();
    let (_dir, path) = script(
        "CREATE STREAM readings (sensor VARCHAR, celsius BIGINT);\n\
         INSERT INTO readings VALUES ('a', 21), ('b', 19), ('c', 25);\n\
         SELECT sensor, celsius FROM readings WHERE celsius > 20 LIMIT 2;\n",
    );
    let out = psql(&server, &["-v", "ON_ERROR_STOP=1", "-f", &path]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "psql failed: {}\n{stdout}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "no errors or notices expected");
    let lines: Vec<&str> = stdout.lines().collect();
    // Command tags, then an aligned table: header, rule, rows, footer.
    assert_eq!(
        &lines[..4],
        &[
            "CREATE STREAM",
            "INSERT 0 3",
            " sensor | celsius ",
            "--------+---------"
        ],
        "{stdout}"
    );
    let mut rows = lines[4..6].to_vec();
    rows.sort();
    assert_eq!(rows, vec![" a      |      21", " c      |      25"], "{stdout}");
    assert_eq!(&lines[6..], &["(2 rows)", ""], "{stdout}");
}

#[test]
fn single_command_with_dash_c() {
    let server = TestServer::start();
    let out = psql(&server, &["-c", "SELECT 1 AS one, 'x' AS letter"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        " one | letter \n-----+--------\n   1 | x\n(1 row)\n\n"
    );
}

#[test]
fn errors_print_and_psql_keeps_going_without_on_error_stop() {
    let server = TestServer::start();
    let (_dir, path) = script(
        "SELECT * FROM missing_stream;\n\
         CREATE STREAM t (x BIGINT);\n\
         INSERT INTO t VALUES (7);\n\
         SELEC x FROM t;\n\
         SELECT x FROM t LIMIT 1;\n",
    );
    let out = psql(&server, &["-A", "-t", "-f", &path]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "without ON_ERROR_STOP psql exits 0: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR:")).collect();
    assert_eq!(errors.len(), 2, "{stderr}");
    assert!(errors[0].contains("missing_stream"), "{stderr}");
    assert!(errors[1].contains("syntax error"), "{stderr}");
    assert_eq!(stdout, "CREATE STREAM\nINSERT 0 1\n7\n", "{stderr}");
}

#[test]
fn on_error_stop_ends_the_script_at_the_first_error() {
    let server = TestServer::start();
    let (_dir, path) = script(
        "CREATE STREAM t (x BIGINT);\n\
         SELECT nope FROM t;\n\
         INSERT INTO t VALUES (7);\n",
    );
    let out = psql(&server, &["-v", "ON_ERROR_STOP=1", "-A", "-t", "-f", &path]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "psql exits 3 on an error with ON_ERROR_STOP"
    );
    assert!(text(&out.stderr).contains("ERROR:"), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "CREATE STREAM\n", "nothing after the error runs");
}

#[test]
fn fetch_count_reads_through_a_cursor() {
    let server = TestServer::start();
    let (_dir, path) = script(&format!(
        "{};\n\\set FETCH_COUNT 10\nSELECT auction, price FROM b LIMIT 25;\n",
        create_bid_stream("b", 10_000, 5)
    ));
    let out = psql(&server, &["-v", "ON_ERROR_STOP=1", "-A", "-t", "-f", &path]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "CREATE STREAM");
    let rows = &lines[1..];
    assert_eq!(rows.len(), 25, "{stdout}");
    for r in rows {
        let parts: Vec<&str> = r.split('|').collect();
        assert_eq!(parts.len(), 2, "{r}");
        assert!(parts.iter().all(|p| p.parse::<i64>().is_ok()), "{r}");
    }
}

#[test]
fn describe_meta_commands_list_streams_and_columns() {
    let server = TestServer::start();
    let (_dir, path) =
        script("CREATE STREAM readings (sensor VARCHAR, celsius BIGINT NOT NULL);\n\\d\n\\dt read*\n\\d readings\n");
    let out = psql(&server, &["-v", "ON_ERROR_STOP=1", "-f", &path]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    let after_list = stdout.split("CREATE STREAM").nth(1).unwrap_or_default();
    assert!(
        after_list.matches("readings").count() >= 2,
        "\\d lists the stream and \\d readings names it:\n{stdout}"
    );
    assert!(
        stdout.contains("sensor") && stdout.contains("celsius"),
        "\\d readings shows its columns:\n{stdout}"
    );
    assert!(stdout.contains("bigint"), "{stdout}");
    assert!(stdout.contains("Table \"public.readings\""), "{stdout}");
    assert!(stdout.contains("not null"), "celsius is NOT NULL:\n{stdout}");
    // \d, \dt read* and \d readings each name it.
    assert!(after_list.matches("readings").count() >= 3, "{stdout}");
}

/// `psql -A -t -c <meta-command>`'s output.
fn meta(server: &TestServer, command: &str) -> String {
    let out = psql(server, &["-v", "ON_ERROR_STOP=1", "-A", "-t", "-c", command]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{command}: {}\n{stdout}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "{command}: no errors or notices expected");
    stdout
}

/// `\d`, `\dt`, `\d+`, `\d name` and `\d+ name` against the catalog tables,
/// in psql's unaligned, tuples-only form. Expected rows follow from the
/// streams created: tables of `public` owned by `sluice`, columns with
/// Postgres' names for their types (VARCHAR is text).
#[test]
fn describe_meta_commands_show_what_postgres_would() {
    let server = TestServer::start();
    // The statements run as psql sends them (no error, no notice).
    meta(
        &server,
        "CREATE STREAM readings (sensor VARCHAR NOT NULL, celsius DOUBLE PRECISION, at TIMESTAMP); \
             CREATE STREAM alerts (level INT, amount DECIMAL(10,2))",
    );

    let tables = "public|alerts|table|sluice\npublic|readings|table|sluice\n";
    assert_eq!(meta(&server, "\\d"), tables);
    assert_eq!(meta(&server, "\\dt"), tables);
    assert_eq!(meta(&server, "\\dt read*"), "public|readings|table|sluice\n");
    // \d+ adds persistence, access method, size and description.
    assert_eq!(
        meta(&server, "\\d+"),
        "public|alerts|table|sluice|permanent|heap|0 bytes|\npublic|readings|table|sluice|permanent|heap|0 bytes|\n"
    );
    // Column | Type | Collation | Nullable | Default
    assert_eq!(
        meta(&server, "\\d readings"),
        "sensor|text||not null|\ncelsius|double precision|||\nat|timestamp without time zone|||\n"
    );
    // … | Storage | Compression | Stats target | Description (Postgres'
    // storage of integer is plain, of numeric main).
    assert_eq!(
        meta(&server, "\\d+ alerts"),
        "level|integer||||plain|||\namount|numeric(10,2)||||main|||\n"
    );
    // \dn lists the schemas that are not the system's.
    assert_eq!(meta(&server, "\\dn"), "public|sluice\n");
}

/// A materialized view is a relation of kind `m`: `\d` lists it as such,
/// `\dm` lists only views, `\d name` shows the columns of its query (no op
/// column) with Postgres' names for their types, and a plain SELECT reads
/// it.
#[test]
fn describe_meta_commands_show_materialized_views() {
    let server = TestServer::start();
    // The statements run as psql sends them (no error, no notice).
    meta(
        &server,
        "CREATE STREAM nums (i BIGINT) WITH (connector = 'datagen', 'number-of-rows' = '12', \
               'rows-per-second' = '0', 'fields.i.kind' = 'sequence', 'fields.i.start' = '1', 'fields.i.end' = '12'); \
             CREATE MATERIALIZED VIEW parity AS SELECT i % 2 AS odd, count(*) AS n, max(i) AS top FROM nums GROUP BY i % 2",
    );
    assert_eq!(
        meta(&server, "\\d"),
        "public|nums|table|sluice\npublic|parity|materialized view|sluice\n"
    );
    assert_eq!(meta(&server, "\\dm"), "public|parity|materialized view|sluice\n");
    assert_eq!(
        meta(&server, "\\d parity"),
        "odd|bigint|||\nn|bigint|||\ntop|bigint|||\n"
    );
    // \d+ parity's "View definition" (what psql asks for it).
    assert_eq!(
        meta(&server, "SELECT pg_catalog.pg_get_viewdef('parity'::regclass, true)"),
        "SELECT i % 2 AS odd, count(*) AS n, max(i) AS top FROM nums GROUP BY i % 2\n"
    );
    // i = 1..12: six odd (top 11), six even (top 12).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows = meta(&server, "SELECT odd, n, top FROM parity ORDER BY odd");
        if rows == "0|6|12\n1|6|11\n" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the view never held all rows: {rows}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
