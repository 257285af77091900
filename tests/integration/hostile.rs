//! Hostile input on the wire: a message whose length prefix claims 2 GB is
//! refused on its header alone (the server closes the connection without
//! waiting for, or reserving room for, the body), and other sessions go on;
//! the per-role connection limit holds at its bound.

use crate::common::TestServer;
use crate::support::simple_rows;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A v3 StartupMessage for `user`.
fn startup(user: &str) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", "sluice")] {
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

/// Reads until the server's first ReadyForQuery ('Z', length 5, status).
async fn until_ready(socket: &mut TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(5).any(|w| w == [b'Z', 0, 0, 0, 5]) {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed during startup: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn a_two_gigabyte_length_prefix_is_refused_on_its_header() {
    let server = TestServer::start();
    let other = server.connect().await;
    let mut socket = TcpStream::connect(("127.0.0.1", server.pg_port)).await.unwrap();
    socket.write_all(&startup("sluice")).await.unwrap();
    until_ready(&mut socket).await;
    // 'Q' with a length of 2^31 - 1: only the 5 header bytes are sent.
    socket.write_all(&[b'Q', 0x7f, 0xff, 0xff, 0xff]).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the server waited for a 2 GB body");
    // The other session is untouched.
    assert_eq!(
        simple_rows(&other, "SELECT 2 + 2").await,
        vec![vec![Some("4".to_string())]]
    );
}

#[tokio::test]
async fn a_role_holds_at_most_its_connection_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir.path(), &["--connections-per-role-max", "2"], &[]);
    let first = server.connect().await;
    let second = server.connect().await;
    let refused = server
        .connect_as("sluice", "")
        .await
        .map(|_| ())
        .expect_err("a third connection is refused");
    assert_eq!(refused.code().map(|c| c.code()), Some("53300"), "{refused}");
    drop(first);
    // The slot frees when the connection ends (the server notices the close).
    let mut third = None;
    for _ in 0..50 {
        if let Ok(c) = server.connect_as("sluice", "").await {
            third = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let third = third.expect("a freed slot is reusable");
    assert_eq!(simple_rows(&third, "SELECT 1").await, vec![vec![Some("1".to_string())]]);
    assert_eq!(
        simple_rows(&second, "SELECT 1").await,
        vec![vec![Some("1".to_string())]]
    );
}
