//! Two OS processes: this test binary re-executes itself as the receiving
//! worker (`peer_process`, which does nothing unless started that way),
//! sends it rows, then kills it with SIGKILL mid-stream. The sender hears
//! of the failure and its channel stays open (no end of input).

mod common;

use common::*;
use sluice_dataflow::channel::Transport;
use sluice_dataflow::message::Message;
use sluice_net::{DataPlaneConfig, NetError};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const ROLE: &str = "SLUICE_NET_TEST_PEER_OF";
const ROWS_EXPECTED: u64 = 100_000;

/// The receiving worker `b`, when started by the test below: prints its
/// address, receives the rows of channel 1 from `a`, reports their count,
/// then keeps reading channel 2 until it is killed.
#[test]
fn peer_process() {
    let Ok(a_address) = std::env::var(ROLE) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let b = start("b", DataPlaneConfig::default()).await;
        connect(&b, "a", a_address.parse().unwrap());
        let mut rx = b.receiver_from(key(1, 1), &worker("a")).unwrap();
        let mut endless = b.receiver_from(key(1, 2), &worker("a")).unwrap();
        println!("ADDR {}", b.local_addr());
        let mut rows = 0u64;
        let mut sum = 0i64;
        while let Some(m) = rx.recv().await {
            if let Message::Data(batch) = m {
                rows += batch.num_rows() as u64;
                let keys = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .unwrap();
                sum += keys.values().iter().sum::<i64>();
            }
        }
        println!("GOT {rows} {sum}");
        while endless.recv().await.is_some() {}
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_in_another_process_receives_and_its_death_is_reported() {
    let a = start("a", DataPlaneConfig::default()).await;
    let mut failures = a.failures();
    let mut child = Peer(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
            .env(ROLE, a.local_addr().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut next_line = async |prefix: &str| loop {
        let line = within("the peer's output", lines.recv())
            .await
            .expect("the peer exited");
        // libtest prints "test peer_process ... " before the peer's first line.
        if let Some((_, rest)) = line.split_once(prefix) {
            return rest.to_string();
        }
    };
    let address = next_line("ADDR ").await;
    connect(&a, "b", address.parse().unwrap());

    let tx = a.sender_to(key(1, 1), &worker("b")).unwrap();
    for i in 0..(ROWS_EXPECTED / 1000) {
        within("a send", tx.send(Message::Data(batch(i as i64 * 1000, 1000))))
            .await
            .unwrap();
    }
    tx.send(Message::EndOfInput).await.unwrap();
    drop(tx);
    let n = ROWS_EXPECTED as i64;
    assert_eq!(next_line("GOT ").await, format!("{ROWS_EXPECTED} {}", n * (n - 1) / 2));

    // Stream on channel 2, then kill the peer mid-stream.
    let endless = a.sender_to(key(1, 2), &worker("b")).unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let sent = sent.clone();
        tokio::spawn(async move {
            for i in 0.. {
                if endless.send(Message::Data(batch(i * 100, 100))).await.is_err() {
                    return;
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    until("rows to flow on channel 2", || sent.load(Ordering::SeqCst) > 100).await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let failure = next_failure(&mut failures).await;
    assert_eq!((failure.deployment, failure.peer.0.as_str()), (1, "b"));
    assert!(matches!(failure.error, NetError::Link { .. }), "{failure:?}");
    assert!(!sender.is_finished(), "the sender must not see its channel end");
    a.close_deployment(key(1, 2).pipeline, 1);
    within("the sender to close", sender).await.unwrap();
}

/// The peer process, killed if the test fails before it does.
struct Peer(std::process::Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
