//! Two data planes over real TCP on 127.0.0.1: order and equality,
//! credits, the shared-connection trap, start-up races, version checks,
//! link failures and closing deployments.

mod common;

use common::*;
use sluice_dataflow::channel::Transport;
use sluice_dataflow::message::{Barrier, Message, Mutation};
use sluice_net::{DataPlaneConfig, NetError};
use sluice_types::{PipelineId, Watermark};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

fn credits(n: u32) -> DataPlaneConfig {
    DataPlaneConfig {
        channel_credits: n,
        ..DataPlaneConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_and_equal() {
    let (a, b) = pair(DataPlaneConfig::default(), DataPlaneConfig::default()).await;
    let k = key(1, 0);
    let mut rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    let b1 = batch(0, 1000);
    // Another schema mid-stream, and a slice (offsets not at zero).
    let b2 = sluice_net_test_other_schema();
    let b3 = batch(5000, 300).slice(17, 200);
    let sent = vec![
        Message::Data(b1.clone()),
        Message::Watermark(Watermark(42)),
        Message::Idle,
        Message::Data(b2.clone()),
        Message::Barrier(Barrier::checkpoint(9)),
        Message::Data(b3.clone()),
        Message::Barrier(Barrier {
            checkpoint_id: 10,
            mutation: Some(Mutation::Stop),
        }),
        Message::EndOfInput,
    ];
    let sender = tokio::spawn(async move {
        for m in sent {
            tx.send(m).await.unwrap();
        }
    });
    let mut got = Vec::new();
    while let Some(m) = within("the next message", rx.recv()).await {
        got.push(m);
    }
    within("the sender", sender).await.unwrap();
    assert_eq!(got.len(), 8, "{got:?}");
    assert!(matches!(&got[0], Message::Data(b) if *b == b1));
    assert!(matches!(got[1], Message::Watermark(Watermark(42))));
    assert!(matches!(got[2], Message::Idle));
    assert!(matches!(&got[3], Message::Data(b) if *b == b2));
    assert!(matches!(got[4], Message::Barrier(b) if b.checkpoint_id == 9 && !b.stops()));
    assert!(matches!(&got[5], Message::Data(b) if *b == b3));
    assert!(matches!(got[6], Message::Barrier(b) if b.checkpoint_id == 10 && b.stops()));
    assert!(matches!(got[7], Message::EndOfInput));
    let (ma, mb) = (a.metrics(), b.metrics());
    assert_eq!(ma.messages_sent, 8);
    assert_eq!(mb.messages_received, 8);
    assert_eq!(ma.rows_sent, 1000 + 3 + 200);
    assert_eq!(mb.rows_received, 1000 + 3 + 200);
    assert!(ma.bytes_sent > 0 && ma.bytes_sent == mb.bytes_received, "{ma:?} {mb:?}");
    assert_eq!(ma.links_opened, 1);
}

fn sluice_net_test_other_schema() -> arrow::record_batch::RecordBatch {
    use arrow::array::Float64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float64, true)]));
    let x = Float64Array::from(vec![Some(1.5), None, Some(-2.0)]);
    arrow::record_batch::RecordBatch::try_new(schema, vec![Arc::new(x)]).unwrap()
}

