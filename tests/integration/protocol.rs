//! The Postgres wire protocol as tokio-postgres speaks it: parameters,
//! prepared statements, row types, errors and their SQLSTATEs, cursors,
//! COPY TO STDOUT, and CancelRequest.

use crate::common::TestServer;
use crate::support::{
    Bid, STATEMENT_TIMEOUT, all_bids, create_bid_stream, describe, epoch_ms, exec, query, simple_rows, sqlstate, within,
};
use futures::{StreamExt, TryStreamExt};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

const EVENTS: u64 = 20_000;
const SEED: u64 = 11;

async fn server_with_bids() -> (TestServer, Client, Vec<Bid>) {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, &create_bid_stream("b", EVENTS, SEED)).await;
    let bids = all_bids(&client, "b").await;
    assert!(!bids.is_empty());
    (server, client, bids)
}

/// Counts of each value, for comparing results as multisets.
fn multiset<T: Ord + Clone>(items: &[T]) -> BTreeMap<T, usize> {
    let mut m = BTreeMap::new();
    for i in items {
        *m.entry(i.clone()).or_default() += 1;
    }
    m
}

#[tokio::test]
async fn parameters_bind_in_extended_protocol() {
    let (_server, client, bids) = server_with_bids().await;

    let limited = within(
        "parameterized LIMIT query",
        STATEMENT_TIMEOUT,
        client.query("SELECT price FROM b WHERE price > $1 LIMIT 5", &[&1000i64]),
    )
    .await
    .expect("parameterized query");
    assert_eq!(limited.len(), 5);
    let over: Vec<i64> = bids.iter().map(|b| b.price).filter(|p| *p > 1000).collect();
    let available = multiset(&over);
    for r in &limited {
        let price: i64 = r.get(0);
        assert!(price > 1000, "price {price} should be above the parameter");
        assert!(
            available.contains_key(&price),
            "price {price} is not a bid of the stream"
        );
    }

    // Two parameters, whole bounded result: equal to filtering the raw rows.
    let auction = bids[bids.len() / 2].auction;
    let rows = within(
        "two-parameter query",
        STATEMENT_TIMEOUT,
        client.query(
            "SELECT bidder, price FROM b WHERE auction = $1 AND price >= $2",
            &[&auction, &500i64],
        ),
    )
    .await
    .expect("two-parameter query");
    let actual: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(i64, i64)> = bids
        .iter()
        .filter(|b| b.auction == auction && b.price >= 500)
        .map(|b| (b.bidder, b.price))
        .collect();
    assert!(
        !expected.is_empty(),
        "the chosen auction should have bids of at least 500"
    );
    assert_eq!(multiset(&actual), multiset(&expected));
}

#[tokio::test]
async fn prepared_statement_is_described_and_reused() {
    let (_server, client, bids) = server_with_bids().await;
    let stmt = within(
        "prepare",
        STATEMENT_TIMEOUT,
        client.prepare("SELECT auction, price, channel FROM b WHERE price BETWEEN $1 AND $2"),
    )
    .await
    .expect("prepare");
    assert_eq!(stmt.params(), &[Type::INT8, Type::INT8]);
    let columns: Vec<(&str, &Type)> = stmt.columns().iter().map(|c| (c.name(), c.type_())).collect();
    assert_eq!(
        columns,
        vec![
            ("auction", &Type::INT8),
            ("price", &Type::INT8),
            ("channel", &Type::TEXT)
        ]
    );

    for (lo, hi) in [(0i64, 100i64), (1000, 1500), (20_000, 30_000)] {
        let rows = within("execute prepared", STATEMENT_TIMEOUT, client.query(&stmt, &[&lo, &hi]))
            .await
            .unwrap_or_else(|e| panic!("execute with ({lo}, {hi}): {}", describe(&e)));
        let actual: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let expected: Vec<(i64, i64)> = bids
            .iter()
            .filter(|b| (lo..=hi).contains(&b.price))
            .map(|b| (b.auction, b.price))
            .collect();
        assert_eq!(multiset(&actual), multiset(&expected), "prices between {lo} and {hi}");
    }
}

