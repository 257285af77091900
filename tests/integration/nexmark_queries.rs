//! The benchmark queries (`benches/nexmark/qN.sql`, the very files the
//! benchmark runs; q4, q6, q9, q11, q14–q21 and q23 are checked here but
//! not yet benchmarked) and Flink's own texts of q2 and q22, over a small
//! bounded Nexmark run at parallelism 2, each
//! checked against a reference computed here in Rust from the raw rows of
//! the streams (fetched by plain pass-through queries). A fast wrong answer
//! cannot pass: the timed runs use the same SQL. The updating queries
//! (q4, q6, q9, q15–q19) return changelogs: the test folds each into a table,
//! checking that every `-U` retracts exactly the row its key showed. The
//! runs use the generator's fixed time model (10 000 events a second of
//! event time); the window queries and q8 run once more at the benchmark's,
//! Flink Nexmark's (10 M a second), where q3 also reaches a TTL, q5 its
//! window-group bound, q20 its join-state bound and q17 its aggregate-group
//! bound.

use crate::common::TestServer;
use crate::support::{STATEMENT_TIMEOUT, exec, query, simple_rows, within};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio_postgres::Client;

/// 15 s of event time (10,000 events per second): two 10 s windows.
const EVENTS: u64 = 150_000;
const SEED: u64 = 11;
const BASE_MS: i64 = 1_800_000_000_000;

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The statements of a benchmark file: the SETs, then the query.
fn bench_sql(name: &str) -> (Vec<String>, String) {
    let path = format!("{}/benches/nexmark/{name}.sql", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let text: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut statements: Vec<String> = text
        .split(';')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let query = statements.pop().expect("a query");
    (statements, query)
}

async fn run(client: &Client, name: &str) -> Vec<tokio_postgres::Row> {
    let (sets, sql) = bench_sql(name);
    for s in sets {
        exec(client, &s).await;
    }
    query(client, &sql).await
}

struct Person {
    id: i64,
    name: String,
    email: String,
    card: String,
    city: String,
    state: String,
    ts: i64,
    extra: String,
}

struct Auction {
    id: i64,
    item_name: String,
    seller: i64,
    category: i64,
    ts: i64,
    expires: i64,
    extra: String,
}

struct Bid {
    auction: i64,
    bidder: i64,
    price: i64,
    channel: String,
    url: String,
    ts: i64,
    extra: String,
}

async fn setup() -> (TestServer, Client) {
    setup_at(BASE_MS).await
}

/// The streams with event time starting at `base_ms`.
async fn setup_at(base_ms: i64) -> (TestServer, Client) {
    setup_with(base_ms, "").await
}

/// The streams with event time starting at `base_ms` and more generator
/// `options` (`, 'key' = 'value'…`).
async fn setup_with(base_ms: i64, options: &str) -> (TestServer, Client) {
    setup_sized(EVENTS, base_ms, options).await
}

/// The streams over `events` events in all.
async fn setup_sized(events: u64, base_ms: i64, options: &str) -> (TestServer, Client) {
    setup_delayed(events, base_ms, options, "INTERVAL '2' SECOND").await
}

/// The streams over `events` events, watermarks `delay` behind.
async fn setup_delayed(events: u64, base_ms: i64, options: &str, delay: &str) -> (TestServer, Client) {
    let server = TestServer::start();
    let client = server.connect().await;
    for table in ["person", "auction", "bid"] {
        exec(
            &client,
            &format!(
                "CREATE STREAM {table} (WATERMARK FOR date_time AS date_time - {delay}) \
                 WITH (connector = 'nexmark', table = '{table}', 'events.max' = {events}, seed = {SEED}, \
                 'base.time' = {base_ms}{options})"
            ),
        )
        .await;
    }
    exec(&client, "SET parallelism = 2").await;
    (server, client)
}

async fn persons(c: &Client) -> Vec<Person> {
    query(
        c,
        "SELECT id, name, email_address, credit_card, city, state, date_time, extra FROM person",
    )
    .await
    .iter()
    .map(|r| Person {
        id: r.get(0),
        name: r.get(1),
        email: r.get(2),
        card: r.get(3),
        city: r.get(4),
        state: r.get(5),
        ts: ms(r.get(6)),
        extra: r.get(7),
    })
    .collect()
}

async fn auctions(c: &Client) -> Vec<Auction> {
    query(
        c,
        "SELECT id, item_name, seller, category, date_time, expires, extra FROM auction",
    )
    .await
    .iter()
    .map(|r| Auction {
        id: r.get(0),
        item_name: r.get(1),
        seller: r.get(2),
        category: r.get(3),
        ts: ms(r.get(4)),
        expires: ms(r.get(5)),
        extra: r.get(6),
    })
    .collect()
}

async fn bids(c: &Client) -> Vec<Bid> {
    query(
        c,
        "SELECT auction, bidder, price, channel, url, date_time, extra FROM bid",
    )
    .await
    .iter()
    .map(|r| Bid {
        auction: r.get(0),
        bidder: r.get(1),
        price: r.get(2),
        channel: r.get(3),
        url: r.get(4),
        ts: ms(r.get(5)),
        extra: r.get(6),
    })
    .collect()
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[tokio::test]
async fn stateless_queries_match_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    assert_eq!(bids.len() as u64, (0..EVENTS).filter(|n| n % 50 >= 4).count() as u64);

    // Every column, `extra` too.
    let got: Vec<(i64, i64, i64, i64, String)> = run(&c, "q0")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), ms(r.get(3)), r.get(4)))
        .collect();
    let want: Vec<_> = bids
        .iter()
        .map(|b| (b.auction, b.bidder, b.price, b.ts, b.extra.clone()))
        .collect();
    assert!(want.iter().any(|w| !w.4.is_empty()), "extra is generated");
    assert_eq!(sorted(got), sorted(want), "q0");

    type Q1 = (i64, i64, f64, i64, String);
    let order = |a: &Q1, b: &Q1| {
        (a.0, a.1, a.3, &a.4)
            .cmp(&(b.0, b.1, b.3, &b.4))
            .then(a.2.total_cmp(&b.2))
    };
    let mut got: Vec<Q1> = run(&c, "q1")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), ms(r.get(3)), r.get(4)))
        .collect();
    got.sort_by(order);
    let mut want: Vec<Q1> = bids
        .iter()
        .map(|b| (b.auction, b.bidder, 0.908 * b.price as f64, b.ts, b.extra.clone()))
        .collect();
    want.sort_by(order);
    assert_eq!(got.len(), want.len(), "q1 rows");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g.0, g.1, g.3, &g.4) == (w.0, w.1, w.3, &w.4) && (g.2 - w.2).abs() < 1e-6,
            "q1: {g:?} vs {w:?}"
        );
    }

    let got: Vec<(i64, i64)> = run(&c, "q2").await.iter().map(|r| (r.get(0), r.get(1))).collect();
    let want: Vec<_> = bids
        .iter()
        .filter(|b| b.auction % 123 == 0)
        .map(|b| (b.auction, b.price))
        .collect();
    assert!(!want.is_empty(), "q2 selects something in this run");
    assert_eq!(sorted(got), sorted(want.clone()), "q2");
    // Flink's own text of q2 (MOD), the same answer.
    let flink = query(&c, "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0").await;
    let flink: Vec<(i64, i64)> = flink.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(sorted(flink), sorted(want), "q2 in Flink's text");

    // q21: the channel's number, or the URL's channel_id parameter.
    let param = |url: &str| {
        let at = if url.starts_with("channel_id=") {
            0
        } else {
            url.find("&channel_id=")? + 1
        };
        let value = &url[at + "channel_id=".len()..];
        Some(value.split('&').next().unwrap_or_default().to_string())
    };
    let known = |channel: &str| match channel.to_lowercase().as_str() {
        "apple" => Some("0"),
        "google" => Some("1"),
        "facebook" => Some("2"),
        "baidu" => Some("3"),
        _ => None,
    };
    let want: Vec<(i64, i64, i64, String, Option<String>)> = bids
        .iter()
        .filter(|b| param(&b.url).is_some() || known(&b.channel).is_some())
        .map(|b| {
            let id = known(&b.channel).map(str::to_string).or_else(|| param(&b.url));
            (b.auction, b.bidder, b.price, b.channel.clone(), id)
        })
        .collect();
    assert!(
        want.iter().any(|w| known(&w.3).is_none()),
        "q21 finds channel_id parameters in this run"
    );
    let got: Vec<(i64, i64, i64, String, Option<String>)> = run(&c, "q21")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(sorted(got), sorted(want), "q21");

    // q22 (split_part, 1-based), and Flink's own text (SPLIT_INDEX, from 0).
    let flink_q22 = "SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1, \
                     SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid";
    // Every column: auction, bidder, price, channel, then the directories.
    let got = simple_rows(&c, &bench_sql("q22").1).await;
    let flink = simple_rows(&c, flink_q22).await;
    let piece = |url: &str, i: usize| url.split('/').nth(i).map(str::to_string);
    let want: Vec<Vec<Option<String>>> = bids
        .iter()
        .map(|b| {
            vec![
                Some(b.auction.to_string()),
                Some(b.bidder.to_string()),
                Some(b.price.to_string()),
                Some(b.channel.clone()),
                piece(&b.url, 3),
                piece(&b.url, 4),
                piece(&b.url, 5),
            ]
        })
        .collect();
    assert!(
        want.iter().all(|w| w[6].is_some()),
        "every generated URL has three directories"
    );
    assert_eq!(sorted(flink), sorted(want.clone()), "q22 in Flink's text");
    assert_eq!(sorted(got), sorted(want), "q22");
}

