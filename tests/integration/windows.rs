//! Window aggregates over a bounded Nexmark bid stream, checked against a
//! reference model computed in Rust from the stream's raw rows (fetched by a
//! plain pass-through query; the generator is deterministic per seed).
//!
//! With 10,000 events per second of event time, 50,000 events span 5 s, so
//! the windows below are sized in hundreds of milliseconds to seconds.

use crate::common::TestServer;
use crate::support::{Bid, NEXMARK_BASE_TIME_MS, all_bids, bids_in, create_bid_stream, epoch_ms, exec, query};
use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

const EVENTS: u64 = 50_000;
const SEED: u64 = 7;

/// One output row of the aggregate query below.
#[derive(Debug, Clone, PartialEq)]
struct WindowRow {
    start_ms: i64,
    end_ms: i64,
    auction: i64,
    bids: i64,
    total: i64,
    top: i64,
    bottom: i64,
    bidders: i64,
    mean: f64,
}

impl WindowRow {
    fn key(&self) -> (i64, i64, i64) {
        (self.start_ms, self.end_ms, self.auction)
    }
}

/// The aggregates of one window and key.
#[derive(Default)]
struct Acc {
    bids: i64,
    total: i64,
    top: Option<i64>,
    bottom: Option<i64>,
    bidders: BTreeSet<i64>,
}

impl Acc {
    fn add(&mut self, b: &Bid) {
        self.bids += 1;
        self.total += b.price;
        self.top = Some(self.top.map_or(b.price, |t| t.max(b.price)));
        self.bottom = Some(self.bottom.map_or(b.price, |t| t.min(b.price)));
        self.bidders.insert(b.bidder);
    }

    fn row(&self, start_ms: i64, end_ms: i64, auction: i64) -> WindowRow {
        WindowRow {
            start_ms,
            end_ms,
            auction,
            bids: self.bids,
            total: self.total,
            top: self.top.expect("non-empty window"),
            bottom: self.bottom.expect("non-empty window"),
            bidders: self.bidders.len() as i64,
            mean: self.total as f64 / self.bids as f64,
        }
    }
}

/// Reference: windows given by `windows_of(ts)` (half-open `[start, end)`).
fn fixed_windows(bids: &[Bid], windows_of: impl Fn(i64) -> Vec<(i64, i64)>) -> Vec<WindowRow> {
    let mut groups: BTreeMap<(i64, i64, i64), Acc> = BTreeMap::new();
    for b in bids {
        for (start, end) in windows_of(b.ts_ms) {
            groups.entry((start, end, b.auction)).or_default().add(b);
        }
    }
    groups.iter().map(|((s, e, a), acc)| acc.row(*s, *e, *a)).collect()
}

/// Reference TUMBLE: the window `[floor(ts / size) * size, … + size)`.
fn tumble_reference(bids: &[Bid], size_ms: i64) -> Vec<WindowRow> {
    fixed_windows(bids, |ts| {
        let start = ts.div_euclid(size_ms) * size_ms;
        vec![(start, start + size_ms)]
    })
}

/// Reference HOP: every `[s, s + size)` with `s` a multiple of `slide` that
/// contains `ts`, found by scanning the candidate starts.
fn hop_reference(bids: &[Bid], slide_ms: i64, size_ms: i64) -> Vec<WindowRow> {
    fixed_windows(bids, |ts| {
        let first = (ts - size_ms).div_euclid(slide_ms) * slide_ms;
        (0..)
            .map(|k| first + k * slide_ms)
            .take_while(|s| *s <= ts)
            .filter(|s| *s <= ts && ts < s + size_ms)
            .map(|s| (s, s + size_ms))
            .collect()
    })
}

