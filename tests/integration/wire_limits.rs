//! Limits at their bounds: the pgwire message cap (16 MiB, checked on the
//! header) and rows per INSERT (100 000). Each is exercised just under
//! or at the limit (accepted) and one past it (refused, naming the limit,
//! with nothing done).

use crate::common::TestServer;
use crate::support::{describe, simple_rows};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sluice's cap on one client message, its length field included.
const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Rows one INSERT may write.
const INSERT_ROWS_MAX: usize = 100_000;

/// A v3 StartupMessage for `sluice`.
fn startup() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", "sluice"), ("database", "sluice")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    message.extend(body);
    message
}

/// Reads messages until a ReadyForQuery; returns the (type, body) pairs,
/// or what arrived before the server closed.
async fn read_until_ready(socket: &mut TcpStream) -> (Vec<(u8, Vec<u8>)>, bool) {
    let mut messages = Vec::new();
    loop {
        let mut header = [0u8; 5];
        let read = tokio::time::timeout(Duration::from_secs(30), socket.read_exact(&mut header)).await;
        let Ok(Ok(_)) = read else {
            return (messages, false);
        };
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        socket.read_exact(&mut body).await.unwrap();
        let ready = header[0] == b'Z';
        messages.push((header[0], body));
        if ready {
            return (messages, true);
        }
    }
}

/// The (severity, SQLSTATE, message) of an ErrorResponse body.
fn error_fields(body: &[u8]) -> (String, String, String) {
    let mut fields = std::collections::HashMap::new();
    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        fields.insert(field[0], String::from_utf8_lossy(&field[1..]).into_owned());
    }
    let get = |k: u8| fields.get(&k).cloned().unwrap_or_default();
    (get(b'S'), get(b'C'), get(b'M'))
}

/// A Query message declaring `declared` bytes (length field included),
/// with a body that is a comment-padded `SELECT 1`.
fn query_of_length(declared: usize) -> Vec<u8> {
    let body_len = declared - 4;
    let mut sql = b"SELECT 1 -- ".to_vec();
    sql.resize(body_len - 1, b'x');
    let mut m = vec![b'Q'];
    m.extend_from_slice(&(declared as u32).to_be_bytes());
    m.extend(sql);
    m.push(0);
    assert_eq!(m.len(), declared + 1);
    m
}

async fn started(server: &TestServer) -> TcpStream {
    let mut socket = TcpStream::connect(("127.0.0.1", server.pg_port)).await.unwrap();
    socket.write_all(&startup()).await.unwrap();
    let (_, ready) = read_until_ready(&mut socket).await;
    assert!(ready, "startup did not complete");
    socket
}

#[tokio::test]
async fn a_message_at_the_cap_is_read_and_one_byte_more_closes_the_session() {
    let server = TestServer::start();
    let other = server.connect().await;

    // Exactly the cap: read whole, then refused by the 1 MiB statement
    // limit as an ordinary ERROR; the session goes on.
    let mut socket = started(&server).await;
    socket.write_all(&query_of_length(MESSAGE_BYTES_MAX)).await.unwrap();
    let (messages, ready) = read_until_ready(&mut socket).await;
    assert!(ready, "the session ended after a message at the cap: {messages:?}");
    let (severity, code, message) = error_fields(&messages.iter().find(|(t, _)| *t == b'E').expect("an error").1);
    assert_eq!((severity.as_str(), code.as_str()), ("ERROR", "54000"), "{message}");
    assert!(!message.contains(&MESSAGE_BYTES_MAX.to_string()), "{message}");
    let mut select = vec![b'Q'];
    select.extend_from_slice(&(4 + 9u32).to_be_bytes());
    select.extend_from_slice(b"SELECT 7\0");
    socket.write_all(&select).await.unwrap();
    let (messages, ready) = read_until_ready(&mut socket).await;
    assert!(
        ready && messages.iter().any(|(t, b)| *t == b'D' && b.ends_with(b"7")),
        "{messages:?}"
    );

    // One byte over: only the header is sent; FATAL 54000 naming the limit,
    // then the server closes without waiting for the body.
    for declared in [MESSAGE_BYTES_MAX + 1, 2_000_000_000, 0x8000_0000] {
        let mut socket = started(&server).await;
        let header = query_of_length(16)[..1].to_vec();
        let mut header = header;
        header.extend_from_slice(&(declared as u32).to_be_bytes());
        socket.write_all(&header).await.unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "the server waited for the body of a {declared}-byte message"
        );
        assert_eq!(rest.first(), Some(&b'E'), "{rest:?}");
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let (severity, code, message) = error_fields(&rest[5..1 + len]);
        assert_eq!((severity.as_str(), code.as_str()), ("FATAL", "54000"), "{message}");
        assert!(
            message.contains(&declared.to_string()) && message.contains(&MESSAGE_BYTES_MAX.to_string()),
            "{message}"
        );
    }

    // Other sessions are untouched.
    assert_eq!(
        simple_rows(&other, "SELECT 2 + 2").await,
        vec![vec![Some("4".to_string())]]
    );
}

