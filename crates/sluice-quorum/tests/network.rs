//! Three quorum members over real gRPC on loopback, with the default timing
//! `sluice master` uses: they elect one leader, a write at the leader is
//! held by all, a follower names the leader, the leader's death elects
//! another that kept every acknowledged write, and the dead one restarted
//! from its data directory follows and converges. Also: a peer of another
//! protocol version, or a message for another member, is refused.

use sluice_proto::v1::QuorumEnvelope;
use sluice_proto::v1::quorum_client::QuorumClient;
use sluice_quorum::{Config, NodeError, QuorumError, QuorumNode, RoleName};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

struct Member {
    node: QuorumNode,
    stop: CancellationToken,
}

async fn serve(node: &QuorumNode, listener: tokio::net::TcpListener) -> CancellationToken {
    let stop = CancellationToken::new();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tonic::transport::Server::builder()
        .add_service(node.service())
        .serve_with_incoming_shutdown(incoming, stop.clone().cancelled_owned());
    tokio::spawn(server);
    stop
}

async fn start(id: &str, addresses: &BTreeMap<String, SocketAddr>, dir: &Path) -> Member {
    let listener = tokio::net::TcpListener::bind(addresses[id]).await.unwrap();
    let peers = addresses
        .iter()
        .filter(|(p, _)| *p != id)
        .map(|(p, a)| (p.clone(), a.to_string()))
        .collect();
    let node = QuorumNode::start(id.into(), peers, Config::default(), &dir.join(id)).unwrap();
    let stop = serve(&node, listener).await;
    Member { node, stop }
}

fn kill(member: Member) {
    member.stop.cancel();
    member.node.shutdown();
}

async fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn the_leader(members: &BTreeMap<String, Member>) -> Option<String> {
    let leaders: Vec<&String> = members
        .iter()
        .filter(|(_, m)| m.node.is_leader())
        .map(|(id, _)| id)
        .collect();
    (leaders.len() == 1).then(|| leaders[0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_elect_write_fail_over_and_converge() {
    let dir = std::env::temp_dir().join(format!("sluice-quorum-net-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut addresses = BTreeMap::new();
    for id in ["m1", "m2", "m3"] {
        // Take a free port, then let it go for the member to bind.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        addresses.insert(id.to_string(), l.local_addr().unwrap());
    }
    let mut members = BTreeMap::new();
    for id in ["m1", "m2", "m3"] {
        members.insert(id.to_string(), start(id, &addresses, &dir).await);
    }

    let leader = wait_for("one leader", Duration::from_secs(10), || the_leader(&members)).await;
    let stamp = members[&leader]
        .node
        .propose(vec![("stream/s".into(), Some("v1".into()))])
        .await
        .unwrap();
    wait_for("every master holds the write", Duration::from_secs(5), || {
        members
            .values()
            .all(|m| m.node.state().get("stream/s") == Some("v1"))
            .then_some(())
    })
    .await;
    let follower = members.keys().find(|m| **m != leader).unwrap().clone();
    match members[&follower].node.propose(vec![("stream/t".into(), None)]).await {
        Err(NodeError::Quorum(QuorumError::NotLeader { leader: Some(l) })) => assert_eq!(l, leader),
        other => panic!("a follower took a write: {other:?}"),
    }
    let status = members[&follower].node.status();
    assert_eq!(status.role, RoleName::Follower);
    assert!(status.has_quorum);
    // Right after the election a follower may still list the other
    // follower, whose vote request it heard within the election timeout;
    // once that ages out it hears only its leader.
    wait_for("a follower hears only its leader", Duration::from_secs(5), || {
        (members[&follower].node.status().reachable == std::slice::from_ref(&leader)).then_some(())
    })
    .await;
    let status = members[&leader].node.status();
    assert_eq!(status.reachable.len(), 2, "the leader hears everyone: {status:?}");

    // The leader dies: another is elected in a newer term, holding the write.
    let old_term = members[&leader].node.status().term;
    let killed_at = Instant::now();
    kill(members.remove(&leader).unwrap());
    let new = wait_for("a new leader", Duration::from_secs(10), || the_leader(&members)).await;
    eprintln!("new leader {new} after {:?}", killed_at.elapsed());
    let status = members[&new].node.status();
    assert!(status.term > old_term);
    assert!(status.version >= stamp);
    assert_eq!(members[&new].node.state().get("stream/s"), Some("v1"));
    members[&new]
        .node
        .propose(vec![("stream/s".into(), Some("v2".into()))])
        .await
        .expect("two of three masters acknowledge");

    // The dead one comes back from its directory, follows, converges.
    members.insert(leader.clone(), start(&leader, &addresses, &dir).await);
    wait_for("the restarted master converges", Duration::from_secs(10), || {
        let back = members[&leader].node.status();
        (back.leader.as_deref() == Some(new.as_str()) && members[&leader].node.state() == members[&new].node.state())
            .then_some(())
    })
    .await;
    assert_eq!(members[&leader].node.state().get("stream/s"), Some("v2"));
    assert_eq!(the_leader(&members), Some(new));

    // A peer of another protocol version, or a message for someone else.
    let mut client = QuorumClient::connect(format!("http://{}", addresses[&follower]))
        .await
        .unwrap();
    let envelope = |version: u32, to: &str| QuorumEnvelope {
        version,
        from: leader.clone(),
        to: to.into(),
        message: b"{}".to_vec().into(),
    };
    let refused = client.deliver(envelope(999, &follower)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains("999"), "{}", refused.message());
    let refused = client
        .deliver(envelope(sluice_proto::PROTOCOL_VERSION, "m9"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("--peers"), "{}", refused.message());
    let refused = client
        .deliver(envelope(sluice_proto::PROTOCOL_VERSION, &follower))
        .await
        .unwrap_err();
    assert!(refused.message().contains("malformed"), "{}", refused.message());

    for (_, m) in members {
        kill(m);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