/// Reference SESSION per auction: rows sorted by time, a new session where
/// the distance to the previous row is more than `gap` (sessions that touch
/// merge, as in Flink); a session is `[first row, last row + gap)`.
fn session_reference(bids: &[Bid], gap_ms: i64) -> Vec<WindowRow> {
    let mut per_key: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for b in bids {
        per_key.entry(b.auction).or_default().push(*b);
    }
    let mut out = Vec::new();
    for (auction, mut rows) in per_key {
        rows.sort_by_key(|b| b.ts_ms);
        let mut acc = Acc::default();
        let (mut first, mut last) = (rows[0].ts_ms, rows[0].ts_ms);
        for b in &rows {
            if b.ts_ms - last > gap_ms {
                out.push(acc.row(first, last + gap_ms, auction));
                acc = Acc::default();
                first = b.ts_ms;
            }
            last = b.ts_ms;
            acc.add(b);
        }
        out.push(acc.row(first, last + gap_ms, auction));
    }
    out.sort_by_key(WindowRow::key);
    out
}

/// The aggregate query over window TVF `window` (e.g. `TUMBLE(b, …)`).
fn window_sql(window: &str) -> String {
    format!(
        "SELECT window_start, window_end, auction, count(*) AS bids, sum(price) AS total, max(price) AS top, \
         min(price) AS bottom, count(DISTINCT bidder) AS bidders, avg(price) AS mean \
         FROM {window} GROUP BY window_start, window_end, auction"
    )
}

/// Runs the window query at `parallelism`; rows sorted by window and key.
async fn run_windows(client: &tokio_postgres::Client, window: &str, parallelism: u32) -> Vec<WindowRow> {
    exec(client, &format!("SET parallelism = {parallelism}")).await;
    let rows = query(client, &window_sql(window)).await;
    let mut out: Vec<WindowRow> = rows
        .iter()
        .map(|r| WindowRow {
            start_ms: epoch_ms(r.get::<_, SystemTime>("window_start")),
            end_ms: epoch_ms(r.get::<_, SystemTime>("window_end")),
            auction: r.get("auction"),
            bids: r.get("bids"),
            total: r.get("total"),
            top: r.get("top"),
            bottom: r.get("bottom"),
            bidders: r.get("bidders"),
            mean: r.get("mean"),
        })
        .collect();
    out.sort_by_key(WindowRow::key);
    out
}

fn same_row(a: &WindowRow, b: &WindowRow) -> bool {
    let ints = (
        a.start_ms, a.end_ms, a.auction, a.bids, a.total, a.top, a.bottom, a.bidders,
    ) == (
        b.start_ms, b.end_ms, b.auction, b.bids, b.total, b.top, b.bottom, b.bidders,
    );
    ints && (a.mean - b.mean).abs() <= 1e-9 * a.mean.abs().max(1.0)
}

/// Asserts equal row lists, reporting the first difference.
fn assert_rows_eq(what: &str, actual: &[WindowRow], expected: &[WindowRow]) {
    if let Some(i) = (0..actual.len().min(expected.len())).find(|i| !same_row(&actual[*i], &expected[*i])) {
        panic!(
            "{what}: first difference at row {i}:\n  actual   {:?}\n  expected {:?}",
            actual[i], expected[i]
        );
    }
    assert_eq!(actual.len(), expected.len(), "{what}: row counts differ");
}

/// Starts a server with the bid stream `b` and returns its raw rows.
async fn server_with_bids() -> (TestServer, tokio_postgres::Client, Vec<Bid>) {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, &create_bid_stream("b", EVENTS, SEED)).await;
    let bids = all_bids(&client, "b").await;
    assert_eq!(bids.len(), bids_in(EVENTS), "the pass-through query returns every bid");
    let distinct: BTreeSet<Bid> = bids.iter().copied().collect();
    assert!(distinct.len() > bids.len() * 9 / 10, "bids look degenerate");
    // Event n happens n / 10 ms after the base time (10,000 events per second).
    let first = bids.iter().map(|b| b.ts_ms).min();
    let last = bids.iter().map(|b| b.ts_ms).max();
    assert_eq!(first, Some(NEXMARK_BASE_TIME_MS));
    assert_eq!(last, Some(NEXMARK_BASE_TIME_MS + (EVENTS as i64 - 1) / 10));
    (server, client, bids)
}

