//! `ALTER PIPELINE` on a running pipeline, end to end: the switch happens
//! at a barrier, windows keep their state across it, an exactly-once file
//! sink writes every window once, and the history records each version.
//! Expected rows are computed here from the inserted rows.

use crate::common::TestServer;
use crate::support::{describe, exec, simple_records, sqlstate, wait_for, within};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const PIPELINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Rows of key `k` (0..4) in one-second window `w`: 1 to 5, varying.
fn rows_in_window(w: i64, k: i64) -> i64 {
    (w * 3 + k * 2) % 5 + 1
}

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

/// `(second, key)` of every row of windows `windows`, each at
/// `2026-01-01 00:00:<second>.<row>`.
fn rows(windows: std::ops::Range<i64>) -> Vec<(i64, i64, &'static str)> {
    let mut out = Vec::new();
    for w in windows {
        for (k, key) in KEYS.iter().enumerate() {
            for r in 0..rows_in_window(w, k as i64) {
                out.push((w, r * 10, *key));
            }
        }
    }
    out
}

fn insert_sql(rows: &[(i64, i64, &str)]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|(s, ms, k)| format!("('{k}', TIMESTAMP '2026-01-01 00:00:{s:02}.{ms:03}')"))
        .collect();
    format!("INSERT INTO ev VALUES {}", values.join(", "))
}

