//! A real cluster: `sluice master` and `sluice worker` processes on
//! loopback, tasks exchanging rows over the data plane.
//!
//! (The windows reference tests also run against a two-worker cluster:
//! `SLUICE_TEST_WORKERS=2 cargo test --test integration windows`, as
//! `scripts/test.sh` does.)

mod common;

use common::netns::Hosts;
use common::{TestServer, assert_windows_exact, committed_windows, pipeline_state};
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
    // The same sums without a window: a changelog (its op column crosses
    // the workers' data plane like any column), folded to the same table.
    let rows = c
        .query("SELECT k, count(*) AS n, sum(i) AS s FROM nums GROUP BY k", &[])
        .await
        .unwrap();
    let mut table: std::collections::BTreeMap<i64, (i64, i64)> = Default::default();
    for r in &rows {
        let (op, k, row): (String, i64, (i64, i64)) = (r.get(0), r.get(1), (r.get(2), r.get(3)));
        match op.as_str() {
            "+I" | "+U" => assert!(table.insert(k, row).is_none(), "{op} of shown key {k}"),
            "-U" => assert_eq!(table.remove(&k), Some(row), "-U of {k} is not its row"),
            other => panic!("op {other}"),
        }
    }
    let folded: Vec<(i64, i64, i64)> = table.into_iter().map(|(k, (n, s))| (k, n, s)).collect();
    assert_eq!(folded, expected_sums(100_000, 7));
    // Both workers ran tasks.
    let cluster = server.cluster_json();
    let workers = cluster["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{cluster}");
}