/// Checks a window kind at parallelism 1 and 4 against the reference;
/// returns the rows at parallelism 4.
async fn check_window(client: &tokio_postgres::Client, window: &str, expected: &[WindowRow]) -> Vec<WindowRow> {
    let p1 = run_windows(client, window, 1).await;
    assert_rows_eq(&format!("{window} at parallelism 1"), &p1, expected);
    let p4 = run_windows(client, window, 4).await;
    assert_rows_eq(&format!("{window} at parallelism 4"), &p4, expected);
    assert_rows_eq(&format!("{window}: parallelism 4 vs 1"), &p4, &p1);
    p4
}

#[tokio::test]
async fn tumble_matches_reference_at_parallelism_1_and_4() {
    let (_server, client, bids) = server_with_bids().await;
    let expected = tumble_reference(&bids, 1000);
    // Sanity of the reference itself: several windows, every bid in one.
    let windows: BTreeSet<i64> = expected.iter().map(|r| r.start_ms).collect();
    assert!(
        windows.len() >= 5,
        "expected at least 5 one-second windows, got {}",
        windows.len()
    );
    assert_eq!(expected.iter().map(|r| r.bids).sum::<i64>(), bids.len() as i64);

    let p4 = check_window(&client, "TUMBLE(b, date_time, INTERVAL '1' SECOND)", &expected).await;
    // No bid is dropped as late (ordered times, 2 s delay): counts add up to the input.
    assert_eq!(
        p4.iter().map(|r| r.bids).sum::<i64>(),
        bids.len() as i64,
        "every bid counted once"
    );
}

#[tokio::test]
async fn hop_matches_reference_at_parallelism_1_and_4() {
    let (_server, client, bids) = server_with_bids().await;
    // A size that is not a multiple of the slide: each bid is in 3 or 4 windows.
    let (slide, size) = (300, 1000);
    let expected = hop_reference(&bids, slide, size);
    // A bid at ts is in the windows starting at the multiples of slide in (ts - size, ts].
    let memberships: i64 = bids
        .iter()
        .map(|b| b.ts_ms.div_euclid(slide) - (b.ts_ms - size).div_euclid(slide))
        .sum();
    assert_eq!(expected.iter().map(|r| r.bids).sum::<i64>(), memberships);
    assert!(memberships > 3 * bids.len() as i64);

    let window = format!("HOP(b, date_time, INTERVAL '{slide}' MILLISECOND, INTERVAL '1' SECOND)");
    check_window(&client, &window, &expected).await;
}

#[tokio::test]
async fn session_matches_reference_at_parallelism_1_and_4() {
    let (_server, client, bids) = server_with_bids().await;
    let gap = 50;
    let expected = session_reference(&bids, gap);
    // The data must exercise both merging and splitting of sessions.
    let mut sessions_per_auction: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &expected {
        *sessions_per_auction.entry(r.auction).or_default() += 1;
    }
    assert!(
        sessions_per_auction.values().any(|n| *n >= 2),
        "no auction has two sessions"
    );
    assert!(expected.iter().any(|r| r.bids >= 3), "no session has three bids");
    assert_eq!(expected.iter().map(|r| r.bids).sum::<i64>(), bids.len() as i64);

    check_window(
        &client,
        &format!("SESSION(b, date_time, INTERVAL '{gap}' MILLISECOND)"),
        &expected,
    )
    .await;
}

#[test]
fn reference_models_agree_with_hand_computation() {
    let bid = |auction, price, ts_ms| Bid {
        auction,
        bidder: price % 3,
        price,
        ts_ms,
    };
    let bids = [
        bid(1, 10, 0),
        bid(1, 20, 999),
        bid(1, 30, 1000),
        bid(2, 5, 1500),
        bid(1, 40, 1060),
    ];
    let t = tumble_reference(&bids, 1000);
    let keys: Vec<_> = t.iter().map(|r| (r.key(), r.bids, r.total)).collect();
    assert_eq!(
        keys,
        vec![((0, 1000, 1), 2, 30), ((1000, 2000, 1), 2, 70), ((1000, 2000, 2), 1, 5)]
    );
    // HOP slide 300 size 1000: ts 999 is in [0,1000), [300,1300), [600,1600), [900,1900).
    let h = hop_reference(&[bid(1, 1, 999)], 300, 1000);
    let starts: Vec<i64> = h.iter().map(|r| r.start_ms).collect();
    assert_eq!(starts, vec![0, 300, 600, 900]);
    // SESSION gap 50: 1000 and 1060 are 60 apart → two sessions for auction 1 after 999.
    let s = session_reference(&bids, 50);
    let sessions: Vec<_> = s.iter().map(|r| (r.key(), r.bids)).collect();
    assert_eq!(
        sessions,
        vec![
            ((0, 50, 1), 1),
            ((999, 1050, 1), 2),
            ((1060, 1110, 1), 1),
            ((1500, 1550, 2), 1)
        ]
    );
}