#[tokio::test]
async fn row_types_decode_to_rust_types() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE STREAM t (id BIGINT, name VARCHAR, ts TIMESTAMP, score DOUBLE PRECISION, ok BOOLEAN)",
    )
    .await;
    exec(
        &client,
        "INSERT INTO t VALUES (1, 'héllo', TIMESTAMP '2024-01-02 03:04:05.678', 1.5, true), \
         (2, NULL, TIMESTAMP '1999-12-31 23:59:59', NULL, false)",
    )
    .await;
    let rows = query(&client, "SELECT id, name, ts, score, ok FROM t LIMIT 2").await;
    assert_eq!(rows.len(), 2);
    let types: Vec<&Type> = rows[0].columns().iter().map(|c| c.type_()).collect();
    assert_eq!(
        types,
        vec![&Type::INT8, &Type::TEXT, &Type::TIMESTAMP, &Type::FLOAT8, &Type::BOOL]
    );
    let mut by_id: BTreeMap<i64, &tokio_postgres::Row> = BTreeMap::new();
    for r in &rows {
        by_id.insert(r.get::<_, i64>("id"), r);
    }
    let first = by_id[&1];
    assert_eq!(first.get::<_, Option<String>>("name").as_deref(), Some("héllo"));
    // `date -u -d '2024-01-02 03:04:05' +%s` = 1704164645.
    assert_eq!(
        first.get::<_, SystemTime>("ts"),
        UNIX_EPOCH + Duration::from_millis(1_704_164_645_678)
    );
    assert_eq!(first.get::<_, f64>("score"), 1.5);
    assert!(first.get::<_, bool>("ok"));
    let second = by_id[&2];
    assert_eq!(second.get::<_, Option<String>>("name"), None);
    // `date -u -d '1999-12-31 23:59:59' +%s` = 946684799.
    assert_eq!(epoch_ms(second.get::<_, SystemTime>("ts")), 946_684_799_000);
    assert_eq!(second.get::<_, Option<f64>>("score"), None);
    assert!(!second.get::<_, bool>("ok"));

    // The simple protocol sends the same values as text.
    let mut text = simple_rows(&client, "SELECT id, name, ts, score, ok FROM t LIMIT 2").await;
    text.sort();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        text,
        vec![
            vec![s("1"), s("héllo"), s("2024-01-02 03:04:05.678"), s("1.5"), s("t")],
            vec![s("2"), None, s("1999-12-31 23:59:59"), None, s("f")],
        ]
    );
}

#[tokio::test]
async fn nexmark_columns_have_postgres_types() {
    let (_server, client, bids) = server_with_bids().await;
    let rows = query(
        &client,
        "SELECT auction, bidder, price, channel, url, date_time, extra FROM b LIMIT 3",
    )
    .await;
    assert_eq!(rows.len(), 3);
    let types: Vec<&Type> = rows[0].columns().iter().map(|c| c.type_()).collect();
    assert_eq!(
        types,
        vec![
            &Type::INT8,
            &Type::INT8,
            &Type::INT8,
            &Type::TEXT,
            &Type::TEXT,
            &Type::TIMESTAMP,
            &Type::TEXT
        ]
    );
    let known = multiset(&bids);
    for r in &rows {
        let bid = Bid {
            auction: r.get(0),
            bidder: r.get(1),
            price: r.get(2),
            ts_ms: epoch_ms(r.get::<_, SystemTime>(5)),
        };
        assert!(known.contains_key(&bid), "{bid:?} is not a bid of the stream");
        let url: String = r.get(4);
        assert!(url.starts_with("http"), "url {url}");
        let _channel: String = r.get(3);
        let _extra: String = r.get(6);
    }
    // A LIMIT beyond the bounded stream's end returns every row and completes.
    let everything = query(&client, "SELECT auction, price FROM b LIMIT 1000000").await;
    assert_eq!(everything.len(), bids.len());
}

#[tokio::test]
async fn pass_through_is_the_same_at_parallelism_4() {
    let (_server, client, bids) = server_with_bids().await;
    exec(&client, "SET parallelism = 4").await;
    assert_eq!(
        simple_rows(&client, "SHOW parallelism").await,
        vec![vec![Some("4".to_string())]]
    );
    let parallel = all_bids(&client, "b").await;
    assert_eq!(multiset(&parallel), multiset(&bids));
}