/// The committed lines of a file sink's directory.
fn committed_lines(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    names.retain(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'));
    names.sort();
    names
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// (window end second, key, n) of a JSON line.
fn parse_line(line: &str) -> (i64, String, i64) {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let end = v["window_end"]
        .as_str()
        .unwrap_or_else(|| panic!("window_end in {line}"));
    let second: f64 = end.rsplit(':').next().unwrap().parse().unwrap();
    (
        second as i64,
        v["k"].as_str().unwrap().to_string(),
        v["n"].as_i64().unwrap(),
    )
}

/// A server with the memory stream `ev` (k, ts; watermark ts) and a file
/// sink `name` writing JSON lines of `query` to a fresh directory every
/// second (exactly once); returns the server, a client, the directory.
async fn with_file_sink(name: &str, query: &str) -> (TestServer, tokio_postgres::Client, tempfile::TempDir) {
    with_stream_and_file_sink(
        "CREATE STREAM ev (k VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
        name,
        query,
    )
    .await
}

/// A server where `setup` ran, then a file sink `name` of `query` as
/// [`with_file_sink`] makes it.
async fn with_stream_and_file_sink(
    setup: &str,
    name: &str,
    query: &str,
) -> (TestServer, tokio_postgres::Client, tempfile::TempDir) {
    let out_dir = tempfile::tempdir().unwrap();
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, setup).await;
    exec(
        &client,
        &format!(
            "CREATE SINK {name} WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS {query}",
            out_dir.path().join("out").display()
        ),
    )
    .await;
    (server, client, out_dir)
}

async fn field(client: &tokio_postgres::Client, name: &str, column: &str) -> String {
    simple_records(client, "SHOW PIPELINES")
        .await
        .into_iter()
        .find(|r| r.get("name").cloned().flatten().as_deref() == Some(name))
        .and_then(|r| r.get(column).cloned().flatten())
        .unwrap_or_default()
}

/// Waits until the running version of `name` has read `n` rows: everything
/// inserted since it started was read, and (in order behind it) the
/// watermark that closes the windows before it.
async fn read_all(client: &tokio_postgres::Client, name: &str, n: usize) {
    wait_for(&format!("{name} reads {n} rows"), PIPELINE_TIMEOUT, || async {
        (field(client, name, "rows_in").await == n.to_string()).then_some(())
    })
    .await;
}

fn counts_query(min: i64) -> String {
    format!(
        "SELECT window_end, k, n FROM (SELECT window_end, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) \
         GROUP BY window_start, window_end, k) WHERE n >= {min}"
    )
}

/// A TUMBLE count per key over a memory stream, written exactly once to
/// files, while the filter below it changes twice: windows closed before
/// each switch pass the old filter, after it the new one, and every count
/// is the count of all its rows — also of the windows open across a switch,
/// whose state the new version took over. Each window is written once.
#[tokio::test]
async fn a_filter_changed_twice_keeps_the_window_counts_and_writes_each_window_once() {
    let (_server, client, out_dir) = with_file_sink("counts", &counts_query(2)).await;
    let out = out_dir.path().join("out");

    // Phase 1: windows 0–4, and one row of window 5, which stays open
    // across the first switch: key b has 3 more rows there, 4 in all,
    // which passes the second version's filter (n >= 4) only if the row
    // read by the first version is still counted.
    let mut phase1 = rows(0..5);
    phase1.push((5, 999, "b"));
    exec(&client, &insert_sql(&phase1)).await;
    read_all(&client, "counts", phase1.len()).await;
    exec(&client, &format!("ALTER PIPELINE counts AS {}", counts_query(4))).await;

    // Phase 2: windows 5–9 and one row of window 10.
    let mut phase2 = rows(5..10);
    phase2.push((10, 999, "b"));
    exec(&client, &insert_sql(&phase2)).await;
    read_all(&client, "counts", phase2.len()).await;
    exec(&client, &format!("ALTER PIPELINE counts AS {}", counts_query(1))).await;

    // Phase 3: windows 10–14, and a row far ahead that closes them.
    let mut phase3 = rows(10..15);
    phase3.push((59, 0, "z"));
    exec(&client, &insert_sql(&phase3)).await;

    // Independently: the count of every (window, key) over all rows, and
    // the filter of the version in which the window closed.
    let mut counts: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (s, _, k) in phase1.iter().chain(&phase2).chain(&phase3) {
        *counts.entry((s + 1, k.to_string())).or_default() += 1;
    }
    let min_of = |end: i64| match end {
        1..=5 => Some(2),
        6..=10 => Some(4),
        11..=15 => Some(1),
        _ => None, // still open
    };
    let mut expected: Vec<(i64, String, i64)> = counts
        .into_iter()
        .filter(|((end, _), n)| min_of(*end).is_some_and(|min| *n >= min))
        .map(|((end, k), n)| (end, k, n))
        .collect();
    expected.sort();
    assert!(
        expected
            .iter()
            .any(|(end, k, n)| *end == 6 && k == "b" && *n == rows_in_window(5, 1) + 1),
        "window 5 of key b spans the first switch and passes the filter"
    );

    wait_for("every closed window in the files", PIPELINE_TIMEOUT, || async {
        (committed_lines(&out).len() >= expected.len()).then_some(())
    })
    .await;
    // Two more checkpoints: nothing is written twice.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let got = committed_lines(&out);
    let mut got: Vec<(i64, String, i64)> = got.iter().map(|l| parse_line(l)).collect();
    got.sort();
    assert_eq!(got, expected);

    // Three versions, each with the statement that made it; the window was
    // kept by both changes (only the filter above it changed).
    let history = simple_records(&client, "SHOW PIPELINE HISTORY counts").await;
    assert_eq!(history.len(), 3, "{history:?}");
    for (i, min) in [(1usize, 4), (2, 1)] {
        let v = &history[i];
        let by = v["changed_by"].clone().unwrap_or_default();
        assert!(
            by.starts_with("ALTER PIPELINE counts AS") && by.contains(&format!("n >= {min}")),
            "{by}"
        );
        let diff = v["diff"].clone().unwrap_or_default();
        assert!(diff.contains("kept window_aggregate"), "{diff}");
        assert!(diff.contains("replaced project"), "{diff}");
    }
    assert_eq!(field(&client, "counts", "version").await, "3");
    assert_eq!(field(&client, "counts", "state").await, "running");
}

/// Changes that cannot be applied leave the pipeline running as it was,
/// reading on: a new aggregate without `state = 'reset'`, a derived
/// stream's columns under a reader, a second ALTER while one runs.
#[tokio::test]
async fn a_refused_change_leaves_the_pipeline_running_as_it_was() {
    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        "CREATE STREAM ev (k VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts)",
    )
    .await;
    exec(&client, "CREATE STREAM per_key AS SELECT window_end, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end, k").await;
    exec(
        &client,
        "CREATE SINK big WITH (connector = 'blackhole') AS SELECT k, n FROM per_key WHERE n > 1",
    )
    .await;
    let first = rows(0..3);
    exec(&client, &insert_sql(&first)).await;
    read_all(&client, "per_key", first.len()).await;

    let refused = [
        (
            "ALTER PIPELINE per_key AS SELECT window_end, k, sum(1) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end, k",
            "0A000",
            "state = 'reset'",
        ),
        (
            "ALTER PIPELINE per_key AS SELECT window_end, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end",
            "2BP01",
            "pipeline(s) big read it (k disappears)",
        ),
    ];
    for (sql, code, text) in refused {
        let e = within(sql, Duration::from_secs(60), client.batch_execute(sql))
            .await
            .expect_err(sql);
        assert_eq!(sqlstate(&e), Some(code), "{}", describe(&e));
        assert!(describe(&e).contains(text), "{}", describe(&e));
    }
    assert_eq!(field(&client, "per_key", "version").await, "1");
    assert_eq!(field(&client, "per_key", "state").await, "running");
    // It reads on, with its state: rows_in counts on from where it was.
    let second = rows(3..5);
    exec(&client, &insert_sql(&second)).await;
    read_all(&client, "per_key", first.len() + second.len()).await;
}