/// A memory stream fed one INSERT at a time (each INSERT is one batch, and
/// the source advances the watermark after each): a row behind the
/// watermark whose window has fired is dropped and counted. Expected rows
/// computed by hand.
#[tokio::test]
async fn late_rows_are_dropped_and_counted() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE STREAM clicks (user_id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)",
    )
    .await;
    exec(
        &client,
        "CREATE STREAM per_user AS SELECT window_start, window_end, user_id, count(*) AS clicks \
         FROM TUMBLE(clicks, ts, INTERVAL '5' SECOND) GROUP BY window_start, window_end, user_id",
    )
    .await;
    let at = |s: u32| format!("TIMESTAMP '2026-01-01 00:00:{s:02}'");
    for (user, second) in [(1, 1), (2, 3), (1, 4), (1, 9), (2, 2), (2, 6), (3, 30)] {
        // After (1, 9) the watermark is 7 s: [0 s, 5 s) fires and (2, 2) is late.
        // (3, 30) moves the watermark to 28 s and fires [5 s, 10 s).
        exec(&client, &format!("INSERT INTO clicks VALUES ({user}, {})", at(second))).await;
    }
    // `date -u -d '2026-01-01' +%s` = 1767225600.
    let base_ms = 1_767_225_600_000i64;
    let expected = vec![
        (base_ms, base_ms + 5000, 1, 2),
        (base_ms, base_ms + 5000, 2, 1),
        (base_ms + 5000, base_ms + 10_000, 1, 1),
        (base_ms + 5000, base_ms + 10_000, 2, 1),
    ];
    let read = |rows: Vec<tokio_postgres::Row>| {
        let mut v: Vec<(i64, i64, i64, i64)> = rows
            .iter()
            .map(|r| {
                (
                    epoch_ms(r.get::<_, SystemTime>(0)),
                    epoch_ms(r.get::<_, SystemTime>(1)),
                    r.get::<_, i64>(2),
                    r.get::<_, i64>(3),
                )
            })
            .collect();
        v.sort();
        v
    };
    // The derived stream (a background pipeline) …
    let derived = query(
        &client,
        "SELECT window_start, window_end, user_id, clicks FROM per_user LIMIT 4",
    )
    .await;
    assert_eq!(read(derived), expected);
    // … and the same query run by the session over the whole log agree.
    let direct = query(
        &client,
        "SELECT window_start, window_end, user_id, count(*) AS clicks FROM TUMBLE(clicks, ts, INTERVAL '5' SECOND) \
         GROUP BY window_start, window_end, user_id LIMIT 4",
    )
    .await;
    assert_eq!(read(direct), expected);
    // Counters of tasks on other workers arrive with their heartbeats
    // (every second): wait for the late row to be counted, at most 10 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let p = loop {
        let pipelines = crate::support::simple_records(&client, "SHOW PIPELINES").await;
        let p = pipelines
            .into_iter()
            .find(|r| r["name"].as_deref() == Some("per_user"))
            .expect("per_user listed");
        if p["late_rows_dropped"].as_deref() == Some("1") || std::time::Instant::now() > deadline {
            break p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(p["late_rows_dropped"].as_deref(), Some("1"), "{p:?}");
    assert_eq!(p["rows_in"].as_deref(), Some("7"), "{p:?}");
    assert_eq!(p["rows_out"].as_deref(), Some("4"), "{p:?}");
}