#[tokio::test]
async fn q3_join_matches_the_reference() {
    let (_server, c) = setup().await;
    let persons = persons(&c).await;
    let auctions = auctions(&c).await;
    let by_id: HashMap<i64, &Person> = persons.iter().map(|p| (p.id, p)).collect();
    let want: Vec<(String, String, String, i64)> = auctions
        .iter()
        .filter(|a| a.category == 10)
        .filter_map(|a| by_id.get(&a.seller).map(|p| (p, a)))
        .filter(|(p, _)| ["OR", "ID", "CA"].contains(&p.state.as_str()))
        .map(|(p, a)| (p.name.clone(), p.city.clone(), p.state.clone(), a.id))
        .collect();
    assert!(!want.is_empty(), "q3 finds matches in this run");
    let got: Vec<(String, String, String, i64)> = run(&c, "q3")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(sorted(got), sorted(want));
}

/// q3 at the benchmark's time model with a TTL the run passes: 1 M events
/// at 10 M events a second of event time (100 ms), watermarks 1 ms behind
/// (each generator partition is in time order, so no row is late) and
/// `join_state_ttl` 1 ms, so persons and auctions expire while it runs (an
/// auction's seller is a recent person: the pairs are 0–5 ms apart). When
/// the later row of a pair arrives, the low watermark is at most its time,
/// so the earlier row is still held if the two are at most the TTL apart:
/// every such pair must meet. A pair farther apart meets or not depending
/// on how far the watermark lags; nothing outside the full join may appear;
/// and some pair must be missing — the TTL dropped state. The sources are
/// paced (400 k events a second of wall clock, the rows of 250 µs a batch)
/// so the watermark lags by a few hundred events, not by whole batches of
/// 8 Ki rows: unpaced, the lag is about as long as the pairs' distances.
#[tokio::test]
async fn q3_with_a_ttl_the_run_passes_keeps_every_pair_within_it() {
    const TTL_MS: i64 = 1;
    let (_server, c) = setup_delayed(
        1_000_000,
        BASE_MS,
        ", 'event.rate' = 10000000, 'events.per.second' = 400000",
        "INTERVAL '1' MILLISECOND",
    )
    .await;
    let persons = persons(&c).await;
    let auctions = auctions(&c).await;
    let by_id: HashMap<i64, &Person> = persons.iter().map(|p| (p.id, p)).collect();
    // Every pair of q3's full join (auction id → the two rows' distance).
    let full: BTreeMap<i64, i64> = auctions
        .iter()
        .filter(|a| a.category == 10)
        .filter_map(|a| by_id.get(&a.seller).map(|p| (p, a)))
        .filter(|(p, _)| ["OR", "ID", "CA"].contains(&p.state.as_str()))
        .map(|(p, a)| (a.id, (a.ts - p.ts).abs()))
        .collect();
    let within = full.values().filter(|d| **d <= TTL_MS).count();
    let far = full.values().filter(|d| **d > 3 * TTL_MS).count();
    assert!(
        within >= 100 && far >= 10,
        "the run has pairs on both sides of the TTL ({within}, {far})"
    );
    let (_, q3) = bench_sql("q3");
    exec(&c, &format!("SET join_state_ttl = '{TTL_MS}ms'")).await;
    let got: BTreeSet<i64> = query(&c, &q3).await.iter().map(|r| r.get::<_, i64>(3)).collect();
    for (id, distance) in &full {
        if *distance <= TTL_MS {
            assert!(
                got.contains(id),
                "auction {id}: its seller is {distance} ms apart, within the TTL, but they did not meet"
            );
        }
    }
    assert!(
        got.iter().all(|id| full.contains_key(id)),
        "only pairs of the full join"
    );
    assert!(
        got.len() < full.len(),
        "the TTL dropped state: {} of {} pairs met ({far} are more than 3 TTLs apart)",
        got.len(),
        full.len()
    );
}