/// A materialized view in a cluster: the generator, the aggregate and the
/// view's sink run on the two workers, and the master answers `SELECT …
/// FROM view` with the rows it asks the sink's worker for (`FetchView`).
/// A view over a running input answers with a prefix of it, and goes on;
/// once a bounded input ended the view holds every key's sums, computed
/// here, and keeps them after both workers are gone: a finished view's
/// rows are brought to the master before its worker forgets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_materialized_view_over_two_workers_is_exact() {
    use common::views::{VIEW_QUERY, view_past};
    let (mut server, _tmp) = cluster(2);
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE STREAM live (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '500',
                'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
             CREATE MATERIALIZED VIEW vlive WITH ('checkpoint.interval' = '200ms') AS
                {VIEW_QUERY} FROM live GROUP BY i % 7"
        ),
    )
    .await;
    let mut answers = 0;
    let first = view_past(&server, "vlive", 100, &mut answers).await;
    view_past(&server, "vlive", first + 200, &mut answers).await;
    exec(
        &c,
        "CREATE STREAM vnums (i BIGINT, k AS i % 7) WITH (
            connector = 'datagen', 'number-of-rows' = '100000', 'rows-per-second' = '40000',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '99999');
         SET parallelism = 2;
         CREATE MATERIALIZED VIEW vsums AS SELECT k, count(*) AS n, sum(i) AS s FROM vnums GROUP BY k",
    )
    .await;
    // Every task runs on a worker, none on the master's own (the bounded
    // input is paced so that its pipeline is seen running).
    let workers_of = |view: &'static str| {
        let c = &c;
        async move {
            let rows = c.simple_query("SHOW PIPELINES").await.unwrap();
            rows.into_iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(view) => {
                        Some(r.get("workers").unwrap_or_default().to_string())
                    }
                    _ => None,
                })
                .unwrap()
        }
    };
    for view in ["vlive", "vsums"] {
        let deadline = Instant::now() + Duration::from_secs(20);
        let workers = loop {
            let workers = workers_of(view).await;
            if !workers.is_empty() {
                break workers;
            }
            assert!(Instant::now() < deadline, "{view} never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            workers.contains('w') && !workers.contains("master:"),
            "{view} runs on {workers}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while pipeline_state(&c, "vsums").await.as_deref() != Some("finished") {
        assert!(Instant::now() < deadline, "vsums never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sums = || async {
        let rows = c.query("SELECT k, n, s FROM vsums ORDER BY k", &[]).await.unwrap();
        rows.iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect::<Vec<(i64, i64, i64)>>()
    };
    assert_eq!(sums().await, expected_sums(100_000, 7));
    // A view of ~26 MB of rows comes from its worker in pieces (at most
    // 16 MiB each), put together in order: every row, every character.
    exec(
        &c,
        "CREATE STREAM big (i BIGINT, s TEXT) WITH (
            connector = 'datagen', 'number-of-rows' = '200000', 'rows-per-second' = '0',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '1', 'fields.i.end' = '200000',
            'fields.s.length' = '120');
         SET parallelism = 1;
         CREATE MATERIALIZED VIEW vbig AS SELECT i, s FROM big",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while pipeline_state(&c, "vbig").await.as_deref() != Some("finished") {
        assert!(Instant::now() < deadline, "vbig never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let row = c
        .query_one("SELECT count(*), sum(i), sum(char_length(s)) FROM vbig", &[])
        .await
        .unwrap();
    let got: (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(got, (200_000, 200_000 * 200_001 / 2, 200_000 * 120));
    // The workers gone, the finished view answers from the master; the
    // live one cannot, and says which worker it was on.
    server.kill_worker(0);
    server.kill_worker(0);
    assert_eq!(sums().await, expected_sums(100_000, 7));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.query("SELECT k FROM vlive", &[]).await {
            Err(e) => {
                let code = e.code().map(|c| c.code().to_string());
                assert!(matches!(code.as_deref(), Some("08006") | Some("55000")), "{e:?}");
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "vlive answered long after its workers died"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A bounded pipeline that finished on the workers shows every row it
/// read and wrote: each part's final counters reach the master before it
/// exits (the last periodic heartbeat is up to a second old).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pipelines_counts_are_complete() {
    let (server, _tmp) = cluster(2);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM bounded (i BIGINT) WITH (connector = 'datagen', 'number-of-rows' = '250000',
            'rows-per-second' = '0', 'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '249999')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    exec(
        &c,
        "CREATE SINK counted WITH (connector = 'blackhole') AS SELECT i FROM bounded WHERE i % 5 = 0",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (rows_in, rows_out) = loop {
        let rows = c.simple_query("SHOW PIPELINES").await.unwrap();
        let row = rows.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some("counted") => Some((
                r.get("state").unwrap_or_default().to_string(),
                r.get("rows_in").unwrap_or("0").parse::<u64>().unwrap(),
                r.get("rows_out").unwrap_or("0").parse::<u64>().unwrap(),
            )),
            _ => None,
        });
        if let Some((state, rows_in, rows_out)) = row
            && state == "finished"
        {
            break (rows_in, rows_out);
        }
        assert!(Instant::now() < deadline, "the bounded pipeline did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((rows_in, rows_out), (250_000, 50_000), "rows read and written");
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
    wait_until_spread(&server).await;
    let tasks: u64 = used_slots(&server).iter().map(|(_, n)| n).sum();
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
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
    // REST keeps the lost worker (not only a dashboard page that saw it),
    // with when and why, until it registers again.
    let cluster = server.cluster_json();
    let lost = cluster["lost_workers"].as_array().cloned().unwrap_or_default();
    assert_eq!(lost.len(), 1, "{cluster}");
    assert_eq!(lost[0]["id"], "w1", "{cluster}");
    assert_eq!(lost[0]["slots"], 4, "{cluster}");
    assert!(lost[0]["lost_at_ms"].as_i64().unwrap() >= killed_at, "{cluster}");
    assert!(!lost[0]["why"].as_str().unwrap().is_empty(), "{cluster}");
    server.add_worker("w1", 4, &[]);
    server.wait_for_workers(2);
    let cluster = server.cluster_json();
    assert_eq!(cluster["lost_workers"], serde_json::json!([]), "{cluster}");
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
        // Each window instance's snapshot, stored by its worker, is sized.
        let windows_sized = text
            .lines()
            .filter(|l| l.starts_with("sluice_task_state_bytes") && l.contains("kind=\"window_aggregate\""))
            .filter(|l| !l.ends_with(" 0"))
            .count();
        if text.contains("sluice_checkpoint_duration_seconds{pipeline=\"m_plain\"}")
            && text
                .lines()
                .any(|l| l.starts_with("sluice_task_rows_out_total") && !l.ends_with(" 0"))
            && windows_sized == 2
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint, counters or sized window state in 60 s:\n{text}"
        );
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
        "sluice_task_state_bytes",
        "sluice_task_checkpoint_alignment_seconds_total",
        "sluice_task_watermark_lag_seconds",
        "sluice_checkpoint_alignment_seconds",
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

/// SIGTERM to a worker: it drains — the pipeline stops at a barrier and
/// starts again from that barrier's checkpoint on the other worker, which
/// is no failure (no restart counted, no error) — and exits cleanly. The
/// exactly-once file sink then holds each source instance's numbers from
/// its first on, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_worker_drains_its_tasks_at_a_barrier_and_exits() {
    let (mut server, tmp) = cluster(2);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM d_ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '200',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    let out = tmp.path().join("drained");
    // Checkpoints every 30 s: a fail-over would go back to the last one
    // (and count a restart); a stop at a barrier needs none of them.
    exec(
        &c,
        &format!(
            "CREATE SINK drained WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '30s')
                AS SELECT i FROM d_ticks",
            out.display()
        ),
    )
    .await;
    wait_until_spread(&server).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tasks: u64 = used_slots(&server).iter().map(|(_, n)| n).sum();
    let status = server.terminate_worker(0, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "w1 did not drain and exit cleanly: {status:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = used_slots(&server);
        let state = pipeline_state(&c, "drained").await;
        if now == vec![("w2".to_string(), tasks)] && state.as_deref() == Some("running") {
            break;
        }
        assert!(Instant::now() < deadline, "tasks did not move to w2: {now:?} {state:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rows = c.simple_query("SHOW PIPELINES").await.unwrap();
    let (restarts, error) = rows
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some("drained") => Some((
                r.get("restarts").unwrap().parse::<i64>().unwrap(),
                r.get("error").filter(|e| !e.is_empty()).map(str::to_string),
            )),
            _ => None,
        })
        .unwrap();
    assert_eq!((restarts, error), (0, None), "the drain counted as a failure");
    // The stop checkpoint committed everything read before the barrier;
    // wait for the next commit after the move (30 s checkpoints).
    let committed = || -> Vec<i64> {
        let mut values = Vec::new();
        for path in std::fs::read_dir(&out).into_iter().flatten().map(|e| e.unwrap().path()) {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with('.') || !name.ends_with(".jsonl") {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                values.push(v["i"].as_i64().unwrap());
            }
        }
        values.sort_unstable();
        values
    };
    let values = committed();
    assert!(!values.is_empty(), "the stop at the barrier committed nothing");
    // Datagen instance j of 2 emits j, j + 2, j + 4, …: each instance's
    // numbers committed up to its barrier are a prefix of its sequence,
    // once each (the two instances stop at different heights).
    for instance in 0..2 {
        let mine: Vec<i64> = values.iter().copied().filter(|v| v % 2 == instance).collect();
        let expected: Vec<i64> = (0..mine.len() as i64).map(|n| instance + 2 * n).collect();
        assert!(
            mine == expected,
            "instance {instance}'s committed numbers are not its first {} once each (first difference at {:?})",
            mine.len(),
            mine.iter().zip(&expected).position(|(a, b)| a != b)
        );
    }
}

/// (worker id, used slots) of every worker REST lists.
fn used_slots(s: &TestServer) -> Vec<(String, u64)> {
    s.cluster_json()["workers"].as_array().map_or(vec![], |w| {
        w.iter()
            .map(|w| {
                (
                    w["id"].as_str().unwrap_or_default().to_string(),
                    w["used_slots"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    })
}

/// Waits (at most 30 s) until tasks run on two workers.
async fn wait_until_spread(s: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while used_slots(s).iter().filter(|(_, n)| *n > 0).count() < 2 {
        assert!(Instant::now() < deadline, "tasks never spread: {}", s.cluster_json());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A network fault, in network namespaces (each process its own address,
/// as on separate hosts).
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// w1's cable pulled: it hears nobody, nobody hears it.
    Cable,
    /// Packets between w1 and w2 dropped (the data plane breaks); both
    /// still hear the master.
    BetweenWorkers,
    /// Packets between w1 and the master dropped; w1 still reaches w2.
    WorkerMaster,
}

impl Hosts {
    fn fault(&self, fault: Fault, on: bool) {
        match fault {
            Fault::Cable => self.link("w1", !on),
            Fault::BetweenWorkers => self.partition("w1", "w2", on),
            Fault::WorkerMaster => self.partition("w1", "m", on),
        }
    }
}

/// Pulling a worker's cable mid-stream: the master hears nothing (no
/// reset), declares it dead after the worker timeout and restarts the
/// pipeline on the other worker from its checkpoint; the cut worker,
/// hearing nothing from the master, stops its tasks. Plugged back, it
/// registers again. Every window of the exactly-once file sink is written
/// once, with the count computed by hand: 20 rows of each key. (It once
/// caught a stream with computed columns restoring no source position:
/// replayed rows were counted twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulled_cable_moves_the_tasks_keeps_windows_exact_and_the_worker_rejoins() {
    network_fault(Fault::Cable).await;
}

/// Cutting only the data plane between the two workers: both keep their
/// sessions with the master, but the link's keepalive fails, the pipeline
/// fails with the broken link in SHOW PIPELINES and restarts from its
/// checkpoint with backoff until the link is back; then every window is
/// written once with its full count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_between_workers_restarts_the_pipeline_and_keeps_windows_exact() {
    network_fault(Fault::BetweenWorkers).await;
}

/// Cutting only w1 from the master (w1 still reaches w2): the master
/// declares w1 dead and moves its tasks to w2; w1, hearing no master,
/// stops its own — never two live copies writing. Mended, w1 registers
/// again; every window written once with its full count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_from_the_master_is_replaced_and_keeps_windows_exact() {
    network_fault(Fault::WorkerMaster).await;
}

/// SHOW PIPELINES' `state` and `error` of `name`.
async fn pipeline_row(c: &tokio_postgres::Client, name: &str) -> (String, String) {
    let Ok(messages) = c.simple_query("SHOW PIPELINES").await else {
        return Default::default();
    };
    messages
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => Some((
                r.get("state").unwrap_or_default().to_string(),
                r.get("error").unwrap_or_default().to_string(),
            )),
            _ => None,
        })
        .unwrap_or_default()
}

async fn network_fault(fault: Fault) {
    let hosts = Hosts::up(&format!("sl{}", std::process::id() % 10_000), &["m", "w1", "w2"]);
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_master_at(tmp.path(), &[], Some(&hosts.ns("m")), &hosts.ip("m"));
    // Room for all six tasks (source, window, sink × 2) on one worker.
    for w in ["w1", "w2"] {
        server.add_worker_at(w, 8, &[], Some(&hosts.ns(w)), &hosts.ip(w));
    }
    server.wait_for_workers(2);
    let c = server.connect().await;
    // 300 rows/s; ts = i × 10 ms, so a 1-second window holds rows
    // 100·w … 100·w + 99: 20 of each k = i % 5.
    exec(
        &c,
        "CREATE STREAM n_ticks (i BIGINT, k AS i % 5, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    let out = tmp.path().join("out");
    exec(
        &c,
        &format!(
            "CREATE SINK n_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS
                SELECT window_start, k, count(*) AS n FROM TUMBLE(n_ticks, ts, INTERVAL '1' SECOND)
                GROUP BY window_start, window_end, k",
            out.display()
        ),
    )
    .await;
    wait_until_spread(&server).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = committed_windows(&out).len();
    hosts.fault(fault, true);
    let deadline = Instant::now() + Duration::from_secs(30);
    match fault {
        // Declared dead after 3 s of silence; the pipeline runs again on w2.
        Fault::Cable | Fault::WorkerMaster => loop {
            let now = used_slots(&server);
            let (state, _) = pipeline_row(&c, "n_out").await;
            if now.len() == 1 && now[0].0 == "w2" && now[0].1 > 0 && state == "running" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the pipeline did not move off the cut worker: {now:?} {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        },
        // Both workers stay; the broken link shows.
        Fault::BetweenWorkers => loop {
            let (state, error) = pipeline_row(&c, "n_out").await;
            if error.contains("data link") {
                assert_eq!(used_slots(&server).len(), 2, "both workers still registered");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the broken data link never showed: {state:?} {error:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        },
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    hosts.fault(fault, false);
    // A cut-off worker stopped its tasks (no word from the master) and
    // registers again once it hears the master.
    server.wait_for_workers(2);
    // Well past the windows committed before the fault.
    let deadline = Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let rows = committed_windows(&out);
        if rows.len() >= before + 100 {
            break rows;
        }
        assert!(
            Instant::now() < deadline,
            "only {} windows committed in time ({before} before the fault): {:?}",
            rows.len(),
            pipeline_row(&c, "n_out").await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_windows_exact(&rows, 5, 20);
    drop(server);
}

/// `WITH (placement = 'zone=b')` puts every task on workers labelled
/// zone=b; a label no worker has is a 53000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_labels_choose_the_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_master(tmp.path(), &[]);
    server.add_worker_with("wa", 4, &[], (None, "127.0.0.1"), &["--labels", "zone=a"]);
    server.add_worker_with("wb", 4, &[], (None, "127.0.0.1"), &["--labels", "zone=b,disk=ssd"]);
    server.wait_for_workers(2);
    let c = server.connect().await;
    exec(
        &c,
        "CREATE STREAM l_ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '100',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await;
    exec(&c, "SET parallelism = 2").await;
    exec(
        &c,
        "CREATE SINK in_b WITH (connector = 'blackhole', placement = 'zone=b') AS SELECT i FROM l_ticks",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let used = used_slots(&server);
        if used.iter().any(|(id, n)| id == "wb" && *n > 0) {
            assert!(
                used.iter().all(|(id, n)| id == "wb" || *n == 0),
                "tasks outside zone=b: {used:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "in_b never placed: {used:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    exec(
        &c,
        "CREATE SINK in_c WITH (connector = 'blackhole', placement = 'zone=c') AS SELECT i FROM l_ticks",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let messages = c.simple_query("SHOW PIPELINES").await.unwrap();
        let row = messages.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some("in_c") => {
                Some((r.get("state").map(str::to_string), r.get("error").map(str::to_string)))
            }
            _ => None,
        });
        if let Some((Some(state), Some(error))) = &row
            && state == "failed"
        {
            assert!(error.contains("zone=c"), "{error}");
            break;
        }
        assert!(Instant::now() < deadline, "in_c should fail to place: {row:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One source instance's counters as REST shows them (a heartbeat old).
struct SourceInstance {
    worker: String,
    rows: u64,
    held_us: u64,
    watermark_ms: i64,
}

fn source_instances(s: &TestServer, pipeline: &str) -> Vec<SourceInstance> {
    let detail = s.get_json(&format!("/api/v1/pipelines/{pipeline}"));
    let mut tasks: Vec<&serde_json::Value> = detail["tasks"]
        .as_array()
        .map_or(vec![], |t| t.iter().filter(|t| t["kind"] == "source").collect());
    tasks.sort_by_key(|t| t["instance"].as_u64());
    tasks
        .iter()
        .map(|t| SourceInstance {
            worker: t["worker"].as_str().unwrap_or_default().to_string(),
            rows: t["rows_out"].as_u64().unwrap_or(0),
            held_us: t["alignment_held_us"].as_u64().unwrap_or(0),
            watermark_ms: t["watermark_ms"].as_i64().unwrap_or(i64::MIN),
        })
        .collect()
}

/// Watermark alignment across workers: a source whose two instances run on
/// two worker processes, instance 0's event time running ten times faster
/// than instance 1's. Aligned (max drift 1 s), instance 0 may read only up
/// to instance 1's watermark plus the drift — which it learns through the
/// master — so it reads about a tenth of instance 1's rows; unaligned (the
/// control, same cluster, same data), both read at the same pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_split_over_workers_is_aligned_through_the_master() {
    let (server, _tmp) = cluster(2);
    let c = server.connect().await;
    exec(&c, "SET parallelism = 2").await;
    for (name, drift) in [("aligned", "1s"), ("unaligned", "off")] {
        // 200 rows/s over both instances: instance 0 generates the even i
        // (ts = i × 100 ms: 20 s of event time a second), instance 1 the
        // odd i (ts = i × 10 ms: 2 s a second).
        exec(
            &c,
            &format!(
                "CREATE STREAM {name}_src (i BIGINT,
                    ts AS TO_TIMESTAMP_LTZ(CASE WHEN i % 2 = 0 THEN i * 100 ELSE i * 10 END, 3),
                    WATERMARK FOR ts AS ts)
                 WITH (connector = 'datagen', 'rows-per-second' = '200',
                    'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000',
                    'scan.watermark.alignment.max-drift' = '{drift}')"
            ),
        )
        .await;
        exec(
            &c,
            &format!("CREATE SINK {name} WITH (connector = 'blackhole') AS SELECT i FROM {name}_src"),
        )
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for name in ["aligned", "unaligned"] {
        loop {
            let s = source_instances(&server, name);
            if s.len() == 2 && s.iter().all(|i| i.rows > 0) {
                assert_ne!(s[0].worker, s[1].worker, "{name}: both instances on one worker");
                break;
            }
            assert!(Instant::now() < deadline, "{name} never ran on both workers");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The bound: instance 0 reads while its watermark (its largest ts so
    // far) is within 1 s of what it knows of instance 1's, which is at most
    // instance 1's largest ts. After instance 1's n rows (largest odd i
    // < 2n, ts < 20·n ms), instance 0's read rows have i·100 ≤ 20·n + 1000,
    // i.e. n / 10 + 6 rows; allowed on top: the rows instance 1 read while
    // REST's figures of the two workers are a heartbeat apart (100 rows,
    // 10 of instance 0), its first second before any report arrived (100)
    // and one batch read past the bound.
    let bound = |n: u64| n / 10 + 6 + 10 + 100 + 100;
    let mut aligned_rows = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let a = source_instances(&server, "aligned");
        let u = source_instances(&server, "unaligned");
        assert!(
            a[0].rows <= bound(a[1].rows),
            "aligned: instance 0 read {} rows, instance 1 only {} (bound {}); watermarks {} and {} ms",
            a[0].rows,
            a[1].rows,
            bound(a[1].rows),
            a[0].watermark_ms,
            a[1].watermark_ms
        );
        assert!(a[0].held_us > 0, "aligned: instance 0 was never held");
        assert!(
            u[0].rows * 2 >= u[1].rows,
            "unaligned: instance 0 read {} rows against instance 1's {}: held without alignment?",
            u[0].rows,
            u[1].rows
        );
        assert_eq!(u[0].held_us, 0, "unaligned: instance 0 held");
        aligned_rows.push((a[0].rows, a[1].rows));
    }
    // Held, not stopped: instance 0 read on as instance 1 caught up (its
    // first second, unaligned, put it ~20 s of event time ahead: ~10 s of
    // instance 1's progress), and instance 1 got far enough that an
    // unaligned instance 0 would have broken the bound.
    assert!(
        aligned_rows[2].0 > aligned_rows[0].0 && aligned_rows[2].1 > bound(aligned_rows[2].1),
        "aligned instance 0 stalled, or instance 1 too slow to show the bound: {aligned_rows:?}"
    );
}

/// A data plane bound to a wildcard address (0.0.0.0) without
/// `--advertise` would hand peers an address they cannot dial: master and
/// worker refuse to start, naming the flag.
#[test]
fn a_wildcard_data_address_needs_advertise() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("SLUICE_SUPERUSER_PASSWORD", "not-used-here")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let dir = tmp.path().join("w").display().to_string();
    let (ok, err) = run(&[
        "worker",
        "--id",
        "w",
        "--masters",
        "127.0.0.1:1",
        "--listen",
        "0.0.0.0:0",
        "--data-dir",
        &dir,
    ]);
    assert!(!ok && err.contains("--advertise"), "worker: {err}");
    let dir = tmp.path().join("m").display().to_string();
    let (ok, err) = run(&[
        "master",
        "--listen",
        "127.0.0.1:0",
        "--data-listen",
        "0.0.0.0:0",
        "--pg-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--data-dir",
        &dir,
    ]);
    assert!(!ok && err.contains("--advertise"), "master: {err}");
}
