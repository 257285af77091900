//! The Kafka source and sink against the real broker of
//! `scripts/services.sh`: replay from a timestamp over several partitions,
//! Kafka → filter → Kafka with every record once, the error policies
//! for malformed records, and an updating query's changelog in Debezium's
//! format. Inputs are produced by a plain rdkafka producer
//! and outputs read by a plain read_committed consumer; expected results
//! are computed here from the records produced.

use crate::common::TestServer;
use crate::common::external::{Produce, consume, create_topic, produce, unique};
use crate::support::{exec, simple_records, simple_rows, wait_for};
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A whole hour two hours ago: Kafka refuses record timestamps more than
/// an hour in the future (`log.message.timestamp.after.max.ms`).
fn base_ms() -> i64 {
    let now = crate::support::epoch_ms(std::time::SystemTime::now());
    now - now % 3_600_000 - 7_200_000
}

fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

fn kafka_options(topic: &str) -> String {
    format!("connector = 'kafka', topic = '{topic}', 'properties.bootstrap.servers' = 'localhost:9092'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_from_a_timestamp_reads_exactly_the_records_at_or_after_it() {
    let topic = unique("replay");
    create_topic(&topic, 3).await;
    let base = base_ms();
    // Record i: partition i % 3 (so offset i / 3), timestamp BASE + i s.
    let records: Vec<Produce> = (0..300i64)
        .map(|i| Produce::to((i % 3) as i32, format!(r#"{{"id": {i}}}"#)).at(base + i * 1000))
        .collect();
    produce(&topic, &records).await;

    let server = TestServer::start();
    let client = server.connect().await;
    // base + 150 s: records 150..300.
    exec(
        &client,
        &format!(
            "SET parallelism = 2; CREATE STREAM replayed (id BIGINT NOT NULL) WITH ({}, format = 'json', \
             'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp' = '{}')",
            kafka_options(&topic),
            format_ms(base + 150_000)
        ),
    )
    .await;
    let rows = simple_rows(
        &client,
        "SELECT id, _kafka_partition, _kafka_offset, _kafka_timestamp FROM replayed LIMIT 150",
    )
    .await;
    let mut ids = BTreeSet::new();
    for r in &rows {
        let id: i64 = r[0].as_deref().unwrap().parse().unwrap();
        assert_eq!(
            r[1].as_deref(),
            Some((id % 3).to_string().as_str()),
            "partition of {id}"
        );
        assert_eq!(r[2].as_deref(), Some((id / 3).to_string().as_str()), "offset of {id}");
        assert_eq!(
            r[3].as_deref(),
            Some(format_ms(base + id * 1000).as_str()),
            "timestamp of {id}"
        );
        assert!(ids.insert(id), "record {id} twice");
    }
    assert_eq!(ids, (150..300).collect::<BTreeSet<i64>>());

    // Epoch milliseconds work too: the last two records.
    exec(
        &client,
        &format!(
            "CREATE STREAM last_two (id BIGINT NOT NULL) WITH ({}, 'scan.startup.mode' = 'timestamp', \
             'scan.startup.timestamp' = '{}')",
            kafka_options(&topic),
            base + 298_000
        ),
    )
    .await;
    let rows = simple_rows(&client, "SELECT id FROM last_two LIMIT 2").await;
    let ids: BTreeSet<String> = rows.into_iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(ids, BTreeSet::from(["298".to_string(), "299".to_string()]));

    // The metadata columns are hidden from SELECT * (and shown by name).
    let star = client.simple_query("SELECT * FROM last_two LIMIT 1").await.unwrap();
    let row = star
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("one row");
    let names: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, vec!["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_filter_to_kafka_delivers_every_record_once() {
    let (input, output) = (unique("orders"), unique("big_orders"));
    create_topic(&input, 3).await;
    create_topic(&output, 2).await;
    let base = base_ms();
    let records: Vec<Produce> = (0..1000i64)
        .map(|i| {
            Produce::to(
                (i % 3) as i32,
                format!(
                    r#"{{"id": {i}, "amount": {}, "uid": "u{}", "ts": {}}}"#,
                    i % 100,
                    i % 7,
                    base + i
                ),
            )
        })
        .collect();
    produce(&input, &records).await;

    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        &format!(
            "SET parallelism = 2; \
             CREATE STREAM orders (id BIGINT NOT NULL, amount INT, uid TEXT, ts TIMESTAMP) WITH ({}, format = 'json'); \
             CREATE SINK big_orders WITH (connector = 'kafka', topic = '{output}', \
               'properties.bootstrap.servers' = 'localhost:9092', format = 'json', key = 'uid', \
               'timestamp.column' = 'ts') \
             AS SELECT id, amount, uid, ts FROM orders WHERE amount >= 50",
            kafka_options(&input)
        ),
    )
    .await;
    let expected: BTreeMap<i64, (i64, String)> = (0..1000i64)
        .filter(|i| i % 100 >= 50)
        .map(|i| (i, (i % 100, format!("u{}", i % 7))))
        .collect();
    let out = consume(&output, expected.len(), Duration::from_secs(2), Duration::from_secs(90));
    assert_eq!(out.len(), expected.len(), "every record once, no more");
    let mut seen = BTreeMap::new();
    for r in &out {
        let v: serde_json::Value = serde_json::from_str(&r.payload).unwrap();
        let id = v["id"].as_i64().unwrap();
        assert_eq!(
            r.key.as_deref(),
            Some(format!(r#"{{"uid":"u{}"}}"#, id % 7).as_str()),
            "key of {id}"
        );
        assert_eq!(r.timestamp_ms, Some(base + id), "record timestamp of {id}");
        assert!(
            seen.insert(
                id,
                (v["amount"].as_i64().unwrap(), v["uid"].as_str().unwrap().to_string())
            )
            .is_none(),
            "record {id} twice"
        );
    }
    assert_eq!(seen, expected);
}

/// Where a bad record is: (partition, offset, payload).
type BadRecord = (i32, i64, String);

/// Good records are `{"id": n}`; the bad ones below break the format in
/// each way the error policy covers.
fn mixed_records(partitions: i32) -> (Vec<Produce>, BTreeSet<i64>, Vec<BadRecord>) {
    let bad = [
        "not json at all".to_string(),
        r#"{"id": "seven"}"#.to_string(), // wrong type
        r#"{"other": 1}"#.to_string(),    // required id missing
    ];
    let mut records = Vec::new();
    let mut good = BTreeSet::new();
    let mut bad_at = Vec::new();
    let mut offsets = vec![0i64; partitions as usize];
    for i in 0..30i64 {
        let p = (i % partitions as i64) as i32;
        let payload = if i % 10 == 5 {
            let b = bad[(i / 10) as usize].clone();
            bad_at.push((p, offsets[p as usize], b.clone()));
            b
        } else {
            good.insert(i);
            format!(r#"{{"id": {i}}}"#)
        };
        offsets[p as usize] += 1;
        records.push(Produce::to(p, payload).key(&format!("k{i}")));
    }
    (records, good, bad_at)
}

async fn pipeline(client: &tokio_postgres::Client, name: &str) -> Option<BTreeMap<String, Option<String>>> {
    simple_records(client, "SHOW PIPELINES")
        .await
        .into_iter()
        .find(|p| p["name"].as_deref() == Some(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_records_follow_the_error_policy() {
    let server = TestServer::start();
    let client = server.connect().await;

    // skip: the good records arrive, the bad ones are counted.
    let topic = unique("mixed");
    create_topic(&topic, 2).await;
    let (records, good, bad) = mixed_records(2);
    produce(&topic, &records).await;
    let out = unique("mixed_out");
    exec(
        &client,
        &format!(
            "CREATE STREAM m_skip (id BIGINT NOT NULL) WITH ({}, 'format.error.policy' = 'skip'); \
             CREATE SINK m_skip_out WITH (connector = 'kafka', topic = '{out}', \
               'properties.bootstrap.servers' = 'localhost:9092') AS SELECT id FROM m_skip",
            kafka_options(&topic)
        ),
    )
    .await;
    let read = consume(&out, good.len(), Duration::from_secs(1), Duration::from_secs(60));
    let ids: BTreeSet<i64> = read
        .iter()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(&r.payload).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(read.len(), good.len());
    assert_eq!(ids, good);
    let p = wait_for("the malformed count", Duration::from_secs(30), || async {
        pipeline(&client, "m_skip_out")
            .await
            .filter(|p| p["records_malformed"].as_deref() == Some(bad.len().to_string().as_str()))
    })
    .await;
    assert_eq!(p["state"].as_deref(), Some("running"));
    assert_eq!(p["rows_in"].as_deref(), Some(good.len().to_string().as_str()));

    // dead_letter: the bad records' bytes, keys and errors go to the topic.
    let dlq = unique("dlq");
    exec(
        &client,
        &format!(
            "CREATE STREAM m_dl (id BIGINT NOT NULL) WITH ({}, 'format.error.policy' = 'dead_letter', \
               'dead_letter.topic' = '{dlq}'); \
             CREATE SINK m_dl_out WITH (connector = 'blackhole') AS SELECT id FROM m_dl",
            kafka_options(&topic)
        ),
    )
    .await;
    let letters = consume(&dlq, bad.len(), Duration::from_secs(1), Duration::from_secs(60));
    let got: BTreeSet<(i32, i64, String)> = letters
        .iter()
        .map(|r| {
            assert!(!r.headers["sluice.error"].is_empty(), "{r:?}");
            assert_eq!(r.headers["sluice.topic"], topic);
            assert!(r.key.as_deref().is_some_and(|k| k.starts_with('k')), "{r:?}");
            (
                r.headers["sluice.partition"].parse().unwrap(),
                r.headers["sluice.offset"].parse().unwrap(),
                r.payload.clone(),
            )
        })
        .collect();
    assert_eq!(got, bad.iter().cloned().collect::<BTreeSet<_>>());
    wait_for("the dead-lettered count", Duration::from_secs(30), || async {
        pipeline(&client, "m_dl_out")
            .await
            .filter(|p| p["records_malformed"].as_deref() == Some("3") && p["rows_in"].as_deref() == Some("27"))
    })
    .await;

    // fail: the pipeline fails, naming where the bad record is; one
    // partition, so the first bad record is known: offset 5.
    let single = unique("mixed_single");
    create_topic(&single, 1).await;
    let (records, _, _) = mixed_records(1);
    produce(&single, &records).await;
    exec(
        &client,
        &format!(
            "CREATE STREAM m_fail (id BIGINT NOT NULL) WITH ({}, 'format.error.policy' = 'fail'); \
             CREATE SINK m_fail_out WITH (connector = 'blackhole') AS SELECT id FROM m_fail",
            kafka_options(&single)
        ),
    )
    .await;
    let p = wait_for("the failure", Duration::from_secs(30), || async {
        pipeline(&client, "m_fail_out")
            .await
            .filter(|p| p["state"].as_deref() == Some("failed"))
    })
    .await;
    let error = p["error"].clone().unwrap();
    assert!(
        error.contains(&format!("topic {single} partition 0 offset 5")),
        "{error}"
    );
    // The other pipelines and the server go on.
    assert_eq!(
        pipeline(&client, "m_skip_out").await.unwrap()["state"].as_deref(),
        Some("running")
    );
    assert_eq!(
        simple_rows(&client, "SELECT 1 + 1").await,
        vec![vec![Some("2".to_string())]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_options_are_checked_when_the_stream_is_created() {
    let server = TestServer::start();
    let client = server.connect().await;
    let cases = [
        (
            "WITH (connector = 'kafka', topic = 't')",
            "properties.bootstrap.servers",
        ),
        (
            "WITH (connector = 'kafka', topic = 't', 'properties.bootstrap.servers' = 'x', 'scan.startup.mode' = 'timestamp')",
            "scan.startup.timestamp",
        ),
        (
            "WITH (connector = 'kafka', topic = 't', 'properties.bootstrap.servers' = 'x', 'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp' = 'noon')",
            "noon",
        ),
        (
            "WITH (connector = 'kafka', topic = 't', 'properties.bootstrap.servers' = 'x', format = 'xml')",
            "xml",
        ),
        (
            "WITH (connector = 'kafka', topic = 't', 'properties.bootstrap.servers' = 'x', tpoic = 'y')",
            "tpoic",
        ),
    ];
    for (with, needle) in cases {
        let sql = format!("CREATE STREAM bad_k (id BIGINT) {with}");
        let e = client.batch_execute(&sql).await.unwrap_err();
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
        assert_eq!(db.code().code(), "22023", "{sql}: {}", db.message());
        assert!(db.message().contains(needle), "{sql}: {}", db.message());
    }
    // A metadata column declared with the wrong type.
    let e = client
        .batch_execute(
            "CREATE STREAM bad_k (_kafka_offset TEXT) WITH (connector = 'kafka', topic = 't', \
             'properties.bootstrap.servers' = 'x')",
        )
        .await
        .unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "42804");
    // Sink options naming columns are checked against the query.
    exec(
        &client,
        "CREATE STREAM k_ok (id BIGINT) WITH (connector = 'kafka', topic = 't', 'properties.bootstrap.servers' = 'localhost:9092')",
    )
    .await;
    let e = client
        .batch_execute(
            "CREATE SINK k_bad WITH (connector = 'kafka', topic = 'o', 'properties.bootstrap.servers' = 'localhost:9092', \
             key = 'nope') AS SELECT id FROM k_ok",
        )
        .await
        .unwrap_err();
    let db = e.as_db_error().unwrap();
    assert!(db.message().contains("\"nope\""), "{}", db.message());
    assert!(simple_records(&client, "SHOW PIPELINES").await.is_empty());
}

/// How many times the replay race below is tried (fresh topic each time).
const REPLAY_ROUNDS: usize = 15;

/// Issue 22: replay from a timestamp right after the records were produced,
/// over three partitions, repeated with fresh topics. Records are produced
/// in time order; each round reads exactly as many rows as there are
/// records at or after the start and compares them with those records, so
/// a partition started before its first such record shows up as rows from
/// before the start, one started after it as a missing row (a timeout).
/// Odd rounds have a partition with no record at or after the start: it
/// starts at its end as of the lookup, never at its beginning, and a
/// record written to it while the query runs is read. Rounds vary the
/// parallelism and set `auto.offset.reset` to `earliest` half of the time
/// (where a partition whose lookup failed used to start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_from_a_timestamp_right_after_producing_never_starts_before_it() {
    const BEFORE: i64 = 180;
    const TOTAL: i64 = 360;
    let server = TestServer::start();
    let client = server.connect().await;
    let base = base_ms();
    for round in 0..REPLAY_ROUNDS {
        let topic = unique("replay_race");
        create_topic(&topic, 3).await;
        // Record i: timestamp base + i s, the first BEFORE before the start.
        // Record i goes to partition i % 3, except that in odd rounds the
        // records after the start skip partition `empty`.
        let empty = (round % 2 == 1).then_some((round % 3) as i32);
        let partition_of = |i: i64| -> i32 {
            let p = (i % 3) as i32;
            match empty {
                Some(e) if i >= BEFORE && p == e => (p + 1) % 3,
                _ => p,
            }
        };
        let records: Vec<Produce> = (0..TOTAL)
            .map(|i| Produce::to(partition_of(i), format!(r#"{{"id": {i}}}"#)).at(base + i * 1000))
            .collect();
        produce(&topic, &records).await;
        let stream = format!("replay_race_{round}");
        let reset = if round % 4 >= 2 {
            ", 'properties.auto.offset.reset' = 'earliest'"
        } else {
            ""
        };
        exec(
            &client,
            &format!(
                "SET parallelism = {}; CREATE STREAM {stream} (id BIGINT NOT NULL) WITH ({}, \
                 'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp' = '{}'{reset})",
                1 + round % 3,
                kafka_options(&topic),
                base + BEFORE * 1000
            ),
        )
        .await;
        // The marker: one more record, to the empty partition, written once
        // every other record has been read (so after the lookups).
        let marker = empty.map(|p| (TOTAL, p));
        let mut expected: BTreeMap<i64, i32> = (BEFORE..TOTAL).map(|i| (i, partition_of(i))).collect();
        expected.extend(marker);
        let sql = format!("SELECT id, _kafka_partition FROM {stream} LIMIT {}", expected.len());
        let what = format!("round {round} (empty partition {empty:?}): {sql} (records at or after the start missing?)");
        let got = crate::support::within(&what, Duration::from_secs(60), async {
            let rows = client
                .query_raw(&sql, Vec::<i64>::new())
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut rows = std::pin::pin!(rows);
            let mut got: BTreeMap<i64, i32> = BTreeMap::new();
            while let Some(row) = rows.next().await {
                let row = row.unwrap_or_else(|e| panic!("{what}: {e}"));
                let id: i64 = row.get(0);
                assert!(got.insert(id, row.get(1)).is_none(), "round {round}: record {id} twice");
                if got.len() == (TOTAL - BEFORE) as usize
                    && let Some((id, p)) = marker
                {
                    produce(
                        &topic,
                        &[Produce::to(p, format!(r#"{{"id": {id}}}"#)).at(base + id * 1000)],
                    )
                    .await;
                }
            }
            got
        })
        .await;
        let early: Vec<i64> = got.keys().copied().filter(|id| *id < BEFORE).collect();
        assert!(
            early.is_empty(),
            "round {round} (empty partition {empty:?}): {} records from before the start: {early:?}",
            early.len()
        );
        assert_eq!(
            got, expected,
            "round {round} (empty partition {empty:?}): (id, partition)"
        );
    }
}

/// An updating query (an aggregate without a window) into a Kafka sink in
/// Debezium's format: folding the topic's creates and deletes gives the
/// aggregates of every row inserted; a plain JSON sink refuses the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updating_query_reaches_kafka_as_debezium_json() {
    let output = unique("counts");
    create_topic(&output, 1).await;
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE STREAM dbz_clicks (k TEXT, v BIGINT)").await;
    let query = "SELECT k, count(*) AS n, sum(v) AS total FROM dbz_clicks GROUP BY k";
    let refused = client
        .batch_execute(&format!(
            "CREATE SINK dbz_plain WITH (connector = 'kafka', topic = '{output}', \
             'properties.bootstrap.servers' = 'localhost:9092', format = 'json') AS {query}"
        ))
        .await
        .expect_err("a plain JSON sink is append-only");
    let db = refused.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "0A000");
    assert!(db.message().contains("debezium-json"), "{}", db.message());
    exec(
        &client,
        &format!(
            "CREATE SINK dbz_counts WITH (connector = 'kafka', topic = '{output}', \
             'properties.bootstrap.servers' = 'localhost:9092', format = 'debezium-json', key = 'k') AS {query}"
        ),
    )
    .await;
    // Several INSERTs, so keys are updated after they were created.
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for round in 0..5i64 {
        let rows: Vec<(String, i64)> = (0..7)
            .map(|i| (format!("k{}", (i * (round + 1)) % 4), round * 10 + i))
            .collect();
        let values: Vec<String> = rows.iter().map(|(k, v)| format!("('{k}', {v})")).collect();
        exec(&client, &format!("INSERT INTO dbz_clicks VALUES {}", values.join(", "))).await;
        for (k, v) in rows {
            let e = expected.entry(k).or_default();
            e.0 += 1;
            e.1 += v;
        }
    }
    // The topic holds at least one create per key; read until its fold is
    // the expected table (the number of updates depends on the batches).
    let mut last = BTreeMap::new();
    for _ in 0..30 {
        let records = consume(&output, expected.len(), Duration::from_secs(2), Duration::from_secs(90));
        let mut table: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for r in &records {
            let v: serde_json::Value = serde_json::from_str(&r.payload).unwrap();
            let row = |side: &str| {
                let x = &v[side];
                (
                    x["k"].as_str().unwrap().to_string(),
                    (x["n"].as_i64().unwrap(), x["total"].as_i64().unwrap()),
                )
            };
            match v["op"].as_str() {
                Some("c") => {
                    let (k, n) = row("after");
                    assert_eq!(r.key.as_deref(), Some(format!(r#"{{"k":"{k}"}}"#).as_str()));
                    assert!(table.insert(k.clone(), n).is_none(), "a create of {k}, already there");
                }
                Some("d") => {
                    let (k, n) = row("before");
                    assert_eq!(table.remove(&k), Some(n), "a delete of {k} that is not its row");
                }
                other => panic!("op {other:?} in {}", r.payload),
            }
        }
        if table == expected {
            return;
        }
        last = table;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the topic folds to {last:?}, not {expected:?}");
}

/// Folds an upsert topic: the latest value per key, a tombstone (no
/// value) deleting it. Returns the table and how many tombstones came.
fn fold_upserts(records: &[crate::common::external::Consumed]) -> (BTreeMap<String, serde_json::Value>, usize) {
    let mut table = BTreeMap::new();
    let mut tombstones = 0;
    for r in records {
        let key = r.key.clone().expect("an upsert record has a key");
        if r.null_payload {
            tombstones += 1;
            table.remove(&key);
        } else {
            table.insert(key, serde_json::from_str(&r.payload).unwrap());
        }
    }
    (table, tombstones)
}

/// An updating query to an upsert topic (`format = 'upsert-json'`, Flink's
/// upsert-kafka): each key's latest row as its value, deletes as
/// tombstones. The query counts keys by their count (an aggregate over an
/// aggregate's changelog): after every key was seen once, the group n = 1
/// holds six keys; once each is seen again that group empties — a delete,
/// so a tombstone for key {"n":1} — and n = 2 holds six. Folding the topic
/// (latest value per key, tombstones deleting) gives the table computed
/// here; without a 'key' option the sink is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updating_query_reaches_kafka_as_upserts_with_tombstones() {
    let output = unique("upserts");
    create_topic(&output, 1).await;
    let server = TestServer::start();
    let client = server.connect().await;
    exec(&client, "CREATE STREAM up_clicks (k TEXT)").await;
    let query = "SELECT n, count(*) AS keys FROM (SELECT k, count(*) AS n FROM up_clicks GROUP BY k) AS t GROUP BY n";
    let refused = client
        .batch_execute(&format!(
            "CREATE SINK up_nokey WITH (connector = 'kafka', topic = '{output}', \
             'properties.bootstrap.servers' = 'localhost:9092', format = 'upsert-json') AS {query}"
        ))
        .await
        .expect_err("an upsert sink needs a key");
    let db = refused.as_db_error().expect("a server error");
    assert!(db.message().contains("needs a 'key' option"), "{}", db.message());
    exec(
        &client,
        &format!(
            "CREATE SINK up_counts WITH (connector = 'kafka', topic = '{output}', \
             'properties.bootstrap.servers' = 'localhost:9092', format = 'upsert-json', key = 'n') AS {query}"
        ),
    )
    .await;
    let keys: Vec<String> = (0..6).map(|i| format!("('k{i}')")).collect();
    exec(&client, &format!("INSERT INTO up_clicks VALUES {}", keys.join(", "))).await;
    // Wait until the first round is out (n = 1: six keys), so the second
    // comes in another batch and empties that group.
    let mut first = BTreeMap::new();
    for _ in 0..60 {
        (first, _) = fold_upserts(&consume(
            &output,
            1,
            Duration::from_millis(500),
            Duration::from_secs(90),
        ));
        if first.get(r#"{"n":1}"#).is_some_and(|v| v["keys"] == 6) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        first.get(r#"{"n":1}"#).map(|v| v["keys"].clone()),
        Some(serde_json::json!(6)),
        "{first:?}"
    );
    exec(&client, &format!("INSERT INTO up_clicks VALUES {}", keys.join(", "))).await;
    let expected: BTreeMap<String, serde_json::Value> =
        [(r#"{"n":2}"#.to_string(), serde_json::json!({"n": 2, "keys": 6}))]
            .into_iter()
            .collect();
    let mut last = (BTreeMap::new(), 0);
    for _ in 0..30 {
        last = fold_upserts(&consume(&output, 2, Duration::from_secs(1), Duration::from_secs(90)));
        if last.0 == expected {
            assert!(last.1 >= 1, "the emptied group n = 1 left by a tombstone");
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the topic folds to {last:?}, not {expected:?}");
}
