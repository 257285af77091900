//! Fuzz targets against a live server, proptest strategies run through
//! tests/support/fuzz.rs (a bounded number of cases in the normal suite,
//! `SLUICE_FUZZ_CASES` / `SLUICE_FUZZ_SEED` / `SLUICE_FUZZ_SECONDS`,
//! failures shrunk and kept under tests/fuzz-regressions/;
//! `scripts/fuzz.sh` runs many more):
//!
//! - the pgwire message decoder: random bytes as the first packet, random
//!   bytes after a completed startup, and valid message streams edited;
//!   after each case the server answers another session and no connection
//!   task has died of a panic;
//! - the REST JSON bodies: random JSON (and non-JSON) to every POST route
//!   is answered with a status below 500.

use crate::common::TestServer;
use crate::fuzz::{self, Edit, apply};
use crate::redaction::LoggedServer;
use crate::support::simple_rows;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn startup() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", "sluice"), ("database", "sluice")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A valid extended-protocol exchange and a simple query.
fn valid_messages() -> Vec<u8> {
    let mut parse = b"s1\0SELECT $1::bigint + 1\0".to_vec();
    parse.extend_from_slice(&1u16.to_be_bytes());
    parse.extend_from_slice(&20u32.to_be_bytes());
    let mut bind = b"p1\0s1\0".to_vec();
    bind.extend_from_slice(&0u16.to_be_bytes());
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&1u32.to_be_bytes());
    bind.push(b'7');
    bind.extend_from_slice(&0u16.to_be_bytes());
    [
        message(b'P', &parse),
        message(b'B', &bind),
        message(b'D', b"Pp1\0"),
        message(b'E', b"p1\0\0\0\0\0"),
        message(b'S', b""),
        message(b'Q', b"SELECT 1; SELECT 'x' || 2\0"),
        message(b'C', b"Ss1\0"),
        message(b'S', b""),
    ]
    .concat()
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Set(at, b)),
        (any::<Index>(), 1..17usize).prop_map(|(at, n)| Edit::Drop(at, n)),
        (any::<Index>(), vec(any::<u8>(), 1..17)).prop_map(|(at, b)| Edit::Insert(at, b)),
        (
            any::<Index>(),
            select(vec![0u32, 3, 4, 5, 0x7fff_ffff, 0xffff_ffff, 16 * 1024 * 1024])
        )
            .prop_map(|(at, v)| Edit::Length(at, v)),
        any::<Index>().prop_map(Edit::Truncate),
        // A message stream written twice from some point (resent, or cut
        // and continued).
        any::<Index>().prop_map(Edit::Double),
    ]
}

/// What one pgwire case sends.
#[derive(Debug, Clone)]
enum Wire {
    /// Bytes instead of a startup message.
    First(Vec<u8>),
    /// Bytes after a valid startup.
    AfterStartup(Vec<u8>),
    /// The valid exchange after a startup, edited.
    Edited(Vec<Edit>),
}

fn wire() -> impl Strategy<Value = Wire> {
    prop_oneof![
        vec(any::<u8>(), 0..200).prop_map(Wire::First),
        vec(any::<u8>(), 0..200).prop_map(Wire::AfterStartup),
        vec(edit(), 1..7).prop_map(Wire::Edited),
    ]
}

/// Sends `bytes` (after a startup when `start`) and reads until the server
/// closes or goes quiet; never longer than a few seconds.
async fn throw(port: u16, start: bool, bytes: &[u8]) {
    let Ok(mut socket) = TcpStream::connect(("127.0.0.1", port)).await else {
        panic!("the server stopped accepting connections");
    };
    if start {
        socket.write_all(&startup()).await.unwrap();
    }
    let _ = socket.write_all(bytes).await;
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(300), socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => continue,
            Err(_) => return, // quiet: waiting for more input, as it should
        }
    }
}

/// The server's log lines that say a connection task died of a panic.
fn panicked(log: &std::path::Path) -> Vec<String> {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("connection task panicked"))
        .map(str::to_string)
        .collect()
}

#[test]
fn garbage_and_edited_pgwire_messages_never_take_the_server_down() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = LoggedServer::start(&dir.path().join("data"), &log);
    let other = rt.block_on(server.connect());
    let valid = valid_messages();
    let target = fuzz::fuzz(
        "pgwire fuzz",
        60,
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz-regressions/pgwire.txt"),
        64,
    );
    target.run(wire(), |case| {
        rt.block_on(async {
            match &case {
                Wire::First(bytes) => throw(server.pg_port, false, bytes).await,
                Wire::AfterStartup(bytes) => throw(server.pg_port, true, bytes).await,
                Wire::Edited(edits) => throw(server.pg_port, true, &apply(valid.clone(), edits)).await,
            }
            let rows = tokio::time::timeout(Duration::from_secs(10), simple_rows(&other, "SELECT 40 + 2"))
                .await
                .map_err(|_| TestCaseError::fail("the server stopped answering another session"))?;
            prop_assert_eq!(rows, vec![vec![Some("42".to_string())]]);
            let died = panicked(&log);
            prop_assert!(died.is_empty(), "a connection task died: {:?}", died);
            Ok(())
        })
    });
    // New sessions still start.
    let fresh = rt.block_on(server.connect());
    assert_eq!(
        rt.block_on(simple_rows(&fresh, "SELECT 1")),
        vec![vec![Some("1".to_string())]]
    );
    drop(server);
    let undecodable = std::fs::read_to_string(&log)
        .unwrap()
        .matches("could not be decoded")
        .count();
    eprintln!("pgwire fuzz: {undecodable} connections closed on an undecodable message");
}

