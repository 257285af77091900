//! The server's life: catalog persistence across a clean Ctrl-C restart,
//! file sinks, a failing pipeline beside a healthy one, and the HTTP API.

use crate::common::TestServer;
use crate::support::{STATEMENT_TIMEOUT, describe, exec, query, simple_records, simple_rows, wait_for, within};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// How long a background pipeline may take to show an effect.
const PIPELINE_TIMEOUT: Duration = Duration::from_secs(60);

type Record = BTreeMap<String, Option<String>>;

/// The SHOW PIPELINES row of `name`, if listed.
async fn pipeline(client: &tokio_postgres::Client, name: &str) -> Option<Record> {
    simple_records(client, "SHOW PIPELINES")
        .await
        .into_iter()
        .find(|r| r.get("name").cloned().flatten().as_deref() == Some(name))
}

fn field<'a>(r: &'a Record, column: &str) -> &'a str {
    r.get(column)
        .unwrap_or_else(|| panic!("no column {column} in {r:?}"))
        .as_deref()
        .unwrap_or("")
}

/// Stops `server` with SIGINT, failing if it takes too long; returns whether it exited 0.
async fn interrupt(mut server: TestServer) -> std::process::ExitStatus {
    let stopping = tokio::task::spawn_blocking(move || server.interrupt());
    within("clean shutdown after Ctrl-C", Duration::from_secs(30), stopping)
        .await
        .expect("interrupt")
}

/// The lines of `path` once it has at least `n` of them.
/// The committed part files of a file sink's directory, in name order
/// (hidden in-progress files are not read), concatenated.
fn committed_text(dir: &Path) -> String {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    names.retain(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'));
    names.sort();
    names.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
}

async fn lines_of(dir: &Path, n: usize) -> Vec<String> {
    wait_for(&format!("{n} lines in {}", dir.display()), PIPELINE_TIMEOUT, || async {
        let text = committed_text(dir);
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= n && text.ends_with('\n')).then_some(lines)
    })
    .await
}

fn json_lines(lines: &[String]) -> Vec<Value> {
    let mut values: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    values.sort_by_key(|v| v.to_string());
    values
}

