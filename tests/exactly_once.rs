//! Exactly-once across crashes, against the real Kafka (localhost:9092)
//! and HDFS (hdfs://localhost:9000) of `scripts/services.sh`: Kafka →
//! TUMBLE (or HOP) count per key → a transactional Kafka sink and an HDFS
//! Parquet sink, with checkpoints every second. The server is killed with SIGKILL
//! at random moments (or a task panics once, or the newest checkpoint is
//! corrupted) and restarted; at the end both sinks must hold every window
//! exactly once, as computed here from the records the test produced.

mod common;

use arrow::array::{Array, Int64Array, StringArray};
use common::TestServer;
use rand::Rng;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

const BROKERS: &str = "localhost:9092";
const HDFS: &str = "hdfs://localhost:9000";
const RECORDS: i64 = 24_000;
const KEYS: i64 = 7;
const STEP_MS: i64 = 5;
const BASE_MS: i64 = 1_796_040_000_000; // 2026-11-30T12:00:00

/// (key, the window's identity) → count: the expected output, computed
/// from the produced records with 1 s windows starting every `slide_ms`
/// (1000: tumbling). A tumbling window is known by its first seq; hopping
/// windows by their first and last (`first * 1_000_000 + last`, as
/// [`Fault::window`]'s query writes it): the window over the input's
/// start and the one after it share their first row, the last two their
/// last.
fn expected(slide_ms: i64) -> BTreeMap<(String, i64), i64> {
    let mut windows: BTreeMap<(String, i64), (i64, i64, i64)> = BTreeMap::new();
    for i in 0..RECORDS {
        let ts = BASE_MS + i * STEP_MS;
        let mut start = ts - ts.rem_euclid(slide_ms);
        while start + 1000 > ts {
            let e = windows.entry((format!("k{}", i % KEYS), start)).or_insert((i, i, 0));
            e.1 = i;
            e.2 += 1;
            start -= slide_ms;
        }
    }
    windows
        .into_iter()
        .map(|((k, _), (first, last, c))| {
            let id = if slide_ms == 1000 {
                first
            } else {
                first * 1_000_000 + last
            };
            ((k, id), c)
        })
        .collect()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}_{}", std::process::id(), rand::rng().random::<u32>())
}

async fn create_topics(names: &[&str]) {
    create_topics_with(names, 3).await;
}

async fn create_topics_with(names: &[&str], partitions: i32) {
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", BROKERS)
        .create()
        .expect("admin client");
    let topics: Vec<NewTopic> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1)))
        .collect();
    for r in admin
        .create_topics(&topics, &AdminOptions::new())
        .await
        .expect("create topics")
    {
        r.expect("topic created");
    }
}

/// Produces the records at a steady pace on a thread, then one record per
/// partition far ahead in event time, so every window fires.
fn produce(topic: String, pace: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", BROKERS)
            .create()
            .expect("producer");
        let record = |i: i64, k: &str, ts: i64| {
            let t = chrono::DateTime::from_timestamp_millis(ts).unwrap().naive_utc();
            format!(
                r#"{{"k":"{k}","seq":{i},"ts":"{}"}}"#,
                t.format("%Y-%m-%dT%H:%M:%S%.3f")
            )
        };
        for i in 0..RECORDS {
            let payload = record(i, &format!("k{}", i % KEYS), BASE_MS + i * STEP_MS);
            let mut r = BaseRecord::<(), String>::to(&topic)
                .payload(&payload)
                .partition((i % 3) as i32);
            while let Err((_, back)) = producer.send(r) {
                producer.poll(Duration::from_millis(10));
                r = back;
            }
            if i % 200 == 0 {
                producer.poll(Duration::ZERO);
                std::thread::sleep(pace);
            }
        }
        for p in 0..3 {
            let payload = record(-1, "end", BASE_MS + RECORDS * STEP_MS + 10_000);
            producer
                .send(BaseRecord::<(), String>::to(&topic).payload(&payload).partition(p))
                .expect("send end");
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
    })
}