/// Runs `sql` and returns the SQLSTATE of its error; then checks the
/// session still answers.
async fn error_code(client: &Client, sql: &str, simple: bool) -> String {
    let result = if simple {
        within(sql, STATEMENT_TIMEOUT, client.batch_execute(sql))
            .await
            .map(|_| ())
    } else {
        within(sql, STATEMENT_TIMEOUT, client.query(sql, &[])).await.map(|_| ())
    };
    let e = result.expect_err(&format!("{sql} should fail"));
    let code = sqlstate(&e)
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"))
        .to_string();
    let one = within(
        "SELECT 1 after an error",
        STATEMENT_TIMEOUT,
        client.query_one("SELECT 1", &[]),
    )
    .await
    .unwrap_or_else(|e| panic!("session unusable after {sql}: {}", describe(&e)));
    assert_eq!(one.get::<_, i64>(0), 1);
    code
}

#[tokio::test]
async fn errors_carry_sqlstate_and_leave_the_session_usable() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE STREAM s (x BIGINT, name VARCHAR)").await;
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT x FROM nowhere", "42P01"),
        ("SELECT nope FROM s", "42703"),
        ("CREATE STREAM s (y BIGINT)", "42P07"),
        ("SET no_such_setting_anywhere = 1", "42704"),
        ("SET parallelism = 0", "22023"),
    ];
    for simple in [true, false] {
        for (sql, code) in cases {
            if !simple && sql.starts_with("CREATE") {
                continue; // DDL goes through the simple protocol below.
            }
            assert_eq!(
                error_code(&client, sql, simple).await,
                code,
                "{sql} (simple protocol: {simple})"
            );
        }
    }
    // After all that, the stream still works.
    exec(&client, "INSERT INTO s VALUES (1, 'a')").await;
    let rows = query(&client, "SELECT x, name FROM s LIMIT 1").await;
    assert_eq!(
        (rows[0].get::<_, i64>(0), rows[0].get::<_, String>(1)),
        (1, "a".to_string())
    );
}

#[tokio::test]
async fn type_errors_carry_sqlstate() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE STREAM s (x BIGINT, name VARCHAR)").await;
    let code = error_code(&client, "INSERT INTO s VALUES ('not a number', 'a')", true).await;
    assert!(
        ["22P02", "42804"].contains(&code.as_str()),
        "INSERT of text into BIGINT gave {code}"
    );
}

fn bid_of(r: &tokio_postgres::Row) -> Bid {
    Bid {
        auction: r.get(0),
        bidder: r.get(1),
        price: r.get(2),
        ts_ms: epoch_ms(r.get::<_, SystemTime>(3)),
    }
}

#[tokio::test]
async fn cursor_fetches_rows_in_chunks() {
    let (_server, client, bids) = server_with_bids().await;
    exec(&client, "BEGIN").await;
    exec(
        &client,
        "DECLARE c CURSOR FOR SELECT auction, bidder, price, date_time FROM b",
    )
    .await;
    let chunk = 1000;
    let mut fetched: Vec<Bid> = Vec::new();
    let mut sizes = Vec::new();
    // As psql does with FETCH_COUNT: fetch until a chunk comes back short.
    loop {
        let rows = query(&client, &format!("FETCH {chunk} FROM c")).await;
        sizes.push(rows.len());
        fetched.extend(rows.iter().map(bid_of));
        if rows.len() < chunk {
            break;
        }
        assert!(sizes.len() <= bids.len() / chunk + 1, "FETCH never runs dry");
    }
    // Full chunks, then the remainder (this stream has 18,400 bids).
    assert_eq!(bids.len() % chunk, 400);
    let mut expected_sizes = vec![chunk; bids.len() / chunk];
    expected_sizes.push(bids.len() % chunk);
    assert_eq!(sizes, expected_sizes);
    assert_eq!(multiset(&fetched), multiset(&bids));
    exec(&client, "CLOSE c").await;
    exec(&client, "COMMIT").await;
    // A closed cursor is gone.
    let e = within("FETCH closed", STATEMENT_TIMEOUT, client.query("FETCH 1 FROM c", &[]))
        .await
        .expect_err("FETCH from a closed cursor");
    assert_eq!(sqlstate(&e), Some("34000"), "{}", describe(&e));
    // FETCH NEXT / FETCH ALL on a fresh cursor.
    exec(
        &client,
        "BEGIN; DECLARE d CURSOR FOR SELECT auction, bidder, price, date_time FROM b WHERE price > 5000",
    )
    .await;
    let next = query(&client, "FETCH NEXT FROM d").await;
    assert_eq!(next.len(), 1);
    let rest = query(&client, "FETCH ALL FROM d").await;
    let mut all: Vec<Bid> = next.iter().chain(rest.iter()).map(bid_of).collect();
    all.sort();
    let mut expected: Vec<Bid> = bids.iter().filter(|b| b.price > 5000).copied().collect();
    expected.sort();
    assert_eq!(all, expected);
    exec(&client, "CLOSE d; COMMIT").await;
}

