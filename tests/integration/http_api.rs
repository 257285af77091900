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
    assert_eq!(results[2]["columns"][1], json!({"name": "note", "type": "varchar"}));
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
    assert_eq!(response.status().as_u16(), 400);
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