const STRINGS: &[&str] = &[
    "SELECT 1",
    "sql",
    "",
    "SELECT * FROM nowhere",
    "CREATE USER fz WITH PASSWORD 'x'",
    "EXPLAIN SELECT 1",
    "\u{0}",
    "DROP STREAM fz_missing",
    "SELECT 1; SELECT 2",
    "((((((((",
];

const KEYS: &[&str] = &["sql", "limit", "timeout_ms", "params", "name", "x"];

/// A JSON value of at most three levels, biased to the shapes the routes
/// read (`sql` strings, numbers, nesting).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        select(STRINGS).prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(select(KEYS), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// What one REST case posts.
#[derive(Debug, Clone)]
enum Body {
    Bytes(Vec<u8>),
    /// A JSON text cut short.
    Cut(Value, Index),
    Json(Value),
}

impl Body {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Body::Bytes(b) => b.clone(),
            Body::Cut(v, at) => {
                let mut text = serde_json::to_vec(v).unwrap();
                text.truncate(at.index(text.len() + 1));
                text
            }
            Body::Json(v) => serde_json::to_vec(v).unwrap(),
        }
    }
}

const ROUTES: &[&str] = &[
    "/api/v1/sql",
    "/api/v1/explain",
    "/api/v1/pipelines/fz_d/pause",
    "/api/v1/pipelines/fz_d/resume",
    "/api/v1/pipelines/fz_missing/pause",
];

fn post() -> impl Strategy<Value = (&'static str, Body, bool)> {
    let body = prop_oneof![
        1 => vec(any::<u8>(), 0..100).prop_map(Body::Bytes),
        1 => (json(), any::<Index>()).prop_map(|(v, at)| Body::Cut(v, at)),
        2 => json().prop_map(Body::Json),
    ];
    (select(ROUTES), body, prop::bool::weighted(0.75))
}

#[test]
fn random_json_bodies_to_post_routes_are_never_5xx() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = TestServer::start();
    let client = rt.block_on(server.connect());
    rt.block_on(async {
        client.batch_execute("CREATE STREAM fz_s (id BIGINT)").await.unwrap();
        client
            .batch_execute("CREATE STREAM fz_d AS SELECT id FROM fz_s")
            .await
            .unwrap();
    });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let statuses = std::cell::RefCell::new(std::collections::BTreeMap::new());
    let target = fuzz::fuzz(
        "REST fuzz",
        150,
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz-regressions/rest.txt"),
        128,
    );
    target.run(post(), |(route, body, json_type)| {
        rt.block_on(async {
            let mut request = http.post(format!("http://127.0.0.1:{}{route}", server.http_port));
            if json_type {
                request = request.header("content-type", "application/json");
            }
            let response = request
                .body(body.bytes())
                .send()
                .await
                .map_err(|e| TestCaseError::fail(format!("{route} failed: {e}")))?;
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            prop_assert!(status < 500, "{} answered {}: {}", route, status, text);
            *statuses.borrow_mut().entry(status).or_insert(0) += 1;
            Ok(())
        })
    });
    eprintln!("REST fuzz statuses: {:?}", statuses.borrow());
    assert_eq!(
        rt.block_on(simple_rows(&client, "SELECT 2 + 3")),
        vec![vec![Some("5".to_string())]]
    );
}

/// The crashes the pgwire target found, kept: a Bind whose format-code
/// count runs past its body, and one whose parameter length does. pgwire's
/// decoder panics on both; the client gets `FATAL 08P01` and the
/// connection closes, and the server goes on.
#[tokio::test]
async fn bind_messages_whose_counts_run_past_their_body_are_a_protocol_error() {
    let server = TestServer::start();
    let other = server.connect().await;
    let short_formats = [b"\0\0".to_vec(), 1u16.to_be_bytes().to_vec(), vec![0]].concat();
    let short_value = [
        b"\0\0".to_vec(),
        0u16.to_be_bytes().to_vec(),
        1u16.to_be_bytes().to_vec(),
        79_616u32.to_be_bytes().to_vec(),
        b"abc".to_vec(),
    ]
    .concat();
    for body in [short_formats, short_value] {
        let mut socket = TcpStream::connect(("127.0.0.1", server.pg_port)).await.unwrap();
        socket.write_all(&startup()).await.unwrap();
        socket.write_all(&message(b'B', &body)).await.unwrap();
        let mut received = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut received)).await;
        assert!(read.is_ok(), "the connection stayed open");
        // Skip the startup answers to the last message: an ErrorResponse.
        let mut at = 0;
        let mut last = None;
        while at + 5 <= received.len() {
            let len = u32::from_be_bytes(received[at + 1..at + 5].try_into().unwrap()) as usize;
            last = Some((
                received[at],
                received[at + 5..(at + 1 + len).min(received.len())].to_vec(),
            ));
            at += 1 + len;
        }
        let (tag, fields) = last.expect("a reply");
        assert_eq!(tag, b'E', "{received:?}");
        let text = String::from_utf8_lossy(&fields);
        assert!(text.contains("SFATAL") && text.contains("C08P01"), "{text}");
    }
    assert_eq!(simple_rows(&other, "SELECT 1").await, vec![vec![Some("1".to_string())]]);
}