#[tokio::test]
async fn window_queries_match_the_reference() {
    let (_server, c) = setup().await;
    check_window_queries(&c).await;
}

/// The window queries and q8 once at the benchmark's time model, Flink Nexmark's:
/// event time advances 10 M events a second ('event.rate'), so a million
/// events span 0.1 s and every window holds all of them at once — the
/// big-state regime the benchmark measures, where the fixed model's
/// windows hold 100 000 events each.
#[tokio::test]
async fn window_queries_match_the_reference_at_flink_nexmark_time() {
    let (_server, c) = setup_sized(1_000_000, BASE_MS, ", 'event.rate' = 10000000").await;
    check_window_queries(&c).await;
    check_q8(&c).await;
}

/// q5 against its window-group bound at the benchmark's time model. A
/// million events at 10 M a second span 0.1 s, so no window fires until
/// the input ends and q5's two instances hold all the run's groups
/// together: a HOP window is merged from 2-s panes when it fires, so the
/// groups held are the (auction, pane) pairs (worked out here from the
/// bids). At a bound of that count the run passes with one row an
/// (auction, window); at one under half of it (an instance holds at least
/// half) it stops with 53400 naming the bound, and the server answers the
/// next statement.
#[tokio::test]
async fn q5_reaches_its_window_group_bound_at_flink_nexmark_time() {
    let (_server, c) = setup_sized(1_000_000, BASE_MS, ", 'event.rate' = 10000000").await;
    let mut groups = BTreeSet::new();
    let mut windows = BTreeSet::new();
    for b in bids(&c).await {
        groups.insert((b.auction, b.ts.div_euclid(2000)));
        let mut start = b.ts.div_euclid(2000) * 2000;
        while start > b.ts - 10_000 {
            windows.insert((b.auction, start));
            start -= 2000;
        }
    }
    let total = groups.len();
    assert!(total > 20_000, "{total} groups");
    let (_, sql) = bench_sql("q5");
    exec(&c, &format!("SET window_groups_max = {total}")).await;
    assert_eq!(
        query(&c, &sql).await.len(),
        windows.len(),
        "q5 at a bound of its groups"
    );
    let under = total / 2 - 1;
    past_its_bound(
        &c,
        &sql,
        &format!("SET window_groups_max = {under}"),
        &format!("window state limit reached: {under} open groups"),
    )
    .await;
}

/// Under `set`, `sql` stops with 53400 and a message holding `message`;
/// the server answers the next statement.
async fn past_its_bound(c: &Client, sql: &str, set: &str, message: &str) {
    exec(c, set).await;
    let err = within(sql, STATEMENT_TIMEOUT, c.simple_query(sql))
        .await
        .expect_err("a query past its bound");
    let db = err.as_db_error().unwrap_or_else(|| panic!("not a server error: {err}"));
    assert_eq!(db.code().code(), "53400", "{}", db.message());
    assert!(db.message().contains(message), "{}", db.message());
    let sellers = query(c, "SELECT seller FROM auction WHERE id % 1000 = 0").await;
    assert!(!sellers.is_empty() && sellers.iter().all(|r| r.get::<_, i64>(0) >= 0));
}

/// q20 at the benchmark's time model holds every bid and every auction of
/// category 10 (a regular join keeps all it reads): at a
/// `join_state_rows_max` of all of them (counted here from the rows read
/// back) it returns every pair; at one under half (an instance holds at
/// least half) it stops with 53400 naming the bound.
#[tokio::test]
async fn q20_reaches_its_join_state_bound_at_flink_nexmark_time() {
    let (_server, c) = setup_sized(1_000_000, BASE_MS, ", 'event.rate' = 10000000").await;
    let bids = bids(&c).await;
    let category_10: BTreeSet<i64> = auctions(&c)
        .await
        .iter()
        .filter(|a| a.category == 10)
        .map(|a| a.id)
        .collect();
    let total = bids.len() + category_10.len();
    let pairs = bids.iter().filter(|b| category_10.contains(&b.auction)).count();
    assert!(total > 500_000 && pairs > 0, "{total} rows, {pairs} pairs");
    let (_, sql) = bench_sql("q20");
    exec(&c, &format!("SET join_state_rows_max = {total}")).await;
    assert_eq!(query(&c, &sql).await.len(), pairs, "q20 at a bound of its rows");
    let under = total / 2 - 1;
    past_its_bound(
        &c,
        &sql,
        &format!("SET join_state_rows_max = {under}"),
        &format!("join state limit reached: {under} rows held"),
    )
    .await;
}

