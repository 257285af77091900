//! The real Kafka broker and HDFS that `scripts/services.sh start all`
//! runs on this machine: plain clients to prepare input and read output,
//! independent of Sluice's own connectors.
//!
//! A test that cannot reach a service fails with the command that starts it.

#![allow(dead_code)]

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const KAFKA: &str = "localhost:9092";
pub const HDFS: &str = "hdfs://localhost:9000";
const START_HINT: &str = "start the services with `scripts/services.sh start all`";

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000_000;
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates a topic with `partitions` partitions (replication 1).
pub async fn create_topic(name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()
        .expect("admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let result = admin
        .create_topics(&[topic], &options)
        .await
        .unwrap_or_else(|e| panic!("cannot reach Kafka at {KAFKA} ({e}); {START_HINT}"));
    for r in result {
        if let Err((t, e)) = r {
            panic!("cannot create topic {t}: {e}; {START_HINT}");
        }
    }
}

/// A record to produce.
#[derive(Debug, Clone)]
pub struct Produce {
    pub partition: Option<i32>,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub timestamp_ms: Option<i64>,
}

impl Produce {
    pub fn to(partition: i32, payload: impl Into<Vec<u8>>) -> Self {
        Produce {
            partition: Some(partition),
            key: None,
            payload: payload.into(),
            timestamp_ms: None,
        }
    }

    pub fn at(mut self, timestamp_ms: i64) -> Self {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }

    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }
}

/// Produces every record and waits until the broker acknowledged each.
pub async fn produce(topic: &str, records: &[Produce]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("message.timeout.ms", "60000")
        .create()
        .expect("producer");
    let mut pending = Vec::new();
    for r in records {
        let mut record: FutureRecord<'_, String, Vec<u8>> = FutureRecord::to(topic).payload(&r.payload);
        if let Some(p) = r.partition {
            record = record.partition(p);
        }
        if let Some(k) = &r.key {
            record = record.key(k);
        }
        if let Some(t) = r.timestamp_ms {
            record = record.timestamp(t);
        }
        pending.push(producer.send(record, Duration::from_secs(60)));
    }
    for p in pending {
        if let Err((e, _)) = p.await {
            panic!("producing to {topic} failed: {e}; {START_HINT}");
        }
    }
}

/// A record as read back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Consumed {
    pub partition: i32,
    pub key: Option<String>,
    pub payload: String,
    /// No value at all (a tombstone), not an empty one.
    pub null_payload: bool,
    pub timestamp_ms: Option<i64>,
    pub headers: BTreeMap<String, String>,
}

/// Reads the topic from the beginning (committed records only) until
/// `expected` records arrived, then `grace` longer to catch any extra
/// ones; fails after `limit`.
pub fn consume(topic: &str, expected: usize, grace: Duration, limit: Duration) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("group.id", unique("reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let started = Instant::now();
    // The topic may not exist yet (a sink creates it with its first record).
    let mut tpl = TopicPartitionList::new();
    while tpl.count() == 0 {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?}: topic {topic} does not exist"
        );
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("cannot read metadata of {topic}: {e}; {START_HINT}"));
        for t in metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
        {
            for p in t.partitions() {
                tpl.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
            }
        }
        if tpl.count() == 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    consumer.assign(&tpl).expect("assign");
    let mut reached: Option<Instant> = None;
    let mut out = Vec::new();
    loop {
        if let Some(at) = reached
            && at.elapsed() >= grace
        {
            return out;
        }
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} reading {topic}: {} of {expected} records",
            out.len()
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (
                                    h.key.to_string(),
                                    String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Consumed {
                    partition: m.partition(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    payload: String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                    null_payload: m.payload().is_none(),
                    timestamp_ms: m.timestamp().to_millis(),
                    headers,
                });
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
        if reached.is_none() && out.len() >= expected {
            reached = Some(Instant::now());
        }
    }
}

/// An HDFS client.
pub fn hdfs() -> hdfs_native::Client {
    hdfs_native::ClientBuilder::new()
        .with_url(HDFS)
        .build()
        .expect("hdfs client")
}

/// Every visible file under `dir` (recursively; names starting with `.`
/// are in-progress files, not visible): (path, length).
pub async fn hdfs_files(dir: &str) -> Vec<(String, usize)> {
    let client = hdfs();
    match client.list_status(dir, true).await {
        Ok(list) => list
            .into_iter()
            .filter(|s| !s.isdir)
            .filter(|s| !s.path.rsplit('/').next().unwrap_or_default().starts_with('.'))
            .map(|s| (s.path, s.length))
            .collect(),
        Err(hdfs_native::HdfsError::FileNotFound(_)) => Vec::new(),
        Err(e) => panic!("cannot list {dir} on {HDFS}: {e}; {START_HINT}"),
    }
}

/// The in-progress files under `dir`.
pub async fn hdfs_in_progress(dir: &str) -> Vec<String> {
    match hdfs().list_status(dir, true).await {
        Ok(list) => list
            .into_iter()
            .filter(|s| !s.isdir && s.path.ends_with(".inprogress"))
            .map(|s| s.path)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Reads a whole file.
pub async fn hdfs_read(path: &str) -> Bytes {
    let client = hdfs();
    let reader = client
        .read(path)
        .await
        .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    reader
        .read_range(0, reader.file_length())
        .await
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The rows of a Parquet file on HDFS.
pub async fn hdfs_parquet(path: &str) -> Vec<RecordBatch> {
    let bytes = hdfs_read(path).await;
    ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap_or_else(|e| panic!("{path} is not a Parquet file: {e}"))
        .build()
        .expect("parquet reader")
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}