#[tokio::test]
async fn catalog_survives_a_clean_restart() {
    let data = tempfile::tempdir().expect("data dir");
    let out_dir = tempfile::tempdir().expect("sink dir");
    let out = out_dir.path().join("nested").join("events");
    let server = TestServer::start_in(data.path());
    let client = server.connect().await;
    exec(&client, "CREATE STREAM events (id BIGINT, msg VARCHAR)").await;
    exec(
        &client,
        &format!(
            "CREATE SINK exported WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') \
             AS SELECT id, msg FROM events WHERE id > 1",
            out.display()
        ),
    )
    .await;
    exec(&client, "CREATE STREAM doubled AS SELECT id * 2 AS id2 FROM events").await;
    exec(&client, "INSERT INTO events VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;

    // The file sink writes one JSON object per row that passes the filter.
    let lines = lines_of(&out, 2).await;
    assert_eq!(
        json_lines(&lines),
        vec![json!({"id": 2, "msg": "b"}), json!({"id": 3, "msg": "c"})]
    );
    let p = pipeline(&client, "exported").await.expect("exported is listed");
    assert_eq!(field(&p, "state"), "running");
    assert_eq!(field(&p, "kind"), "sink");

    // Ctrl-C with a session open and an unbounded query in flight: a clean exit.
    let in_flight = server.connect().await;
    let running = tokio::spawn(async move { in_flight.simple_query("SELECT id FROM events").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = interrupt(server).await;
    assert!(status.success(), "Ctrl-C shutdown should exit 0, got {status}");
    let cut = within("in-flight query ends with the server", STATEMENT_TIMEOUT, running)
        .await
        .expect("task");
    assert!(cut.is_err(), "the in-flight query cannot complete normally");

    // Same data dir: the catalog is back and the pipelines run again.
    let server = TestServer::start_in(data.path());
    let client = server.connect().await;
    let streams = simple_records(&client, "SHOW STREAMS").await;
    let names: Vec<&str> = streams.iter().map(|r| field(r, "name")).collect();
    assert!(
        names.contains(&"events") && names.contains(&"doubled"),
        "SHOW STREAMS after restart: {names:?}"
    );
    let events = streams.iter().find(|r| field(r, "name") == "events").expect("events");
    assert_eq!(field(events, "connector"), "memory");
    assert_eq!(field(events, "columns"), "2");
    let doubled = streams.iter().find(|r| field(r, "name") == "doubled").expect("doubled");
    assert_eq!(field(doubled, "pipeline"), "doubled");
    for name in ["exported", "doubled"] {
        let p = pipeline(&client, name)
            .await
            .unwrap_or_else(|| panic!("{name} is listed after restart"));
        assert!(["starting", "running"].contains(&field(&p, "state")), "{name}: {p:?}");
        // A checkpointed pipeline is deployed by its supervisor once its
        // newest checkpoint is loaded: `starting` until then.
        wait_for(
            &format!("{name} running after restart"),
            Duration::from_secs(30),
            || async { pipeline(&client, name).await.filter(|p| field(p, "state") == "running") },
        )
        .await;
    }
    let described = simple_rows(&client, "DESCRIBE events").await;
    let columns: Vec<(String, String)> = described
        .iter()
        .map(|r| (r[0].clone().unwrap_or_default(), r[1].clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        columns,
        vec![("id".into(), "bigint".into()), ("msg".into(), "text".into())]
    );

    exec(&client, "INSERT INTO events VALUES (4, 'd')").await;
    let want = json!({"id": 4, "msg": "d"});
    wait_for("the restarted sink writes the new row", PIPELINE_TIMEOUT, || async {
        let text = committed_text(&out);
        text.lines()
            .any(|l| serde_json::from_str::<Value>(l).ok().as_ref() == Some(&want))
            .then_some(())
    })
    .await;
    let rows = query(&client, "SELECT id2 FROM doubled WHERE id2 >= 8 LIMIT 1").await;
    assert_eq!(rows[0].get::<_, i64>(0), 8);

    drop(client);
    let status = interrupt(server).await;
    assert!(status.success(), "second Ctrl-C shutdown should exit 0, got {status}");
}

#[tokio::test]
async fn a_failing_pipeline_is_reported_and_others_keep_running() {
    let server = TestServer::start();
    let client = server.connect().await;
    let out_dir = tempfile::tempdir().expect("sink dir");
    let out = out_dir.path().join("good");
    exec(&client, "CREATE STREAM s (x BIGINT)").await;
    exec(
        &client,
        "CREATE SINK bad WITH (connector = 'blackhole') AS SELECT 10 / (x - x) AS boom FROM s",
    )
    .await;
    exec(
        &client,
        &format!(
            "CREATE SINK good WITH (connector = 'file', path = '{}', format = 'csv', 'checkpoint.interval' = '1s') AS SELECT x, x * 10 AS tenfold FROM s",
            out.display()
        ),
    )
    .await;
    exec(&client, "INSERT INTO s VALUES (1), (2), (3)").await;

    let bad = wait_for("bad to fail", PIPELINE_TIMEOUT, || async {
        pipeline(&client, "bad").await.filter(|p| field(p, "state") == "failed")
    })
    .await;
    // The error names the operator that divided by zero (the projection).
    let plan = simple_records(&client, "EXPLAIN PIPELINE bad").await;
    let project = plan
        .iter()
        .find(|r| field(r, "kind") == "project")
        .unwrap_or_else(|| panic!("no project in {plan:?}"));
    let error = field(&bad, "error").to_ascii_lowercase();
    assert!(
        error.contains(&format!("operator {}", field(project, "operator_id"))),
        "error: {error}"
    );
    assert!(
        error.contains("divide by zero") || error.contains("division by zero"),
        "error: {error}"
    );

    // The healthy pipeline over the same stream goes on.
    let lines = lines_of(&out, 4).await;
    assert_eq!(lines[0], "x,tenfold");
    let mut rows = lines[1..].to_vec();
    rows.sort();
    assert_eq!(rows, vec!["1,10", "2,20", "3,30"]);
    exec(&client, "INSERT INTO s VALUES (4)").await;
    let lines = lines_of(&out, 5).await;
    assert!(lines.contains(&"4,40".to_string()), "{lines:?}");
    let good = pipeline(&client, "good").await.expect("good listed");
    assert_eq!(field(&good, "state"), "running");
    assert_eq!(field(&good, "error"), "");
    assert_eq!(field(&good, "rows_in"), "4", "{good:?}");
    let bad = pipeline(&client, "bad").await.expect("bad still listed");
    assert_eq!(field(&bad, "state"), "failed");

    // Sessions keep working, old and new.
    let rows = query(&client, "SELECT x FROM s LIMIT 4").await;
    let mut xs: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    xs.sort();
    assert_eq!(xs, vec![1, 2, 3, 4]);
    let other = server.connect().await;
    assert_eq!(simple_rows(&other, "SELECT 1").await, vec![vec![Some("1".to_string())]]);

    // A failed pipeline can be dropped; the other stays.
    exec(&client, "DROP PIPELINE bad").await;
    assert!(pipeline(&client, "bad").await.is_none());
    assert!(pipeline(&client, "good").await.is_some());
}

async fn get(url: &str) -> (u16, Value) {
    let resp = within(url, STATEMENT_TIMEOUT, reqwest::get(url))
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(
        content_type.starts_with("application/json"),
        "GET {url}: content-type {content_type}"
    );
    let body = within(url, STATEMENT_TIMEOUT, resp.json::<Value>())
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (status, body)
}

#[tokio::test]
async fn http_api_answers_json() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE STREAM s (x BIGINT, label VARCHAR)").await;
    exec(
        &client,
        "CREATE SINK keep WITH (connector = 'blackhole') AS SELECT x FROM s WHERE x > 0",
    )
    .await;
    let base = format!("http://127.0.0.1:{}", server.http_port);

    let (status, health) = get(&format!("{base}/health")).await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok", "{health}");

    exec(&client, "INSERT INTO s VALUES (1, 'a'), (-1, 'b'), (2, 'c')").await;
    let (status, body) = get(&format!("{base}/api/v1/pipelines")).await;
    assert_eq!(status, 200);
    let list = body["pipelines"]
        .as_array()
        .unwrap_or_else(|| panic!("no pipelines array: {body}"));
    let keep = list
        .iter()
        .find(|p| p["name"] == "keep")
        .unwrap_or_else(|| panic!("keep not listed: {body}"));
    assert_eq!(keep["state"], "running", "{keep}");
    assert_eq!(keep["kind"], "sink", "{keep}");

    // Counters reach the rows inserted (3 in, 2 pass the filter).
    wait_for("keep to count its rows", PIPELINE_TIMEOUT, || async {
        let (_, body) = get(&format!("{base}/api/v1/pipelines/keep")).await;
        (body["pipeline"]["rows_in"] == 3 && body["pipeline"]["rows_out"] == 2).then_some(())
    })
    .await;

    let (status, body) = get(&format!("{base}/api/v1/streams")).await;
    assert_eq!(status, 200);
    let s = body["streams"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "s"))
        .cloned();
    let s = s.unwrap_or_else(|| panic!("s not listed: {body}"));
    assert_eq!(s["columns"][0]["name"], "x");
    assert_eq!(s["columns"][0]["type"], "bigint");
    assert_eq!(s["columns"][1]["type"], "text");

    let (status, body) = get(&format!("{base}/api/v1/no-such-thing")).await;
    assert_eq!(status, 404);
    assert!(body["error"].is_string(), "{body}");
    let (status, body) = get(&format!("{base}/api/v1/pipelines/nope")).await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap_or_default().contains("nope"), "{body}");

    // Dropped pipelines leave the listing.
    exec(&client, "DROP PIPELINE keep").await;
    let (_, body) = get(&format!("{base}/api/v1/pipelines")).await;
    assert!(
        body["pipelines"]
            .as_array()
            .is_some_and(|a| a.iter().all(|p| p["name"] != "keep")),
        "{body}"
    );
    let e = within(
        "drop twice",
        STATEMENT_TIMEOUT,
        client.batch_execute("DROP PIPELINE keep"),
    )
    .await
    .expect_err("gone");
    assert!(e.code().is_some(), "{}", describe(&e));
}

/// Runs `ddl` on a server in `data_dir`, then twice: waits until
/// `committed()` grew by `step`, lets a moment the test does not choose
/// pass (0 to 1.5 s), kills the server with SIGKILL and starts it again
/// from its directory; finally waits for `step` more and stops it.
async fn killed_twice(data_dir: &Path, ddl: &str, step: usize, committed: impl Fn() -> usize) {
    let mut server = TestServer::start_in(data_dir);
    server
        .connect()
        .await
        .batch_execute(ddl)
        .await
        .expect("create the pipeline");
    let committed = &committed;
    let grown = |n: usize| {
        within("new committed output", PIPELINE_TIMEOUT, async move {
            while committed() < n {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let mut before = 0;
    for _ in 0..2 {
        grown(before + step).await;
        let pause = rand::random::<u64>() % 1500;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        server.stop();
        before = committed();
        server = TestServer::start_in(data_dir);
    }
    grown(before + step).await;
    server.stop();
}

/// `UNION ALL` of two window aggregates in a named pipeline writing
/// exactly once to files, the server killed with SIGKILL twice mid-stream
/// and restarted from its directory: the barriers align across the union's
/// two inputs (each branch a different parallelism), so after the restarts
/// every window of both branches is committed once, none missing. The
/// streams are paced datagen sequences, ts = i × 10 ms: a 1-second window
/// holds i = 100·w … 100·w + 99, 20 rows of each k = i % 5; branch b has
/// its keys moved to 100..104.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_union_all_pipeline_stays_exactly_once_across_kills() {
    let dir = tempfile::tempdir().expect("data dir");
    let out = dir.path().join("out");
    let ddl = format!(
        "CREATE STREAM ua (i BIGINT, k AS i % 5, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         CREATE STREAM ub (i BIGINT, k AS i % 5, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         SET parallelism = 2;
         CREATE SINK u_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS
            SELECT window_start, k, count(*) AS n FROM TUMBLE(ua, ts, INTERVAL '1' SECOND)
            GROUP BY window_start, window_end, k
            UNION ALL
            SELECT window_start, k + 100, count(*) FROM TUMBLE(ub, ts, INTERVAL '1' SECOND)
            GROUP BY window_start, window_end, k",
        out.display()
    );
    // 30 new windows (3 s of both branches) before each kill and after.
    killed_twice(dir.path(), &ddl, 30, || crate::common::committed_windows(&out).len()).await;
    let rows = crate::common::committed_windows(&out);
    let keys: std::collections::BTreeSet<i64> = rows.iter().map(|(_, k, _)| *k).collect();
    assert_eq!(keys, (0..5).chain(100..105).collect(), "the keys of both branches");
    // Each branch on its own: its windows from second 0 up to its last,
    // each once (a branch may have committed a window more than the other).
    let (a, b): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(_, k, _)| *k < 100);
    crate::common::assert_windows_exact(&a, 5, 20);
    crate::common::assert_windows_exact(&b, 5, 20);
}

/// A regular LEFT join of a stream onto an aggregate's changelog (the
/// count per key) in a named pipeline writing its changelog exactly once
/// to files, the server killed with SIGKILL twice mid-stream and restarted:
/// both sides' rows are in the join's checkpoint, so the committed
/// changelog folds — never taking back a row it did not add — to the join
/// of the whole input, computed here: b's row j (key j % 60) with the
/// count of a's rows of its key (i < 400, key i % 40: 10 each), NULL for
/// the keys a never has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_over_a_changelog_stays_exactly_once_across_kills() {
    let dir = tempfile::tempdir().expect("data dir");
    let out = dir.path().join("out");
    let ddl = format!(
        "CREATE STREAM cja (i BIGINT, k AS i % 40) WITH (connector = 'datagen', 'rows-per-second' = '100',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '399');
         CREATE STREAM cjb (j BIGINT, k AS j % 60) WITH (connector = 'datagen', 'rows-per-second' = '100',
            'fields.j.kind' = 'sequence', 'fields.j.start' = '0', 'fields.j.end' = '599');
         SET parallelism = 2;
         CREATE SINK cj_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '500ms') AS
            SELECT b.j, a.n FROM cjb AS b LEFT JOIN (SELECT k, count(*) AS n FROM cja GROUP BY k) AS a ON b.k = a.k",
        out.display()
    );
    killed_twice(dir.path(), &ddl, 300, || crate::common::committed_json(&out).len()).await;
    let expected: BTreeMap<(i64, Option<i64>), i64> = (0..600).map(|j| ((j, (j % 60 < 40).then_some(10)), 1)).collect();
    let fold = || {
        let mut result: BTreeMap<(i64, Option<i64>), i64> = BTreeMap::new();
        for row in crate::common::committed_json(&out) {
            let key = (row["j"].as_i64().expect("j"), row["n"].as_i64());
            let op = row["op"].as_str().expect("op").to_string();
            let n = result.entry(key).or_insert(0);
            *n += if op.starts_with('+') { 1 } else { -1 };
            assert!(*n >= 0, "{op} of {key:?}, which was not in the result");
            if *n == 0 {
                result.remove(&key);
            }
        }
        result
    };
    let server = TestServer::start_in(dir.path());
    let folded = wait_for("the whole input folded", PIPELINE_TIMEOUT, || async {
        let result = fold();
        (result == expected).then_some(result)
    })
    .await;
    assert_eq!(folded.len(), 600);
    drop(server);
}

/// A pipeline one of whose bounded inputs ended checkpoints on (the
/// finished source acknowledges every later checkpoint with its final
/// position): its exactly-once file sink commits at those checkpoints, an
/// `ALTER` stops it at a barrier and starts the new version from there
/// (the finished source restored at its end), and every row is committed
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_whose_input_partly_ended_checkpoints_on_and_alters_exactly_once() {
    let server = TestServer::start();
    let out = server.data_dir.join("out");
    let client = server.connect().await;
    let query = "SELECT i AS x FROM pe_short UNION ALL SELECT j FROM pe_long";
    exec(
        &client,
        &format!(
            "CREATE STREAM pe_short (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '0',
                'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '9');
             CREATE STREAM pe_long (j BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '100',
                'fields.j.kind' = 'sequence', 'fields.j.start' = '0', 'fields.j.end' = '799');
             CREATE SINK pe_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '200ms') AS {query}",
            out.display()
        ),
    )
    .await;
    // pe_short ends at once; pe_long runs for 8 s. Checkpoints go on:
    // rows are committed before the end of the input.
    let committed = wait_for("rows committed while pe_long runs", PIPELINE_TIMEOUT, || async {
        let n = crate::common::committed_json(&out).len();
        (n > 50).then_some(n)
    })
    .await;
    assert!(
        committed < 810,
        "committed at checkpoints, not only at the end ({committed})"
    );
    exec(&client, &format!("ALTER PIPELINE pe_out AS {query} WHERE j >= 0")).await;
    let rows = wait_for("every row committed", PIPELINE_TIMEOUT, || async {
        let rows = crate::common::committed_json(&out);
        (rows.len() >= 810).then_some(rows)
    })
    .await;
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for row in rows {
        *seen.entry(row["x"].as_i64().expect("x")).or_default() += 1;
    }
    let expected: BTreeMap<i64, usize> = (0..800).map(|x| (x, if x < 10 { 2 } else { 1 })).collect();
    assert_eq!(seen, expected);
}