/// q17 at the benchmark's time model keeps a group per auction and day:
/// at an `aggregate_groups_max` of all of them (counted here from the bids)
/// its changelog folds into one row a group; at one under half it stops
/// with 53400 naming the bound.
#[tokio::test]
async fn q17_reaches_its_aggregate_group_bound_at_flink_nexmark_time() {
    let (_server, c) = setup_sized(1_000_000, BASE_MS, ", 'event.rate' = 10000000").await;
    let groups: BTreeSet<(i64, String)> = bids(&c)
        .await
        .iter()
        .map(|b| (b.auction, utc_day_minute(b.ts).0))
        .collect();
    let total = groups.len();
    assert!(total > 20_000, "{total} groups");
    let (_, sql) = bench_sql("q17");
    exec(&c, &format!("SET aggregate_groups_max = {total}")).await;
    let rows = query(&c, &sql).await;
    let got = fold(
        "q17",
        rows.iter()
            .map(|r| (r.get::<_, String>(0), (r.get::<_, i64>(1), r.get::<_, String>(2)), ()))
            .collect(),
    );
    assert_eq!(
        got.into_keys().collect::<BTreeSet<_>>(),
        groups,
        "q17 at a bound of its groups"
    );
    let under = total / 2 - 1;
    past_its_bound(
        &c,
        &sql,
        &format!("SET aggregate_groups_max = {under}"),
        &format!("aggregate state limit reached: {under} groups in one instance"),
    )
    .await;
}

/// q5, q5 in full, q7 and q7_1s over the streams of `c`, against the
/// reference.
async fn check_window_queries(c: &Client) {
    let bids = bids(c).await;

    // q5: HOP 10 s every 2 s — a bid at t is in the windows starting at the
    // multiples of 2 s in (t - 10 s, t].
    let mut counts: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for b in &bids {
        let mut start = b.ts.div_euclid(2000) * 2000;
        while start > b.ts - 10_000 {
            *counts.entry((b.auction, start)).or_default() += 1;
            start -= 2000;
        }
    }
    let want: Vec<(i64, i64, i64, i64)> = counts.iter().map(|((a, s), n)| (*a, *n, *s, s + 10_000)).collect();
    let got: Vec<(i64, i64, i64, i64)> = run(c, "q5")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), ms(r.get(2)), ms(r.get(3))))
        .collect();
    assert_eq!(sorted(got), sorted(want), "q5");

    // q5 in full: per window, the auctions whose count is the window's
    // maximum (an aggregate over the window aggregate's rows, joined back).
    let mut max: BTreeMap<i64, i64> = BTreeMap::new();
    for ((_, start), n) in &counts {
        let m = max.entry(*start).or_insert(*n);
        *m = (*m).max(*n);
    }
    let want: Vec<(i64, i64)> = counts
        .iter()
        .filter(|((_, start), n)| max[start] == **n)
        .map(|((auction, _), n)| (*auction, *n))
        .collect();
    assert!(want.len() >= max.len(), "every window has a top auction");
    let got: Vec<(i64, i64)> = run(c, "q5_full").await.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(sorted(got), sorted(want), "q5 in full");

    // q7 (and q7_1s, its 1-second windows for the latency run): each
    // window's maximum price, then the bids with that price whose time lies
    // in [end - window, end], with every column Flink's q7 returns.
    for (name, window) in [("q7", 10_000), ("q7_1s", 1_000)] {
        let mut max: BTreeMap<i64, i64> = BTreeMap::new();
        for b in &bids {
            let end = b.ts.div_euclid(window) * window + window;
            let m = max.entry(end).or_insert(b.price);
            *m = (*m).max(b.price);
        }
        let mut want = Vec::new();
        for (end, price) in &max {
            for b in bids
                .iter()
                .filter(|b| b.price == *price && b.ts >= end - window && b.ts <= *end)
            {
                want.push((b.auction, b.price, b.bidder, b.ts, b.extra.clone()));
            }
        }
        assert!(want.len() >= max.len());
        let got: Vec<(i64, i64, i64, i64, String)> = run(c, name)
            .await
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), ms(r.get(3)), r.get(4)))
            .collect();
        assert_eq!(sorted(got), sorted(want), "{name}");
    }
}

#[tokio::test]
async fn q11_sessions_per_bidder_match_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    // Each bidder's bids in time order; a bid within 10 s of the session's
    // last bid (inclusive, as Flink's intersecting windows) extends it, else
    // starts a new one. A session is [first, last + 10 s).
    let mut by_bidder: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for b in &bids {
        by_bidder.entry(b.bidder).or_default().push(b.ts);
    }
    let mut want: Vec<(i64, i64, i64, i64)> = Vec::new();
    for (bidder, mut times) in by_bidder {
        times.sort_unstable();
        let (mut start, mut end, mut n) = (times[0], times[0] + 10_000, 0i64);
        for t in times {
            if t > end {
                want.push((bidder, n, start, end));
                (start, n) = (t, 0);
            }
            end = end.max(t + 10_000);
            n += 1;
        }
        want.push((bidder, n, start, end));
    }
    assert!(want.iter().any(|w| w.1 > 1), "some session holds several bids");
    let got: Vec<(i64, i64, i64, i64)> = run(&c, "q11")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), ms(r.get(2)), ms(r.get(3))))
        .collect();
    assert_eq!(sorted(got), sorted(want), "q11");
}

/// q20 is a regular join (no window, interval or TTL), kept by the rows
/// limit alone: every bid on an auction of category 10, with its auction.
#[tokio::test]
async fn q20_regular_join_matches_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    let auctions = auctions(&c).await;
    let by_id: HashMap<i64, &Auction> = auctions
        .iter()
        .filter(|a| a.category == 10)
        .map(|a| (a.id, a))
        .collect();
    let want: Vec<(i64, i64, i64, i64, i64, i64)> = bids
        .iter()
        .filter_map(|b| {
            by_id
                .get(&b.auction)
                .map(|a| (b.auction, b.bidder, b.price, b.ts, a.seller, a.ts))
        })
        .collect();
    assert!(!want.is_empty(), "q20 finds matches in this run");
    let got: Vec<(i64, i64, i64, i64, i64, i64)> = run(&c, "q20")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), ms(r.get(5)), r.get(13), ms(r.get(11))))
        .collect();
    assert_eq!(sorted(got), sorted(want), "q20");
}

