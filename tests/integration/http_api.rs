//! The REST API: SQL over HTTP with the engine's errors, pipeline actions,
//! the cluster view and Prometheus metrics.

use crate::common::TestServer;
use serde_json::{Value, json};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

async fn post_sql(server: &TestServer, sql: &str) -> (u16, Value) {
    let url = format!("http://127.0.0.1:{}/api/v1/sql", server.http_port);
    let response = tokio::time::timeout(
        LIMIT,
        reqwest::Client::new().post(&url).json(&json!({ "sql": sql })).send(),
    )
    .await
    .expect("in time")
    .expect("POST /api/v1/sql");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

async fn get(server: &TestServer, path: &str) -> (u16, String) {
    let url = format!("http://127.0.0.1:{}{path}", server.http_port);
    let response = tokio::time::timeout(LIMIT, reqwest::get(&url))
        .await
        .expect("in time")
        .expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

#[tokio::test]
async fn sql_over_http_runs_statements_and_reports_errors_with_sqlstates() {
    let server = TestServer::start();
    let (status, body) = post_sql(
        &server,
        "CREATE STREAM h (a BIGINT, note VARCHAR); INSERT INTO h VALUES (1, 'x'), (2, NULL); SELECT a * 10, note FROM h LIMIT 2",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().expect("results");
    assert_eq!(results[0]["tag"], "CREATE STREAM");
    assert_eq!(results[1]["rows_affected"], 2);
    assert_eq!(results[2]["columns"][1], json!({"name": "note", "type": "text"}));
    assert_eq!(results[2]["rows"], json!([["10", "x"], ["20", null]]));
    assert_eq!(results[2]["truncated"], false);

    let (status, body) = post_sql(&server, "SELEC 1").await;
    assert_eq!((status, body["sqlstate"].as_str()), (400, Some("42601")), "{body}");
    let (status, body) = post_sql(&server, "SELECT * FROM nowhere").await;
    assert_eq!((status, body["sqlstate"].as_str()), (404, Some("42P01")), "{body}");
    // The statements before an error ran; the error says which kind.
    let (status, body) = post_sql(&server, "INSERT INTO h VALUES (3, 'y'); SELECT nope FROM h LIMIT 1").await;
    assert_eq!((status, body["sqlstate"].as_str()), (400, Some("42703")), "{body}");
    assert_eq!(body["results"][0]["rows_affected"], 3 - 2);

    let url = format!("http://127.0.0.1:{}/api/v1/sql", server.http_port);
    let response = reqwest::Client::new()
        .post(&url)
        .body("not json")
        .send()
        .await
        .expect("POST");
    // Without a JSON content type the body is not read: 415 says so.
    assert_eq!(response.status().as_u16(), 415);
}

#[tokio::test]
async fn pipelines_can_be_dropped_and_are_measured() {
    let server = TestServer::start();
    let (status, body) = post_sql(
        &server,
        "CREATE STREAM m (a BIGINT); CREATE SINK m_out WITH (connector = 'blackhole') AS SELECT a FROM m WHERE a > 1; \
         INSERT INTO m VALUES (1), (2), (3)",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // 3 rows read, 2 pass the filter: wait until the sink has them.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (status, text) = get(&server, "/metrics").await;
        assert_eq!(status, 200);
        if text.contains("sluice_pipeline_rows_in_total{pipeline=\"m_out\"} 3")
            && text.contains("sluice_pipeline_rows_out_total{pipeline=\"m_out\"} 2")
        {
            assert!(text.contains("# TYPE sluice_pipeline_rows_in_total counter"), "{text}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics never showed 3 in / 2 out:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, text) = get(&server, "/api/v1/cluster").await;
    let cluster: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(status, 200);
    assert_eq!(cluster["masters"][0]["role"], "leader");
    assert_eq!(cluster["workers"][0]["pipelines_running"], 1);

    let url = format!("http://127.0.0.1:{}/api/v1/pipelines/m_out", server.http_port);
    let client = reqwest::Client::new();
    assert_eq!(client.delete(&url).send().await.expect("DELETE").status().as_u16(), 204);
    let again = client.delete(&url).send().await.expect("DELETE");
    assert_eq!(again.status().as_u16(), 404);
    let (_, text) = get(&server, "/api/v1/pipelines").await;
    assert!(!text.contains("m_out"), "{text}");
}

#[tokio::test]
async fn the_openapi_document_lists_every_endpoint_and_pipelines_show_their_tasks() {
    let server = TestServer::start();
    let (status, text) = get(&server, "/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    let spec: Value = serde_json::from_str(&text).expect("OpenAPI JSON");
    assert_eq!(spec["openapi"], "3.0.3");
    let paths: Vec<&String> = spec["paths"].as_object().expect("paths").keys().collect();
    for path in [
        "/health",
        "/api/v1/cluster",
        "/api/v1/streams",
        "/api/v1/pipelines",
        "/api/v1/sql",
        "/metrics",
    ] {
        assert!(paths.iter().any(|p| p.as_str() == path), "{path} is not documented");
        if path != "/api/v1/sql" {
            assert_eq!(get(&server, path).await.0, 200, "GET {path}");
        }
    }
    for path in [
        "/api/v1/streams/{name}",
        "/api/v1/pipelines/{name}",
        "/api/v1/pipelines/{name}/history",
        "/api/v1/pipelines/{name}/pause",
        "/api/v1/pipelines/{name}/resume",
        "/api/v1/explain",
        "/api/v1/sql/stream",
        "/api/v1/openapi.json",
    ] {
        assert!(paths.iter().any(|p| p.as_str() == path), "{path} is not documented");
    }

    // A pipeline of source → project → sink shows one task per operator instance.
    let (status, body) = post_sql(
        &server,
        "CREATE STREAM t (a BIGINT); CREATE SINK t_out WITH (connector = 'blackhole') AS SELECT a + 1 FROM t; \
         INSERT INTO t VALUES (1), (2)",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (status, text) = get(&server, "/api/v1/pipelines/t_out").await;
        assert_eq!(status, 200, "{text}");
        let pipeline: Value = serde_json::from_str(&text).expect("JSON");
        let tasks = pipeline["tasks"].as_array().expect("tasks").clone();
        let kinds: Vec<&str> = tasks.iter().map(|t| t["kind"].as_str().unwrap_or_default()).collect();
        assert_eq!(kinds, vec!["source", "project", "sink"], "{text}");
        assert_eq!(pipeline["dag"]["operators"].as_array().map(Vec::len), Some(3));
        if tasks[2]["rows_in"] == 2 {
            assert_eq!(tasks[0]["rows_out"], 2);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sink never saw 2 rows: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get(&server, "/api/v1/pipelines/nope").await.0, 404);
}

#[tokio::test]
async fn a_pipeline_paused_over_http_reads_nothing_until_resumed() {
    let server = TestServer::start();
    let (status, body) = post_sql(
        &server,
        "CREATE STREAM pz (a BIGINT); CREATE SINK pz_out WITH (connector = 'blackhole') AS SELECT a FROM pz",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}/api/v1/pipelines", server.http_port);
    assert_eq!(
        client
            .post(format!("{base}/pz_out/pause"))
            .send()
            .await
            .expect("pause")
            .status()
            .as_u16(),
        204
    );
    assert_eq!(post_sql(&server, "INSERT INTO pz VALUES (1), (2)").await.0, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, text) = get(&server, "/api/v1/pipelines/pz_out").await;
    let view: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        (view["pipeline"]["state"].as_str(), view["pipeline"]["rows_in"].as_u64()),
        (Some("paused"), Some(0)),
        "{text}"
    );
    assert_eq!(
        client
            .post(format!("{base}/pz_out/resume"))
            .send()
            .await
            .expect("resume")
            .status()
            .as_u16(),
        204
    );
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (_, text) = get(&server, "/api/v1/pipelines/pz_out").await;
        let view: Value = serde_json::from_str(&text).expect("JSON");
        if view["pipeline"]["rows_out"] == 2 {
            assert_eq!(view["pipeline"]["state"], "running");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "resumed pipeline never read its rows: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        client
            .post(format!("{base}/nope/pause"))
            .send()
            .await
            .expect("pause")
            .status()
            .as_u16(),
        404
    );
}

async fn get_json(server: &TestServer, path: &str) -> (u16, Value) {
    let (status, text) = get(server, path).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}")),
    )
}

async fn post_json(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let url = format!("http://127.0.0.1:{}{path}", server.http_port);
    let response = reqwest::Client::new()
        .post(&url)
        .json(&body)
        .send()
        .await
        .expect("POST");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

const NEXMARK_BIDS: &str = "CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, \
    url VARCHAR, date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) \
    WITH (connector = 'nexmark', table = 'bid', 'events.per.second' = 2000)";

#[tokio::test]
async fn a_running_pipeline_shows_rates_its_dag_with_metrics_history_and_versions() {
    let server = TestServer::start();
    let create = format!(
        "{NEXMARK_BIDS}; SET parallelism = 2; CREATE SINK w WITH (connector = 'blackhole') AS \
         SELECT window_start, auction, count(*) FROM TUMBLE(bids, date_time, INTERVAL '100' MILLISECOND) \
         GROUP BY window_start, window_end, auction"
    );
    let (status, body) = post_sql(&server, &create).await;
    assert_eq!(status, 200, "{body}");

    // Rates come from sampled deltas: wait until the sources' rate is > 0.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let view = loop {
        let (status, view) = get_json(&server, "/api/v1/pipelines/w").await;
        assert_eq!(status, 200, "{view}");
        if view["pipeline"]["rows_in_per_s"].as_f64().unwrap_or(0.0) > 0.0 {
            break view;
        }
        assert!(tokio::time::Instant::now() < deadline, "no rate yet: {view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // source → pre-projection → window (hash on the key) → projection → sink.
    let operators = view["dag"]["operators"].as_array().expect("operators");
    let kinds: Vec<&str> = operators.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["source", "project", "window_aggregate", "project", "sink"],
        "{view}"
    );
    let parallelism: Vec<u64> = operators.iter().map(|o| o["parallelism"].as_u64().unwrap()).collect();
    assert_eq!(parallelism, [2, 2, 2, 2, 1]);
    let edges = view["dag"]["edges"].as_array().expect("edges");
    assert_eq!(edges.len(), 4);
    assert!(
        edges[1]["partitioning"].as_str().unwrap().starts_with("hash("),
        "{view}"
    );
    assert_eq!(edges[3]["partitioning"], "single");
    // The two projections sit behind forward edges: chained into the
    // source's and the window's tasks.
    let chained: Vec<bool> = edges.iter().map(|e| e["chained"].as_bool().unwrap()).collect();
    assert_eq!(chained, [true, false, true, false], "{view}");
    // One instance per unit of parallelism, with counters and rates.
    for (op, p) in operators.iter().zip(&parallelism) {
        let instances = op["instances"].as_array().expect("instances");
        assert_eq!(instances.len() as u64, *p, "{op}");
        for key in [
            "rows_in_per_s",
            "rows_out_per_s",
            "backpressure_share",
            "busy_share",
            "queued_rows",
            "state_groups",
        ] {
            assert!(op["metrics"][key].is_number(), "{key} in {op}");
        }
        for key in ["backpressure_share", "busy_share"] {
            let share = op["metrics"][key].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&share), "{key} in {op}");
        }
    }
    // Busy time is measured per task: the sources ran; the chained
    // projection's time is its host's, so it has none of its own.
    let busy_us = |op: usize| -> Vec<u64> {
        let instances = operators[op]["instances"].as_array().expect("instances");
        instances
            .iter()
            .map(|i| i["busy_us"].as_u64().expect("busy_us"))
            .collect()
    };
    assert!(busy_us(0).iter().all(|us| *us > 0), "{view}");
    assert_eq!(busy_us(1), [0, 0], "{view}");
    assert!(operators[0]["metrics"]["rows_out_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(view["tasks"].as_array().map(Vec::len), Some(9));
    assert_eq!(view["errors"], json!([]));
    let versions = view["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["version"], 1);
    assert!(
        versions[0]["sql"].as_str().unwrap().starts_with("CREATE SINK w"),
        "{view}"
    );

    // The list: version, rates, a sparkline, watermark lag once windows move.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (_, list) = get_json(&server, "/api/v1/pipelines").await;
        let p = &list["pipelines"][0];
        assert_eq!(
            (p["name"].as_str(), p["version"].as_u64()),
            (Some("w"), Some(1)),
            "{list}"
        );
        let spark = p["sparkline"]["rows_in_per_s"].as_array().expect("sparkline");
        if spark.len() >= 2 && p["watermark_lag_ms"].is_i64() && p["rows_out_per_s"].as_f64().unwrap() > 0.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "list never showed rates out: {list}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // History: aligned series per operator.
    let (status, history) = get_json(&server, "/api/v1/pipelines/w/history").await;
    assert_eq!(status, 200);
    let ops = history["operators"].as_array().expect("operators");
    assert_eq!(ops.len(), 5);
    for op in ops {
        let n = op["t_ms"].as_array().unwrap().len();
        assert!(n >= 2, "{op}");
        for key in [
            "rows_in_per_s",
            "rows_out_per_s",
            "backpressure_share",
            "queued_rows",
            "watermark_lag_ms",
        ] {
            assert_eq!(op[key].as_array().map(Vec::len), Some(n), "{key}");
        }
    }
    assert_eq!(get(&server, "/api/v1/pipelines/nope/history").await.0, 404);

    // The worker runs exactly this pipeline's tasks — 9 operator instances,
    // 4 of them chained projections — and its heartbeat is fresh.
    let (_, cluster) = get_json(&server, "/api/v1/cluster").await;
    let worker = &cluster["workers"][0];
    assert_eq!(
        (worker["tasks"].as_u64(), worker["health"].as_str()),
        (Some(5), Some("ok")),
        "{cluster}"
    );
    assert!(worker["slots"].as_u64().unwrap() >= 1);
    assert!(worker["heartbeat_age_ms"].as_i64().unwrap() >= 0);
    assert_eq!(cluster["masters"][0]["health"], "ok");
    assert!(cluster["uptime_ms"].as_i64().unwrap() >= 0);
}

/// A windowed count with a filter above the window: `WHERE n > {min}`.
fn counts_above(min: u32) -> String {
    format!(
        "SELECT * FROM (SELECT window_start, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) \
         GROUP BY window_start, window_end, k) WHERE n > {min}"
    )
}

#[tokio::test]
async fn an_altered_pipeline_lists_its_versions_with_the_statement_and_the_diff() {
    let server = TestServer::start();
    let create = format!(
        "CREATE STREAM ev (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH (connector = 'memory'); \
         INSERT INTO ev VALUES (1, TIMESTAMP '2024-01-01 00:00:01'), (1, TIMESTAMP '2024-01-01 00:00:02'); \
         CREATE SINK counts WITH (connector = 'blackhole') AS {}",
        counts_above(1)
    );
    let (status, body) = post_sql(&server, &create).await;
    assert_eq!(status, 200, "{body}");
    let (_, view) = get_json(&server, "/api/v1/pipelines/counts").await;
    let v1 = &view["versions"][0];
    assert_eq!(
        (&v1["version"], &v1["changed_by"], &v1["diff"]),
        (&json!(1), &Value::Null, &json!([])),
        "{view}"
    );
    let (_, list) = get_json(&server, "/api/v1/pipelines").await;
    let created_ms = list["pipelines"][0]["changed_ms"].as_i64().expect("changed_ms");
    assert_eq!(v1["created_ms"].as_i64(), Some(created_ms), "{list}");

    // Only the filter above the window changes.
    let alter = format!("ALTER PIPELINE counts AS {}", counts_above(5));
    let (status, body) = post_sql(&server, &alter).await;
    assert_eq!(status, 200, "{body}");

    let (_, view) = get_json(&server, "/api/v1/pipelines/counts").await;
    let versions = view["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 2, "{view}");
    let v2 = &versions[1];
    assert_eq!(v2["version"], 2);
    // The statement as the server rendered it (its own SQL text).
    let changed_by = v2["changed_by"].as_str().expect("changed_by");
    assert!(
        changed_by.starts_with("ALTER PIPELINE counts AS SELECT") && changed_by.contains("n > 5"),
        "{view}"
    );
    assert!(v2["sql"].as_str().unwrap().contains("n > 5"), "{view}");
    assert!(v2["created_ms"].as_i64().unwrap() >= created_ms);
    // source → pre-projection → window → filter (project) → sink: the
    // window and its upstream are untouched, so kept with their state; the
    // filter is replaced, and so is the sink below it, whose state (same
    // connector and options) moves to the new one.
    let diff = v2["diff"].as_array().expect("diff");
    let lines: Vec<(&str, &str, &str)> = diff
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap(),
                l["change"].as_str().unwrap(),
                l["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("source", "kept", "kept"),
            ("project", "kept", "none"),
            ("window_aggregate", "kept", "kept"),
            ("project", "replaced", "none"),
            ("sink", "replaced", "moved"),
        ],
        "{view}"
    );
    // Operators are numbered as in the running DAG; uids are the short
    // form of the DAG's (8 hex digits): a kept one keeps its uid, a
    // replaced one has a new one.
    let operators = view["dag"]["operators"].as_array().expect("operators");
    for (line, op) in diff.iter().zip(operators) {
        assert_eq!(line["operator"], op["id"], "{line}");
        let uid = line["uid"].as_str().expect("uid");
        let old_uid = line["old_uid"].as_str().expect("old_uid");
        assert!(
            [uid, old_uid]
                .iter()
                .all(|u| u.len() == 8 && u.chars().all(|c| c.is_ascii_hexdigit())),
            "{line}"
        );
        assert!(op["uid"].as_str().unwrap().starts_with(uid), "{line} {op}");
        assert_eq!(uid == old_uid, line["change"] == "kept", "{line}");
        assert_eq!(line["parallelism"], op["parallelism"], "{line}");
        assert_eq!(line["old_parallelism"], op["parallelism"], "{line}");
        assert!(line["detail"].is_string(), "{line}");
    }

    // The list shows the running version and when it started.
    let (_, list) = get_json(&server, "/api/v1/pipelines").await;
    let p = &list["pipelines"][0];
    assert_eq!(
        (p["version"].as_u64(), p["changed_ms"].as_i64()),
        (Some(2), v2["created_ms"].as_i64()),
        "{list}"
    );
}

#[tokio::test]
async fn streams_show_schema_event_time_and_options_and_explain_plans_without_running() {
    let server = TestServer::start();
    assert_eq!(post_sql(&server, NEXMARK_BIDS).await.0, 200);
    let (status, stream) = get_json(&server, "/api/v1/streams/bids").await;
    assert_eq!(status, 200, "{stream}");
    assert_eq!(stream["connector"], "nexmark");
    assert_eq!(stream["options"]["table"], "bid");
    assert_eq!(stream["options"]["events.per.second"], "2000");
    assert_eq!(stream["event_time"]["column"], "date_time");
    assert_eq!(stream["event_time"]["delay_ms"], 1000);
    assert_eq!(
        stream["columns"][2],
        json!({"name": "price", "type": "bigint", "nullable": false})
    );
    let (_, list) = get_json(&server, "/api/v1/streams").await;
    assert_eq!(list["streams"][0]["name"], "bids");
    let (status, body) = get_json(&server, "/api/v1/streams/nope").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("stream \"nope\" does not exist"))
    );

    let (status, plan) = post_json(
        &server,
        "/api/v1/explain",
        json!({"sql": "SELECT auction FROM bids WHERE price > 10"}),
    )
    .await;
    assert_eq!(status, 200, "{plan}");
    let kinds: Vec<&str> = plan["dag"]["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["source", "project", "sink"]);
    // Each operator has a stable uid: 16 hex digits, the same when the
    // same query is planned again.
    let uids = |plan: &serde_json::Value| -> Vec<String> {
        plan["dag"]["operators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["uid"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        uids(&plan)
            .iter()
            .all(|u| u.len() == 16 && u.chars().all(|c| c.is_ascii_hexdigit())),
        "{plan}"
    );
    let (_, again) = post_json(
        &server,
        "/api/v1/explain",
        json!({"sql": "SELECT auction FROM bids WHERE price > 10"}),
    )
    .await;
    assert_eq!(uids(&again), uids(&plan));
    assert!(
        plan["dag"]["operators"][1]["detail"]
            .as_str()
            .unwrap()
            .contains("price > 10")
    );
    // `EXPLAIN query` works too; nothing ran.
    let (status, _) = post_json(
        &server,
        "/api/v1/explain",
        json!({"sql": "EXPLAIN SELECT auction FROM bids"}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, pipelines) = get_json(&server, "/api/v1/pipelines").await;
    assert_eq!(pipelines["pipelines"], json!([]));
    // Errors carry SQLSTATEs and fitting statuses.
    for (sql, status, sqlstate) in [
        ("SELEC auction FROM bids", 400, "42601"),
        ("SELECT auction FROM nowhere", 404, "42P01"),
        ("SELECT nope FROM bids", 400, "42703"),
        ("INSERT INTO bids VALUES (1)", 400, "42809"),
        ("SELECT 1 FROM bids; SELECT 2 FROM bids", 400, "42809"),
    ] {
        let (got, body) = post_json(&server, "/api/v1/explain", json!({ "sql": sql })).await;
        assert_eq!(
            (got, body["sqlstate"].as_str()),
            (status, Some(sqlstate)),
            "{sql}: {body}"
        );
    }
}

#[tokio::test]
async fn the_live_preview_streams_rows_as_server_sent_events() {
    let server = TestServer::start();
    assert_eq!(post_sql(&server, NEXMARK_BIDS).await.0, 200);
    let url = format!("http://127.0.0.1:{}/api/v1/sql/stream", server.http_port);
    let client = reqwest::Client::new();
    let sse = |sql: &'static str| {
        let request = client.get(&url).query(&[("sql", sql)]);
        async move {
            let response = tokio::time::timeout(LIMIT, request.send())
                .await
                .expect("in time")
                .expect("GET");
            let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
            let text = tokio::time::timeout(LIMIT, response.text())
                .await
                .expect("in time")
                .expect("body");
            (content_type, text)
        }
    };
    let (content_type, text) = sse("SELECT auction, price FROM bids WHERE price > 0 LIMIT 3").await;
    assert_eq!(content_type, "text/event-stream");
    assert!(
        text.contains("event: columns\ndata: [{\"name\":\"auction\",\"type\":\"bigint\"}"),
        "{text}"
    );
    let rows: usize = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("event: rows\ndata: "))
        .map(|d| serde_json::from_str::<Vec<Value>>(d).expect("rows").len())
        .sum();
    assert_eq!(rows, 3, "{text}");
    assert!(
        text.contains("event: end\ndata: {\"rows\":3,\"truncated\":false}"),
        "{text}"
    );

    let (_, text) = sse("SELECT nope FROM bids").await;
    assert!(text.contains("event: error") && text.contains("42703"), "{text}");
    let (_, text) = sse("SET parallelism = 2").await;
    assert!(
        text.contains("event: command\ndata: {\"rows_affected\":null,\"tag\":\"SET\"}"),
        "{text}"
    );
    let response = client.get(&url).send().await.expect("GET");
    assert_eq!(response.status().as_u16(), 400);
    assert!(response.json::<Value>().await.expect("JSON")["error"].is_string());
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_the_dashboard_is_served_beside_the_api() {
    let server = TestServer::start();
    let base = format!("http://127.0.0.1:{}", server.http_port);
    let client = reqwest::Client::new();
    let cases = [
        (client.put(format!("{base}/api/v1/pipelines")), 405),
        (client.post(format!("{base}/api/v1/cluster")), 405),
        (client.get(format!("{base}/api/v1/sql")), 405),
        (client.get(format!("{base}/api/v1/nope")), 404),
        (client.get(format!("{base}/api")), 404),
        (client.delete(format!("{base}/api/v1/pipelines/nope")), 404),
        (client.post(format!("{base}/api/v1/pipelines/nope/resume")), 404),
        (client.post(format!("{base}/api/v1/sql")).body("{\"sql\": 1}"), 415),
        (
            client
                .post(format!("{base}/api/v1/sql"))
                .header("content-type", "application/json")
                .body("{\"sql\": 1}"),
            400,
        ),
        (
            client
                .post(format!("{base}/api/v1/explain"))
                .header("content-type", "application/json")
                .body("{not json"),
            400,
        ),
        (client.post(format!("{base}/pipelines/x")), 405),
        (client.get(format!("{base}/assets/nope.js")), 404),
    ];
    for (request, expected) in cases {
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
        assert_eq!(status, expected, "{body}");
        assert!(body["error"].is_string(), "{body}");
    }
    // A SQL error message stays the user's; nothing internal leaks.
    let (status, body) = post_sql(&server, "SELECT 1/0").await;
    assert!(status == 400 || status == 200, "{body}");
    assert!(!body.to_string().contains("panicked"), "{body}");

    // The dashboard: the index at / and at its client-side routes, its
    // scripts from /assets, and the API still first.
    let (status, index) = get(&server, "/").await;
    assert_eq!(status, 200);
    assert!(index.contains("<div id=\"app\">"), "{index}");
    assert_eq!(get(&server, "/pipelines/anything").await, (200, index.clone()));
    let script = index
        .split('"')
        .find(|s| s.starts_with("/assets/") && s.ends_with(".js"))
        .expect("a script under /assets");
    let response = reqwest::get(format!("{base}{script}")).await.expect("GET script");
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert_eq!(get(&server, "/health").await.0, 200);
}