/// Milliseconds since midnight of a timestamp as the JSON writer renders
/// it (`…THH:MM:SS[.fff]`).
fn ms_of_day(text: &str) -> i64 {
    let time = text.rsplit('T').next().unwrap();
    let mut parts = time.split(':');
    let h: i64 = parts.next().unwrap().parse().unwrap();
    let m: i64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    (h * 3600 + m * 60) * 1000 + (s * 1000.0).round() as i64
}

/// Rescaled 1 → 4 → 2 while it reads a bounded, paced Nexmark bid stream:
/// the windows written equal the reference computed from the stream's
/// rows, each once (the keyed window state moved between instances by key
/// group at each switch, the source's event numbers re-split between its
/// instances).
/// The same bounded bid stream twice, for pipelines at parallelism 1:
/// `bids` paced (about 7.5 s for 30 000 events), `bids_all` unpaced for the
/// reference rows.
async fn paced_bids(client: &tokio_postgres::Client, events: u64, seed: u64) {
    exec(client, &crate::support::create_bid_stream("bids_all", events, seed)).await;
    exec(
        client,
        &crate::support::create_bid_stream("bids", events, seed)
            .replace("'events.max'", "'events.per.second' = '4000', 'events.max'"),
    )
    .await;
    exec(client, "SET parallelism = 1").await;
}

/// Rescales pipeline `name` to 4, then 2 instances while it reads, then
/// waits until it has read to the end.
async fn rescale_4_then_2(client: &tokio_postgres::Client, name: &str) {
    for parallelism in [4, 2] {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(
            field(client, name, "state").await,
            "running",
            "the input lasts past the rescale to {parallelism}"
        );
        exec(client, &format!("ALTER PIPELINE {name} SET PARALLELISM {parallelism}")).await;
    }
    wait_for("the pipeline reads to the end", Duration::from_secs(120), || async {
        (field(client, name, "state").await == "finished").then_some(())
    })
    .await;
}

#[tokio::test]
async fn rescaling_1_4_2_mid_stream_gives_the_results_of_a_run_never_rescaled() {
    const EVENTS: u64 = 30_000;
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("bids");
    let server = TestServer::start();
    let client = server.connect().await;
    paced_bids(&client, EVENTS, 11).await;
    exec(
        &client,
        &format!(
            "CREATE SINK per_auction WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '500ms') AS \
             SELECT window_start, auction, count(*) AS bids, sum(price) AS total \
             FROM TUMBLE(bids, date_time, INTERVAL '500' MILLISECOND) GROUP BY window_start, window_end, auction",
            out.display()
        ),
    )
    .await;
    let reference = crate::support::all_bids(&client, "bids_all").await;
    assert_eq!(reference.len(), crate::support::bids_in(EVENTS));
    let mut expected: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    for b in &reference {
        let e = expected.entry((b.ts_ms.div_euclid(500) * 500, b.auction)).or_default();
        e.0 += 1;
        e.1 += b.price;
    }
    let expected: Vec<(i64, i64, i64, i64)> = expected
        .into_iter()
        .map(|((w, a), (n, t))| (w.rem_euclid(86_400_000), a, n, t))
        .collect();

    rescale_4_then_2(&client, "per_auction").await;
    let lines = committed_lines(&out);
    let mut got: Vec<(i64, i64, i64, i64)> = lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                ms_of_day(v["window_start"].as_str().unwrap()),
                v["auction"].as_i64().unwrap(),
                v["bids"].as_i64().unwrap(),
                v["total"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got.len(), expected.len(), "windows written");
    assert_eq!(got, expected);
    let history = simple_records(&client, "SHOW PIPELINE HISTORY per_auction").await;
    let diffs: Vec<String> = history.iter().filter_map(|v| v["diff"].clone()).collect();
    assert_eq!(diffs.len(), 2, "{history:?}");
    assert!(
        diffs[0].contains("parallelism 1 → 4, state redistributed by key group"),
        "{}",
        diffs[0]
    );
    assert!(
        diffs[1].contains("parallelism 4 → 2, state redistributed by key group"),
        "{}",
        diffs[1]
    );
    assert!(
        diffs[0].contains("kept source") && diffs[0].contains("parallelism 1 → 4, partitions re-split"),
        "{}",
        diffs[0]
    );
}