#[tokio::test]
async fn q8_windowed_join_matches_the_reference() {
    let (_server, c) = setup().await;
    check_q8(&c).await;
}

/// q8 over the streams of `c`, against the reference.
async fn check_q8(c: &Client) {
    let persons = persons(c).await;
    let auctions = auctions(c).await;
    let window = |t: i64| t.div_euclid(10_000) * 10_000;
    let sellers: BTreeSet<(i64, i64)> = auctions.iter().map(|a| (a.seller, window(a.ts))).collect();
    let want: BTreeSet<(i64, String, i64)> = persons
        .iter()
        .filter(|p| sellers.contains(&(p.id, window(p.ts))))
        .map(|p| (p.id, p.name.clone(), window(p.ts)))
        .collect();
    assert!(!want.is_empty(), "q8 finds new sellers in this run");
    let got: Vec<(i64, String, i64)> = run(c, "q8")
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), ms(r.get(2))))
        .collect();
    assert_eq!(got.len(), want.len(), "q8 emits each (person, window) once");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
}

/// The UTC day (`yyyy-MM-dd`) and minute (`HH:mm`) of `ms` since the epoch,
/// by the civil-from-days algorithm (Howard Hinnant's `civil_from_days`).
fn utc_day_minute(ms: i64) -> (String, String) {
    let days = ms.div_euclid(86_400_000);
    let minute_of_day = ms.rem_euclid(86_400_000) / 60_000;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{:02}:{:02}", minute_of_day / 60, minute_of_day % 60),
    )
}

#[test]
fn utc_days_and_minutes_are_right() {
    assert_eq!(utc_day_minute(0), ("1970-01-01".into(), "00:00".into()));
    // 2027-01-15T23:59:53Z and seven seconds later.
    assert_eq!(
        utc_day_minute(MIDNIGHT_MS - 7_000),
        ("2027-01-15".into(), "23:59".into())
    );
    assert_eq!(utc_day_minute(MIDNIGHT_MS), ("2027-01-16".into(), "00:00".into()));
    assert_eq!(utc_day_minute(951_782_400_000), ("2000-02-29".into(), "00:00".into()));
}

/// Midnight UTC of 2027-01-16: the updating queries' run starts 7 s before
/// it, so their per-day groups see two days.
const MIDNIGHT_MS: i64 = 1_800_057_600_000;

/// Folds a changelog (op, key, row) into the table it describes, checking
/// it: `+I` only for a key not in the table, `-U`/`-D` exactly the row the
/// key shows, each `-U` followed by the `+U` of its key.
fn fold<K: Ord + Clone + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
    name: &str,
    changes: Vec<(String, K, V)>,
) -> BTreeMap<K, V> {
    let mut table = BTreeMap::new();
    let mut updating: Option<K> = None;
    for (op, key, row) in changes {
        if let Some(k) = updating.take() {
            assert!(
                op == "+U" && k == key,
                "{name}: -U of {k:?} followed by {op} of {key:?}"
            );
            table.insert(key, row);
            continue;
        }
        match op.as_str() {
            "+I" => assert!(
                table.insert(key.clone(), row).is_none(),
                "{name}: +I of {key:?}, already shown"
            ),
            "-U" | "-D" => {
                let shown = table.remove(&key);
                assert_eq!(
                    shown.as_ref(),
                    Some(&row),
                    "{name}: {op} of {key:?} retracts another row"
                );
                if op == "-U" {
                    updating = Some(key);
                }
            }
            other => panic!("{name}: op {other}"),
        }
    }
    assert!(updating.is_none(), "{name}: a -U without its +U");
    table
}

/// Counts and distinct sets of bids in Nexmark's three price ranks.
#[derive(Default)]
struct Ranks {
    bids: [i64; 4],
    bidders: [BTreeSet<i64>; 4],
    auctions: [BTreeSet<i64>; 4],
}

impl Ranks {
    fn add(&mut self, b: &Bid) {
        let rank = match b.price {
            p if p < 10_000 => 1,
            p if p < 1_000_000 => 2,
            _ => 3,
        };
        for r in [0, rank] {
            self.bids[r] += 1;
            self.bidders[r].insert(b.bidder);
            self.auctions[r].insert(b.auction);
        }
    }

    /// total, rank1–3 bids, total, rank1–3 bidders, total, rank1–3 auctions.
    fn columns(&self) -> Vec<i64> {
        let mut v = self.bids.to_vec();
        v.extend(self.bidders.iter().map(|s| s.len() as i64));
        v.extend(self.auctions.iter().map(|s| s.len() as i64));
        v
    }
}

fn ints(r: &tokio_postgres::Row, from: usize, n: usize) -> Vec<i64> {
    (from..from + n).map(|i| r.get(i)).collect()
}