/// A consumer that does not read stops the sender at its credits; a slow
/// one never has more rows between the two tasks than the credits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credits_bound_the_rows_across_the_link() {
    const CREDITS: u64 = 1000;
    let (a, b) = pair(credits(CREDITS as u32), credits(CREDITS as u32)).await;
    let k = key(1, 0);
    let mut rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let sent = sent.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                tx.send(Message::Data(batch(i * 100, 100))).await.unwrap();
                sent.fetch_add(100, Ordering::SeqCst);
            }
            tx.send(Message::EndOfInput).await.unwrap();
        })
    };
    // Nobody reads: the sender gets exactly the credits through.
    until("the credits to be spent", || sent.load(Ordering::SeqCst) == CREDITS).await;
    until("the rows to reach the receiver", || {
        rx.queued_credits() == CREDITS as usize
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sent.load(Ordering::SeqCst), CREDITS, "the sender went past its credits");
    assert!(!sender.is_finished());
    // A slow reader: rows sent but not yet taken never exceed the credits.
    let mut received = 0u64;
    loop {
        let m = within("the next message", rx.recv()).await.unwrap();
        received += m.rows() as u64;
        let in_flight = sent.load(Ordering::SeqCst) - received;
        assert!(
            in_flight <= CREDITS,
            "{in_flight} rows in flight with {CREDITS} credits"
        );
        if matches!(m, Message::EndOfInput) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(received, 5000);
    within("the sender", sender).await.unwrap();
    assert!(a.metrics().credit_wait_ns > 0, "the sender waited for credits");
}

/// The HTTP/2 trap: channels sharing a connection. A consumer that stops
/// reading must not stall another channel on the same link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_channel_does_not_stall_its_neighbour() {
    // Small windows, so a transport that let the stalled channel's bytes
    // pile up in the connection would block the fast one quickly.
    let config = DataPlaneConfig {
        channel_credits: 2000,
        window_bytes: 64 * 1024,
        ..DataPlaneConfig::default()
    };
    let (a, b) = pair(config.clone(), config).await;
    let (slow, fast) = (key(1, 0), key(1, 1));
    let slow_rx = b.receiver_from(slow, &worker("a")).unwrap();
    let mut fast_rx = b.receiver_from(fast, &worker("a")).unwrap();
    let slow_tx = a.sender_to(slow, &worker("b")).unwrap();
    let fast_tx = a.sender_to(fast, &worker("b")).unwrap();
    let slow_sent = Arc::new(AtomicU64::new(0));
    let slow_sender = {
        let sent = slow_sent.clone();
        tokio::spawn(async move {
            for i in 0..1000 {
                slow_tx.send(Message::Data(batch(i * 500, 500))).await.unwrap();
                sent.fetch_add(500, Ordering::SeqCst);
            }
        })
    };
    until("the stalled channel to fill", || slow_rx.queued_credits() == 2000).await;
    let fast_sender = tokio::spawn(async move {
        for i in 0..400 {
            fast_tx.send(Message::Data(batch(i * 500, 500))).await.unwrap();
        }
        fast_tx.send(Message::EndOfInput).await.unwrap();
    });
    let mut rows = 0;
    loop {
        match within("the fast channel", fast_rx.recv()).await.unwrap() {
            Message::EndOfInput => break,
            m => rows += m.rows(),
        }
    }
    assert_eq!(rows, 200_000, "the fast channel got every row (100x its credits)");
    within("the fast sender", fast_sender).await.unwrap();
    // The stalled channel is still stalled at its credits.
    assert_eq!(slow_sent.load(Ordering::SeqCst), 2000);
    assert_eq!(slow_rx.queued_credits(), 2000);
    assert!(!slow_sender.is_finished());
}

/// Deployments start concurrently: a sender may open its channel before the
/// receiver registers it. It waits for the first credits, then sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_before_its_receiver_waits_for_credits() {
    let (a, b) = pair(DataPlaneConfig::default(), DataPlaneConfig::default()).await;
    let k = key(3, 0);
    let tx = a.sender_to(k, &worker("b")).unwrap();
    let first = batch(0, 10);
    let sending = {
        let first = first.clone();
        tokio::spawn(async move {
            tx.send(Message::Data(first)).await.unwrap();
            tx.send(Message::EndOfInput).await.unwrap();
        })
    };
    // The Open frame reached b, and no credit came back: nothing sent.
    until("the open frame to reach b", || b.metrics().grpc_messages_received >= 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !sending.is_finished(),
        "a send completed before the receiver registered"
    );
    assert_eq!(b.metrics().messages_received, 0);
    let mut rx = b.receiver_from(k, &worker("a")).unwrap();
    assert!(matches!(within("the batch", rx.recv()).await, Some(Message::Data(b)) if b == first));
    assert!(matches!(within("the end", rx.recv()).await, Some(Message::EndOfInput)));
    within("the sender", sending).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_version_mismatch_is_an_error_on_both_sides() {
    let other = DataPlaneConfig {
        protocol_version: sluice_proto::PROTOCOL_VERSION + 1,
        ..DataPlaneConfig::default()
    };
    let (a, b) = pair(DataPlaneConfig::default(), other).await;
    let (mut a_failures, mut b_failures) = (a.failures(), b.failures());
    let k = key(4, 0);
    let _rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    let sending = tokio::spawn(async move { tx.send(Message::Data(batch(0, 1))).await });
    for (side, failure) in [
        ("a", next_failure(&mut a_failures).await),
        ("b", next_failure(&mut b_failures).await),
    ] {
        assert_eq!((failure.pipeline, failure.deployment), (PipelineId(7), 4), "{side}");
        let NetError::VersionMismatch(message) = &failure.error else {
            panic!("{side}: {failure:?}");
        };
        let (ours, theirs) = (sluice_proto::PROTOCOL_VERSION, sluice_proto::PROTOCOL_VERSION + 1);
        assert!(message.contains("protocol version mismatch"), "{side}: {message}");
        assert!(
            message.contains(&ours.to_string()) && message.contains(&theirs.to_string()),
            "{message}"
        );
    }
    assert!(!sending.is_finished(), "nothing was delivered");
}