#[tokio::test]
async fn an_insert_holds_at_most_the_row_limit() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE STREAM lim_rows (id BIGINT)")
        .await
        .unwrap();
    let list = |n: usize| (0..n).map(|i| format!("({i})")).collect::<Vec<_>>().join(",");
    let cross = |a: usize, b: usize| {
        format!(
            "INSERT INTO lim_rows SELECT a.column1 * 1000 + b.column1 FROM (VALUES {}) a, (VALUES {}) b",
            list(a),
            list(b)
        )
    };
    let values = |n: usize, from: usize| {
        let rows: Vec<String> = (from..from + n).map(|i| format!("({i})")).collect();
        format!("INSERT INTO lim_rows VALUES {}", rows.join(","))
    };

    // One past the limit, as VALUES and as INSERT … SELECT: refused, naming
    // the limit, nothing appended.
    let refused = client.execute(&values(INSERT_ROWS_MAX + 1, 1), &[]).await.unwrap_err();
    let text = describe(&refused);
    assert!(
        text.starts_with("54000") && text.contains("100000 rows per statement"),
        "{text}"
    );
    // 11 × 9 091 = 100 001 rows from a cross join of two short VALUES
    // lists (a statement of a few KB): counted as they are produced.
    let refused = client.execute(&cross(11, 9_091), &[]).await.unwrap_err();
    let text = describe(&refused);
    assert!(
        text.starts_with("54000") && text.contains("100000 rows per statement"),
        "{text}"
    );

    // The first row of the stream is the marker: the refused rows are not there.
    assert_eq!(
        client.execute("INSERT INTO lim_rows VALUES (-1)", &[]).await.unwrap(),
        1
    );
    assert_eq!(
        simple_rows(&client, "SELECT id FROM lim_rows LIMIT 1").await,
        vec![vec![Some("-1".to_string())]]
    );

    // At the limit: accepted, every row written.
    let n = client.execute(&values(INSERT_ROWS_MAX, 0), &[]).await.unwrap();
    assert_eq!(n, INSERT_ROWS_MAX as u64);
    assert_eq!(
        client.execute(&cross(400, 250), &[]).await.unwrap(),
        INSERT_ROWS_MAX as u64
    );
    let rows = simple_rows(
        &client,
        &format!("SELECT id FROM lim_rows LIMIT {}", 2 * INSERT_ROWS_MAX + 1),
    )
    .await;
    assert_eq!(rows.len(), 2 * INSERT_ROWS_MAX + 1);
    let sum: i64 = rows
        .iter()
        .map(|r| r[0].as_ref().unwrap().parse::<i64>().unwrap())
        .sum();
    let n = INSERT_ROWS_MAX as i64;
    // -1, then 0 … n-1, then a·1000 + b for a < 400, b < 250.
    let cross_sum: i64 = (0..400i64).flat_map(|a| (0..250i64).map(move |b| a * 1000 + b)).sum();
    assert_eq!(sum, -1 + (n - 1) * n / 2 + cross_sum);
}