async fn create_pipelines(
    server: &TestServer,
    input: &str,
    output: &str,
    hdfs_path: &str,
    file_path: &Path,
    checkpoint_dir: Option<&str>,
    (window, identity): (&str, &str),
) {
    let c = server.connect().await;
    let dir = checkpoint_dir.map_or(String::new(), |d| format!(", 'checkpoint.dir' = '{d}'"));
    let query = format!(
        "SELECT k, {identity} AS first_seq, count(*) AS c FROM {window} \
         WHERE k <> 'end' GROUP BY window_start, window_end, k"
    );
    c.batch_execute(&format!(
        "CREATE STREAM src (k VARCHAR, seq BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{input}', 'properties.bootstrap.servers' = '{BROKERS}', format = 'json');
         SET checkpoint_interval = '1s';
         CREATE SINK to_kafka WITH (connector = 'kafka', topic = '{output}', 'properties.bootstrap.servers' = '{BROKERS}',
            'sink.delivery-guarantee' = 'exactly-once'{dir}) AS {query};
         CREATE SINK to_hdfs WITH (connector = 'hdfs', url = '{HDFS}', path = '{hdfs_path}', format = 'parquet',
            'rollover.size' = '4KB'{dir}) AS {query};
         CREATE SINK to_file WITH (connector = 'file', path = '{}', format = 'jsonl',
            'rollover.size' = '4KB'{dir}) AS {query};",
        file_path.display()
    ))
    .await
    .expect("create pipelines");
}

/// Every committed output row of the Kafka topic (read_committed).
fn read_kafka(topic: &str, until: usize, deadline: Instant) -> Vec<(String, i64, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", BROKERS)
        .set("group.id", unique("check"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut rows = Vec::new();
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
                rows.push((
                    v["k"].as_str().unwrap().to_string(),
                    v["first_seq"].as_i64().unwrap(),
                    v["c"].as_i64().unwrap(),
                ));
                quiet_since = Instant::now();
            }
            Some(Err(e)) => panic!("consume: {e}"),
            // Enough rows and nothing more for a while: done (duplicates
            // would have arrived with the rest).
            None if rows.len() >= until && quiet_since.elapsed() > Duration::from_secs(5) => break,
            None => {}
        }
    }
    rows
}

/// Every row of the committed (visible) Parquet files under `path`.
async fn read_hdfs(path: &str) -> Vec<(String, i64, i64)> {
    let client = hdfs_native::ClientBuilder::new().with_url(HDFS).build().unwrap();
    let mut rows = Vec::new();
    let Ok(files) = client.list_status(path, true).await else {
        return rows;
    };
    for f in files.iter().filter(|f| !f.isdir && f.path.ends_with(".parquet")) {
        let name = f.path.rsplit('/').next().unwrap();
        if name.starts_with('.') {
            continue;
        }
        let r = client.read(&f.path).await.unwrap();
        let bytes = r.read_range(0, r.file_length()).await.unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            let b = b.unwrap();
            let k = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let s = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            let c = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
            for i in 0..b.num_rows() {
                rows.push((k.value(i).to_string(), s.value(i), c.value(i)));
            }
        }
    }
    rows
}