#[tokio::test]
async fn updating_queries_q15_q16_q17_fold_into_the_reference() {
    let (_server, c) = setup_at(MIDNIGHT_MS - 7_000).await;
    let bids = bids(&c).await;
    let day = |b: &Bid| utc_day_minute(b.ts).0;
    let mut days: BTreeSet<String> = BTreeSet::new();

    // q15: per day.
    let mut want: BTreeMap<String, Ranks> = BTreeMap::new();
    for b in &bids {
        days.insert(day(b));
        want.entry(day(b)).or_default().add(b);
    }
    assert_eq!(days.len(), 2, "the run crosses midnight");
    let rows = run(&c, "q15").await;
    assert!(rows.len() > days.len(), "q15 updates its days as bids arrive");
    let names: Vec<&str> = rows[0].columns().iter().take(3).map(|c| c.name()).collect();
    assert_eq!(
        names,
        ["op", "day", "total_bids"],
        "a changelog's op column comes first"
    );
    let got = fold(
        "q15",
        rows.iter()
            .map(|r| (r.get(0), r.get::<_, String>(1), ints(r, 2, 12)))
            .collect(),
    );
    let want: BTreeMap<String, Vec<i64>> = want.into_iter().map(|(k, r)| (k, r.columns())).collect();
    assert_eq!(got, want, "q15");
    // Split over buckets (SET distinct_split_buckets): partials by day and
    // bucket of bidder, of auction, on both instances, and a final sum of
    // their changelogs, which must fold to the same table.
    exec(&c, "SET distinct_split_buckets = 8").await;
    let rows = run(&c, "q15").await;
    exec(&c, "SET distinct_split_buckets = 0").await;
    let got = fold(
        "q15 split",
        rows.iter()
            .map(|r| (r.get(0), r.get::<_, String>(1), ints(r, 2, 12)))
            .collect(),
    );
    assert_eq!(got, want, "q15 split");

    // q16: per channel and day, with the last minute.
    let mut want: BTreeMap<(String, String), (String, Ranks)> = BTreeMap::new();
    for b in &bids {
        let (d, minute) = utc_day_minute(b.ts);
        let entry = want.entry((b.channel.clone(), d)).or_default();
        entry.0 = entry.0.clone().max(minute);
        entry.1.add(b);
    }
    let got = fold(
        "q16",
        run(&c, "q16")
            .await
            .iter()
            .map(|r| {
                let key = (r.get::<_, String>(1), r.get::<_, String>(2));
                (r.get(0), key, (r.get::<_, String>(3), ints(r, 4, 12)))
            })
            .collect(),
    );
    let want: BTreeMap<_, _> = want.into_iter().map(|(k, (m, r))| (k, (m, r.columns()))).collect();
    assert_eq!(got.len(), want.len(), "q16 channels × days");
    assert_eq!(got, want, "q16");

    // q17: per auction and day: rank counts, min, max, avg, sum of prices.
    let mut prices: BTreeMap<(i64, String), Vec<i64>> = BTreeMap::new();
    for b in &bids {
        prices.entry((b.auction, day(b))).or_default().push(b.price);
    }
    let want: BTreeMap<(i64, String), (Vec<i64>, f64, i64)> = prices
        .into_iter()
        .map(|(k, p)| {
            let rank = |lo: i64, hi: i64| p.iter().filter(|x| (lo..hi).contains(x)).count() as i64;
            let sum: i64 = p.iter().sum();
            let counts = vec![
                p.len() as i64,
                rank(i64::MIN, 10_000),
                rank(10_000, 1_000_000),
                rank(1_000_000, i64::MAX),
                *p.iter().min().unwrap(),
                *p.iter().max().unwrap(),
            ];
            (k, (counts, sum as f64 / p.len() as f64, sum))
        })
        .collect();
    let rows = run(&c, "q17").await;
    let updates = rows.iter().filter(|r| r.get::<_, String>(0) == "-U").count();
    assert!(updates > 0, "q17 updates auctions as their bids arrive");
    let got = fold(
        "q17",
        rows.iter()
            .map(|r| {
                let key = (r.get::<_, i64>(1), r.get::<_, String>(2));
                (r.get(0), key, (ints(r, 3, 6), r.get::<_, f64>(9), r.get::<_, i64>(10)))
            })
            .collect(),
    );
    assert_eq!(got.len(), want.len(), "q17 auctions × days");
    assert_eq!(got, want, "q17");
}

#[tokio::test]
async fn q4_average_closing_price_over_a_changelog_matches_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    let auctions = auctions(&c).await;
    // Each auction's highest bid between its start and its expiry, then
    // the average of those per category.
    let by_id: HashMap<i64, &Auction> = auctions.iter().map(|a| (a.id, a)).collect();
    let mut closing: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for b in &bids {
        if let Some(a) = by_id.get(&b.auction)
            && (a.ts..=a.expires).contains(&b.ts)
        {
            let entry = closing.entry(a.id).or_insert((a.category, b.price));
            entry.1 = entry.1.max(b.price);
        }
    }
    let mut per_category: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (category, price) in closing.values() {
        per_category.entry(*category).or_default().push(*price);
    }
    let want: BTreeMap<i64, f64> = per_category
        .iter()
        .map(|(k, p)| (*k, p.iter().sum::<i64>() as f64 / p.len() as f64))
        .collect();
    assert!(want.len() > 1, "q4 sees several categories");
    let rows = run(&c, "q4").await;
    assert!(
        rows.iter().any(|r| r.get::<_, String>(0) == "-U"),
        "q4's averages change as auctions' maxima rise"
    );
    // The changelog's averages as their bits, so fold compares them exactly.
    let got = fold(
        "q4",
        rows.iter()
            .map(|r| (r.get(0), r.get::<_, i64>(1), r.get::<_, f64>(2).to_bits()))
            .collect(),
    );
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "q4 categories"
    );
    for (k, avg) in &want {
        let got = f64::from_bits(got[k]);
        assert!(
            (got - avg).abs() <= avg.abs() * 1e-9,
            "q4 category {k}: {got} (the engine) vs {avg} (the reference)"
        );
    }
    // The same changelog of closing prices through min, max and
    // count(DISTINCT): each retraction of an auction's old maximum must
    // leave the others' values (kept as a multiset per category).
    let extremes = "SELECT q.category, min(q.final), max(q.final), count(DISTINCT q.final) FROM (\
                    SELECT max(b.price) AS final, a.category FROM auction AS a, bid AS b \
                    WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires \
                    GROUP BY a.id, a.category) AS q GROUP BY q.category";
    let got = fold(
        "q4 extremes",
        query(&c, extremes)
            .await
            .iter()
            .map(|r| {
                let row: (i64, i64, i64) = (r.get(2), r.get(3), r.get(4));
                (r.get(0), r.get::<_, i64>(1), row)
            })
            .collect(),
    );
    let want: BTreeMap<i64, (i64, i64, i64)> = per_category
        .iter()
        .map(|(k, p)| {
            let distinct = p.iter().collect::<BTreeSet<_>>().len() as i64;
            (*k, (*p.iter().min().unwrap(), *p.iter().max().unwrap(), distinct))
        })
        .collect();
    assert_eq!(
        got, want,
        "min, max and count(DISTINCT) of the closing prices per category"
    );
}