/// A message larger than the receiver accepts fails the link on both sides
/// with the limit named, before its body is buffered; the receiver keeps
/// serving, and a later deployment with small batches goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_receivers_limit_fails_the_link_with_the_limit_named() {
    let small = DataPlaneConfig {
        message_bytes_max: 4096,
        ..DataPlaneConfig::default()
    };
    let (a, b) = pair(DataPlaneConfig::default(), small).await;
    let (mut a_failures, mut b_failures) = (a.failures(), b.failures());
    let k = key(5, 0);
    let _rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    // 1000 rows of an Int64 and a string: far more than 4096 bytes. The
    // sender stays open (a closed channel would leave nothing to report).
    tx.send(Message::Data(batch(0, 1000))).await.unwrap();
    for (side, failure) in [
        ("a", next_failure(&mut a_failures).await),
        ("b", next_failure(&mut b_failures).await),
    ] {
        assert_eq!((failure.pipeline, failure.deployment), (PipelineId(7), 5), "{side}");
        let text = failure.error.to_string();
        assert!(
            text.contains("more than the 4096 accepted (message_bytes_max)"),
            "{side}: {text}"
        );
    }
    drop(tx);
    a.close_deployment(PipelineId(7), 5);
    b.close_deployment(PipelineId(7), 5);
    let k = key(6, 0);
    let mut rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    let expected = batch(0, 1);
    tx.send(Message::Data(expected.clone())).await.unwrap();
    let Some(Message::Data(got)) = within("the small batch", rx.recv()).await else {
        panic!("no batch");
    };
    assert_eq!(got, expected);
}

/// A message larger than the sender's own limit is not sent: the link fails
/// on the sender with the limit named (and on the receiver as a broken
/// stream), and nothing of it is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_senders_limit_is_not_sent_and_fails_the_link() {
    let small = DataPlaneConfig {
        message_bytes_max: 4096,
        ..DataPlaneConfig::default()
    };
    let (a, b) = pair(small, DataPlaneConfig::default()).await;
    let (mut a_failures, mut b_failures) = (a.failures(), b.failures());
    let k = key(8, 0);
    let mut rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    tx.send(Message::Data(batch(0, 1000))).await.unwrap();
    let failure = next_failure(&mut a_failures).await;
    assert_eq!((failure.pipeline, failure.deployment), (PipelineId(7), 8));
    let text = failure.error.to_string();
    assert!(
        text.contains("more than the 4096 allowed (message_bytes_max)"),
        "{text}"
    );
    let failure = next_failure(&mut b_failures).await;
    assert_eq!((failure.pipeline, failure.deployment), (PipelineId(7), 8));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .is_err(),
        "nothing of the refused message arrives, and the channel does not end"
    );
}

