//! Kafka → TUMBLE window counts → HDFS Parquet, against the real broker and
//! the real HDFS of `scripts/services.sh`. The files are read back with
//! `hdfs-native` and the Parquet reader and compared with counts computed
//! here from the produced clicks.

use crate::common::TestServer;
use crate::common::external::{Produce, create_topic, hdfs_files, hdfs_in_progress, hdfs_parquet, produce, unique};
use crate::support::{exec, wait_for};
use arrow::array::{Array, Int64Array, StringArray, TimestampMillisecondArray};
use std::collections::BTreeMap;
use std::time::Duration;

/// 2026-11-30 12:00:00 UTC.
const BASE_MS: i64 = 1_796_040_000_000;
const WINDOW_MS: i64 = 10_000;

/// Click i: url /p(i % 4), event time BASE + 100 ms · i, jittered by at most
/// ±300 ms (less than the 1 s watermark delay: no click is late).
fn click_time(i: i64) -> i64 {
    BASE_MS + i * 100 + (i * 7919) % 600 - 300
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_counts_from_kafka_land_in_hdfs_as_parquet() {
    let topic = unique("clicks");
    create_topic(&topic, 3).await;
    let n = 600i64;
    let mut records: Vec<Produce> = (0..n)
        .map(|i| {
            let json = format!(
                r#"{{"uid": "u{}", "url": "/p{}", "ts": {}}}"#,
                i % 5,
                i % 4,
                click_time(i)
            );
            Produce::to((i % 3) as i32, json)
        })
        .collect();
    // One late-enough click per partition moves every partition's watermark
    // past the last window; its own window stays open (and is not expected).
    let flush_ms = BASE_MS + 120_000;
    for p in 0..3 {
        records.push(Produce::to(
            p,
            format!(r#"{{"uid": "x", "url": "/flush", "ts": {flush_ms}}}"#),
        ));
    }
    produce(&topic, &records).await;

    // Expected: clicks per (window start, url), computed from the input.
    let mut expected: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for i in 0..n {
        let t = click_time(i);
        *expected
            .entry((t - t.rem_euclid(WINDOW_MS), format!("/p{}", i % 4)))
            .or_default() += 1;
    }

    let dir = format!("/sluice-tests/{}", unique("clicks"));
    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        &format!(
            "SET parallelism = 2; \
             CREATE STREAM clicks (uid TEXT, url TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
               WITH (connector = 'kafka', topic = '{topic}', 'properties.bootstrap.servers' = 'localhost:9092', \
                     format = 'json'); \
             CREATE SINK click_counts WITH (connector = 'hdfs', url = 'hdfs://localhost:9000', path = '{dir}', \
               format = 'parquet', 'rollover.interval' = '1s', 'partition.by' = 'window_start') AS \
             SELECT window_start, window_end, url, count(*) AS clicks \
             FROM TUMBLE(clicks, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end, url"
        ),
    )
    .await;

    let rows = wait_for("every window in HDFS", Duration::from_secs(90), || async {
        let files = hdfs_files(&dir).await;
        let mut rows = Vec::new();
        for (path, _) in &files {
            for b in hdfs_parquet(path).await {
                rows.push((path.clone(), b));
            }
        }
        let count: usize = rows.iter().map(|(_, b)| b.num_rows()).sum();
        (count >= expected.len()).then_some(rows)
    })
    .await;

    let mut got: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (path, batch) in &rows {
        let starts = batch
            .column(0)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap();
        let ends = batch
            .column(1)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap();
        let urls = batch.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        let counts = batch.column(3).as_any().downcast_ref::<Int64Array>().unwrap();
        for r in 0..batch.num_rows() {
            let start = starts.value(r);
            assert_eq!(ends.value(r), start + WINDOW_MS);
            assert!(!counts.is_null(r));
            // The file sits in its window's directory, ':' escaped as Hive does.
            let dir_name = chrono::DateTime::from_timestamp_millis(start)
                .unwrap()
                .format("window_start=%Y-%m-%dT%H%%3A%M%%3A%S")
                .to_string();
            assert!(
                path.contains(&format!("/{dir_name}/")),
                "{path} is not under {dir_name}"
            );
            let previous = got.insert((start, urls.value(r).to_string()), counts.value(r));
            assert!(previous.is_none(), "window {start} {} written twice", urls.value(r));
        }
    }
    assert_eq!(got, expected);
    assert!(
        hdfs_in_progress(&dir).await.is_empty(),
        "no in-progress file is left once every window was written"
    );
}