/// A LEFT interval join in a named pipeline writing exactly once to files,
/// the server killed with SIGKILL twice mid-stream and restarted: which
/// rows matched is part of the join's checkpoint, so every left row is
/// committed exactly once — joined when its partner exists, with NULL when
/// it does not (the ON's filter on the right side leaves out every i
/// divisible by 3). Both streams are paced sequences, ts = i × 10 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_left_outer_join_pipeline_stays_exactly_once_across_kills() {
    let dir = tempfile::tempdir().expect("data dir");
    let out = dir.path().join("out");
    let ddl = format!(
        "CREATE STREAM oa (i BIGINT, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         CREATE STREAM ob (i BIGINT, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         SET parallelism = 2;
         CREATE SINK o_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS
            SELECT oa.i, ob.i AS bi FROM oa LEFT JOIN ob
            ON oa.i = ob.i AND ob.i % 3 <> 0
            AND ob.ts BETWEEN oa.ts - INTERVAL '1' SECOND AND oa.ts + INTERVAL '1' SECOND",
        out.display()
    );
    killed_twice(dir.path(), &ddl, 600, || crate::common::committed_json(&out).len()).await;
    let mut seen: BTreeMap<i64, Option<i64>> = BTreeMap::new();
    for row in crate::common::committed_json(&out) {
        let i = row["i"].as_i64().expect("i");
        let bi = row["bi"].as_i64();
        assert!(seen.insert(i, bi).is_none(), "left row {i} committed twice");
    }
    // Padded rows come out a second (100 rows) after their time: check the
    // prefix every row of which must be out.
    let last = *seen.keys().last().expect("rows committed");
    assert!(last > 1_800, "rows up to {last}");
    for i in 0..=last - 200 {
        let expected = (i % 3 != 0).then_some(i);
        assert_eq!(seen.get(&i), Some(&expected), "left row {i}");
    }
}