/// Every committed output row of the local file sink's directory (hidden
/// in-progress files are not read).
fn read_files(dir: &Path) -> Vec<(String, i64, i64)> {
    common::committed_json(dir)
        .iter()
        .map(|v| {
            (
                v["k"].as_str().unwrap().to_string(),
                v["first_seq"].as_i64().unwrap(),
                v["c"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Whether `rows` hold every expected window exactly once; the reason when not.
fn verdict(what: &str, rows: Vec<(String, i64, i64)>, expected: &BTreeMap<(String, i64), i64>) -> Result<(), String> {
    let mut seen: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for (k, first, c) in rows {
        if seen.insert((k.clone(), first), c).is_some() {
            return Err(format!("{what}: window ({k}, {first}) emitted twice"));
        }
    }
    let missing: Vec<_> = expected.keys().filter(|w| !seen.contains_key(*w)).take(5).collect();
    if !missing.is_empty() {
        return Err(format!(
            "{what}: {} of {} windows missing, e.g. {missing:?}",
            expected.len() - seen.len().min(expected.len()),
            expected.len()
        ));
    }
    if &seen != expected {
        let differ: Vec<_> = expected
            .iter()
            .filter(|(w, c)| seen.get(*w) != Some(c))
            .take(5)
            .collect();
        let extra: Vec<_> = seen
            .iter()
            .filter(|(w, _)| !expected.contains_key(*w))
            .take(5)
            .collect();
        return Err(format!(
            "{what}: counts differ, e.g. expected {differ:?}; not expected {extra:?}"
        ));
    }
    Ok(())
}

/// Asserts [`verdict`]; on failure the message carries every pipeline's
/// state as the server reports it (task watermarks, checkpoints, errors),
/// so a failure in CI says where the rows stopped.
async fn check(
    server: &TestServer,
    what: &str,
    rows: Vec<(String, i64, i64)>,
    expected: &BTreeMap<(String, i64), i64>,
) {
    if let Err(e) = verdict(what, rows, expected) {
        panic!("{e}\nserver state:\n{}", server_state(server).await);
    }
}

/// Each pipeline's summary and tasks from the REST API, one line per task.
async fn server_state(server: &TestServer) -> String {
    let base = format!("http://127.0.0.1:{}/api/v1/pipelines", server.http_port);
    let get = |url: String| async move {
        match reqwest::get(&url).await {
            Ok(r) => r.json::<serde_json::Value>().await.unwrap_or_default(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        }
    };
    let list = get(base.clone()).await;
    let mut out = String::new();
    for p in list["pipelines"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default();
        let detail = get(format!("{base}/{name}")).await;
        let summary = &detail["pipeline"];
        out += &format!(
            "{name}: state={} watermark_ms={} restarts={} restored_from={} checkpoints={} error={}\n",
            summary["state"],
            summary["watermark_ms"],
            summary["restarts"],
            summary["restored_from_checkpoint"],
            summary["checkpoints"],
            summary["error"]
        );
        for t in detail["tasks"].as_array().into_iter().flatten() {
            out += &format!(
                "  op {} #{} {}: in={} out={} watermark_ms={} queued={} held_us={} condition={}\n",
                t["operator"],
                t["instance"],
                t["kind"],
                t["rows_in"],
                t["rows_out"],
                t["watermark_ms"],
                t["queued_rows"],
                t["alignment_held_us"],
                t["condition"]
            );
        }
    }
    if out.is_empty() {
        out = format!("{list}");
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Kills,
    /// Two kills, checkpoints on HDFS.
    KillsHdfsCheckpoints,
    Panic,
    CorruptNewest,
    /// SIGKILL while `ALTER PIPELINE` switches the pipelines to an
    /// equivalent query (a filter below the window that passes the same
    /// rows: the window's state moves).
    KillsDuringAlter,
    /// A cluster (master + two workers): SIGKILL of a worker running tasks,
    /// three times, a replacement worker joining after each.
    KillsWorkers,
    /// As `Kills`, over 1 s windows every 500 ms (HOP: panes, whose
    /// checkpoints are incremental).
    KillsHop,
}

impl Fault {
    /// The pipelines' window, the expression of a window's identity in
    /// their output (see [`expected`]) and the window's slide in ms.
    fn window(self) -> ((&'static str, &'static str), i64) {
        match self {
            Fault::KillsHop => (
                (
                    "HOP(src, ts, INTERVAL '500' MILLISECOND, INTERVAL '1' SECOND)",
                    "min(seq) * 1000000 + max(seq)",
                ),
                500,
            ),
            _ => (("TUMBLE(src, ts, INTERVAL '1' SECOND)", "min(seq)"), 1000),
        }
    }
}

/// The pipelines' query with a filter that passes the same rows as
/// `create_pipelines`' (`variant` 0 is that one).
fn equivalent_query(variant: usize) -> String {
    let filter = [
        "k <> 'end'",
        "k <> 'end' AND seq > -1000000",
        "k <> 'end' AND seq > -2000000",
    ][variant];
    format!(
        "SELECT k, min(seq) AS first_seq, count(*) AS c FROM TUMBLE(src, ts, INTERVAL '1' SECOND) \
         WHERE {filter} GROUP BY window_start, window_end, k"
    )
}

/// The checkpoint id committed by the exactly-once Kafka sink of pipeline
/// `pipeline` (its marker: group `sluice-<topic>-p<id>-0`, partition 0).
fn kafka_marker(output: &str, pipeline: &str) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", BROKERS)
        .set("group.id", format!("sluice-{output}-{pipeline}-0"))
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition(output, 0);
    // A failed read is not "nothing committed": read once, it made a
    // marker seen before the kill vanish right after it (CI, once). Up to
    // 5 tries; after that, as before, no marker.
    let committed = (0..5).find_map(|attempt| {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(500));
        }
        consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)).ok()
    })?;
    match committed.elements().first()?.offset() {
        rdkafka::Offset::Offset(o) if o > 0 => Some(o),
        _ => None,
    }
}

/// Complete checkpoint ids of each pipeline under `data_dir`.
fn complete_checkpoints(data_dir: &Path) -> Vec<(String, Vec<i64>)> {
    let Ok(pipelines) = std::fs::read_dir(data_dir.join("checkpoints")) else {
        return Vec::new();
    };
    pipelines
        .map(|p| p.unwrap().path())
        .map(|p| {
            let ids = std::fs::read_dir(&p)
                .map(|dirs| {
                    dirs.map(|e| e.unwrap().path())
                        .filter(|d| d.join("MANIFEST").exists())
                        .filter_map(|d| d.file_name()?.to_string_lossy().strip_prefix("chk-")?.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            (p.file_name().unwrap().to_string_lossy().to_string(), ids)
        })
        .collect()
}

/// True when each of the `pipelines` has a checkpoint to fall back to: the
/// Kafka pipeline's sink committed a checkpoint and an older complete one
/// exists; every other pipeline has two complete checkpoints.
/// The Kafka sink's committed checkpoint per pipeline once every pipeline
/// has one to fall back to; `None` until then.
fn each_can_fall_back(data_dir: &Path, output: &str, pipelines: usize) -> Option<HashMap<String, i64>> {
    let complete = complete_checkpoints(data_dir);
    let markers: Vec<Option<i64>> = complete.iter().map(|(p, _)| kafka_marker(output, p)).collect();
    // The Kafka sink must have committed (its marker read back): without
    // this, a marker not yet visible — or a failed read of it — looked like
    // a pipeline with no Kafka sink, and the kill came too early.
    let ready = complete.len() == pipelines
        && markers.iter().any(Option::is_some)
        && complete.iter().zip(&markers).all(|((_, ids), marker)| match marker {
            Some(m) => ids.iter().any(|id| id < m),
            None => ids.len() >= 2,
        });
    ready.then(|| {
        complete
            .iter()
            .zip(markers)
            .filter_map(|((p, _), m)| Some((p.clone(), m?)))
            .collect()
    })
}

/// Corrupts one task file of checkpoint directory `dir`.
fn corrupt(dir: &Path) {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|f| f.extension().is_some_and(|x| x == "state"))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
}

/// Corrupts, per pipeline, the newest complete checkpoint — for the Kafka
/// pipeline every complete checkpoint from the one its sink committed on
/// (so recovery must fall back past a committed transaction). Returns the
/// Kafka sink's committed checkpoint. `seen`: the markers read before the
/// kill; a marker read again now counts if it is newer (a read of one can
/// come back empty under load — CI, twice — and a sink never uncommits).
fn corrupt_newest_checkpoint(data_dir: &Path, output: &str, seen: &HashMap<String, i64>) -> i64 {
    let root = data_dir.join("checkpoints");
    let mut kafka_committed = None;
    for p in std::fs::read_dir(&root).unwrap() {
        let p = p.unwrap().path();
        let pipeline = p.file_name().unwrap().to_string_lossy().to_string();
        let mut complete: Vec<(i64, std::path::PathBuf)> = std::fs::read_dir(&p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|d| d.join("MANIFEST").exists())
            .map(|d| {
                let id = d.file_name().unwrap().to_string_lossy()["chk-".len()..]
                    .parse()
                    .unwrap();
                (id, d)
            })
            .collect();
        complete.sort();
        match kafka_marker(output, &pipeline).max(seen.get(&pipeline).copied()) {
            Some(m) => {
                assert!(
                    complete.iter().any(|(id, _)| *id < m),
                    "an older complete checkpoint than the committed {m} to fall back to: {complete:?}"
                );
                for (_, d) in complete.iter().filter(|(id, _)| *id >= m) {
                    corrupt(d);
                }
                kafka_committed = Some(m);
            }
            None => {
                assert!(
                    complete.len() >= 2,
                    "an older complete checkpoint to fall back to: {complete:?}"
                );
                corrupt(&complete.last().unwrap().1);
            }
        }
    }
    kafka_committed.expect("the Kafka sink committed a checkpoint before the kill")
}

/// Checkpoint files (path, length) under an HDFS directory.
async fn hdfs_files(path: &str) -> Vec<(String, usize)> {
    let client = hdfs_native::ClientBuilder::new().with_url(HDFS).build().unwrap();
    match client.list_status(path, true).await {
        Ok(files) => files
            .into_iter()
            .filter(|f| !f.isdir)
            .map(|f| (f.path, f.length))
            .collect(),
        Err(_) => Vec::new(),
    }
}

async fn scenario(fault: Fault) {
    let (input, output) = (unique("eo_in"), unique("eo_out"));
    let hdfs_path = format!("/sluice-test/{}", unique("eo"));
    let checkpoint_path = format!("/sluice-test/{}", unique("chk"));
    let checkpoint_dir = (fault == Fault::KillsHdfsCheckpoints).then(|| format!("{HDFS}{checkpoint_path}"));
    create_topics(&[&input, &output]).await;
    let tmp = tempfile::tempdir().unwrap();
    let env: Vec<(&str, &str)> = match fault {
        Fault::Panic => vec![("SLUICE_FAULT_PANIC_AT", "window_aggregate:9000")],
        _ => vec![],
    };
    let mut server = if fault == Fault::KillsWorkers {
        TestServer::start_cluster_in(tmp.path(), 2, 16)
    } else {
        TestServer::start_in_with_env(tmp.path(), &env)
    };
    let out_dir = tempfile::tempdir().unwrap();
    let file_path = out_dir.path().join("windows");
    create_pipelines(
        &server,
        &input,
        &output,
        &hdfs_path,
        &file_path,
        checkpoint_dir.as_deref(),
        fault.window().0,
    )
    .await;
    let producer = produce(input.clone(), Duration::from_millis(40));
    match fault {
        Fault::Kills | Fault::KillsHop => {
            for _ in 0..4 {
                let wait = rand::rng().random_range(1500..4000);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                server.stop(); // SIGKILL
                server = TestServer::start_in(tmp.path());
            }
        }
        Fault::KillsHdfsCheckpoints => {
            for _ in 0..2 {
                let wait = rand::rng().random_range(2500..4000);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                // A complete checkpoint on HDFS before the kill; how soon one
                // completes depends on the machine's load, so wait for it.
                let deadline = Instant::now() + Duration::from_secs(120);
                loop {
                    let files = hdfs_files(&checkpoint_path).await;
                    if files.iter().any(|(p, _)| p.ends_with("/MANIFEST"))
                        && files.iter().any(|(p, _)| p.ends_with(".state"))
                    {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "checkpoints are written to HDFS within 120 s: {files:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                server.stop(); // SIGKILL
                server = TestServer::start_in(tmp.path());
            }
            assert!(
                !tmp.path().join("checkpoints").exists(),
                "no checkpoint went to the local data directory"
            );
        }
        Fault::KillsDuringAlter => {
            for _ in 0..3 {
                let wait = rand::rng().random_range(1500..3000);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                // Every pipeline is switched; the kill comes at a random
                // moment of the switches (before, between, or after the
                // barrier and the commit of one of them).
                let c = server.connect().await;
                let altering = tokio::spawn(async move {
                    for name in ["to_kafka", "to_hdfs", "to_file"] {
                        let sql = format!("ALTER PIPELINE {name} AS {}", equivalent_query(1));
                        if c.batch_execute(&sql).await.is_err() {
                            return;
                        }
                    }
                });
                let kill_after = rand::rng().random_range(0..1500);
                tokio::time::sleep(Duration::from_millis(kill_after)).await;
                server.stop(); // SIGKILL
                let _ = altering.await;
                server = TestServer::start_in(tmp.path());
            }
            // Each pipeline came back as one version or the other; one more
            // switch each, uninterrupted, while the input still flows.
            let c = server.connect().await;
            let versions = |rows: Vec<tokio_postgres::SimpleQueryMessage>| -> BTreeMap<String, u32> {
                rows.iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                            r.get("name").unwrap().to_string(),
                            r.get("version").unwrap().parse().unwrap(),
                        )),
                        _ => None,
                    })
                    .collect()
            };
            let before = versions(c.simple_query("SHOW PIPELINES").await.unwrap());
            eprintln!("versions after the kills: {before:?}");
            for name in ["to_kafka", "to_hdfs", "to_file"] {
                // Variant 2 was never used: a change from whichever
                // version runs.
                let sql = format!("ALTER PIPELINE {name} AS {}", equivalent_query(2));
                let started = Instant::now();
                c.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
                eprintln!("ALTER PIPELINE {name} took {:?}", started.elapsed());
            }
            let after = versions(c.simple_query("SHOW PIPELINES").await.unwrap());
            for (name, v) in &before {
                assert_eq!(after[name], v + 1, "{name}");
            }
        }
        Fault::KillsWorkers => {
            for next in 3..6 {
                let wait = rand::rng().random_range(2000..4000);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let victim = rand::rng().random_range(0..2);
                server.kill_worker(victim); // SIGKILL
                let back = rand::rng().random_range(0..3000);
                tokio::time::sleep(Duration::from_millis(back)).await;
                server.add_worker(&format!("w{next}"), 16, &[]);
                server.wait_for_workers(2);
            }
        }
        Fault::Panic => {}
        Fault::CorruptNewest => {
            // Kill only once every pipeline has a checkpoint to fall back to
            // (for the Kafka one: older than the one its sink committed);
            // how long that takes depends on the machine's load, so wait
            // for it rather than for a fixed time.
            let deadline = Instant::now() + Duration::from_secs(120);
            let seen = loop {
                if let Some(seen) = each_can_fall_back(tmp.path(), &output, 3) {
                    break seen;
                }
                assert!(
                    Instant::now() < deadline,
                    "not every pipeline had a checkpoint to fall back to within 120 s: {:?}",
                    complete_checkpoints(tmp.path())
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            server.stop();
            let committed = corrupt_newest_checkpoint(tmp.path(), &output, &seen);
            eprintln!(
                "corrupted the Kafka pipeline's checkpoints from {committed} on (its sink committed {committed})"
            );
            server = TestServer::start_in(tmp.path());
        }
    }
    producer.join().unwrap();
    let expected = expected(fault.window().1);
    let deadline = Instant::now() + Duration::from_secs(180);
    check(
        &server,
        "kafka",
        read_kafka(&output, expected.len(), deadline),
        &expected,
    )
    .await;
    // The file sinks commit at the checkpoint after the last window fired.
    let mut rows = Vec::new();
    while Instant::now() < deadline {
        rows = read_hdfs(&hdfs_path).await;
        if rows.len() >= expected.len() {
            tokio::time::sleep(Duration::from_secs(3)).await;
            rows = read_hdfs(&hdfs_path).await;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    check(&server, "hdfs", rows, &expected).await;
    while Instant::now() < deadline && read_files(&file_path).len() < expected.len() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    check(&server, "file", read_files(&file_path), &expected).await;
    if fault == Fault::Panic {
        let c = server.connect().await;
        let rows = c.simple_query("SHOW PIPELINES").await.unwrap();
        let restarts: i64 = rows
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get("restarts").map(|v| v.parse::<i64>().unwrap()),
                _ => None,
            })
            .sum();
        assert!(restarts >= 1, "the panicking task's pipeline restarted");
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_keeps_every_window_exactly_once() {
    scenario(Fault::Kills).await;
}

/// The same over hopping windows, whose panes a checkpoint writes once and
/// later checkpoints reference: a restore resolves them from the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_keeps_every_hopping_window_exactly_once() {
    scenario(Fault::KillsHop).await;
}

/// kill -9 of worker processes running the pipelines' tasks: the master
/// declares each dead and the pipelines restart on the workers left (and
/// the replacements), every window exactly once in Kafka, HDFS and files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_workers_keeps_every_window_exactly_once() {
    scenario(Fault::KillsWorkers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_on_hdfs_survive_sigkill_with_exact_output() {
    scenario(Fault::KillsHdfsCheckpoints).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_panic_restarts_the_pipeline_with_exact_output() {
    scenario(Fault::Panic).await;
}

/// `ALTER PIPELINE` of a Kafka → window → Kafka exactly-once pipeline
/// (and the HDFS and file ones), killed at random moments of the switch:
/// every window exactly once in every sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_alter_pipeline_keeps_every_window_exactly_once() {
    scenario(Fault::KillsDuringAlter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_newest_checkpoint_is_skipped() {
    scenario(Fault::CorruptNewest).await;
}

/// The SHOW PIPELINES row of `name`: (state, rows_out, error, restarts).
async fn pipeline_row(c: &tokio_postgres::Client, name: &str) -> Option<(String, i64, Option<String>, i64)> {
    let rows = c.simple_query("SHOW PIPELINES").await.unwrap();
    rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => Some((
            r.get("state").unwrap().to_string(),
            r.get("rows_out").unwrap().parse().unwrap(),
            r.get("error").map(str::to_string),
            r.get("restarts").unwrap().parse().unwrap(),
        )),
        _ => None,
    })
}

/// A Kafka transaction may hold 'sink.transaction.max-rows' rows: a
/// pipeline that writes more between two checkpoints fails with a clear
/// error on every restart, and after the restart budget (5) it stays
/// `failed` with that error — while another pipeline on the same source
/// keeps running and producing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_failing_on_every_restart_gives_up_and_others_keep_running() {
    let (over, steady) = (unique("eo_over"), unique("eo_steady"));
    create_topics(&[&over, &steady]).await;
    let server = TestServer::start();
    let c = server.connect().await;
    // 1000 bids/s; checkpoints every 10 s: ~10,000 rows per transaction,
    // far past the bound of 100 (a fault that fires again on every restart).
    c.batch_execute(&format!(
        "CREATE STREAM bids WITH (connector = 'nexmark', table = 'bid', 'events.per.second' = 1000);
         SET checkpoint_interval = '10s';
         CREATE SINK over_bound WITH (connector = 'kafka', topic = '{over}', 'properties.bootstrap.servers' = '{BROKERS}',
            'sink.delivery-guarantee' = 'exactly-once', 'sink.transaction.max-rows' = '100') AS SELECT auction, price FROM bids;
         CREATE SINK steady WITH (connector = 'kafka', topic = '{steady}', 'properties.bootstrap.servers' = '{BROKERS}')
            AS SELECT auction, price FROM bids;"
    ))
    .await
    .expect("create pipelines");
    // Backoff 0.5 + 1 + 2 + 4 + 8 s between the 6 attempts.
    let deadline = Instant::now() + Duration::from_secs(120);
    let failed = loop {
        let row = pipeline_row(&c, "over_bound").await.expect("listed");
        if row.0 == "failed" && row.2.as_deref().is_some_and(|e| e.contains("gave up")) {
            break row;
        }
        assert!(Instant::now() < deadline, "still not given up: {row:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let error = failed.2.unwrap();
    assert!(
        error.contains("gave up after 5 restarts")
            && error.contains("more than 100 rows")
            && error.contains("sink.transaction.max-rows"),
        "{error}"
    );
    assert_eq!(failed.3, 5, "restarts");
    // It stays failed; the other pipeline keeps producing.
    let before = pipeline_row(&c, "steady").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = pipeline_row(&c, "steady").await.unwrap();
    assert_eq!(after.0, "running", "{after:?}");
    assert!(after.1 > before.1, "steady keeps producing: {before:?} → {after:?}");
    assert_eq!(after.3, 0, "steady never restarted");
    let again = pipeline_row(&c, "over_bound").await.unwrap();
    assert_eq!((again.0.as_str(), again.3), ("failed", 5), "no restart after giving up");
    // SHOW CHECKPOINTS: steady completed some (every 10 s), newest first,
    // with time, size and duration; over_bound never completed one.
    let checkpoints = |name: &'static str| {
        let c = &c;
        async move {
            c.simple_query(&format!("SHOW CHECKPOINTS FOR {name}"))
                .await
                .unwrap()
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                        r.get("checkpoint_id").unwrap().parse::<i64>().unwrap(),
                        r.get("completed").map(str::to_string),
                        r.get("size_bytes").unwrap().parse::<i64>().unwrap(),
                        r.get("duration_ms").unwrap().parse::<i64>().unwrap(),
                        r.get("restored").unwrap().to_string(),
                    )),
                    _ => None,
                })
                .collect::<Vec<_>>()
        }
    };
    let until = Instant::now() + Duration::from_secs(30);
    let mut steady_checkpoints = checkpoints("steady").await;
    while steady_checkpoints.is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        steady_checkpoints = checkpoints("steady").await;
    }
    assert!(!steady_checkpoints.is_empty(), "steady checkpointed");
    assert!(steady_checkpoints.windows(2).all(|w| w[0].0 > w[1].0), "newest first");
    for (id, completed, size, duration, restored) in &steady_checkpoints {
        assert!(
            *id >= 1 && *size > 0 && *duration >= 0 && restored == "no",
            "{steady_checkpoints:?}"
        );
        assert!(
            completed.as_deref().is_some_and(|t| t.starts_with("20")),
            "{completed:?}"
        );
    }
    assert!(checkpoints("over_bound").await.is_empty());
    let e = c.simple_query("SHOW CHECKPOINTS FOR nope").await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "42704");
}