#[tokio::test]
async fn fetch_past_the_end_returns_no_rows() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, &create_bid_stream("b", 100, SEED)).await;
    exec(&client, "BEGIN; DECLARE c CURSOR FOR SELECT auction, price FROM b").await;
    // 100 events hold 92 bids (46 of every 50 events).
    assert_eq!(query(&client, "FETCH 1000 FROM c").await.len(), 92);
    // As in Postgres: past the end, FETCH returns no rows, as often as asked.
    assert_eq!(query(&client, "FETCH 10 FROM c").await.len(), 0);
    assert_eq!(query(&client, "FETCH 10 FROM c").await.len(), 0);
    exec(&client, "CLOSE c; COMMIT").await;
    assert_eq!(
        simple_rows(&client, "SELECT 1").await,
        vec![vec![Some("1".to_string())]]
    );
}

#[tokio::test]
async fn copy_to_stdout_returns_text_lines() {
    let (_server, client, bids) = server_with_bids().await;
    let auction = bids[0].auction;
    let sql = format!("COPY (SELECT auction, bidder, price FROM b WHERE auction = {auction}) TO STDOUT");
    let data = copy_all(&client, &sql).await;
    let mut lines: Vec<String> = data.lines().map(str::to_string).collect();
    lines.sort();
    let mut expected: Vec<String> = bids
        .iter()
        .filter(|b| b.auction == auction)
        .map(|b| format!("{}\t{}\t{}", b.auction, b.bidder, b.price))
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
    assert!(data.ends_with('\n'));

    // Escapes and NULL in COPY's text format.
    exec(&client, "CREATE STREAM m (id BIGINT, note VARCHAR)").await;
    exec(
        &client,
        "INSERT INTO m VALUES (1, E'tab\\there'), (2, NULL), (3, 'back\\slash')",
    )
    .await;
    let data = copy_all(&client, "COPY (SELECT id, note FROM m LIMIT 3) TO STDOUT").await;
    let mut lines: Vec<&str> = data.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["1\ttab\\there", "2\t\\N", "3\tback\\\\slash"]);
}