/// The committed JSON rows under `out` as i → `value`, each i once (a
/// repeat fails the test), and the largest i, past 1 800.
fn committed_once(out: &Path, value: &str) -> (BTreeMap<i64, i64>, i64) {
    let mut seen: BTreeMap<i64, i64> = BTreeMap::new();
    for row in crate::common::committed_json(out) {
        let i = row["i"].as_i64().expect("i");
        let v = row[value].as_i64().expect(value);
        assert!(seen.insert(i, v).is_none(), "row {i} committed twice");
    }
    let last = *seen.keys().last().expect("rows committed");
    assert!(last > 1_800, "rows up to {last}");
    (seen, last)
}

/// An inner interval join in a named pipeline writing exactly once to
/// files, checkpointed every 500 ms while each side holds its rows for
/// 3 s, the server killed with SIGKILL twice mid-stream and restarted: the
/// join's checkpoints are incremental (a stored batch is written once, then
/// referenced by later checkpoints), and restoring from them loses and
/// repeats nothing — every i is committed once, joined with itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_join_pipeline_with_incremental_checkpoints_stays_exactly_once_across_kills() {
    let dir = tempfile::tempdir().expect("data dir");
    let out = dir.path().join("out");
    let ddl = format!(
        "CREATE STREAM ija (i BIGINT, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         CREATE STREAM ijb (i BIGINT, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         SET parallelism = 2;
         CREATE SINK ij_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '500ms') AS
            SELECT ija.i, ijb.i AS bi FROM ija JOIN ijb
            ON ija.i = ijb.i
            AND ijb.ts BETWEEN ija.ts - INTERVAL '3' SECOND AND ija.ts + INTERVAL '3' SECOND",
        out.display()
    );
    killed_twice(dir.path(), &ddl, 600, || crate::common::committed_json(&out).len()).await;
    let (seen, last) = committed_once(&out, "bi");
    // Both streams are read at the same pace, but each instance's output
    // is committed up to its own last checkpoint: check the prefix.
    for i in 0..=last - 200 {
        assert_eq!(seen.get(&i), Some(&i), "row {i}");
    }
    // The checkpoints left behind include incremental ones.
    let mut manifests = Vec::new();
    let mut dirs = vec![dir.path().join("checkpoints")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "MANIFEST") {
                manifests.push(std::fs::read_to_string(&path).expect("manifest"));
            }
        }
    }
    assert!(
        manifests.iter().any(|m| m.contains("\"references\"")),
        "no kept checkpoint references an earlier one ({} manifests)",
        manifests.len()
    );
}

