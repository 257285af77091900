//! Many clients at once: every session gets its own, correct rows.

use crate::common::TestServer;
use crate::support::{Bid, all_bids, bids_in, create_bid_stream, describe, epoch_ms, exec, within};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Barrier;
use tokio_postgres::NoTls;

const CLIENTS: usize = 100;
const EVENTS: u64 = 100_000;

/// What one client checked, for the summary assertion.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Nexmark { rows: usize },
    Memory { rows: usize },
}

async fn connect(conn_str: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(conn_str, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect: {}", describe(&e)));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Client `i`: even ones read a LIMIT of the shared Nexmark stream, odd
/// ones their own memory stream. All hold their connection open until
/// every client is connected, so the queries overlap.
async fn run_client(i: usize, conn_str: String, barrier: Arc<Barrier>, bids: Arc<HashSet<Bid>>) -> Outcome {
    let client = connect(&conn_str).await;
    let own = format!("m{i}");
    if !i.is_multiple_of(2) {
        exec(&client, &format!("CREATE STREAM {own} (client BIGINT, k BIGINT)")).await;
        let values: Vec<String> = (0..i).map(|k| format!("({i}, {k})")).collect();
        exec(&client, &format!("INSERT INTO {own} VALUES {}", values.join(", "))).await;
    }
    barrier.wait().await;
    if i.is_multiple_of(2) {
        let limit = 50 + i;
        let sql = format!("SELECT auction, bidder, price, date_time FROM shared LIMIT {limit}");
        let rows = client
            .query(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("client {i}: {}", describe(&e)));
        assert_eq!(rows.len(), limit, "client {i}: LIMIT {limit}");
        for r in &rows {
            let bid = Bid {
                auction: r.get(0),
                bidder: r.get(1),
                price: r.get(2),
                ts_ms: epoch_ms(r.get::<_, SystemTime>(3)),
            };
            assert!(bids.contains(&bid), "client {i}: {bid:?} is not a bid of the stream");
        }
        Outcome::Nexmark { rows: rows.len() }
    } else {
        let sql = format!("SELECT client, k FROM {own} LIMIT {i}");
        let rows = client
            .query(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("client {i}: {}", describe(&e)));
        let mut got: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        got.sort();
        let expected: Vec<(i64, i64)> = (0..i as i64).map(|k| (i as i64, k)).collect();
        assert_eq!(got, expected, "client {i}: its own stream");
        Outcome::Memory { rows: rows.len() }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_sessions_each_get_their_rows() {
    let server = TestServer::start();
    let admin = server.connect().await;
    exec(&admin, &create_bid_stream("shared", EVENTS, 3)).await;
    let bids = all_bids(&admin, "shared").await;
    assert_eq!(bids.len(), bids_in(EVENTS));
    let bids: Arc<HashSet<Bid>> = Arc::new(bids.into_iter().collect());

    let barrier = Arc::new(Barrier::new(CLIENTS));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| tokio::spawn(run_client(i, server.conn_str(), barrier.clone(), bids.clone())))
        .collect();
    let outcomes = within(
        "100 concurrent sessions",
        Duration::from_secs(300),
        futures::future::join_all(tasks),
    )
    .await;
    let outcomes: Vec<Outcome> = outcomes.into_iter().map(|o| o.expect("client task")).collect();
    let expected: Vec<Outcome> = (0..CLIENTS)
        .map(|i| {
            if i.is_multiple_of(2) {
                Outcome::Nexmark { rows: 50 + i }
            } else {
                Outcome::Memory { rows: i }
            }
        })
        .collect();
    assert_eq!(outcomes, expected);

    // The server is still fine, and every memory stream exists.
    let streams = crate::support::simple_rows(&admin, "SHOW STREAMS").await;
    assert_eq!(streams.len(), 1 + CLIENTS / 2);
}