/// A bid as the top-N queries return it: (auction, bidder, price, time).
type BidRow = (i64, i64, i64, i64);

#[tokio::test]
async fn top_n_queries_q18_q19_q9_fold_into_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    let auctions = auctions(&c).await;
    let all: BTreeSet<BidRow> = bids.iter().map(|b| (b.auction, b.bidder, b.price, b.ts)).collect();

    // q18: each (bidder, auction)'s last bid. Bids of a pair at the same
    // time tie (the engine keeps the one that reached it first, which the
    // reference cannot know): the row must be one of the pair's latest.
    let mut latest: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for b in &bids {
        let t = latest.entry((b.bidder, b.auction)).or_insert(b.ts);
        *t = (*t).max(b.ts);
    }
    let rows = run(&c, "q18").await;
    assert!(
        rows.iter().any(|r| r.get::<_, String>(0) == "-U"),
        "q18 replaces pairs' rows"
    );
    let got = fold(
        "q18",
        rows.iter()
            .map(|r| {
                let bid: BidRow = (r.get(1), r.get(2), r.get(3), ms(r.get(6)));
                (r.get(0), (bid.1, bid.0), bid)
            })
            .collect(),
    );
    assert_eq!(got.len(), latest.len(), "q18: one row per (bidder, auction)");
    for (pair, bid) in &got {
        assert_eq!(bid.3, latest[pair], "q18 {pair:?}: not the latest bid");
        assert!(all.contains(bid), "q18 {pair:?}: {bid:?} is no bid");
    }

    // q19: each auction's ten highest bids, by rank.
    let mut prices: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for b in &bids {
        prices.entry(b.auction).or_default().push(b.price);
    }
    let want: BTreeMap<(i64, i64), i64> = prices
        .into_iter()
        .flat_map(|(auction, mut p)| {
            p.sort_unstable_by(|a, b| b.cmp(a));
            p.into_iter()
                .take(10)
                .enumerate()
                .map(move |(i, price)| ((auction, i as i64 + 1), price))
        })
        .collect();
    let rows = run(&c, "q19").await;
    let got = fold(
        "q19",
        rows.iter()
            .map(|r| {
                let bid: BidRow = (r.get(1), r.get(2), r.get(3), ms(r.get(6)));
                (r.get(0), (bid.0, r.get::<_, i64>(8)), bid)
            })
            .collect(),
    );
    let got_prices: BTreeMap<(i64, i64), i64> = got.iter().map(|(k, b)| (*k, b.2)).collect();
    assert_eq!(got_prices, want, "q19: each auction's ten highest prices, by rank");
    assert!(got.values().all(|b| all.contains(b)), "q19 rows are bids");

    // q9: each auction's highest bid in its lifetime, the earliest of equal ones.
    let by_id: HashMap<i64, &Auction> = auctions.iter().map(|a| (a.id, a)).collect();
    let mut best: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for b in &bids {
        if let Some(a) = by_id.get(&b.auction)
            && (a.ts..=a.expires).contains(&b.ts)
        {
            let entry = best.entry(a.id).or_insert((b.price, b.ts));
            if (b.price, -b.ts) > (entry.0, -entry.1) {
                *entry = (b.price, b.ts);
            }
        }
    }
    let rows = run(&c, "q9").await;
    let got = fold(
        "q9",
        rows.iter()
            .map(|r| {
                let auction: (i64, i64, i64) = (r.get(1), r.get(8), r.get(9));
                let bid: BidRow = (r.get(11), r.get(12), r.get(13), ms(r.get(14)));
                (r.get(0), auction.0, (auction, bid))
            })
            .collect(),
    );
    assert_eq!(
        got.len(),
        best.len(),
        "q9: one row per auction with a bid in its lifetime"
    );
    for (id, ((_, seller, category), bid)) in &got {
        let a = by_id[id];
        assert_eq!(
            (*seller, *category, bid.0),
            (a.seller, a.category, *id),
            "q9 {id}: the auction's columns"
        );
        assert_eq!(
            (bid.2, bid.3),
            best[id],
            "q9 {id}: the winning price and its earliest time"
        );
        assert!(all.contains(bid), "q9 {id}: {bid:?} is no bid");
    }
}

/// Folds a changelog of rows without a unique key into a multiset (row →
/// copies): a `-U` or `-D` must take back a row shown, a `-U` be followed
/// by a `+U`.
fn fold_multiset<R: Ord + Clone + std::fmt::Debug>(name: &str, changes: Vec<(String, R)>) -> BTreeMap<R, u64> {
    let mut table: BTreeMap<R, u64> = BTreeMap::new();
    let mut after_minus_u = false;
    for (op, row) in changes {
        assert!(!after_minus_u || op == "+U", "{name}: a -U followed by {op}");
        after_minus_u = op == "-U";
        match op.as_str() {
            "+I" | "+U" => *table.entry(row).or_insert(0) += 1,
            "-U" | "-D" => {
                let n = table.get_mut(&row);
                let Some(n) = n else {
                    panic!("{name}: {op} of {row:?}, not shown")
                };
                *n -= 1;
                if *n == 0 {
                    table.remove(&row);
                }
            }
            other => panic!("{name}: op {other}"),
        }
    }
    assert!(!after_minus_u, "{name}: a -U without its +U");
    table
}