/// An OVER aggregate (the sum of each row's partition's last three values,
/// by event time) in a named pipeline writing exactly once to files, the
/// server killed with SIGKILL twice mid-stream and restarted: its frames
/// and waiting rows are in the checkpoint, so every row is committed once
/// with the sum computed here. Row i (ts = i × 10 ms) is in partition
/// i % 3, whose previous rows are i - 3 and i - 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_aggregate_pipeline_stays_exactly_once_across_kills() {
    let dir = tempfile::tempdir().expect("data dir");
    let out = dir.path().join("out");
    let ddl = format!(
        "CREATE STREAM ov (i BIGINT, k AS i % 3, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         SET parallelism = 2;
         CREATE SINK ov_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS
            SELECT i, sum(i) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s
            FROM ov",
        out.display()
    );
    killed_twice(dir.path(), &ddl, 600, || crate::common::committed_json(&out).len()).await;
    // The two instances' last checkpoints may have released up to
    // different watermarks: check the prefix every row of which is out.
    let (seen, last) = committed_once(&out, "s");
    for i in 0..=last - 200 {
        let expected: i64 = [i, i - 3, i - 6].iter().filter(|j| **j >= 0).sum();
        assert_eq!(seen.get(&i), Some(&expected), "row {i}");
    }
}

