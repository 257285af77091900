//! The REST API behind the SQL users: with `--auth scram-sha-256`,
//! `/api/v1/*` and `/metrics` need HTTP Basic (a SQL role's password) or a
//! bearer token from `CREATE TOKEN`; `/health` stays open; 401 without or
//! with wrong credentials, 403 when the role lacks the privilege, and
//! `POST /api/v1/sql` runs as the caller; a script's 401 (the dashboard's)
//! is challenged without `Basic`; no CORS. Plus the request body limit.

use crate::common::TestServer;
use crate::support::{exec, simple_rows};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PASSWORD: &str = "rest-admin-pw";

fn scram_server(data_dir: &std::path::Path) -> TestServer {
    TestServer::start_with(
        data_dir,
        &["--auth", "scram-sha-256"],
        &[("SLUICE_SUPERUSER_PASSWORD", PASSWORD)],
    )
}

fn url(server: &TestServer, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", server.http_port)
}

async fn post_sql(
    http: &reqwest::Client,
    server: &TestServer,
    auth: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    sql: &str,
) -> (StatusCode, Value) {
    let response = auth(http.post(url(server, "/api/v1/sql")))
        .json(&json!({ "sql": sql }))
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn rest_needs_a_sql_users_password_or_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = scram_server(dir.path());
    let http = reqwest::Client::new();

    let health = http.get(url(&server, "/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    for path in ["/api/v1/pipelines", "/api/v1/streams", "/api/v1/cluster", "/metrics"] {
        let anonymous = http.get(url(&server, path)).send().await.unwrap();
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert!(anonymous.headers().contains_key("www-authenticate"), "{path}");
        let wrong = http
            .get(url(&server, path))
            .basic_auth("sluice", Some("wrong"))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{path}");
        let right = http
            .get(url(&server, path))
            .basic_auth("sluice", Some(PASSWORD))
            .send()
            .await
            .unwrap();
        assert_eq!(right.status(), StatusCode::OK, "{path}");
    }
    let (status, _) = post_sql(&http, &server, |r| r, "SELECT 1").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // POST /api/v1/sql runs as the caller, under the SQL privilege rules.
    let admin = server.connect_as("sluice", PASSWORD).await.unwrap();
    exec(&admin, "CREATE USER dave WITH PASSWORD 'dave-pw'").await;
    exec(
        &admin,
        "CREATE STREAM clicks (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
    )
    .await;
    exec(&admin, "INSERT INTO clicks VALUES (5, '2026-01-01 00:00:00')").await;
    exec(&admin, "CREATE STREAM admin_ids AS SELECT id FROM clicks").await;
    let dave = |r: reqwest::RequestBuilder| r.basic_auth("dave", Some("dave-pw"));
    let (status, body) = post_sql(&http, &server, dave, "SELECT id FROM clicks LIMIT 1").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["sqlstate"], "42501", "{body}");
    exec(&admin, "GRANT SELECT ON clicks TO dave").await;
    let (status, body) = post_sql(&http, &server, dave, "SELECT id FROM clicks LIMIT 1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains('5'), "{body}");
    let delete = http
        .delete(url(&server, "/api/v1/pipelines/admin_ids"))
        .basic_auth("dave", Some("dave-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), StatusCode::FORBIDDEN);

    // A token: shown once, stored hashed, works as a bearer until dropped.
    let dave_sql = server.connect_as("dave", "dave-pw").await.unwrap();
    let rows = simple_rows(&dave_sql, "CREATE TOKEN ci").await;
    let secret = rows[0][1].clone().expect("the token's secret");
    assert!(secret.starts_with("sluice_"), "{secret}");
    let catalog = std::fs::read_to_string(dir.path().join("catalog.json")).unwrap();
    assert!(!catalog.contains(&secret), "the token is stored in clear");
    let with_token = |r: reqwest::RequestBuilder| r.bearer_auth(&secret);
    let (status, body) = post_sql(&http, &server, with_token, "SELECT id FROM clicks LIMIT 1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let forged = |r: reqwest::RequestBuilder| r.bearer_auth("sluice_not-a-token");
    let (status, _) = post_sql(&http, &server, forged, "SELECT 1").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    exec(&dave_sql, "DROP TOKEN ci").await;
    let (status, _) = post_sql(&http, &server, |r| r.bearer_auth(&secret), "SELECT 1").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A 401 challenges curl and other clients with `Basic`, but a script's
/// request (the dashboard's, `X-Requested-With: XMLHttpRequest`) with
/// `Bearer` only, so a browser opens no login dialog of its own over the
/// dashboard's form; the status and body are the same.
#[tokio::test]
async fn a_scripts_401_is_challenged_without_basic() {
    let dir = tempfile::tempdir().unwrap();
    let server = scram_server(dir.path());
    let http = reqwest::Client::new();
    let challenge = |r: &reqwest::Response| {
        r.headers()
            .get_all("www-authenticate")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    for path in ["/api/v1/pipelines", "/api/v1/sql/stream?sql=SELECT%201", "/metrics"] {
        let plain = http.get(url(&server, path)).send().await.unwrap();
        assert_eq!(plain.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(challenge(&plain), ["Basic realm=\"sluice\""], "{path}");
        for wrong in [None, Some("Basic c2x1aWNlOndyb25n"), Some("Bearer sluice_forged")] {
            let mut request = http
                .get(url(&server, path))
                .header("X-Requested-With", "XMLHttpRequest");
            if let Some(wrong) = wrong {
                request = request.header("authorization", wrong);
            }
            let script = request.send().await.unwrap();
            assert_eq!(script.status(), StatusCode::UNAUTHORIZED, "{path} {wrong:?}");
            assert_eq!(challenge(&script), ["Bearer realm=\"sluice\""], "{path} {wrong:?}");
            let body: Value = script.json().await.unwrap();
            assert!(
                body["error"].as_str().unwrap().starts_with("authentication required"),
                "{body}"
            );
        }
    }
    // The header changes only the challenge: with it, the right password is 200.
    let ok = http
        .get(url(&server, "/api/v1/pipelines"))
        .header("X-Requested-With", "XMLHttpRequest")
        .basic_auth("sluice", Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}

/// No CORS: another origin's page gets no `Access-Control-Allow-*` header,
/// neither on a preflight (so its script cannot send `Authorization` or
/// `X-Requested-With`) nor on a plain request (so it cannot read the
/// answer); the dashboard is served from the API's own origin.
#[tokio::test]
async fn other_origins_get_no_cors_grant() {
    let dir = tempfile::tempdir().unwrap();
    let server = scram_server(dir.path());
    let http = reqwest::Client::new();
    let origin = "http://evil.example";
    let preflight = http
        .request(reqwest::Method::OPTIONS, url(&server, "/api/v1/pipelines"))
        .header("origin", origin)
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization, x-requested-with")
        .send()
        .await
        .unwrap();
    let plain = http
        .get(url(&server, "/api/v1/pipelines"))
        .header("origin", origin)
        .basic_auth("sluice", Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    for response in [&preflight, &plain] {
        let granted: Vec<_> = response
            .headers()
            .keys()
            .filter(|k| k.as_str().starts_with("access-control-"))
            .collect();
        assert!(granted.is_empty(), "{} {granted:?}", response.url());
    }
}

/// A body at the limit is read (and refused by SQL for its length, 400);
/// one byte more is 413 before it is parsed.
#[tokio::test]
async fn request_bodies_over_the_limit_are_413() {
    const HTTP_BODY_BYTES_MAX: usize = (1 << 20) + (64 << 10);
    let server = TestServer::start();
    let http = reqwest::Client::new();
    let body_of = |len: usize| {
        let wrapper = r#"{"sql":"SELECT 1 --"}"#.len();
        let sql = format!("SELECT 1 --{}", "x".repeat(len - wrapper));
        let body = serde_json::to_string(&json!({ "sql": sql })).unwrap();
        assert_eq!(body.len(), len);
        body
    };
    let send = |body: String| {
        http.post(url(&server, "/api/v1/sql"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let at_limit = send(body_of(HTTP_BODY_BYTES_MAX)).await.unwrap();
    assert_eq!(at_limit.status(), StatusCode::BAD_REQUEST);
    let body: Value = at_limit.json().await.unwrap();
    assert_eq!(body["sqlstate"], "54000", "{body}");
    let over = send(body_of(HTTP_BODY_BYTES_MAX + 1)).await.unwrap();
    assert_eq!(over.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

/// The OpenAPI document says what the server does: both credential
/// schemes declared, every operation but `/health`'s answers 401 without
/// credentials (and is documented so), `/health` needs none, and the
/// operations documented with 403 are the ones that run a privilege
/// check.
#[tokio::test]
async fn the_openapi_document_declares_the_authentication_the_server_enforces() {
    let dir = tempfile::tempdir().unwrap();
    let server = scram_server(dir.path());
    let http = reqwest::Client::new();
    let spec: Value = http
        .get(url(&server, "/api/v1/openapi.json"))
        .basic_auth("sluice", Some(PASSWORD))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let schemes = &spec["components"]["securitySchemes"];
    assert_eq!(schemes["basic"]["scheme"], "basic", "{schemes}");
    assert_eq!(schemes["bearer"]["scheme"], "bearer", "{schemes}");
    assert_eq!(spec["security"], json!([{ "basic": [] }, { "bearer": [] }]));
    let mut operations = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue; // the path's parameters, not an operation
            }
            let concrete = path.replace("{name}", "no_such_object");
            let request = match method.as_str() {
                "get" => http.get(url(&server, &concrete)),
                "post" => http.post(url(&server, &concrete)).json(&json!({ "sql": "SELECT 1" })),
                "delete" => http.delete(url(&server, &concrete)),
                other => panic!("{other} {path}: a method the test does not know"),
            };
            let status = request.send().await.unwrap().status();
            let responses = &op["responses"];
            if path == "/health" {
                assert_eq!(status, StatusCode::OK, "{method} {path}");
                assert_eq!(
                    op["security"],
                    json!([]),
                    "{method} {path} must say it needs no credentials"
                );
            } else {
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} without credentials");
                assert_eq!(
                    responses["401"]["$ref"], "#/components/responses/Unauthorized",
                    "{method} {path} does not document its 401"
                );
            }
            operations += 1;
        }
    }
    assert!(operations >= 16, "only {operations} operations documented");
    // A role without privileges gets the documented 403s.
    let admin = server.connect_as("sluice", PASSWORD).await.unwrap();
    exec(&admin, "CREATE USER erin WITH PASSWORD 'erin-pw'").await;
    exec(&admin, "CREATE STREAM oa_s (id BIGINT)").await;
    exec(
        &admin,
        "CREATE SINK oa_p WITH (connector = 'blackhole') AS SELECT id FROM oa_s",
    )
    .await;
    for (method, path) in [
        ("delete", "/api/v1/pipelines/{name}"),
        ("post", "/api/v1/pipelines/{name}/pause"),
        ("post", "/api/v1/pipelines/{name}/resume"),
        ("post", "/api/v1/sql"),
        ("post", "/api/v1/explain"),
    ] {
        let concrete = path.replace("{name}", "oa_p");
        let request = match method {
            "delete" => http.delete(url(&server, &concrete)),
            _ => http
                .post(url(&server, &concrete))
                .json(&json!({ "sql": "SELECT * FROM oa_s" })),
        };
        let status = request
            .basic_auth("erin", Some("erin-pw"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} as erin");
        assert_eq!(
            spec["paths"][path][method]["responses"]["403"]["$ref"], "#/components/responses/Forbidden",
            "{method} {path} does not document its 403"
        );
    }
}
