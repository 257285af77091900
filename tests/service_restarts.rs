//! Kafka and HDFS going away under a running pipeline and coming back
//! (`scripts/services.sh stop|restart`): the pipeline reports the problem,
//! retries, and goes on without losing or repeating a record.
//!
//! A test binary of its own: it stops the shared services, which the other
//! test binaries (run before or after, never at the same time) rely on. Its
//! tests take a lock so they do not stop services under each other.

#[path = "common/mod.rs"]
mod common;
#[path = "integration/support.rs"]
#[allow(dead_code)]
mod support;

use common::TestServer;
use common::external::{Produce, consume, create_topic, hdfs_files, hdfs_read, produce, unique};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;
use support::{exec, simple_records, wait_for};
use tokio::sync::Mutex;

static SERVICES: Mutex<()> = Mutex::const_new(());

fn services(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services.sh");
    let status = Command::new("bash")
        .arg(script)
        .args(args)
        .status()
        .expect("run services.sh");
    assert!(status.success(), "scripts/services.sh {args:?} failed");
}

/// Starts the service again when dropped, so a failing test does not leave
/// it stopped for the test binaries that come after.
struct Restart(&'static str);

impl Drop for Restart {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services.sh");
        let _ = Command::new("bash").arg(script).args(["start", self.0]).status();
    }
}

async fn pipeline(client: &tokio_postgres::Client, name: &str) -> BTreeMap<String, Option<String>> {
    simple_records(client, "SHOW PIPELINES")
        .await
        .into_iter()
        .find(|p| p["name"].as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no pipeline {name}"))
}

/// Waits until `check` holds, failing after `limit`.
async fn wait_until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(what, limit, || {
        let fut = check();
        async move { fut.await.then_some(()) }
    })
    .await
}

fn ids(range: std::ops::Range<i64>) -> Vec<Produce> {
    range
        .map(|i| Produce::to((i % 2) as i32, format!(r#"{{"id": {i}}}"#)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_is_reported_and_nothing_is_lost_or_repeated() {
    let _services = SERVICES.lock().await;
    let (input, output) = (unique("outage_in"), unique("outage_out"));
    create_topic(&input, 2).await;
    create_topic(&output, 1).await;
    produce(&input, &ids(0..200)).await;

    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        &format!(
            "CREATE STREAM outage (id BIGINT NOT NULL) WITH (connector = 'kafka', topic = '{input}', \
               'properties.bootstrap.servers' = 'localhost:9092'); \
             CREATE SINK outage_copy WITH (connector = 'kafka', topic = '{output}', \
               'properties.bootstrap.servers' = 'localhost:9092') AS SELECT id FROM outage"
        ),
    )
    .await;
    wait_until("the first 200 records through", Duration::from_secs(60), || async {
        pipeline(&client, "outage_copy").await["rows_out"].as_deref() == Some("200")
    })
    .await;

    let _restart = Restart("kafka");
    services(&["stop", "kafka"]);
    wait_until("the outage reported", Duration::from_secs(60), || async {
        let p = pipeline(&client, "outage_copy").await;
        p["state"].as_deref() == Some("running") && p["error"].as_deref().is_some_and(|e| e.contains("kafka"))
    })
    .await;
    services(&["start", "kafka"]);
    produce(&input, &ids(200..400)).await;

    let out = consume(&output, 400, Duration::from_secs(2), Duration::from_secs(120));
    let mut seen = BTreeSet::new();
    for r in &out {
        let id = serde_json::from_str::<serde_json::Value>(&r.payload).unwrap()["id"]
            .as_i64()
            .unwrap();
        assert!(seen.insert(id), "record {id} twice");
    }
    assert_eq!(seen, (0..400).collect::<BTreeSet<i64>>());
    wait_until("the condition cleared", Duration::from_secs(60), || async {
        pipeline(&client, "outage_copy").await["error"].is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namenode_restart_is_retried_and_no_row_goes_missing() {
    let _services = SERVICES.lock().await;
    let input = unique("hdfs_restart_in");
    create_topic(&input, 2).await;
    produce(&input, &ids(0..300)).await;
    let dir = format!("/sluice-tests/{}", unique("restart"));

    let server = TestServer::start();
    let client = server.connect().await;
    exec(
        &client,
        &format!(
            "CREATE STREAM hr (id BIGINT NOT NULL) WITH (connector = 'kafka', topic = '{input}', \
               'properties.bootstrap.servers' = 'localhost:9092'); \
             CREATE SINK hr_files WITH (connector = 'hdfs', url = 'hdfs://localhost:9000', path = '{dir}', \
               format = 'jsonl', 'rollover.interval' = '500ms') AS SELECT id FROM hr"
        ),
    )
    .await;
    let read_ids = || async {
        let mut all = Vec::new();
        for (path, _) in hdfs_files(&dir).await {
            let text = hdfs_read(&path).await;
            for line in String::from_utf8_lossy(&text).lines() {
                all.push(
                    serde_json::from_str::<serde_json::Value>(line).unwrap()["id"]
                        .as_i64()
                        .unwrap(),
                );
            }
        }
        all
    };
    wait_until("the first 300 rows in HDFS", Duration::from_secs(60), || async {
        read_ids().await.len() >= 300
    })
    .await;

    // Rows arrive while the NameNode restarts: the files rolled meanwhile
    // are retried until HDFS answers again.
    let _restart = Restart("hdfs");
    services(&["stop", "hdfs"]);
    produce(&input, &ids(300..600)).await;
    wait_until("the failed write reported", Duration::from_secs(60), || async {
        let p = pipeline(&client, "hr_files").await;
        p["state"].as_deref() == Some("running") && p["error"].as_deref().is_some_and(|e| e.contains("retrying"))
    })
    .await;
    services(&["start", "hdfs"]);

    wait_until("all 600 rows in HDFS", Duration::from_secs(120), || async {
        read_ids().await.len() >= 600
    })
    .await;
    let all = read_ids().await;
    let unique_ids: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), unique_ids.len(), "a row written twice");
    assert_eq!(unique_ids, (0..600).collect::<BTreeSet<i64>>());
    assert_eq!(pipeline(&client, "hr_files").await["state"].as_deref(), Some("running"));
}