/// An updating pipeline — an aggregate without a window, whose changelog
/// a file sink writes exactly once with its op column — rescaled 1 → 4 → 2
/// while it reads: its groups move by key group, and the committed lines,
/// folded in the order they were written, are every auction's aggregates
/// over all its bids (each -U retracting exactly the row the auction
/// showed, across both switches).
#[tokio::test]
async fn an_updating_pipeline_rescaled_mid_stream_folds_to_the_aggregates_of_all_rows() {
    const EVENTS: u64 = 30_000;
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("totals");
    let server = TestServer::start();
    let client = server.connect().await;
    paced_bids(&client, EVENTS, 13).await;
    exec(
        &client,
        &format!(
            "CREATE SINK per_auction_total WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '500ms') AS \
             SELECT auction, count(*) AS bids, sum(price) AS total, max(price) AS top FROM bids GROUP BY auction",
            out.display()
        ),
    )
    .await;
    let mut expected: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
    for b in crate::support::all_bids(&client, "bids_all").await {
        let e = expected.entry(b.auction).or_insert((0, 0, i64::MIN));
        e.0 += 1;
        e.1 += b.price;
        e.2 = e.2.max(b.price);
    }
    rescale_4_then_2(&client, "per_auction_total").await;
    let mut table: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
    let mut pending: Option<i64> = None;
    let mut updates = 0;
    for line in committed_lines(&out) {
        let v: Value = serde_json::from_str(&line).unwrap();
        let auction = v["auction"].as_i64().unwrap();
        let row = (
            v["bids"].as_i64().unwrap(),
            v["total"].as_i64().unwrap(),
            v["top"].as_i64().unwrap(),
        );
        match (v["op"].as_str().unwrap(), pending.take()) {
            ("+U", Some(a)) if a == auction => {
                table.insert(auction, row);
            }
            (op, Some(a)) => panic!("-U of auction {a} followed by {op} of {auction}"),
            ("+I", None) => assert!(table.insert(auction, row).is_none(), "+I of auction {auction}, shown"),
            ("-U", None) => {
                assert_eq!(
                    table.remove(&auction),
                    Some(row),
                    "-U of auction {auction} is not its row"
                );
                pending = Some(auction);
                updates += 1;
            }
            (op, None) => panic!("op {op} in {line}"),
        }
    }
    assert!(updates > 0, "auctions were updated");
    assert_eq!(table.len(), expected.len(), "auctions");
    assert_eq!(table, expected);
    let history = simple_records(&client, "SHOW PIPELINE HISTORY per_auction_total").await;
    let diffs: Vec<String> = history.iter().filter_map(|v| v["diff"].clone()).collect();
    assert!(
        diffs.len() == 2 && diffs.iter().all(|d| d.contains("state redistributed by key group")),
        "{diffs:?}"
    );
}

/// An OVER aggregate (each bid with its auction's running sum of prices up
/// to its time, peers included: `ORDER BY date_time` alone) written exactly
/// once to files while rescaled 1 → 4 → 2 mid-stream: the running values
/// and the rows waiting for the watermark move by key group at each switch,
/// so every bid comes out once, with the sum computed here over all bids.
#[tokio::test]
async fn an_over_aggregate_rescaled_mid_stream_gives_every_rows_running_sum_once() {
    over_rescaled_mid_stream("", |o, b| o.ts_ms <= b.ts_ms).await;
}

/// The same with a bounded frame (the bids of the last 2 seconds, peers
/// included): the frames — each row's time and argument, not the row —
/// move by key group at each switch.
#[tokio::test]
async fn an_over_aggregate_with_a_range_frame_rescaled_mid_stream_gives_every_rows_sum_once() {
    over_rescaled_mid_stream(
        " RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW",
        |o, b| o.ts_ms <= b.ts_ms && o.ts_ms >= b.ts_ms - 2_000,
    )
    .await;
}

/// Each bid with the sum of its auction's prices `OVER (PARTITION BY
/// auction ORDER BY date_time{frame})`, rescaled 1 → 4 → 2, against the
/// sums computed here: bid `o` is in bid `b`'s frame when `in_frame(o, b)`.
async fn over_rescaled_mid_stream(frame: &str, in_frame: impl Fn(&crate::support::Bid, &crate::support::Bid) -> bool) {
    const EVENTS: u64 = 30_000;
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("running");
    let server = TestServer::start();
    let client = server.connect().await;
    paced_bids(&client, EVENTS, 17).await;
    exec(
        &client,
        &format!(
            "CREATE SINK running_total WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '500ms') AS \
             SELECT auction, bidder, price, sum(price) OVER (PARTITION BY auction ORDER BY date_time{frame}) AS s FROM bids",
            out.display()
        ),
    )
    .await;
    rescale_4_then_2(&client, "running_total").await;
    let mut by_auction: BTreeMap<i64, Vec<crate::support::Bid>> = BTreeMap::new();
    for b in crate::support::all_bids(&client, "bids_all").await {
        by_auction.entry(b.auction).or_default().push(b);
    }
    let mut expected: Vec<(i64, i64, i64, i64)> = Vec::new();
    for bids in by_auction.values() {
        for b in bids {
            let s = bids.iter().filter(|o| in_frame(o, b)).map(|o| o.price).sum();
            expected.push((b.auction, b.bidder, b.price, s));
        }
    }
    let mut got: Vec<(i64, i64, i64, i64)> = committed_lines(&out)
        .iter()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let n = |c: &str| v[c].as_i64().unwrap_or_else(|| panic!("{c} in {line}"));
            (n("auction"), n("bidder"), n("price"), n("s"))
        })
        .collect();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got.len(), expected.len(), "one row per bid");
    assert!(got == expected, "rows differ from the sums computed here");
}

