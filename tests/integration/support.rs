//! Helpers shared by the integration tests: deadlines around every await,
//! typed access to common results, and the bounded Nexmark bid stream the
//! reference models are fed from.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_postgres::{Client, Row, SimpleQueryMessage};

/// The deadline of one statement or one short exchange.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Event time of Nexmark event 0 (the generator's fixed default), ms.
pub const NEXMARK_BASE_TIME_MS: i64 = 1_700_000_000_000;

/// Runs `fut`, failing the test if it takes longer than `limit`.
pub async fn within<F: Future>(what: &str, limit: Duration, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// Runs statements (simple protocol), panicking with the statement on error.
pub async fn exec(client: &Client, sql: &str) {
    if let Err(e) = within(sql, STATEMENT_TIMEOUT, client.batch_execute(sql)).await {
        panic!("{sql}\n  failed: {}", describe(&e));
    }
}

/// Runs a query (extended protocol), panicking with the statement on error.
pub async fn query(client: &Client, sql: &str) -> Vec<Row> {
    match within(sql, STATEMENT_TIMEOUT, client.query(sql, &[])).await {
        Ok(rows) => rows,
        Err(e) => panic!("{sql}\n  failed: {}", describe(&e)),
    }
}

/// The rows of a simple-protocol query, every value as text.
pub async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let messages = match within(sql, STATEMENT_TIMEOUT, client.simple_query(sql)).await {
        Ok(m) => m,
        Err(e) => panic!("{sql}\n  failed: {}", describe(&e)),
    };
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
            _ => None,
        })
        .collect()
}

/// A simple-protocol result as maps from column name to text value.
pub async fn simple_records(client: &Client, sql: &str) -> Vec<std::collections::BTreeMap<String, Option<String>>> {
    let messages = match within(sql, STATEMENT_TIMEOUT, client.simple_query(sql)).await {
        Ok(m) => m,
        Err(e) => panic!("{sql}\n  failed: {}", describe(&e)),
    };
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_string(), r.get(i).map(str::to_string)))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// SQLSTATE and message of an error, for assertion messages.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// The SQLSTATE of a server error (`None` for client-side errors).
pub fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

/// Milliseconds since the Unix epoch.
pub fn epoch_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// Polls `check` until it returns `Some`, failing after `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One Nexmark bid, as the tests need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bid {
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    pub ts_ms: i64,
}

/// `CREATE STREAM name …` over a bounded Nexmark bid table of `events`
/// global events, with a 2 s watermark delay.
pub fn create_bid_stream(name: &str, events: u64, seed: u64) -> String {
    format!(
        "CREATE STREAM {name} (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
         date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND) \
         WITH (connector = 'nexmark', table = 'bid', 'events.max' = '{events}', seed = '{seed}')"
    )
}

/// How many bids `events` global Nexmark events hold: of every 50 events,
/// 1 is a person, 3 are auctions and 46 are bids (events 4..50 of a block).
pub fn bids_in(events: u64) -> usize {
    (0..events).filter(|n| n % 50 >= 4).count()
}

/// Every row of the bounded bid stream, by a plain pass-through query.
pub async fn all_bids(client: &Client, stream: &str) -> Vec<Bid> {
    let sql = format!("SELECT auction, bidder, price, date_time FROM {stream}");
    query(client, &sql)
        .await
        .iter()
        .map(|r| Bid {
            auction: r.get(0),
            bidder: r.get(1),
            price: r.get(2),
            ts_ms: epoch_ms(r.get::<_, SystemTime>(3)),
        })
        .collect()
}