/// A cut link is reported per deployment on both sides and never looks like
/// an end of input; a later deployment reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_link_is_reported_not_ended_and_later_deployments_reconnect() {
    let (a, b) = pair(credits(1000), credits(1000)).await;
    let proxy = Proxy::start(b.local_addr()).await;
    connect(&a, "b", proxy.address);
    let (mut a_failures, mut b_failures) = (a.failures(), b.failures());
    let k = key(5, 0);
    let mut rx = b.receiver_from(k, &worker("a")).unwrap();
    let tx = a.sender_to(k, &worker("b")).unwrap();
    let sender = tokio::spawn(async move {
        for i in 0.. {
            if tx.send(Message::Data(batch(i * 100, 100))).await.is_err() {
                return i;
            }
        }
        unreachable!()
    });
    for _ in 0..20 {
        assert!(matches!(within("data", rx.recv()).await, Some(Message::Data(_))));
    }
    proxy.cut();
    for (side, failure) in [
        ("a", next_failure(&mut a_failures).await),
        ("b", next_failure(&mut b_failures).await),
    ] {
        assert_eq!(failure.deployment, 5, "{side}");
        assert!(matches!(failure.error, NetError::Link { .. }), "{side}: {failure:?}");
    }
    assert_eq!(b.metrics().receivers_orphaned, 1, "the receiver's end is kept open");
    // The receiver drains what arrived, then waits: no end of input, no close.
    let tail = tokio::time::timeout(Duration::from_millis(500), async {
        loop {
            match rx.recv().await {
                Some(Message::Data(_)) => continue,
                other => return other,
            }
        }
    })
    .await;
    assert!(tail.is_err(), "the receiver saw {tail:?} after the link broke");
    assert!(!sender.is_finished(), "the sender saw its channel close");
    // The worker closes the failed deployment: both ends close.
    b.close_deployment(PipelineId(7), 5);
    a.close_deployment(PipelineId(7), 5);
    assert!(within("the receiver to close", rx.recv()).await.is_none());
    assert!(within("the sender to close", sender).await.unwrap() >= 20);
    // A later deployment gets a new link.
    connect(&a, "b", b.local_addr());
    let k2 = key(6, 0);
    let mut rx2 = b.receiver_from(k2, &worker("a")).unwrap();
    let tx2 = a.sender_to(k2, &worker("b")).unwrap();
    within("a send on the new link", tx2.send(Message::Watermark(Watermark(1))))
        .await
        .unwrap();
    assert!(matches!(
        within("the watermark", rx2.recv()).await,
        Some(Message::Watermark(Watermark(1)))
    ));
    assert_eq!(a.metrics().links_opened, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_deployment_frees_channels_in_every_state() {
    let config = DataPlaneConfig {
        pending_opens_max: 2,
        ..DataPlaneConfig::default()
    };
    let (a, b) = pair(config.clone(), config).await;
    let mut a_failures = a.failures();
    // A receiver whose sender never connects.
    let mut never = b.receiver_from(key(8, 0), &worker("a")).unwrap();
    // Senders whose receivers never register: two wait at b …
    let waiting: Vec<_> = (1..=2).map(|e| a.sender_to(key(8, e), &worker("b")).unwrap()).collect();
    until("b to hold both opens", || b.metrics().opens_waiting == 2).await;
    // … and a third is over b's pending_opens_max: refused, and reported.
    let refused = a.sender_to(key(9, 0), &worker("b")).unwrap();
    let failure = next_failure(&mut a_failures).await;
    assert_eq!(failure.deployment, 9);
    let NetError::Refused { reason, .. } = &failure.error else {
        panic!("{failure:?}");
    };
    assert!(reason.contains("pending_opens_max"), "{reason}");
    assert!(
        refused.send(Message::Idle).await.is_err(),
        "a refused channel is closed"
    );
    // Closing the deployment frees the receiver …
    b.close_deployment(PipelineId(7), 8);
    assert!(
        within("the unconnected receiver to close", never.recv())
            .await
            .is_none()
    );
    // … refuses its later channels on b …
    assert!(b.receiver_from(key(8, 5), &worker("a")).is_err());
    // … and a's senders waiting for credits fail once a closes it too.
    a.close_deployment(PipelineId(7), 8);
    for tx in waiting {
        assert!(within("the waiting sender", tx.send(Message::Idle)).await.is_err());
    }
    let (ma, mb) = (a.metrics(), b.metrics());
    assert_eq!(
        (ma.channels_out, mb.opens_waiting, mb.receivers_waiting),
        (0, 0, 0),
        "{ma:?} {mb:?}"
    );
    // b forgot the pending opens: two new ones fit under the bound again.
    let txs: Vec<_> = (0..2).map(|e| a.sender_to(key(10, e), &worker("b")).unwrap()).collect();
    until("b to hold the new opens", || b.metrics().opens_waiting == 2).await;
    let mut rxs: Vec<_> = (0..2)
        .map(|e| b.receiver_from(key(10, e), &worker("a")).unwrap())
        .collect();
    for tx in &txs {
        within("a send", tx.send(Message::Idle)).await.unwrap();
    }
    for rx in &mut rxs {
        assert!(matches!(within("idle", rx.recv()).await, Some(Message::Idle)));
    }
    assert_eq!(b.metrics().channels_in, 2);
    b.close_deployment(PipelineId(7), 10);
    a.close_deployment(PipelineId(7), 10);
    let (ma, mb) = (a.metrics(), b.metrics());
    assert_eq!(
        (ma.channels_out, mb.channels_in, mb.opens_waiting),
        (0, 0, 0),
        "{ma:?} {mb:?}"
    );
}