async fn copy_all(client: &Client, sql: &str) -> String {
    let stream = within(sql, STATEMENT_TIMEOUT, client.copy_out(sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
    let data = within(sql, STATEMENT_TIMEOUT, concat_copy(stream))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
    String::from_utf8(data).expect("utf-8 COPY data")
}

/// All bytes of a COPY OUT stream.
async fn concat_copy(stream: tokio_postgres::CopyOutStream) -> Result<Vec<u8>, tokio_postgres::Error> {
    stream
        .try_fold(Vec::new(), |mut all, chunk| async move {
            all.extend_from_slice(&chunk);
            Ok(all)
        })
        .await
}

/// Sends CancelRequests until `done` fires (a cancel that arrives before
/// the statement started is ignored, as in Postgres, so it is repeated).
async fn cancel_until<T>(client: &Client, done: tokio::task::JoinHandle<T>) -> T {
    let token = client.cancel_token();
    let mut done = done;
    within("cancel", Duration::from_secs(30), async {
        loop {
            tokio::select! {
                out = &mut done => return out.expect("query task"),
                () = tokio::time::sleep(Duration::from_millis(300)) => {
                    token.cancel_query(NoTls).await.expect("send CancelRequest");
                }
            }
        }
    })
    .await
}

#[tokio::test]
async fn cancel_stops_an_unbounded_query_and_session_goes_on() {
    let server = TestServer::start();
    let client = std::sync::Arc::new(server.connect().await);
    exec(&client, "CREATE STREAM m (x BIGINT)").await;
    exec(&client, "INSERT INTO m VALUES (1), (2), (3)").await;

    // Extended protocol: read the first rows, then cancel.
    let mut rows = Box::pin(
        within(
            "query_raw",
            STATEMENT_TIMEOUT,
            client.query_raw("SELECT x FROM m", Vec::<i64>::new()),
        )
        .await
        .expect("start unbounded query"),
    );
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let row = within("first rows of unbounded query", STATEMENT_TIMEOUT, rows.next())
            .await
            .expect("stream ended early")
            .expect("row");
        seen.push(row.get::<_, i64>(0));
    }
    seen.sort();
    assert_eq!(seen, vec![1, 2, 3]);
    client
        .cancel_token()
        .cancel_query(NoTls)
        .await
        .expect("send CancelRequest");
    let end = within("query ends after cancel", Duration::from_secs(30), rows.next()).await;
    let e = match end {
        Some(Err(e)) => e,
        other => panic!("expected a 57014 error after cancel, got {other:?}"),
    };
    assert_eq!(sqlstate(&e), Some("57014"), "{}", describe(&e));
    drop(rows);
    let one = within("SELECT 1", STATEMENT_TIMEOUT, client.query_one("SELECT 1", &[]))
        .await
        .expect("SELECT 1");
    assert_eq!(one.get::<_, i64>(0), 1);

    // Simple protocol: the query runs in a task, cancelled from outside.
    let c = client.clone();
    let task = tokio::spawn(async move { c.simple_query("SELECT x FROM m").await });
    let result = cancel_until(&client, task).await;
    let e = result.expect_err("cancelled simple query");
    assert_eq!(sqlstate(&e), Some("57014"), "{}", describe(&e));
    let rows = simple_rows(&client, "SELECT 1").await;
    assert_eq!(rows, vec![vec![Some("1".to_string())]]);

    // COPY of an unbounded query streams until cancelled.
    let c = client.clone();
    let task = tokio::spawn(async move {
        let stream = c.copy_out("COPY (SELECT x FROM m) TO STDOUT").await?;
        concat_copy(stream).await
    });
    let e = cancel_until(&client, task).await.expect_err("cancelled COPY");
    assert_eq!(sqlstate(&e), Some("57014"), "{}", describe(&e));
    exec(&client, "INSERT INTO m VALUES (4)").await;
    let rows = query(&client, "SELECT x FROM m LIMIT 4").await;
    assert_eq!(rows.len(), 4);
}

/// Unaliased result columns are named as Postgres 15 names them (the
/// expected names are what Postgres answers for the same statements), over
/// both protocols and for a continuous query as well as a batch one.
#[tokio::test]
async fn result_columns_are_named_as_postgres_names_them() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE STREAM named (k BIGINT, page TEXT); INSERT INTO named VALUES (1, 'a')",
    )
    .await;
    let names = |columns: &[tokio_postgres::Column]| columns.iter().map(|c| c.name().to_string()).collect::<Vec<_>>();
    // Extended protocol: the Describe of the prepared statement.
    let batch = client
        .prepare("SELECT 1, 2 AS two, 1 + 1, 3::int, upper('x'), CASE WHEN true THEN 1 END")
        .await
        .unwrap();
    assert_eq!(
        names(batch.columns()),
        ["?column?", "two", "?column?", "int4", "upper", "case"]
    );
    let rows = client.query(&batch, &[]).await.unwrap();
    assert_eq!(names(rows[0].columns()), names(batch.columns()));
    let continuous = client
        .prepare("SELECT k, k + 1, upper(page) AS up FROM named LIMIT 1")
        .await
        .unwrap();
    assert_eq!(names(continuous.columns()), ["k", "?column?", "up"]);
    let rows = within(
        "LIMIT 1 over a memory stream",
        STATEMENT_TIMEOUT,
        client.query(&continuous, &[]),
    )
    .await
    .unwrap();
    assert_eq!(names(rows[0].columns()), ["k", "?column?", "up"]);
    assert_eq!(rows[0].get::<_, i64>(1), 2);
    // Simple protocol: the RowDescription of `SELECT 1`.
    let messages = client.simple_query("SELECT 1").await.unwrap();
    let columns = messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::RowDescription(c) => {
                Some(c.iter().map(|c| c.name().to_string()).collect::<Vec<_>>())
            }
            _ => None,
        })
        .expect("a RowDescription");
    assert_eq!(columns, ["?column?"]);
}