/// A materialized view over a paced sequence (one source instance, read
/// in order), the server killed with SIGKILL twice mid-stream and
/// restarted from its directory. Every answer the view gives, before and
/// after the kills, is the result of a prefix i = 0..=p of the input —
/// published at barriers only, restored from its checkpoint, never half
/// of an update — and once the input ended it is the result of all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_materialized_view_answers_consistently_across_kills() {
    use crate::common::views::{VIEW_QUERY, groups_up_to, view_past, view_rows};
    const LAST: i64 = 1999;
    let dir = tempfile::tempdir().expect("data dir");
    let mut server = TestServer::start_in(dir.path());
    server
        .connect()
        .await
        .batch_execute(&format!(
            "CREATE STREAM mvk_in (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '200',
                'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '{LAST}');
             CREATE MATERIALIZED VIEW mvk WITH ('checkpoint.interval' = '500ms') AS
                {VIEW_QUERY} FROM mvk_in GROUP BY i % 7"
        ))
        .await
        .expect("create the view");
    let mut answers = 0;
    let mut p = view_past(&server, "mvk", 300, &mut answers).await;
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 1500)).await;
        server.stop();
        server = TestServer::start_in(dir.path());
        // Its first answer after the restart: the restored checkpoint's
        // rows (a view started over would answer with none).
        let restored = view_past(&server, "mvk", i64::MIN, &mut answers).await;
        assert!(restored >= 0, "the view came back with its checkpointed rows");
        p = view_past(&server, "mvk", restored.max(p) + 300, &mut answers).await;
    }
    view_past(&server, "mvk", LAST, &mut answers).await;
    assert_eq!(
        view_rows(&server, "mvk").await.expect("the view answers"),
        groups_up_to(LAST)
    );
    assert!(answers > 10, "the view was read while it changed ({answers} answers)");
    server.stop();
}
