//! The dashboard's Workers page in a real browser, against a cluster: a
//! `sluice master` and two `sluice worker` processes (labelled, 8 slots
//! each) run two pipelines at parallelism 2 spread over both workers;
//! `tests/dashboard/workers.mjs` (playwright-core driving Debian's headless
//! `chromium`) checks the page against `/api/v1/cluster` and the pipelines'
//! REST data: masters and workers with slots, labels and process metrics,
//! every task instance under the worker running it, and the pipeline page's
//! instance rows naming their worker. When the script asks ("workers:
//! kill"), this test kill -9s worker w2 and tells it which; the open page
//! must then show w2 lost and every task on w1. A second test opens the page
//! on `sluice playground`, where one process runs everything.
//! Screenshots go to `target/tmp/dashboard/`.
//!
//! Needs `node`/`npm`, `psql` and `/usr/bin/chromium` (scripts/test.sh
//! installs them); `CHROMIUM` overrides the browser path.

mod common;

use common::TestServer;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The whole browser run may take this long at most.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

/// One browser and server set at a time: the machine may have two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard")
}

/// The workers REST names in `pipeline`'s task instances.
fn task_workers(server: &TestServer, pipeline: &str) -> Vec<String> {
    let detail = server.get_json(&format!("/api/v1/pipelines/{pipeline}"));
    let mut workers: Vec<String> = detail["tasks"].as_array().map_or(vec![], |t| {
        t.iter()
            .filter_map(|t| t["worker"].as_str().map(str::to_string))
            .collect()
    });
    workers.sort();
    workers.dedup();
    workers
}

/// Runs workers.mjs in `mode`. On its "workers: kill" line, calls `kill`
/// (which returns the killed worker's id) and writes "killed <id>" to its
/// stdin. Returns (success, the script's output, whether it asked to kill).
fn run_script(script_dir: &Path, base: &str, mode: &str, mut kill: impl FnMut() -> String) -> (bool, String, bool) {
    let mut child = Command::new("node")
        .arg(script_dir.join("workers.mjs"))
        .args([base, &shots().to_string_lossy(), mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node is needed for the dashboard test");
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let tx2 = tx.clone();
    let readers = [
        std::thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .for_each(|l| drop(tx.send(l)))
        }),
        std::thread::spawn(move || {
            BufReader::new(err)
                .lines()
                .map_while(Result::ok)
                .for_each(|l| drop(tx2.send(l)))
        }),
    ];
    let mut stdin = child.stdin.take();
    let mut output = String::new();
    let mut killed = false;
    let deadline = Instant::now() + SCRIPT_DEADLINE;
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                println!("{line}");
                if line.trim() == "workers: kill" && !killed {
                    killed = true;
                    let id = kill();
                    if let Some(s) = stdin.as_mut() {
                        let _ = writeln!(s, "killed {id}");
                        let _ = s.flush();
                    }
                }
                output.push_str(&line);
                output.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if Instant::now() > deadline {
                    timed_out = true;
                    let _ = child.kill();
                    break;
                }
            }
        }
    }
    drop(stdin);
    let status = child.wait().expect("wait for node");
    for r in readers {
        let _ = r.join();
    }
    if timed_out {
        output.push_str(&format!("(killed after {SCRIPT_DEADLINE:?})\n"));
    }
    (!timed_out && status.success(), output, killed)
}

fn assert_shot(name: &str) {
    let size = std::fs::metadata(shots().join(name)).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "{name} is missing or empty ({size} bytes)");
}

#[test]
fn the_workers_page_follows_a_two_worker_cluster_and_a_killed_worker_in_chromium() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let script_dir = common::dashboard_scripts();
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut server = TestServer::start_master(tmp.path(), &[]);
    server.add_worker_with("w1", 8, &[], (None, "127.0.0.1"), &["--labels", "zone=a,disk=ssd"]);
    server.add_worker_with("w2", 8, &[], (None, "127.0.0.1"), &["--labels", "zone=b"]);
    server.wait_for_workers(2);

    // Two pipelines at parallelism 2, checkpointed so that they restart on
    // the survivor: a filter over a generator, and a keyed window count
    // (its hash exchange crosses the data plane).
    server.psql(
        "CREATE STREAM ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '200', \
         'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    );
    server.psql(
        "CREATE STREAM nums (i BIGINT, k AS i % 5, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts) \
         WITH (connector = 'datagen', 'rows-per-second' = '200', \
         'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    );
    server.psql(
        "SET parallelism = 2; CREATE SINK spread WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS \
         SELECT i FROM ticks WHERE i >= 0",
    );
    server.psql(
        "SET parallelism = 2; CREATE SINK counts WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS \
         SELECT window_start, k, count(*) AS n FROM TUMBLE(nums, ts, INTERVAL '1' SECOND) \
         GROUP BY window_start, window_end, k",
    );

    // What the script is to see: both workers busy, each pipeline on both.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cluster = server.cluster_json();
        let used: Vec<u64> = cluster["workers"].as_array().map_or(vec![], |w| {
            w.iter().map(|w| w["used_slots"].as_u64().unwrap_or(0)).collect()
        });
        let placed = ["spread", "counts"].map(|p| task_workers(&server, p));
        if used.len() == 2 && used.iter().all(|n| *n > 0) && placed.iter().all(|w| w == &["w1", "w2"]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pipelines never spread over both workers: {cluster} {placed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let base = format!("http://{}:{}", server.host, server.http_port);
    let (ok, output, killed) = run_script(&script_dir, &base, "cluster", || {
        // Worker processes in start order: w1, w2.
        server.kill_worker(1);
        "w2".to_string()
    });
    println!("screenshots in {}", shots().display());
    assert!(ok, "the browser test failed:\n{output}");
    assert!(killed, "the script never asked to kill a worker:\n{output}");
    assert!(output.contains("workers: 27 passed, 0 failed"), "{output}");
    for shot in ["workers.png", "pipeline-workers.png", "workers-lost.png"] {
        assert_shot(shot);
    }
    // The survivor runs everything, as the page was checked to show.
    assert_eq!(task_workers(&server, "spread"), ["w1"]);
    assert_eq!(task_workers(&server, "counts"), ["w1"]);
    server.stop();
}

#[test]
fn the_workers_page_explains_the_playground_in_chromium() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let script_dir = common::dashboard_scripts();
    // A flag keeps it a playground even under SLUICE_TEST_WORKERS.
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut server = TestServer::start_with(tmp.path(), &["--auth", "trust"], &[]);
    server.psql(
        "CREATE STREAM ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '100'); \
         SET parallelism = 2; CREATE SINK local_sink WITH (connector = 'blackhole') AS SELECT i FROM ticks WHERE i >= 0",
    );
    let base = format!("http://{}:{}", server.host, server.http_port);
    let (ok, output, killed) = run_script(&script_dir, &base, "playground", || {
        unreachable!("no kill in the playground")
    });
    assert!(ok, "the browser test failed:\n{output}");
    assert!(!killed);
    assert!(output.contains("workers: 7 passed, 0 failed"), "{output}");
    assert_shot("workers-playground.png");
    server.stop();
}