/// An OVER aggregate over a changelog — each auction's top price summed
/// with the two auctions before it (by id) among those of its id's last
/// digit — written exactly once to files while rescaled 1 → 4 → 2
/// mid-stream: every partition's held rows move by key group, and the
/// committed changelog, folded in the order it was written, is the sums
/// computed here over every auction's final top.
#[tokio::test]
async fn an_over_aggregate_over_a_changelog_rescaled_mid_stream_folds_to_the_reference() {
    const EVENTS: u64 = 30_000;
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("tops");
    let server = TestServer::start();
    let client = server.connect().await;
    paced_bids(&client, EVENTS, 19).await;
    exec(
        &client,
        &format!(
            "CREATE SINK top_sums WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '500ms') AS \
             SELECT auction, top, sum(top) OVER (PARTITION BY auction % 10 ORDER BY auction ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s \
             FROM (SELECT auction, max(price) AS top FROM bids GROUP BY auction) AS t",
            out.display()
        ),
    )
    .await;
    let mut top: BTreeMap<i64, i64> = BTreeMap::new();
    for b in crate::support::all_bids(&client, "bids_all").await {
        let t = top.entry(b.auction).or_insert(b.price);
        *t = (*t).max(b.price);
    }
    let mut by_digit: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (auction, t) in &top {
        by_digit.entry(auction % 10).or_default().push((*auction, *t));
    }
    let mut expected: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for rows in by_digit.values() {
        for (i, (auction, t)) in rows.iter().enumerate() {
            let s = rows[i.saturating_sub(2)..=i].iter().map(|r| r.1).sum();
            expected.insert(*auction, (*t, s));
        }
    }
    rescale_4_then_2(&client, "top_sums").await;
    let mut table: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut pending: Option<i64> = None;
    let mut changed = 0;
    for line in committed_lines(&out) {
        let v: Value = serde_json::from_str(&line).unwrap();
        let auction = v["auction"].as_i64().unwrap();
        let row = (v["top"].as_i64().unwrap(), v["s"].as_i64().unwrap());
        match (v["op"].as_str().unwrap(), pending.take()) {
            ("+U", Some(a)) if a == auction => {
                table.insert(auction, row);
            }
            (op, Some(a)) => panic!("-U of auction {a} followed by {op} of {auction}"),
            ("+I", None) => assert!(table.insert(auction, row).is_none(), "+I of auction {auction}, shown"),
            (op @ ("-U" | "-D"), None) => {
                assert_eq!(
                    table.remove(&auction),
                    Some(row),
                    "{op} of auction {auction} is not its row"
                );
                changed += 1;
                if op == "-U" {
                    pending = Some(auction);
                }
            }
            (op, None) => panic!("op {op} in {line}"),
        }
    }
    assert!(changed > 0, "rows were taken back");
    assert_eq!(table.len(), expected.len(), "auctions");
    assert!(
        table == expected,
        "the folded changelog differs from the sums computed here"
    );
}

/// A whole hour two hours ago: Kafka refuses record timestamps far ahead.
fn kafka_base_ms() -> i64 {
    let now = crate::support::epoch_ms(std::time::SystemTime::now());
    now - now % 3_600_000 - 7_200_000
}

/// A record `{"k", "seq", "ts"}` to `partition`; `ts_ms` is its event time
/// and its Kafka timestamp.
fn kafka_record(partition: i32, k: &str, seq: i64, ts_ms: i64) -> crate::common::external::Produce {
    let t = chrono::DateTime::from_timestamp_millis(ts_ms).unwrap().naive_utc();
    let json = format!(
        r#"{{"k":"{k}","seq":{seq},"ts":"{}"}}"#,
        t.format("%Y-%m-%dT%H:%M:%S%.3f")
    );
    crate::common::external::Produce::to(partition, json).at(ts_ms)
}

