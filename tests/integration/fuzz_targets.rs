//! Fuzz targets against a live server, each a bounded number of random
//! cases in the normal suite (`SLUICE_FUZZ_CASES`, `SLUICE_FUZZ_SEED`
//! replays a run, its seed printed; `SLUICE_FUZZ_SECONDS` bounds the time;
//! `scripts/fuzz.sh` runs many more):
//!
//! - the pgwire message decoder: random bytes as the first packet, random
//!   bytes after a completed startup, and valid message streams mutated;
//!   each connection ends or answers, and the server keeps serving another
//!   session (no panic takes it down);
//! - the REST JSON bodies: random JSON (and non-JSON) to every POST route
//!   is answered with a status below 500.

use crate::common::TestServer;
use crate::redaction::LoggedServer;
use crate::support::simple_rows;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "../support/fuzz.rs"]
mod fuzz;

use fuzz::{Rng, plan};

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

fn mutate(mut bytes: Vec<u8>, rng: &mut Rng) -> Vec<u8> {
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(5) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] = rng.next() as u8;
            }
            1 if !bytes.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            2 => {
                let junk: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, junk);
            }
            3 => {
                // A length field set to an edge value.
                let edge = [0u32, 3, 4, 5, 0x7fff_ffff, 0xffff_ffff, 16 * 1024 * 1024][rng.below(7)];
                if at + 4 <= bytes.len() {
                    bytes[at..at + 4].copy_from_slice(&edge.to_be_bytes());
                }
            }
            _ => bytes.truncate(at),
        }
    }
    bytes
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

#[tokio::test]
async fn garbage_and_mutated_pgwire_messages_never_take_the_server_down() {
    let (cases, seed, seconds) = plan("pgwire fuzz", 60);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = LoggedServer::start(&dir.path().join("data"), &log);
    let other = server.connect().await;
    let mut rng = Rng(seed);
    let started = Instant::now();
    let valid = valid_messages();
    for case in 0..cases {
        if seconds.is_some_and(|s| started.elapsed() > s) {
            eprintln!("pgwire fuzz: time bound reached after {case} cases");
            break;
        }
        match rng.below(3) {
            0 => {
                let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
                throw(server.pg_port, false, &bytes).await;
            }
            1 => {
                let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
                throw(server.pg_port, true, &bytes).await;
            }
            _ => {
                let bytes = mutate(valid.clone(), &mut rng);
                throw(server.pg_port, true, &bytes).await;
            }
        }
        if case % 10 == 9 || case + 1 == cases {
            let rows = tokio::time::timeout(Duration::from_secs(10), simple_rows(&other, "SELECT 40 + 2"))
                .await
                .unwrap_or_else(|_| panic!("case {case} (SLUICE_FUZZ_SEED={seed}): the server stopped answering"));
            assert_eq!(rows, vec![vec![Some("42".to_string())]], "case {case} (seed {seed})");
        }
    }
    // New sessions still start.
    let fresh = server.connect().await;
    assert_eq!(simple_rows(&fresh, "SELECT 1").await, vec![vec![Some("1".to_string())]]);
    // No connection task died of a panic: each bad message was an error.
    drop(server);
    let log = std::fs::read_to_string(&log).unwrap();
    let undecodable = log.matches("could not be decoded").count();
    eprintln!("pgwire fuzz: {undecodable} connections closed on an undecodable message");
    let died: Vec<&str> = log.lines().filter(|l| l.contains("connection task panicked")).collect();
    assert!(died.is_empty(), "SLUICE_FUZZ_SEED={seed}: {died:?}");
}

/// A random JSON value of at most `depth` levels, biased to the shapes the
/// routes read (`sql` strings, numbers, nesting).
fn random_json(rng: &mut Rng, depth: usize) -> Value {
    let strings = [
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
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next() as i64),
        3 => json!(rng.next() as f64 / 3.0),
        4 => json!(strings[rng.below(strings.len())]),
        5 => Value::Array((0..rng.below(4)).map(|_| random_json(rng, depth - 1)).collect()),
        _ => {
            let keys = ["sql", "limit", "timeout_ms", "params", "name", "x"];
            let mut map = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                map.insert(keys[rng.below(keys.len())].to_string(), random_json(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

#[tokio::test]
async fn random_json_bodies_to_post_routes_are_never_5xx() {
    let (cases, seed, seconds) = plan("REST fuzz", 150);
    let server = TestServer::start();
    let client = server.connect().await;
    client.batch_execute("CREATE STREAM fz_s (id BIGINT)").await.unwrap();
    client
        .batch_execute("CREATE STREAM fz_d AS SELECT id FROM fz_s")
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let routes = [
        "/api/v1/sql",
        "/api/v1/explain",
        "/api/v1/pipelines/fz_d/pause",
        "/api/v1/pipelines/fz_d/resume",
        "/api/v1/pipelines/fz_missing/pause",
    ];
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut statuses = std::collections::BTreeMap::new();
    for case in 0..cases {
        if seconds.is_some_and(|s| started.elapsed() > s) {
            eprintln!("REST fuzz: time bound reached after {case} cases");
            break;
        }
        let route = routes[rng.below(routes.len())];
        let body: Vec<u8> = match rng.below(4) {
            0 => (0..rng.below(100)).map(|_| rng.next() as u8).collect(),
            1 => {
                let mut text = serde_json::to_vec(&random_json(&mut rng, 3)).unwrap();
                text.truncate(rng.below(text.len() + 1));
                text
            }
            _ => serde_json::to_vec(&random_json(&mut rng, 3)).unwrap(),
        };
        let mut request = http.post(format!("http://127.0.0.1:{}{route}", server.http_port));
        if rng.below(4) != 0 {
            request = request.header("content-type", "application/json");
        }
        let response = request
            .body(body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("case {case} (SLUICE_FUZZ_SEED={seed}): {route} failed: {e}"));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        assert!(
            status < 500,
            "case {case} (SLUICE_FUZZ_SEED={seed}): {route} answered {status} to {:?}: {text}",
            String::from_utf8_lossy(&body)
        );
        *statuses.entry(status).or_insert(0) += 1;
    }
    eprintln!("REST fuzz statuses: {statuses:?}");
    assert_eq!(
        simple_rows(&client, "SELECT 2 + 3").await,
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
