//! Client compatibility: real Postgres drivers against a live `sluice`.
//!
//! Each test starts a server and runs a client program from
//! `tests/clients/` against it:
//!
//! - `psycopg_check.py` with psycopg 3 (`psycopg[binary]`), in a virtualenv
//!   made on first use;
//! - `JdbcCheck.java` with the PostgreSQL JDBC driver, fetched with Maven on
//!   first use and run as a single-file source program (`java Foo.java`).
//!
//! The clients are installed under `$SLUICE_CLIENTS_DIR`, by default
//! `$HOME/.cache/sluice-clients`, once, and reused. A failed install fails
//! the test with what could not be installed (never a skip). Every child
//! process has a deadline and is killed past it, so a hung client fails
//! the test instead of blocking the run. The client programs check every
//! step even after one failed and print each failure; their output is part
//! of a failing test's message.

mod common;

use common::TestServer;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The JDBC driver version the check runs with.
const PGJDBC_VERSION: &str = "42.7.14";
/// How long a client check may run (its queries time out after 15 s each).
const CHECK_TIMEOUT: Duration = Duration::from_secs(240);
/// How long an install step (venv, pip, Maven) may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a quick probe (`python -c import`, `java -version`) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished (or killed) child process left.
struct Finished {
    /// `None` when the process was killed at its deadline.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The outcome and output, for failure messages.
    fn report(&self, timeout: Duration) -> String {
        let outcome = match self.status {
            Some(status) => format!("exited with {status}"),
            None => format!("was killed after {} s", timeout.as_secs()),
        };
        format!(
            "{outcome}\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Reads a child's pipe to the end on its own thread.
fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs `command` to its end or until `timeout`, when it is killed.
/// `Err` if it could not be started.
fn run(command: &mut Command, timeout: Duration) -> Result<Finished, String> {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start {shown}: {e}"))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(100)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Where the clients are installed.
fn clients_dir() -> PathBuf {
    let dir = match std::env::var_os("SLUICE_CLIENTS_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").expect("HOME or SLUICE_CLIENTS_DIR must be set");
            PathBuf::from(home).join(".cache").join("sluice-clients")
        }
    };
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create the clients directory {}: {e}", dir.display()));
    dir
}

/// Holds an exclusive lock on `<clients dir>/<name>.lock` (another test
/// process may be installing the same client) until dropped.
fn install_lock(dir: &Path, name: &str) -> File {
    let path = dir.join(format!("{name}.lock"));
    let file = File::create(&path).unwrap_or_else(|e| panic!("cannot create the lock file {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    file
}

/// A program in `tests/clients/`.
fn client_program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("clients")
        .join(name)
}

/// Runs one install step; panics with `what` could not be installed and
/// why, if it fails.
fn install_step(what: &str, command: &mut Command) {
    match run(command, INSTALL_TIMEOUT) {
        Ok(done) if done.success() => {}
        Ok(done) => panic!("could not install {what}: {command:?} {}", done.report(INSTALL_TIMEOUT)),
        Err(e) => panic!("could not install {what}: {e}"),
    }
}

/// Whether `python` can import psycopg with its binary libpq.
fn psycopg_importable(python: &Path) -> bool {
    python.exists()
        && run(
            Command::new(python).args(["-c", "import psycopg; psycopg.pq.version()"]),
            PROBE_TIMEOUT,
        )
        .is_ok_and(|done| done.success())
}

/// The python of a virtualenv with `psycopg[binary]`, made on first use.
fn psycopg_python() -> PathBuf {
    let dir = clients_dir();
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    if psycopg_importable(&python) {
        return python;
    }
    let _lock = install_lock(&dir, "venv");
    if psycopg_importable(&python) {
        return python;
    }
    if !python.exists() {
        install_step(
            &format!("a Python virtualenv at {}", venv.display()),
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
        );
    }
    install_step(
        &format!("psycopg[binary] (PyPI) into {}", venv.display()),
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "psycopg[binary]",
        ]),
    );
    assert!(
        psycopg_importable(&python),
        "could not install psycopg[binary]: pip succeeded but {} cannot import psycopg",
        python.display()
    );
    python
}

/// The PostgreSQL JDBC driver jar, fetched with Maven on first use.
fn pgjdbc_jar() -> PathBuf {
    let dir = clients_dir();
    let jdbc = dir.join("jdbc");
    let jar = jdbc.join(format!("postgresql-{PGJDBC_VERSION}.jar"));
    if jar.is_file() {
        return jar;
    }
    let _lock = install_lock(&dir, "jdbc");
    if jar.is_file() {
        return jar;
    }
    let artifact = format!("org.postgresql:postgresql:{PGJDBC_VERSION}");
    install_step(
        &format!(
            "the PostgreSQL JDBC driver {artifact} (Maven Central) into {}",
            jdbc.display()
        ),
        Command::new("mvn")
            // Outside any project: the plugin needs no pom.
            .current_dir(&dir)
            .args(["-q", "-B", "dependency:copy"])
            .arg(format!("-Dartifact={artifact}"))
            .arg(format!("-DoutputDirectory={}", jdbc.display())),
    );
    assert!(
        jar.is_file(),
        "could not install the PostgreSQL JDBC driver: Maven succeeded but {} is missing",
        jar.display()
    );
    jar
}

/// Checks that a Java 11+ launcher (single-file source programs) is there.
fn check_java() {
    let done = run(Command::new("java").arg("-version"), PROBE_TIMEOUT)
        .unwrap_or_else(|e| panic!("could not run java (Java 11+ is needed): {e}"));
    assert!(
        done.success(),
        "java -version failed (Java 11+ is needed): {}",
        done.report(PROBE_TIMEOUT)
    );
}

/// Runs a client check and asserts it exited 0 and printed `ok_line`.
fn assert_check(name: &str, command: &mut Command, ok_line: &str) {
    let done = run(command, CHECK_TIMEOUT).unwrap_or_else(|e| panic!("{name}: {e}"));
    let printed_ok = done.stdout.lines().any(|line| line.trim() == ok_line);
    assert!(
        done.success() && printed_ok,
        "{name} check failed: {command:?} {}",
        done.report(CHECK_TIMEOUT)
    );
}

#[test]
fn psycopg3() {
    let python = psycopg_python();
    let server = TestServer::start();
    assert_check(
        "psycopg",
        Command::new(&python)
            .arg(client_program("psycopg_check.py"))
            .arg(server.pg_port.to_string()),
        "psycopg: ok",
    );
}

#[test]
fn pgjdbc() {
    check_java();
    let jar = pgjdbc_jar();
    let server = TestServer::start();
    assert_check(
        "jdbc",
        Command::new("java")
            .arg("-cp")
            .arg(&jar)
            .arg(client_program("JdbcCheck.java"))
            .arg(server.pg_port.to_string()),
        "jdbc: ok",
    );
}

/// psycopg logs in with SCRAM-SHA-256: the right password runs a query,
/// a wrong one is refused with the server's message.
#[test]
fn psycopg3_scram() {
    let python = psycopg_python();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start_with(
        dir.path(),
        &["--auth", "scram-sha-256"],
        &[("SLUICE_SUPERUSER_PASSWORD", "py-scram-pw")],
    );
    let script = r#"
import sys, psycopg
port = int(sys.argv[1])
def connect(password):
    return psycopg.connect(host="127.0.0.1", port=port, user="sluice", dbname="sluice",
                           password=password, connect_timeout=10, autocommit=True)
with connect("py-scram-pw") as conn:
    assert conn.execute("SELECT 20 + 22").fetchone()[0] == 42
try:
    connect("wrong")
    raise SystemExit("a wrong password was accepted")
except psycopg.OperationalError as e:
    assert "password authentication failed" in str(e), str(e)
print("psycopg scram: ok")
"#;
    assert_check(
        "psycopg scram",
        Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(server.pg_port.to_string()),
        "psycopg scram: ok",
    );
}

/// pgJDBC logs in with SCRAM-SHA-256: right and wrong passwords, an
/// unknown role, a role created over JDBC refused (42501) until granted.
#[test]
fn pgjdbc_scram() {
    check_java();
    let jar = pgjdbc_jar();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start_with(
        dir.path(),
        &["--auth", "scram-sha-256"],
        &[("SLUICE_SUPERUSER_PASSWORD", "jdbc-scram-pw")],
    );
    assert_check(
        "jdbc scram",
        Command::new("java")
            .arg("-cp")
            .arg(&jar)
            .arg(client_program("JdbcScramCheck.java"))
            .arg(server.pg_port.to_string())
            .arg("jdbc-scram-pw"),
        "jdbc scram: ok",
    );
}