/// A server with the Kafka stream `stream` (k, seq, ts; watermark ts) over
/// `topic` and, created at parallelism 1, a file sink `name` writing JSON
/// lines of `query` every second (exactly once) to `<dir>/out`.
async fn with_kafka_file_sink(
    topic: &str,
    stream: &str,
    name: &str,
    query: &str,
) -> (TestServer, tokio_postgres::Client, tempfile::TempDir) {
    let setup = format!(
        "CREATE STREAM {stream} (k VARCHAR, seq BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (connector = 'kafka', \
         topic = '{topic}', 'properties.bootstrap.servers' = 'localhost:9092', format = 'json'); SET parallelism = 1"
    );
    with_stream_and_file_sink(&setup, name, query).await
}

/// `RESET SOURCE … TO TIMESTAMP` on a running Kafka pipeline: the source
/// goes back to the first record at or after the time (Kafka's offsets
/// for times), the window below it starts empty and recomputes every
/// window from there, so those windows are written a second time — with
/// the same counts, since the window boundary is the rewind time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_source_to_a_timestamp_recomputes_the_windows_from_there() {
    use crate::common::external::{Produce, create_topic, produce, unique};
    let topic = unique("rewind");
    create_topic(&topic, 2).await;
    let base = kafka_base_ms();
    // Record i: key k<i % 3>, event and Kafka time base + i × 500 ms: ten
    // records per 5 s window, windows 0–5; then one far ahead closing them.
    let mut records: Vec<Produce> = (0..60i64)
        .map(|i| kafka_record((i % 2) as i32, &format!("k{}", i % 3), i, base + i * 500))
        .collect();
    records.extend((0..2).map(|p| kafka_record(p, "end", -1, base + 100_000)));
    produce(&topic, &records).await;
    let (_server, client, out_dir) = with_kafka_file_sink(
        &topic,
        "kev",
        "per_window",
        "SELECT window_start, k, count(*) AS n FROM TUMBLE(kev, ts, INTERVAL '5' SECOND) WHERE k <> 'end' \
         GROUP BY window_start, window_end, k",
    )
    .await;
    let out = out_dir.path().join("out");
    // Independently: (window, key) → count, over all records.
    let mut counts: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for i in 0..60i64 {
        *counts.entry((i * 500 / 5000, format!("k{}", i % 3))).or_default() += 1;
    }
    let lines_as_windows = |lines: &[String]| -> Vec<(i64, String, i64)> {
        let mut out: Vec<(i64, String, i64)> = lines
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let start = ms_of_day(v["window_start"].as_str().unwrap());
                (
                    (start - base.rem_euclid(86_400_000)) / 5000,
                    v["k"].as_str().unwrap().to_string(),
                    v["n"].as_i64().unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    };
    let first: Vec<(i64, String, i64)> = counts.iter().map(|((w, k), n)| (*w, k.clone(), *n)).collect();
    wait_for("every window written once", PIPELINE_TIMEOUT, || async {
        (committed_lines(&out).len() >= first.len()).then_some(())
    })
    .await;
    assert_eq!(lines_as_windows(&committed_lines(&out)), first);

    // Back to window 3's start: records 30.. again.
    let at = chrono::DateTime::from_timestamp_millis(base + 15_000)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    let explain = simple_records(
        &client,
        &format!("EXPLAIN ALTER PIPELINE per_window RESET SOURCE kev TO TIMESTAMP '{at}'"),
    )
    .await;
    let fate = |kind: &str| {
        explain
            .iter()
            .find(|r| r["kind"].as_deref() == Some(kind))
            .and_then(|r| r["state"].clone())
            .unwrap_or_default()
    };
    assert_eq!(fate("source"), "reset");
    assert_eq!(fate("window_aggregate"), "reset");
    assert_eq!(fate("sink"), "moved");
    exec(
        &client,
        &format!("ALTER PIPELINE per_window RESET SOURCE kev TO TIMESTAMP '{at}'"),
    )
    .await;
    let mut expected = first.clone();
    expected.extend(first.iter().filter(|(w, ..)| *w >= 3).cloned());
    expected.sort();
    wait_for(
        "the windows from the rewind written again",
        PIPELINE_TIMEOUT,
        || async { (committed_lines(&out).len() >= expected.len()).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(lines_as_windows(&committed_lines(&out)), expected);
    let e = client
        .batch_execute("ALTER PIPELINE per_window RESET SOURCE nope TO TIMESTAMP '2026-01-01 00:00:00'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), Some("42704"), "{}", describe(&e));
}

/// Operators added by an ALTER (here a window aggregate where the
/// pipeline only projected) start empty and see every row read from the
/// switch on: the rows before it went out as they were, the windows count
/// exactly the rows after it.
#[tokio::test]
async fn an_added_window_counts_every_row_from_the_switch_on() {
    let (_server, client, out_dir) = with_file_sink("shaped", "SELECT k, ts FROM ev WHERE k <> 'z'").await;
    let out = out_dir.path().join("out");
    // Before: windows 0–2 (their rows go out one by one).
    let before = rows(0..3);
    exec(&client, &insert_sql(&before)).await;
    read_all(&client, "shaped", before.len()).await;
    let explain = simple_records(
        &client,
        "EXPLAIN ALTER PIPELINE shaped AS SELECT window_end, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) \
         WHERE k <> 'z' GROUP BY window_start, window_end, k",
    )
    .await;
    let window = explain
        .iter()
        .find(|r| r["kind"].as_deref() == Some("window_aggregate"))
        .expect("a window in the new version");
    assert_eq!(
        (window["change"].as_deref(), window["state"].as_deref()),
        (Some("added"), Some("fresh"))
    );
    exec(
        &client,
        "ALTER PIPELINE shaped AS SELECT window_end, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) \
         WHERE k <> 'z' GROUP BY window_start, window_end, k",
    )
    .await;
    // After: windows 3–5, and a row far ahead that closes them.
    let mut after = rows(3..6);
    after.push((59, 0, "z"));
    exec(&client, &insert_sql(&after)).await;
    let mut counts: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (s, _, k) in after.iter().filter(|r| r.2 != "z") {
        *counts.entry((s + 1, k.to_string())).or_default() += 1;
    }
    let total = before.len() + counts.len();
    wait_for("the rows before and the windows after", PIPELINE_TIMEOUT, || async {
        (committed_lines(&out).len() >= total).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let lines = committed_lines(&out);
    let (raw, windows): (Vec<Value>, Vec<Value>) = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .partition(|v| v.get("window_end").is_none());
    assert_eq!(raw.len(), before.len(), "every row before the switch, once");
    let mut got: Vec<(i64, String, i64)> = windows.iter().map(|v| parse_line(&v.to_string())).collect();
    got.sort();
    let expected: Vec<(i64, String, i64)> = counts.into_iter().map(|((e, k), n)| (e, k, n)).collect();
    assert_eq!(got, expected);
}

/// A Kafka source rescaled 1 → 3 → 2 with the window below it: its
/// partitions are re-split between the new instances, each going on from
/// the stored offset, so every record is counted once and every window is
/// written once with the count of all its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_source_re_splits_its_partitions_when_rescaled() {
    use crate::common::external::{Produce, create_topic, produce, unique};
    let topic = unique("resplit");
    create_topic(&topic, 4).await;
    let base = kafka_base_ms();
    let record = |i: i64| kafka_record((i % 4) as i32, &format!("k{}", i % 5), i, base + i * 100);
    let (_server, client, out_dir) = with_kafka_file_sink(
        &topic,
        "kin",
        "per_key",
        "SELECT window_end, k, count(*) AS n FROM TUMBLE(kin, ts, INTERVAL '1' SECOND) WHERE k <> 'end' \
         GROUP BY window_start, window_end, k",
    )
    .await;
    let out = out_dir.path().join("out");
    // Three phases of 200 records (20 s of event time in all), a rescale
    // between them, then one record per partition far ahead.
    for (phase, parallelism) in [(0i64, Some(3)), (1, Some(2)), (2, None)] {
        let records: Vec<Produce> = (phase * 200..(phase + 1) * 200).map(record).collect();
        produce(&topic, &records).await;
        read_all(&client, "per_key", records.len()).await;
        if let Some(p) = parallelism {
            exec(&client, &format!("ALTER PIPELINE per_key SET PARALLELISM {p}")).await;
        }
    }
    let ends: Vec<Produce> = (0..4).map(|p| kafka_record(p, "end", -1, base + 100_000)).collect();
    produce(&topic, &ends).await;
    let mut counts: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for i in 0..600i64 {
        *counts.entry((i * 100 / 1000 + 1, format!("k{}", i % 5))).or_default() += 1;
    }
    let expected: Vec<(i64, String, i64)> = counts.into_iter().map(|((e, k), n)| (e, k, n)).collect();
    wait_for("every window in the files", PIPELINE_TIMEOUT, || async {
        (committed_lines(&out).len() >= expected.len()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut got: Vec<(i64, String, i64)> = committed_lines(&out)
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let end_ms = ms_of_day(v["window_end"].as_str().unwrap()) - base.rem_euclid(86_400_000);
            (
                end_ms / 1000,
                v["k"].as_str().unwrap().to_string(),
                v["n"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, expected);
    let plan = simple_records(&client, "EXPLAIN PIPELINE per_key").await;
    assert_eq!(plan[0]["kind"].as_deref(), Some("source"));
    assert_eq!(plan[0]["parallelism"].as_deref(), Some("2"), "the source runs at 2 now");
}

/// `RESET SOURCE` on a Nexmark source: its own position, computed from the
/// time (event time is a function of the event number). A bounded, paced
/// bid stream with 1-second windows is rewound to the start of window 1
/// after windows 0 and 1 fired: window 1 is written again, every window
/// with the count of all its bids (its records are all at or after the
/// rewind time).
#[tokio::test]
async fn reset_source_rewinds_a_nexmark_stream_by_its_event_numbers() {
    const BASE: i64 = crate::support::NEXMARK_BASE_TIME_MS;
    let (_server, client, out_dir) = {
        let out_dir = tempfile::tempdir().unwrap();
        let server = TestServer::start();
        let client = server.connect().await;
        // 40 000 events: 4 s of event time (10 000 events a second), read
        // in about 5 s.
        exec(
            &client,
            "CREATE STREAM nbid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
             date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time) \
             WITH (connector = 'nexmark', table = 'bid', 'events.max' = '40000', 'events.per.second' = '8000')",
        )
        .await;
        exec(
            &client,
            &format!(
                "CREATE SINK per_second WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS \
                 SELECT window_start, count(*) AS n FROM TUMBLE(nbid, date_time, INTERVAL '1' SECOND) \
                 GROUP BY window_start, window_end",
                out_dir.path().join("out").display()
            ),
        )
        .await;
        (server, client, out_dir)
    };
    let out = out_dir.path().join("out");
    // Windows 0 and 1 fired once the bids of event 25 000 are read.
    let bids_before = (0..25_000u64).filter(|n| n % 50 >= 4).count();
    wait_for("windows 0 and 1 fired", PIPELINE_TIMEOUT, || async {
        let read: usize = field(&client, "per_second", "rows_in").await.parse().unwrap_or(0);
        (read >= bids_before).then_some(())
    })
    .await;
    assert_eq!(
        field(&client, "per_second", "state").await,
        "running",
        "the stream lasts past the rewind"
    );
    exec(
        &client,
        &format!(
            "ALTER PIPELINE per_second RESET SOURCE nbid TO TIMESTAMP '{}'",
            BASE + 1_000
        ),
    )
    .await;
    wait_for("the rewound pipeline reads to the end", PIPELINE_TIMEOUT, || async {
        (field(&client, "per_second", "state").await == "finished").then_some(())
    })
    .await;
    let per_window = (0..10_000u64).filter(|n| n % 50 >= 4).count() as i64;
    // Window 1 twice (before and after the rewind), the others once.
    let expected: Vec<(i64, i64)> = vec![
        (0, per_window),
        (1, per_window),
        (1, per_window),
        (2, per_window),
        (3, per_window),
    ];
    let mut got: Vec<(i64, i64)> = committed_lines(&out)
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let start = ms_of_day(v["window_start"].as_str().unwrap()) - BASE.rem_euclid(86_400_000);
            (start / 1000, v["n"].as_i64().unwrap())
        })
        .collect();
    got.sort();
    assert_eq!(got, expected);
}

/// `RESET SOURCE` on a memory stream: from the first row of the log whose
/// event time is at or after the time. Windows from there are written
/// again, with the counts of all their rows.
#[tokio::test]
async fn reset_source_rewinds_a_memory_stream_by_event_time() {
    let query = "SELECT window_end, k, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) WHERE k <> 'z' \
                 GROUP BY window_start, window_end, k";
    let (_server, client, out_dir) = with_file_sink("mem_counts", query).await;
    let out = out_dir.path().join("out");
    let mut all = rows(0..6);
    all.push((59, 0, "z"));
    exec(&client, &insert_sql(&all)).await;
    let mut counts: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (s, _, k) in all.iter().filter(|r| r.2 != "z") {
        *counts.entry((s + 1, k.to_string())).or_default() += 1;
    }
    let once: Vec<(i64, String, i64)> = counts.into_iter().map(|((e, k), n)| (e, k, n)).collect();
    wait_for("every window once", PIPELINE_TIMEOUT, || async {
        (committed_lines(&out).len() >= once.len()).then_some(())
    })
    .await;
    exec(
        &client,
        "ALTER PIPELINE mem_counts RESET SOURCE ev TO TIMESTAMP '2026-01-01 00:00:03'",
    )
    .await;
    // Windows 3–5 (ending at 4–6 s) again.
    let mut expected = once.clone();
    expected.extend(once.iter().filter(|(end, ..)| *end >= 4).cloned());
    expected.sort();
    wait_for("windows 3-5 written again", PIPELINE_TIMEOUT, || async {
        (committed_lines(&out).len() >= expected.len()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut got: Vec<(i64, String, i64)> = committed_lines(&out).iter().map(|l| parse_line(l)).collect();
    got.sort();
    assert_eq!(got, expected);
}
