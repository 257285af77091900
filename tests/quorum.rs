//! Three `sluice master` processes as one quorum (`--peers`) and a worker
//! that knows all three: DDL through any master is replicated to all, the
//! leader runs the pipelines; kill -9 of the leader elects another that
//! adopts them as they run on the worker (nothing restarts) and takes DDL; a master left alone refuses DDL with
//! 57P03 naming the quorum but still answers reads; a restarted master
//! catches up. And a leader frozen with SIGSTOP for 20 s: the others elect
//! a new one that adopts the pipeline the worker kept running; woken, the
//! old one steps down and keeps no worker.

mod common;

use common::netns::Hosts;
use common::{TestServer, pipeline_state};
use std::time::{Duration, Instant};

/// A free port for a master's --listen, which its peers must know before
/// it starts. Taken below the kernel's ephemeral range (32768 and up here),
/// so no process binding port 0 meanwhile — the other masters' pgwire,
/// HTTP and data-plane listeners, the other test's — can take it first
/// (a CI run lost a master to that race).
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 20_000 + (std::process::id() % 2_000) as u16;
    loop {
        let port = start + NEXT.fetch_add(1, Ordering::Relaxed) % 10_000; // below 32 000
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

struct Quorum {
    ids: Vec<String>,
    listen: Vec<String>,
    masters: Vec<Option<TestServer>>,
    dir: tempfile::TempDir,
    /// Each master's network namespace and address, when on separate
    /// hosts (`Quorum::start_on`).
    netns: Option<Vec<(String, String)>>,
}

impl Quorum {
    fn start() -> Quorum {
        let ids: Vec<String> = (1..=3).map(|i| format!("m{i}")).collect();
        let listen: Vec<String> = ids.iter().map(|_| format!("127.0.0.1:{}", free_port())).collect();
        Quorum::start_with(ids, listen, None)
    }

    /// Masters m1, m2, m3 each on its own host of `hosts` (network
    /// namespaces with their own addresses), listening on port 7070.
    fn start_on(hosts: &Hosts) -> Quorum {
        let ids: Vec<String> = (1..=3).map(|i| format!("m{i}")).collect();
        let listen = ids.iter().map(|id| format!("{}:7070", hosts.ip(id))).collect();
        let netns = ids.iter().map(|id| (hosts.ns(id), hosts.ip(id))).collect();
        Quorum::start_with(ids, listen, Some(netns))
    }

    fn start_with(ids: Vec<String>, listen: Vec<String>, netns: Option<Vec<(String, String)>>) -> Quorum {
        let mut q = Quorum {
            ids,
            listen,
            masters: vec![None, None, None],
            dir: tempfile::tempdir().unwrap(),
            netns,
        };
        for i in 0..3 {
            q.start_master(i);
        }
        q
    }

    fn start_master(&mut self, i: usize) {
        // Every master gets the same list of all three (each skips its
        // own entry), as the Kubernetes StatefulSet gives it.
        let peers: Vec<String> = (0..3).map(|j| format!("{}={}", self.ids[j], self.listen[j])).collect();
        let data = self.dir.path().join(&self.ids[i]);
        std::fs::create_dir_all(&data).unwrap();
        let (netns, ip) = match &self.netns {
            Some(n) => (Some(n[i].0.as_str()), n[i].1.as_str()),
            None => (None, "127.0.0.1"),
        };
        self.masters[i] = Some(TestServer::start_quorum_master_at(
            &data,
            &self.ids[i],
            &self.listen[i],
            &peers.join(","),
            (netns, ip),
        ));
    }

    fn master(&self, i: usize) -> &TestServer {
        self.masters[i].as_ref().expect("a live master")
    }

    /// This master's own entry in /api/v1/cluster.
    fn me(&self, i: usize) -> serde_json::Value {
        self.master(i).cluster_json()["masters"][0].clone()
    }

    /// The live master that leads with a quorum, once exactly one does.
    async fn leader(&self, within: Duration) -> usize {
        self.leader_among(&[0, 1, 2], within, true).await
    }

    /// The one of `among` (live masters; a frozen one must not be asked)
    /// that leads with a quorum; with `ready`, once every live master also
    /// lets the superuser in.
    async fn leader_among(&self, among: &[usize], within: Duration, ready: bool) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let leading: Vec<usize> = among
                .iter()
                .copied()
                .filter(|i| self.masters[*i].is_some())
                .filter(|i| {
                    let me = self.me(*i);
                    me["role"] == "leader" && me["has_quorum"] == true
                })
                .collect();
            if leading.len() == 1 && (!ready || self.ready().await) {
                return leading[0];
            }
            assert!(
                Instant::now() < deadline,
                "no single leader within {within:?}: {leading:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every live master lets the superuser in: the leader created it and
    /// the others hold the replicated catalog.
    async fn ready(&self) -> bool {
        for m in self.masters.iter().flatten() {
            if tokio_postgres::connect(&m.conn_str(), tokio_postgres::NoTls)
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    fn all_listen(&self) -> String {
        self.listen.join(",")
    }
}

async fn streams(c: &tokio_postgres::Client) -> Vec<String> {
    c.simple_query("SHOW STREAMS")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect()
}

async fn wait_for_stream(q: &Quorum, i: usize, name: &str) {
    let c = q.master(i).connect().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !streams(&c).await.iter().any(|s| s == name) {
        assert!(Instant::now() < deadline, "{} never saw stream {name}", q.ids[i]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SHOW CLUSTER` on master `i`: kind, id, address, role, health, term,
/// leader, detail ("" for NULL).
async fn show_cluster(q: &Quorum, i: usize) -> Vec<Vec<String>> {
    let c = q.master(i).connect().await;
    c.simple_query("SHOW CLUSTER")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..8).map(|k| r.get(k).unwrap_or("").to_string()).collect())
            }
            _ => None,
        })
        .collect()
}

/// Pipeline `name`'s `rows_in` in SHOW PIPELINES on master `i`.
async fn rows_in(q: &Quorum, i: usize, name: &str) -> Option<u64> {
    let c = q.master(i).connect().await;
    let messages = c.simple_query("SHOW PIPELINES").await.ok()?;
    messages.into_iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => {
            r.get("rows_in").and_then(|v| v.parse().ok())
        }
        _ => None,
    })
}

/// Creates stream `{p}_ticks` (300 rows/s; ts = i × 10 ms, so the
/// 1-second window w holds i = 100·w … 100·w + 99: 20 rows of each
/// k = i % 5) and the exactly-once file sink `{p}_out` of its per-second
/// counts by k into `out`, checkpointed every second.
async fn create_windowed_counts(c: &tokio_postgres::Client, p: &str, out: &std::path::Path) {
    c.batch_execute(&format!(
        "CREATE STREAM {p}_ticks (i BIGINT, k AS i % 5, ts AS TO_TIMESTAMP_LTZ(i * 10, 3), WATERMARK FOR ts AS ts)
            WITH (connector = 'datagen', 'rows-per-second' = '300',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         CREATE SINK {p}_out WITH (connector = 'file', path = '{}', format = 'json', 'checkpoint.interval' = '1s') AS
            SELECT window_start, k, count(*) AS n FROM TUMBLE({p}_ticks, ts, INTERVAL '1' SECOND)
            GROUP BY window_start, window_end, k",
        out.display()
    ))
    .await
    .unwrap();
}

/// Pipeline `name`'s `restarts` in SHOW PIPELINES on master `i`.
async fn restarts(q: &Quorum, i: usize, name: &str) -> Option<String> {
    let c = q.master(i).connect().await;
    let messages = c.simple_query("SHOW PIPELINES").await.ok()?;
    messages.into_iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => {
            r.get("restarts").map(str::to_string)
        }
        _ => None,
    })
}

/// Pipeline `name`'s `rows_in` on master `i` once it is at least `min`
/// (a leader counts what the workers' heartbeats, one a second, say).
async fn rows_in_at_least(q: &Quorum, i: usize, name: &str, min: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let n = rows_in(q, i, name).await.unwrap_or(0);
        if n >= min {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "{name} counts {n} rows on {}, not {min}",
            q.ids[i]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pipeline `name`'s `rows_in` on master `i` once it counts any.
async fn first_rows_in(q: &Quorum, i: usize, name: &str) -> u64 {
    rows_in_at_least(q, i, name, 1, Duration::from_secs(10)).await
}

async fn wait_running(q: &Quorum, i: usize, name: &str, within: Duration) {
    let c = q.master(i).connect().await;
    let deadline = Instant::now() + within;
    loop {
        let state = pipeline_state(&c, name).await;
        if state.as_deref() == Some("running")
            && q.master(i).cluster_json()["workers"]
                .as_array()
                .is_some_and(|w| !w.is_empty())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not running on {} within {within:?}: {state:?}, {}",
            q.ids[i],
            q.master(i).cluster_json()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_replicate_ddl_fail_over_and_refuse_without_a_majority() {
    let mut q = Quorum::start();
    let first = q.leader(Duration::from_secs(15)).await;
    let follower = (first + 1) % 3;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to("w1", 8, &q.all_listen());

    // DDL through a follower is forwarded to the leader and replicated.
    let c = q.master(follower).connect().await;
    c.batch_execute(
        "CREATE STREAM ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '1000',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await
    .unwrap();
    for i in 0..3 {
        wait_for_stream(&q, i, "ticks").await;
    }
    let c = q.master(first).connect().await;
    c.batch_execute(
        "CREATE SINK moved WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS SELECT i FROM ticks WHERE i >= 0",
    )
    .await
    .unwrap();
    wait_running(&q, first, "moved", Duration::from_secs(30)).await;
    // SHOW CLUSTER on the leader: three masters (itself leading, in a term),
    // and the worker; on a follower: the leader named, no worker.
    let rows = show_cluster(&q, first).await;
    assert_eq!(rows.iter().filter(|r| r[0] == "master").count(), 3, "{rows:?}");
    assert_eq!(rows[0][1], q.ids[first]);
    assert_eq!(rows[0][3], "leader");
    assert_eq!(rows[0][4], "ok");
    assert!(rows[0][5].parse::<u64>().unwrap() >= 1, "{rows:?}");
    assert!(rows.iter().any(|r| r[0] == "worker" && r[1] == "w1"), "{rows:?}");
    let rows = show_cluster(&q, follower).await;
    assert_eq!(rows[0][3], "follower");
    assert_eq!(rows[0][6], q.ids[first], "the follower names its leader");
    assert!(
        rows.iter().any(|r| r[1] == q.ids[first] && r[3] == "leader"),
        "{rows:?}"
    );
    // No worker registers with a follower; it lists the worker the leader
    // recorded in the replicated state (written once a second).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = show_cluster(&q, follower).await;
        let workers: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "worker").collect();
        if !workers.is_empty() {
            assert_eq!(workers.len(), 1, "{rows:?}");
            assert_eq!(workers[0][1], "w1", "{rows:?}");
            assert_eq!(workers[0][4], "recorded", "{rows:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower lists no recorded worker: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let json = q.master(follower).cluster_json();
    assert_eq!(json["recorded_workers"][0]["id"], "w1", "{json}");
    assert_eq!(json["recorded_workers"][0]["slots"], 8, "{json}");
    // Every field /api/v1/cluster gives about a quorum's masters is in the
    // OpenAPI document.
    let spec: serde_json::Value =
        serde_json::from_str(include_str!("../crates/sluice-server/src/openapi.json")).unwrap();
    let documented = &spec["components"]["schemas"]["Cluster"]["properties"]["masters"]["items"]["properties"];
    for m in q.master(follower).cluster_json()["masters"].as_array().unwrap() {
        for key in m.as_object().unwrap().keys() {
            assert!(documented.get(key).is_some(), "masters[].{key} is not in openapi.json");
        }
    }
    // Rows for a memory stream go to the leader, where its log lives: an
    // INSERT through a follower is evaluated there and appended on the
    // leader. A continuous query through a follower runs on the leader,
    // which streams its rows (or its failure) back.
    let f = q.master(follower).connect().await;
    f.batch_execute("CREATE STREAM mem (x BIGINT, s TEXT) WITH (connector = 'memory')")
        .await
        .unwrap();
    wait_for_stream(&q, follower, "mem").await;
    let inserted = f
        .execute("INSERT INTO mem VALUES (1, 'a'), (2.4, NULL), (3, 'c')", &[])
        .await
        .unwrap();
    assert_eq!(inserted, 3);
    // Refused on the follower as on the leader: nothing appended.
    let err = f
        .simple_query("INSERT INTO mem VALUES ('x', 'y')")
        .await
        .expect_err("a text for a BIGINT");
    assert_eq!(err.as_db_error().unwrap().code().code(), "22P02", "{err:?}");
    let l = q.master(first).connect().await;
    wait_for_stream(&q, first, "mem").await;
    l.batch_execute("INSERT INTO mem VALUES (4, 'd')").await.unwrap();
    let rows = l.query("SELECT x, s FROM mem LIMIT 4", &[]).await.unwrap();
    let got: Vec<(i64, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![
            (1, Some("a".into())),
            (2, None),
            (3, Some("c".into())),
            (4, Some("d".into()))
        ],
        "the follower's rows, then the leader's, in the leader's log"
    );
    let rows = f
        .query("SELECT x * 10, s FROM mem WHERE x > 1 LIMIT 3", &[])
        .await
        .unwrap();
    let got: Vec<(i64, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![(20, None), (30, Some("c".into())), (40, Some("d".into()))],
        "a query through the follower, run by the leader"
    );
    let err = f
        .query("SELECT 10 / (x - x) AS q FROM mem LIMIT 1", &[])
        .await
        .expect_err("division by zero on the leader");
    assert_eq!(err.as_db_error().unwrap().code().code(), "22012", "{err:?}");
    // A query through the follower runs on the leader while its client
    // waits, and stops there when the client cancels it.
    let on_leader = |n: u64| {
        let url = format!("http://127.0.0.1:{}/metrics", q.master(first).http_port);
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
                let now = text
                    .lines()
                    .find_map(|l| l.strip_prefix("sluice_session_queries "))
                    .and_then(|v| v.parse::<u64>().ok());
                if now == Some(n) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "the leader runs {now:?} session queries, not {n}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    on_leader(0).await;
    let g = q.master(follower).connect().await;
    let cancel = g.cancel_token();
    let waiting = tokio::spawn(async move { g.simple_query("SELECT x FROM mem").await.map(|_| ()) });
    on_leader(1).await;
    cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let err = waiting.await.unwrap().expect_err("cancelled");
    assert_eq!(err.as_db_error().unwrap().code().code(), "57014", "{err:?}");
    on_leader(0).await;
    // A follower shows the pipeline from the replicated catalog but runs nothing.
    let f = q.master(follower).connect().await;
    assert!(
        pipeline_state(&f, "moved").await.is_some(),
        "the follower lists the pipeline"
    );
    assert!(
        q.master(follower).cluster_json()["workers"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // kill -9 of the leader: another leads, adopts the pipeline running on
    // the worker, takes DDL. Adopted, not restarted: its counters go on
    // from where they were (a restart from the checkpoint counts from 0,
    // and would have read at most a few thousand rows by its first
    // heartbeat).
    let before = rows_in_at_least(&q, first, "moved", 8000, Duration::from_secs(30)).await;
    let killed_at = Instant::now();
    q.masters[first].take().unwrap().stop();
    let second = q.leader(Duration::from_secs(10)).await;
    eprintln!("new leader {} after {:?}", q.ids[second], killed_at.elapsed());
    assert_ne!(second, first);
    let other = (0..3).find(|i| *i != first && *i != second).unwrap();
    let c = q.master(other).connect().await;
    c.batch_execute("CREATE STREAM after_failover (x BIGINT) WITH (connector = 'memory')")
        .await
        .unwrap();
    wait_for_stream(&q, second, "after_failover").await;
    wait_running(&q, second, "moved", Duration::from_secs(40)).await;
    eprintln!("pipeline running again after {:?}", killed_at.elapsed());
    let after = first_rows_in(&q, second, "moved").await;
    assert!(
        after >= before,
        "the new leader counts {after} rows read, fewer than the {before} read before the kill: the pipeline restarted instead of being adopted"
    );
    assert_eq!(
        restarts(&q, second, "moved").await.as_deref(),
        Some("0"),
        "adopted without a restart"
    );

    // One master alone: no quorum. DDL is refused with 57P03 naming the
    // quorum; reads still work there.
    q.masters[second].take().unwrap().stop();
    let c = q.master(other).connect().await;
    // At once (the dead leader is unreachable) and never accepted alone.
    let err = c
        .batch_execute("CREATE STREAM lonely (x BIGINT) WITH (connector = 'memory')")
        .await
        .expect_err("a master alone accepted DDL");
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "57P03", "{db:?}");
    assert!(db.message().contains("quorum"), "{}", db.message());
    assert!(streams(&c).await.contains(&"after_failover".to_string()));
    // It says so once the election timeout passed without its leader.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let me = q.me(other);
        if me["has_quorum"] == false && me["role"] != "leader" {
            assert_eq!(me["health"], "no quorum", "{me}");
            break;
        }
        assert!(Instant::now() < deadline, "still claims a quorum: {me}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = c
        .batch_execute("CREATE STREAM lonely (x BIGINT) WITH (connector = 'memory')")
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "57P03", "{db:?}");
    assert!(db.message().contains("quorum"), "{}", db.message());

    // The first leader comes back from its directory: a majority again,
    // DDL works, and it has caught up with what it missed.
    q.start_master(first);
    let third = q.leader(Duration::from_secs(15)).await;
    let c = q.master(third).connect().await;
    c.batch_execute("CREATE STREAM healed (x BIGINT) WITH (connector = 'memory')")
        .await
        .unwrap();
    wait_for_stream(&q, first, "after_failover").await;
    wait_for_stream(&q, first, "healed").await;
    wait_for_stream(&q, other, "healed").await;
    drop(workers);
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_for_20_s_is_replaced_and_steps_down_when_it_wakes() {
    let q = Quorum::start();
    let old = q.leader(Duration::from_secs(15)).await;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to("w1", 8, &q.all_listen());
    let c = q.master(old).connect().await;
    c.batch_execute(
        "CREATE STREAM ticks (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '1000',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000')",
    )
    .await
    .unwrap();
    c.batch_execute(
        "CREATE SINK frozen WITH (connector = 'blackhole', 'checkpoint.interval' = '1s') AS SELECT i FROM ticks",
    )
    .await
    .unwrap();
    wait_running(&q, old, "frozen", Duration::from_secs(30)).await;
    let old_term = q.me(old)["term"].as_u64().unwrap();
    let before = rows_in_at_least(&q, old, "frozen", 6000, Duration::from_secs(30)).await;

    // Frozen: sockets open, silent. The others elect a leader in a newer
    // term; the worker, hearing nothing, finds it and keeps its tasks for
    // it, and it adopts the running pipeline (counters go on from where
    // they were: a restart counts from 0, and by its first heartbeat would
    // have read a couple of thousand rows at most).
    let pid = q.master(old).pid().unwrap();
    signal(pid, "-STOP");
    let frozen_at = Instant::now();
    let others: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let new = q.leader_among(&others, Duration::from_secs(15), false).await;
    assert!(q.me(new)["term"].as_u64().unwrap() > old_term);
    wait_running(&q, new, "frozen", Duration::from_secs(30)).await;
    let after = first_rows_in(&q, new, "frozen").await;
    assert!(
        after >= before,
        "the new leader counts {after} rows, the frozen one had {before}: restarted, not adopted"
    );
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(frozen_at.elapsed())).await;

    // Woken: it steps down (its lease long gone), follows the new leader,
    // and no worker registers with it or obeys it.
    signal(pid, "-CONT");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let me = q.me(old);
        if me["role"] == "follower" && me["leader"] == q.ids[new].as_str() {
            break;
        }
        assert!(Instant::now() < deadline, "the woken master did not step down: {me}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(q.master(old).cluster_json()["workers"].as_array().unwrap().is_empty());
    let rows = show_cluster(&q, new).await;
    assert!(rows.iter().any(|r| r[0] == "worker" && r[1] == "w1"), "{rows:?}");
    wait_running(&q, new, "frozen", Duration::from_secs(10)).await;
    // DDL through the woken master goes to the new leader.
    let c = q.master(old).connect().await;
    c.batch_execute("CREATE STREAM after_wake (x BIGINT) WITH (connector = 'memory')")
        .await
        .unwrap();
    wait_for_stream(&q, new, "after_wake").await;
    drop(workers);
}

/// A quorum master that would start with SCRAM but without the superuser's
/// password, and has never been part of the quorum, refuses to start: the
/// first leader could not create a role anybody can log in as. With the
/// password it starts.
#[test]
fn a_first_start_with_scram_needs_the_superusers_password() {
    let dir = tempfile::tempdir().unwrap();
    let (own, a, b) = (free_port(), free_port(), free_port());
    let run = |password: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args(["master", "--id", "m1", "--listen", &format!("127.0.0.1:{own}")])
            .args(["--peers", &format!("m2=127.0.0.1:{a},m3=127.0.0.1:{b}")])
            .args(["--pg-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .args(["--data-listen", "127.0.0.1:0", "--auth", "scram-sha-256", "--data-dir"])
            .arg(dir.path())
            .env_remove("SLUICE_SUPERUSER_PASSWORD")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if let Some(p) = password {
            command.env("SLUICE_SUPERUSER_PASSWORD", p);
        }
        command.spawn().unwrap()
    };
    let refused = run(None).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "started without a password: {stderr}");
    assert!(
        stderr.contains("SLUICE_SUPERUSER_PASSWORD") && stderr.contains("first time"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("quorum.json").exists(),
        "a refused master wrote quorum state"
    );
    // With the password it starts and serves (its peers are absent: it
    // only waits for them).
    let mut started = run(Some("first-leader-pw"));
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(started.stdout.take().unwrap()));
    let serving = lines.any(|l| l.is_ok_and(|l| l.trim_start().starts_with("SQL:")));
    let _ = started.kill();
    let _ = started.wait();
    assert!(serving, "the master with a password did not start");
}

/// A rolling restart of all three masters under a running exactly-once
/// pipeline (a paced datagen → 1-s tumbling count per key → file sink,
/// checkpoints every second), as an operator upgrades a quorum: each master
/// is stopped with SIGINT and started again from its directory, the
/// leader while the lead has moved fewer than two times (a restarted
/// leader may win again), then the ones not restarted yet; between
/// restarts a leader holds a quorum and the pipeline runs and commits new
/// windows. Each master has its own data directory
/// and no `--checkpoint-dir`, so each one's default checkpoint directory is
/// a different one: the pipeline's location, fixed in the catalog when it
/// was created, is what every new leader restores from (before it was, a
/// new leader looked in its own directory, found nothing and started the
/// pipeline over, committing the first windows twice in about one run in
/// three). At the end every committed window is there exactly once, none
/// missing, each with its count computed by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_the_masters_keeps_an_exactly_once_pipeline_exact() {
    let mut q = Quorum::start();
    let leader = q.leader(Duration::from_secs(15)).await;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to("w1", 8, &q.all_listen());
    let out = q.dir.path().join("out");
    let c = q.master(leader).connect().await;
    create_windowed_counts(&c, "r", &out).await;
    wait_running(&q, leader, "r_out", Duration::from_secs(30)).await;
    let mut committed = 0;
    let mut restarted = Vec::new();
    let mut leaders = vec![leader];
    let moves = |leaders: &[usize]| leaders.windows(2).filter(|w| w[0] != w[1]).count();
    while (0..3).any(|i| !restarted.contains(&i)) || moves(&leaders) < 2 {
        assert!(
            restarted.len() < 8,
            "the lead did not move twice in 8 restarts: {leaders:?}"
        );
        let now = *leaders.last().unwrap();
        // A restarted leader may win the next election again.
        let i = match (0..3).find(|i| !restarted.contains(i)) {
            Some(other) if restarted.contains(&now) && moves(&leaders) >= 2 => other,
            _ => now,
        };
        // New windows (five of them, five keys each) committed since the
        // last restart.
        let deadline = Instant::now() + Duration::from_secs(60);
        while common::committed_windows(&out).len() < committed + 25 {
            assert!(
                Instant::now() < deadline,
                "no new windows before restarting {}",
                q.ids[i]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        committed = common::committed_windows(&out).len();
        let status = q.masters[i].take().unwrap().interrupt();
        assert!(status.success(), "{} did not stop cleanly: {status:?}", q.ids[i]);
        q.start_master(i);
        restarted.push(i);
        let now = q.leader(Duration::from_secs(30)).await;
        wait_running(&q, now, "r_out", Duration::from_secs(40)).await;
        leaders.push(now);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::committed_windows(&out).len() < committed + 25 {
        assert!(Instant::now() < deadline, "no windows after the last restart");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    common::assert_windows_exact(&common::committed_windows(&out), 5, 20);
    drop(workers);
}

/// The checkpoint ids SHOW CHECKPOINTS lists for `name` on master `i`.
async fn checkpoint_ids(q: &Quorum, i: usize, name: &str) -> Vec<u64> {
    let c = q.master(i).connect().await;
    let Ok(messages) = c.simple_query(&format!("SHOW CHECKPOINTS FOR {name}")).await else {
        return Vec::new();
    };
    messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get("checkpoint_id").and_then(|v| v.parse().ok()),
            _ => None,
        })
        .collect()
}

/// kill -9 of the leader while a checkpoint is in flight: the worker's sink
/// takes 5 s to store each snapshot (a fault hook), so the source's and the
/// window's acknowledgements reach the leader and the sink's does not
/// before it dies. The worker keeps its tasks and the new leader adopts
/// them: its coordinator takes the checkpoint over, the worker sends the
/// acknowledgements again, the checkpoint completes (the sink, which waits
/// for it before taking more rows, commits) and the pipeline goes on —
/// not restarted (counters go on, no restart counted), every window
/// written exactly once with the count computed by hand. A restart would
/// skip the in-flight checkpoint's id (its partial directory counts as
/// used); the adopted deployment completes exactly that id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_checkpoint_hands_the_running_pipeline_to_the_next_which_completes_it() {
    let mut q = Quorum::start();
    let leader = q.leader(Duration::from_secs(15)).await;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to_with_env("w1", 8, &q.all_listen(), &[("SLUICE_FAULT_SLOW_STATE", "sink:5000")]);
    let out = q.dir.path().join("out");
    let c = q.master(leader).connect().await;
    create_windowed_counts(&c, "a", &out).await;
    wait_running(&q, leader, "a_out", Duration::from_secs(30)).await;
    // Two checkpoints complete (each takes the sink's 5 s); then, 1.5 s
    // after the second, the next (started within the 1 s interval) waits
    // for the sink's snapshot.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = checkpoint_ids(&q, leader, "a_out").await;
    while seen.len() < 2 {
        assert!(Instant::now() < deadline, "no checkpoints: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = checkpoint_ids(&q, leader, "a_out").await;
    }
    let newest = *seen.iter().max().unwrap();
    loop {
        let now = checkpoint_ids(&q, leader, "a_out").await;
        if now.iter().max() > Some(&newest) {
            seen = now;
            break;
        }
        assert!(Instant::now() < deadline, "no further checkpoint after {newest}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let completed = *seen.iter().max().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = rows_in(&q, leader, "a_out").await.unwrap_or(0);
    assert_eq!(
        checkpoint_ids(&q, leader, "a_out").await.iter().max(),
        Some(&completed),
        "a checkpoint completed in the sink's 5 s: the leader was not killed mid-checkpoint"
    );
    let committed = common::committed_windows(&out).len();
    q.masters[leader].take().unwrap().stop();
    let second = q.leader(Duration::from_secs(15)).await;
    wait_running(&q, second, "a_out", Duration::from_secs(40)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ids = checkpoint_ids(&q, second, "a_out").await;
        if ids.contains(&(completed + 1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the checkpoint in flight ({}) never completed on the new leader: {ids:?}",
            completed + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = first_rows_in(&q, second, "a_out").await;
    assert!(
        after >= before,
        "counted {after} rows after the kill, {before} before: restarted, not adopted"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::committed_windows(&out).len() < committed + 25 {
        assert!(Instant::now() < deadline, "no windows committed after the kill");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    common::assert_windows_exact(&common::committed_windows(&out), 5, 20);
    drop(workers);
}

/// A materialized view under a master quorum. Its sink runs on the worker
/// (with the rest of its pipeline); the leader asks the worker for its
/// rows. The leader killed with SIGKILL, the new leader adopts the view's
/// pipeline as it runs — no restart, its counters go on — and answers
/// SELECT with the worker's rows, never older than those read before the
/// kill, then newer ones; a follower answers with the rows the leader
/// gives. Every answer, on either leader or the follower, is the result
/// of a prefix of the input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_materialized_view_moves_with_the_leader_and_keeps_its_rows() {
    use common::views::{VIEW_QUERY, view_past};
    let mut q = Quorum::start();
    let leader = q.leader(Duration::from_secs(15)).await;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to("w1", 8, &q.all_listen());
    let c = q.master(leader).connect().await;
    c.batch_execute(&format!(
        "CREATE STREAM qv_in (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '200',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '0', 'fields.i.end' = '1000000000');
         CREATE MATERIALIZED VIEW qv WITH ('checkpoint.interval' = '500ms') AS
            {VIEW_QUERY} FROM qv_in GROUP BY i % 7"
    ))
    .await
    .unwrap();
    let mut answers = 0;
    // Past 2 s of input: checkpoints were taken and recorded (every 1 s).
    let before = view_past(q.master(leader), "qv", 400, &mut answers).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let read_before = rows_in_at_least(&q, leader, "qv", 1, Duration::from_secs(10)).await;
    q.masters[leader].take().unwrap().stop();
    let now = q.leader(Duration::from_secs(30)).await;
    assert_ne!(now, leader);
    let restored = view_past(q.master(now), "qv", i64::MIN, &mut answers).await;
    assert!(
        restored >= before,
        "the new leader's first answer (i up to {restored}) is not older than what was read before the kill (up to {before})"
    );
    // Adopted, not restarted: a restart counts from 0 rows read.
    let read_after = rows_in_at_least(&q, now, "qv", 1, Duration::from_secs(10)).await;
    assert!(
        read_after >= read_before,
        "the new leader counts {read_after} rows read, fewer than the {read_before} before the kill: the view's pipeline restarted"
    );
    assert_eq!(
        restarts(&q, now, "qv").await.as_deref(),
        Some("0"),
        "adopted without a restart"
    );
    let on_leader = view_past(q.master(now), "qv", restored + 200, &mut answers).await;
    // A follower holds the catalog, not the rows: it reads them from the
    // leader, as of one of its barriers, and sees them go on.
    let follower = (0..3).find(|i| *i != now && q.masters[*i].is_some()).unwrap();
    let through_follower = view_past(q.master(follower), "qv", on_leader + 200, &mut answers).await;
    assert!(through_follower >= on_leader + 200);

    // A view over a bounded input publishes no more once the input ended;
    // a follower keeps the rows it took and asks the leader only whether
    // they are still current: later reads take no rows from the leader.
    let c = q.master(now).connect().await;
    c.batch_execute(
        "CREATE STREAM qb_in (i BIGINT) WITH (connector = 'datagen', 'rows-per-second' = '2000',
            'fields.i.kind' = 'sequence', 'fields.i.start' = '1', 'fields.i.end' = '500');
         CREATE MATERIALIZED VIEW qb AS SELECT count(*) AS n, sum(i) AS s FROM qb_in",
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pipeline_state(&c, "qb").await.as_deref() != Some("finished") {
        assert!(
            Instant::now() < deadline,
            "qb never finished: {:?}",
            pipeline_state(&c, "qb").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let f = q.master(follower).connect().await;
    let answer = || async {
        let rows = f.simple_query("SELECT n, s FROM qb").await.unwrap();
        rows.into_iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((r.get(0).unwrap().to_string(), r.get(1).unwrap().to_string()))
                }
                _ => None,
            })
            .unwrap()
    };
    let reads = || async {
        let url = format!("http://127.0.0.1:{}/metrics", q.master(follower).http_port);
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        let count = |from: &str| -> u64 {
            let series = format!("sluice_quorum_view_reads_total{{from=\"{from}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .unwrap_or_else(|| panic!("no {series}in {text}"))
                .parse()
                .unwrap()
        };
        (count("leader"), count("copy"))
    };
    // 1 + … + 500.
    assert_eq!(answer().await, ("500".to_string(), (500 * 501 / 2).to_string()));
    let (fetched, reused) = reads().await;
    for _ in 0..3 {
        assert_eq!(answer().await, ("500".to_string(), "125250".to_string()));
    }
    assert_eq!(
        reads().await,
        (fetched, reused + 3),
        "three reads from the copy, none from the leader"
    );
    drop(workers);
}

/// Pipeline `name`'s `workers` in SHOW PIPELINES on master `i` ("" until
/// it runs).
async fn workers_of(q: &Quorum, i: usize, name: &str) -> String {
    let c = q.master(i).connect().await;
    let messages = c.simple_query("SHOW PIPELINES").await.unwrap();
    messages
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => {
                r.get("workers").map(str::to_string)
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// `INSERT INTO {stream} VALUES (from), …, (to)` through master `i`,
/// again while the master says to retry (57P03: the worker holding the
/// log has not reconnected to a new leader yet).
async fn insert_range(q: &Quorum, i: usize, stream: &str, (from, to): (i64, i64)) {
    let values: Vec<String> = (from..=to).map(|v| format!("({v})")).collect();
    let sql = format!("INSERT INTO {stream} VALUES {}", values.join(","));
    let c = q.master(i).connect().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.batch_execute(&sql).await {
            Ok(()) => return,
            Err(e) if e.code().map(|c| c.code()) == Some("57P03") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("INSERT {from}..={to} through {}: {e:?}", q.ids[i]),
        }
    }
}

/// `SELECT n, s FROM {name}` on master `i` once it is `want`.
async fn until(q: &Quorum, i: usize, name: &str, want: (String, String)) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = q.master(i).connect().await;
        let got = c.simple_query(&format!("SELECT n, s FROM {name}")).await.map(|rows| {
            rows.into_iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some((r.get(0)?.to_string(), r.get(1)?.to_string())),
                _ => None,
            })
        });
        if got.as_ref().is_ok_and(|g| g.as_ref() == Some(&want)) {
            return;
        }
        if Instant::now() >= deadline {
            let pipelines = c.simple_query("SHOW PIPELINES").await.unwrap();
            let rows: Vec<String> = pipelines
                .iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                        (0..r.len())
                            .map(|i| r.get(i).unwrap_or("").to_string())
                            .collect::<Vec<_>>()
                            .join(" | "),
                    ),
                    _ => None,
                })
                .collect();
            panic!("{name}: {got:?}, not {want:?}; SHOW PIPELINES: {rows:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With a quorum a memory stream's log lives on a worker, beside its
/// readers (three masters, two workers, a log on each): kill -9 of the
/// leader takes neither the logs nor the pipelines reading them. Rows inserted through the old leader, a follower and the
/// new leader are each counted once by a view over the stream (and by a
/// derived stream's pipeline writing a second log), whose pipelines were
/// adopted, not restarted. With the log in the leader, as before, the
/// pipelines run on the leader's own worker and restart from their
/// checkpoints on the new leader, reading a new, empty log (and the test
/// fails: they are on `master:`, and counted restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_over_a_memory_stream_keep_running_and_its_rows_through_a_leader_kill() {
    let mut q = Quorum::start();
    let leader = q.leader(Duration::from_secs(15)).await;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to("w1", 16, &q.all_listen());
    workers.add_worker_to("w2", 16, &q.all_listen());
    // A memory stream's log needs a worker to live on.
    let deadline = Instant::now() + Duration::from_secs(20);
    while q.master(leader).cluster_json()["workers"]
        .as_array()
        .is_none_or(|w| w.len() < 2)
    {
        assert!(Instant::now() < deadline, "w1 and w2 never registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = q.master(leader).connect().await;
    c.batch_execute(
        "CREATE STREAM qm (i BIGINT) WITH (connector = 'memory');
         CREATE STREAM qm_odd AS SELECT i FROM qm WHERE i % 2 = 1;
         CREATE MATERIALIZED VIEW qm_all WITH ('checkpoint.interval' = '500ms') AS
            SELECT count(*) AS n, sum(i) AS s FROM qm;
         CREATE MATERIALIZED VIEW qm_odds WITH ('checkpoint.interval' = '500ms') AS
            SELECT count(*) AS n, sum(i) AS s FROM qm_odd",
    )
    .await
    .unwrap();
    for name in ["qm_odd", "qm_all", "qm_odds"] {
        wait_running(&q, leader, name, Duration::from_secs(20)).await;
        let on = workers_of(&q, leader, name).await;
        assert!(on.contains('w') && !on.contains("master:"), "{name} runs on {on}");
    }
    // Each log on the worker holding fewer: qm's on w1 (the first, by
    // id), qm_odd's on w2, so qm_odd's pipeline reads on one and writes
    // on the other.
    let on = workers_of(&q, leader, "qm_odd").await;
    assert!(on.contains("w1") && on.contains("w2"), "qm_odd runs on {on}");
    let follower = (0..3).find(|i| *i != leader).unwrap();
    insert_range(&q, leader, "qm", (1, 100)).await;
    insert_range(&q, follower, "qm", (101, 200)).await;
    // n and sum(i) over i = 1..=to, and over its odd i.
    let all = |to: i64| ((to).to_string(), (to * (to + 1) / 2).to_string());
    let odds = |to: i64| {
        let n = (to + 1) / 2;
        (n.to_string(), (n * n).to_string())
    };
    until(&q, leader, "qm_all", all(200)).await;
    until(&q, leader, "qm_odds", odds(200)).await;
    // Past a checkpoint or two of each.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    q.masters[leader].take().unwrap().stop();
    let now = q.leader(Duration::from_secs(30)).await;
    assert_ne!(now, leader);
    insert_range(&q, now, "qm", (201, 300)).await;
    let follower = (0..3).find(|i| *i != now && q.masters[*i].is_some()).unwrap();
    insert_range(&q, follower, "qm", (301, 400)).await;
    until(&q, now, "qm_all", all(400)).await;
    until(&q, now, "qm_odds", odds(400)).await;
    for name in ["qm_odd", "qm_all", "qm_odds"] {
        assert_eq!(
            restarts(&q, now, name).await.as_deref(),
            Some("0"),
            "{name} adopted without a restart"
        );
    }
    // A dropped stream's log goes (on the worker holding it): one created
    // again under its name starts empty.
    let c = q.master(now).connect().await;
    c.batch_execute("CREATE STREAM qm_x (i BIGINT) WITH (connector = 'memory')")
        .await
        .unwrap();
    insert_range(&q, now, "qm_x", (5, 5)).await;
    c.batch_execute(
        "DROP STREAM qm_x;
         CREATE STREAM qm_x (i BIGINT) WITH (connector = 'memory');
         CREATE MATERIALIZED VIEW qm_xs WITH ('checkpoint.interval' = '500ms') AS
            SELECT count(*) AS n, sum(i) AS s FROM qm_x",
    )
    .await
    .unwrap();
    insert_range(&q, now, "qm_x", (7, 7)).await;
    until(&q, now, "qm_xs", ("1".to_string(), "7".to_string())).await;
    drop(workers);
}

/// The leader cut off from the other masters and the worker by the network
/// (each master and the worker on its own host, network namespaces;
/// blackhole routes drop every packet between the cut master and the
/// others, no reset, while the test still reaches all of them): the other
/// two elect a leader in a newer term and take DDL; the cut master steps
/// down, refuses DDL with 57P03 naming the quorum and still answers reads
/// of its catalog. Healed, it follows the new leader, holds what was
/// decided meanwhile, and DDL through it works again (forwarded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_steps_down_refuses_ddl_and_converges_when_healed() {
    let hosts = Hosts::up(&format!("sq{}", std::process::id() % 10_000), &["m1", "m2", "m3", "w1"]);
    let q = Quorum::start_on(&hosts);
    let old = q.leader(Duration::from_secs(30)).await;
    let mut workers = TestServer::workers_only(q.dir.path());
    workers.add_worker_to_at("w1", 8, &q.all_listen(), (Some(&hosts.ns("w1")), &hosts.ip("w1")));
    let c_old = q.master(old).connect().await;
    c_old
        .batch_execute("CREATE STREAM p_before (x BIGINT)")
        .await
        .expect("DDL before the cut");
    let term_before = q.me(old)["term"].as_u64().unwrap();
    let others: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    for host in ["m1", "m2", "m3", "w1"].into_iter().filter(|h| *h != q.ids[old]) {
        hosts.partition(&q.ids[old], host, true);
    }
    // The other two elect a leader in a newer term.
    let new = q.leader_among(&others, Duration::from_secs(30), false).await;
    assert!(q.me(new)["term"].as_u64().unwrap() > term_before);
    // The cut master steps down: no quorum, and says so.
    let deadline = Instant::now() + Duration::from_secs(15);
    while q.me(old)["has_quorum"] != false || q.me(old)["role"] == "leader" {
        assert!(Instant::now() < deadline, "the cut leader kept leading: {}", q.me(old));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = c_old
        .batch_execute("CREATE STREAM p_refused (x BIGINT)")
        .await
        .expect_err("DDL through a master without a quorum");
    let db = refused.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "57P03", "{db:?}");
    assert!(db.message().contains("quorum"), "{}", db.message());
    assert!(streams(&c_old).await.contains(&"p_before".to_string()), "reads work");
    // The majority decides meanwhile.
    let c_new = q.master(new).connect().await;
    c_new
        .batch_execute("CREATE STREAM p_during (x BIGINT)")
        .await
        .expect("DDL through the majority");
    for host in ["m1", "m2", "m3", "w1"].into_iter().filter(|h| *h != q.ids[old]) {
        hosts.partition(&q.ids[old], host, false);
    }
    // Healed: the old leader follows, holds what was decided, and takes
    // DDL again (forwarded to the leader), seen everywhere.
    wait_for_stream(&q, old, "p_during").await;
    assert!(!streams(&c_new).await.contains(&"p_refused".to_string()));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match q
            .master(old)
            .connect()
            .await
            .batch_execute("CREATE STREAM p_after (x BIGINT)")
            .await
        {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "DDL through the healed master: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..3 {
        wait_for_stream(&q, i, "p_after").await;
    }
    // One leader among the three again.
    q.leader(Duration::from_secs(15)).await;
    drop(workers);
}
