//! The quorum layer's own figures on loopback gRPC (issue 25, "Measured"):
//!
//! - failover: three members, the leader killed (its server and timers
//!   stopped at once, as kill -9 does to a process) → the first write a new
//!   leader gets acknowledged by a majority; `RUNS` runs (default 20), each
//!   from fresh directories;
//! - write latency: sequential one-key writes at the leader, acknowledged by
//!   a majority, with 1, 3 and 5 members (`WRITES` each, default 500).
//!
//! This is the protocol with its real transport and fsync'd `quorum.json`,
//! not yet a DDL statement through `sluice master` (the catalog is not on
//! the quorum yet). Writes `benches/results/quorum/latest.{md,json}`.
//! Run: `cargo bench -p sluice-quorum --bench quorum`.

use sluice_quorum::{Config, QuorumNode};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

struct Member {
    node: QuorumNode,
    stop: CancellationToken,
}

async fn cluster(n: usize, dir: &std::path::Path) -> BTreeMap<String, Member> {
    let mut listeners = BTreeMap::new();
    for i in 1..=n {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listeners.insert(format!("m{i}"), l);
    }
    let addresses: BTreeMap<String, String> = listeners
        .iter()
        .map(|(id, l)| (id.clone(), l.local_addr().unwrap().to_string()))
        .collect();
    let mut members = BTreeMap::new();
    for (id, listener) in listeners {
        let peers = addresses
            .iter()
            .filter(|(p, _)| **p != id)
            .map(|(p, a)| (p.clone(), a.clone()))
            .collect();
        let node = QuorumNode::start(id.clone(), peers, Config::default(), &dir.join(&id)).unwrap();
        let stop = CancellationToken::new();
        let server = tonic::transport::Server::builder()
            .add_service(node.service())
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                stop.clone().cancelled_owned(),
            );
        tokio::spawn(server);
        members.insert(id, Member { node, stop });
    }
    members
}

async fn leader(members: &BTreeMap<String, Member>) -> String {
    loop {
        if let Some((id, _)) = members.iter().find(|(_, m)| m.node.is_leader()) {
            return id.clone();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn stop_all(members: BTreeMap<String, Member>) {
    for m in members.into_values() {
        m.stop.cancel();
        m.node.shutdown();
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::var("RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let writes: usize = std::env::var("WRITES").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let base = std::env::temp_dir().join(format!("sluice-quorum-bench-{}", std::process::id()));
    let mut failovers = Vec::new();
    for run in 0..runs {
        let dir = base.join(format!("failover-{run}"));
        let mut members = cluster(3, &dir).await;
        let old = leader(&members).await;
        members[&old]
            .node
            .propose(vec![("k".into(), Some("0".into()))])
            .await
            .unwrap();
        let killed = members.remove(&old).unwrap();
        let t0 = Instant::now();
        killed.stop.cancel();
        killed.node.shutdown();
        loop {
            let new = leader(&members).await;
            if members[&new]
                .node
                .propose(vec![("k".into(), Some("1".into()))])
                .await
                .is_ok()
            {
                break;
            }
        }
        let s = t0.elapsed().as_secs_f64();
        eprintln!("failover run {run}: {s:.2} s");
        failovers.push(s);
        stop_all(members);
    }
    failovers.sort_by(f64::total_cmp);
    let mut latency = Vec::new();
    for n in [1usize, 3, 5] {
        let dir = base.join(format!("latency-{n}"));
        let members = cluster(n, &dir).await;
        let id = leader(&members).await;
        let mut samples = Vec::with_capacity(writes);
        for i in 0..writes {
            let t = Instant::now();
            members[&id]
                .node
                .propose(vec![(format!("k{}", i % 50), Some(i.to_string()))])
                .await
                .unwrap();
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        samples.sort_by(f64::total_cmp);
        eprintln!(
            "{n} members: p50 {:.2} ms p99 {:.2} ms",
            pct(&samples, 0.5),
            pct(&samples, 0.99)
        );
        latency.push((n, pct(&samples, 0.5), pct(&samples, 0.99), samples[samples.len() - 1]));
        stop_all(members);
    }
    let _ = std::fs::remove_dir_all(&base);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mut md = format!(
        "Measured on {cpu}, {} cores; loopback gRPC, default timing (heartbeat 200 ms, election timeout 1.5–3 s, lease 1 s), quorum.json fsync'd on the machine's disk.\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    md += &format!(
        "Leader failover (3 members; leader's server and timers stopped at once → first write acknowledged by a majority under a new leader), {runs} runs: p50 {:.2} s, p99 {:.2} s, min {:.2} s, max {:.2} s.\n\n",
        pct(&failovers, 0.5),
        pct(&failovers, 0.99),
        failovers[0],
        failovers[failovers.len() - 1]
    );
    md += &format!(
        "Sequential writes at the leader, each acknowledged by a majority ({writes} per row):\n\n| members | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n"
    );
    for (n, p50, p99, max) in &latency {
        md += &format!("| {n} | {p50:.2} | {p99:.2} | {max:.2} |\n");
    }
    let json = format!(
        "{{\"failover_s\":{:?},\"latency_ms\":[{}]}}\n",
        failovers,
        latency
            .iter()
            .map(|(n, a, b, c)| format!("{{\"members\":{n},\"p50\":{a},\"p99\":{b},\"max\":{c}}}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/results/quorum");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("latest.md"), &md).unwrap();
    std::fs::write(out.join("latest.json"), json).unwrap();
    print!("{md}");
}
