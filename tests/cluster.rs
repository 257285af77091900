//! A real cluster: `sluice master` and `sluice worker` processes on
//! loopback, tasks exchanging rows over the data plane.
//!
//! (The windows reference tests also run against a two-worker cluster:
//! `SLUICE_TEST_WORKERS=2 cargo test --test integration windows`, as
//! `scripts/test.sh` does.)

mod common;

use common::TestServer;
use std::time::{Duration, Instant};

async fn exec(c: &tokio_postgres::Client, sql: &str) {
    c.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Rows of a bounded generator summed by key, computed without the engine:
/// `datagen` with `sequence` fields is deterministic.
fn expected_sums(rows: i64, keys: i64) -> Vec<(i64, i64, i64)> {
    let mut sums = vec![(0i64, 0i64); keys as usize];
    for i in 0..rows {
        let k = (i % keys) as usize;
        sums[k].0 += 1;
        sums[k].1 += i;
    }
    sums.into_iter()
        .enumerate()
        .map(|(k, (n, s))| (k as i64, n, s))
        .collect()
}

/// The `state` column of `name` in SHOW PIPELINES.
async fn pipeline_state(c: &tokio_postgres::Client, name: &str) -> Option<String> {
    let messages = c.simple_query("SHOW PIPELINES").await.ok()?;
    messages.into_iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => r.get("state").map(str::to_string),
        _ => None,
    })
}

fn cluster(workers: usize) -> (TestServer, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = TestServer::start_master(tmp.path(), &[]);
    for i in 0..workers {
        s.add_worker(&format!("w{}", i + 1), 4, &[]);
    }
    s.wait_for_workers(workers);
    (s, tmp)
}

/// A session query whose source, aggregate and result sink run in three
/// places: the generator and the keyed aggregate on the two workers (two
/// instances each, spread), the result sink on the master. Every hash
/// exchange crosses processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_spread_over_two_workers_is_exact() {
    let (server, _tmp) = cluster(2);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM nums (i BIGINT, k AS i % 7, ts AS TO_TIMESTAMP_LTZ(i, 3), WATERMARK FOR ts AS ts) WITH (
            connector = 'datagen', 'number-of-rows' = '100000', 'rows-per-second' = '0',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '99999')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    let rows = c
        .query(
            "SELECT k, count(*) AS n, sum(i) AS s \
             FROM TUMBLE(nums, ts, INTERVAL '1' HOUR) GROUP BY window_start, window_end, k",
            &[],
        )
        .await
        .unwrap();
    let mut got: Vec<(i64, i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    got.sort();
    assert_eq!(got, expected_sums(100_000, 7));
    // Both workers ran tasks.
    let cluster = server.cluster_json();
    let workers = cluster["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{cluster}");
}

/// A pipeline that cannot be placed fails with 53000 saying what was missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_without_room_is_refused_with_53000() {
    let (server, _tmp) = cluster(0);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM g (x BIGINT) WITH (connector = 'datagen', 'number-of-rows' = '10')",
    )
    .await;
    let e = c.query("SELECT x FROM g", &[]).await.unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "53000", "{db:?}");
    assert!(db.message().contains("no worker is registered"), "{}", db.message());
}

/// kill -9 of a worker: the master declares it dead after the worker
/// timeout and the pipeline runs again on the worker left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_pipeline_moves_to_the_others() {
    let (mut server, _tmp) = cluster(2);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '200',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    exec(
        &c,
        "CREATE SINK moved WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS SELECT i FROM ticks WHERE i >= 0",
    )
    .await;
    let used = |s: &TestServer| -> Vec<u64> {
        s.cluster_json()["workers"].as_array().map_or(vec![], |w| {
            w.iter().map(|w| w["used_slots"].as_u64().unwrap_or(0)).collect()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while used(&server).iter().filter(|n| **n > 0).count() < 2 {
        assert!(
            Instant::now() < deadline,
            "tasks never spread: {}",
            server.cluster_json()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tasks: u64 = used(&server).iter().sum();
    server.kill_worker(0);
    // Declared dead within the timeout (3 s in tests), then the pipeline
    // runs again with every task on the remaining worker.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let cluster = server.cluster_json();
        let workers = cluster["workers"].as_array().cloned().unwrap_or_default();
        let row = pipeline_state(&c, "moved").await;
        if workers.len() == 1 && workers[0]["used_slots"].as_u64() == Some(tasks) && row.as_deref() == Some("running") {
            break;
        }
        assert!(Instant::now() < deadline, "pipeline did not move: {cluster} {row:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET /metrics` of a two-worker cluster has every series a cluster
/// operator watches, task series labelled with the worker running them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_cover_tasks_workers_checkpoints_and_processes() {
    let (server, _tmp) = cluster(2);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM m_ticks (i BIGINT, k AS i % 5, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '500',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    // A keyed window: its input is hash-partitioned, so rows cross workers.
    exec(
        &c,
        "CREATE SINK m_plain WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS
            SELECT window_start, k, count(*) AS n FROM TUMBLE(m_ticks, ts, INTERVAL '1' SECOND)
            GROUP BY window_start, window_end, k",
    )
    .await;
    let body = || async {
        let url = format!("http://127.0.0.1:{}/metrics", server.http_port);
        reqwest::get(&url).await.unwrap().text().await.unwrap()
    };
    // A checkpoint completes and heartbeats carry the tasks' counters.
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = body().await;
        if text.contains("sluice_checkpoint_duration_seconds{pipeline=\"m_plain\"}")
            && text
                .lines()
                .any(|l| l.starts_with("sluice_task_rows_out_total") && !l.ends_with(" 0"))
        {
            break text;
        }
        assert!(Instant::now() < deadline, "no checkpoint or counters in 60 s:\n{text}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    for family in [
        "sluice_pipeline_rows_in_total",
        "sluice_pipeline_rows_out_total",
        "sluice_pipeline_restarts_total",
        "sluice_checkpoint_duration_seconds",
        "sluice_checkpoint_bytes",
        "sluice_task_rows_in_total",
        "sluice_task_rows_out_total",
        "sluice_task_queued_rows",
        "sluice_task_backpressure_seconds_total",
        "sluice_task_busy_seconds_total",
        "sluice_task_state_groups",
        "sluice_task_late_rows_total",
        "sluice_worker_slots",
        "sluice_worker_used_slots",
        "sluice_worker_heartbeat_age_seconds",
        "sluice_worker_data_bytes_sent_total",
        "sluice_worker_data_bytes_received_total",
        "sluice_worker_credit_wait_seconds_total",
        "sluice_worker_resident_memory_bytes",
        "sluice_worker_cpu_seconds_total",
        "sluice_process_resident_memory_bytes",
        "sluice_process_cpu_seconds_total",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(family) && !l.starts_with('#')),
            "{family} missing:\n{text}"
        );
    }
    for worker in ["w1", "w2"] {
        let tasks = format!("worker=\"{worker}\"");
        assert!(
            text.lines()
                .any(|l| l.starts_with("sluice_task_rows_out_total") && l.contains(&tasks)),
            "no task series on {worker}:\n{text}"
        );
        assert!(
            text.contains(&format!("sluice_worker_slots{{worker=\"{worker}\"}} 4")),
            "{worker}'s slots:\n{text}"
        );
    }
    // Rows crossed the data plane (the sink's hash edge).
    let sent: f64 = text
        .lines()
        .filter(|l| l.starts_with("sluice_worker_data_bytes_sent_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(sent > 0.0, "no data-plane bytes:\n{text}");
}