/// A restart forgets nothing of the event time read before the checkpoint.
/// The source reads two partitions; partition 0's rows are all read while
/// partition 1 is still empty (so no watermark yet), a checkpoint records
/// partition 0's offsets at its end, and the server is killed. Partition 1
/// then gets its rows. After the restart partition 0 has nothing left to
/// read: the windows close only because the checkpoint kept its event time
/// (before, they waited for partition 0's idle timeout, here 10 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_time_read_before_a_checkpoint_closes_windows_after_a_restart() {
    let input = unique("eo_wm");
    create_topics_with(&[&input], 2).await;
    // Rows every 100 ms of event time, 0 s to 10 s inclusive, in partition p.
    let produce_partition = |p: i32| {
        let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", BROKERS)
            .create()
            .expect("producer");
        for i in 0..=100i64 {
            let t = chrono::DateTime::from_timestamp_millis(BASE_MS + i * 100)
                .unwrap()
                .naive_utc();
            let payload = format!(
                r#"{{"k":"p{p}","seq":{i},"ts":"{}"}}"#,
                t.format("%Y-%m-%dT%H:%M:%S%.3f")
            );
            producer
                .send(BaseRecord::<(), String>::to(&input).payload(&payload).partition(p))
                .expect("send");
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
    };
    produce_partition(0);
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let file_path = out.path().join("windows");
    let mut server = TestServer::start_in(tmp.path());
    let c = server.connect().await;
    c.batch_execute(&format!(
        "SET parallelism = 1;
         SET checkpoint_interval = '500ms';
         CREATE STREAM src (k VARCHAR, seq BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
         WITH (connector = 'kafka', topic = '{input}', 'properties.bootstrap.servers' = '{BROKERS}', format = 'json',
               'idle.timeout' = '10min');
         CREATE SINK windows WITH (connector = 'file', path = '{}', format = 'jsonl') AS
         SELECT window_start, count(*) AS c FROM TUMBLE(src, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end;",
        file_path.display()
    ))
    .await
    .expect("create pipeline");
    // Every row of partition 0 read, then two more checkpoints (the second
    // one started after the reads).
    let base = format!("http://127.0.0.1:{}/api/v1/pipelines/windows", server.http_port);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: serde_json::Value = reqwest::get(&base).await.unwrap().json().await.unwrap();
        let read: u64 = v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"] == "source")
            .map(|t| t["rows_out"].as_u64().unwrap_or(0))
            .sum();
        if read == 101 {
            break;
        }
        assert!(Instant::now() < deadline, "partition 0 read within 60 s: {read} rows");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let count = |rows: Vec<tokio_postgres::SimpleQueryMessage>| {
        rows.iter()
            .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
            .count()
    };
    let before = count(c.simple_query("SHOW CHECKPOINTS FOR windows").await.unwrap());
    while count(c.simple_query("SHOW CHECKPOINTS FOR windows").await.unwrap()) < before + 2 {
        assert!(Instant::now() < deadline, "checkpoints complete within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        read_files(&file_path).is_empty(),
        "no window closed: partition 1 had no rows yet"
    );
    server.stop(); // SIGKILL
    produce_partition(1);
    server = TestServer::start_in(tmp.path());
    // Windows 0..10 s close (window 10 s holds the last row of each
    // partition and stays open): 10 rows of each partition per window.
    let expected: BTreeMap<i64, i64> = (0..10).map(|w| (BASE_MS + w * 1000, 20)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = BTreeMap::new();
    while Instant::now() < deadline {
        got = window_counts(&file_path);
        if got.len() >= expected.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(got, expected, "windows after the restart (within 60 s)");
    drop(server);
}

/// (window start in epoch ms, count) of every committed row of a file sink
/// writing `window_start, c`.
fn window_counts(dir: &Path) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for path in entries.map(|e| e.unwrap().path()) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('.') || !name.ends_with(".jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let text = v["window_start"].as_str().unwrap();
            let start = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
                .unwrap_or_else(|| panic!("window_start {text}"))
                .and_utc()
                .timestamp_millis();
            assert!(
                out.insert(start, v["c"].as_i64().unwrap()).is_none(),
                "window {start} twice"
            );
        }
    }
    out
}