/// q6: each auction's winning bid (highest price between its start and its
/// expiry, the earliest of equal ones), then per seller the average of
/// each winner's price with the seller's 10 winners before it by the
/// winning bids' times (peers by price: the OVER aggregate takes rows of
/// one time in the order of the columns it reads — seller, price, time —
/// and rows equal in those are alike). An OVER aggregate over a changelog:
/// winners change as higher bids come.
#[tokio::test]
async fn q6_over_a_changelog_folds_into_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    let auctions = auctions(&c).await;
    let by_id: HashMap<i64, &Auction> = auctions.iter().map(|a| (a.id, a)).collect();
    let mut winner: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for b in &bids {
        if let Some(a) = by_id.get(&b.auction)
            && (a.ts..=a.expires).contains(&b.ts)
        {
            let w = winner.entry(a.id).or_insert((b.price, b.ts));
            // Highest price, then earliest time.
            if (b.price, -b.ts) > (w.0, -w.1) {
                *w = (b.price, b.ts);
            }
        }
    }
    let mut per_seller: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (id, (price, ts)) in &winner {
        per_seller.entry(by_id[id].seller).or_default().push((*ts, *price));
    }
    let mut want: BTreeMap<(i64, u64), u64> = BTreeMap::new();
    for (seller, mut rows) in per_seller {
        rows.sort_unstable();
        for i in 0..rows.len() {
            let frame = &rows[i.saturating_sub(10)..=i];
            let avg = frame.iter().map(|r| r.1).sum::<i64>() as f64 / frame.len() as f64;
            *want.entry((seller, avg.to_bits())).or_insert(0) += 1;
        }
    }
    assert!(
        want.values().sum::<u64>() > 100,
        "q6 sees many closed auctions in this run"
    );
    let rows = run(&c, "q6").await;
    assert!(
        rows.iter().any(|r| r.get::<_, String>(0) == "-U"),
        "q6's averages change as winners change"
    );
    let got = fold_multiset(
        "q6",
        rows.iter()
            .map(|r| (r.get(0), (r.get::<_, i64>(1), r.get::<_, f64>(2).to_bits())))
            .collect(),
    );
    let only = |a: &BTreeMap<(i64, u64), u64>, b: &BTreeMap<(i64, u64), u64>| -> Vec<(i64, f64, u64)> {
        a.iter()
            .filter(|(k, n)| b.get(*k) != Some(*n))
            .map(|((s, avg), n)| (*s, f64::from_bits(*avg), *n))
            .collect()
    };
    assert!(
        got == want,
        "q6: (seller, average, copies) per closed auction; only the engine's: {:?}; only the reference's: {:?}",
        only(&got, &want).iter().take(20).collect::<Vec<_>>(),
        only(&want, &got).iter().take(20).collect::<Vec<_>>()
    );
}

/// q14: bids whose converted price is between 1 M and 50 M, with the time
/// of day typed by the UTC hour and the 'c's of `extra` counted. Event
/// time advances 10 events a second from 05:00 UTC, so the run spans
/// 05:00-09:10: night, other and day hours.
#[tokio::test]
async fn q14_matches_the_reference() {
    let hour_ms = 3_600_000;
    let five_am = BASE_MS.div_euclid(86_400_000) * 86_400_000 + 5 * hour_ms;
    let (_server, c) = setup_with(five_am, ", 'event.rate' = 10").await;
    let bids = bids(&c).await;
    type Q14 = (i64, i64, String, i64, String, i32, u64);
    let want: Vec<Q14> = bids
        .iter()
        .filter(|b| {
            let p = 0.908 * b.price as f64;
            p > 1_000_000.0 && p < 50_000_000.0
        })
        .map(|b| {
            let hour = b.ts.rem_euclid(86_400_000) / hour_ms;
            let kind = match hour {
                8..=18 => "dayTime",
                h if h <= 6 || h >= 20 => "nightTime",
                _ => "otherTime",
            };
            (
                b.auction,
                b.bidder,
                kind.to_string(),
                b.ts,
                b.extra.clone(),
                b.extra.matches('c').count() as i32,
                (0.908 * b.price as f64).to_bits(),
            )
        })
        .collect();
    let kinds: BTreeSet<&str> = want.iter().map(|w| w.2.as_str()).collect();
    assert_eq!(kinds.len(), 3, "q14's run spans every kind of hour: {kinds:?}");
    assert!(want.iter().any(|w| w.5 > 0), "some extra has a 'c'");
    let got: Vec<Q14> = run(&c, "q14")
        .await
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(3),
                ms(r.get(4)),
                r.get(5),
                r.get(6),
                r.get::<_, f64>(2).to_bits(),
            )
        })
        .collect();
    assert_eq!(sorted(got), sorted(want), "q14");
}

/// q23: every bid whose bidder is a person who also sells, with the person
/// and each of their auctions — a three-way join of regular joins.
#[tokio::test]
async fn q23_multi_way_join_matches_the_reference() {
    let (_server, c) = setup().await;
    let bids = bids(&c).await;
    let persons = persons(&c).await;
    let auctions = auctions(&c).await;
    let person: HashMap<i64, &Person> = persons.iter().map(|p| (p.id, p)).collect();
    let mut sold: HashMap<i64, Vec<&Auction>> = HashMap::new();
    for a in &auctions {
        sold.entry(a.seller).or_default().push(a);
    }
    /// (bid, its person, one of their auctions).
    type Q23 = (
        (i64, i64, String, String),
        (String, String, String, String, String, String),
        (String, i64, i64, String),
    );
    let mut want: Vec<Q23> = Vec::new();
    for b in &bids {
        let (Some(p), Some(sold)) = (person.get(&b.bidder), sold.get(&b.bidder)) else {
            continue;
        };
        for a in sold {
            want.push((
                (b.bidder, b.price, b.channel.clone(), b.extra.clone()),
                (
                    p.name.clone(),
                    p.email.clone(),
                    p.card.clone(),
                    p.city.clone(),
                    p.state.clone(),
                    p.extra.clone(),
                ),
                (a.item_name.clone(), a.ts, a.category, a.extra.clone()),
            ));
        }
    }
    assert!(
        want.len() > 100,
        "q23 finds bidders who sell in this run: {}",
        want.len()
    );
    let got: Vec<Q23> = run(&c, "q23")
        .await
        .iter()
        .map(|r| {
            let person_id: i64 = r.get(5);
            let seller: i64 = r.get(18);
            assert_eq!((person_id, seller), (r.get(0), r.get(0)), "q23 joins on the bidder");
            (
                (r.get(0), r.get(1), r.get(2), r.get(4)),
                (r.get(6), r.get(7), r.get(8), r.get(9), r.get(10), r.get(11)),
                (r.get(12), ms(r.get(16)), r.get(19), r.get(20)),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len(), "q23 rows");
    assert_eq!(sorted(got), sorted(want), "q23");
}
