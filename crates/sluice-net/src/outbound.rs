//! The sending side: one link per peer this worker sends to — one HTTP/2
//! connection, one `Exchange` stream — carrying every channel to that peer.
//!
//! A channel's task holds the sender of a `forwarding_channel` with no
//! credits; the link adds the peer's grants. A forwarder task per channel
//! encodes its messages (Arrow IPC) into frames and queues them for the
//! link's writer, which packs queued frames into gRPC messages. The link's
//! reader applies credit grants and closes.

use crate::codec::{ChannelEncoder, open_frame};
use crate::error::NetError;
use crate::grpc::{self, Messages};
use crate::metrics::add;
use crate::{Shared, inbound};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use prost::Message as _;
use sluice_dataflow::channel::{ChannelKey, ChannelSender, CreditGate, ForwardingReceiver, forwarding_channel};
use sluice_proto::v1::data_frame::Body;
use sluice_proto::v1::{Credit, CreditFrames, DataFrame, DataFrames, Empty};
use sluice_types::{PipelineId, WorkerId};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tonic::codegen::Service as _;
use tonic::transport::{Channel, Endpoint};

/// The link to one peer.
pub(crate) struct Link {
    peer: WorkerId,
    frames: mpsc::Sender<DataFrame>,
    channels: Mutex<HashMap<u64, OutChannel>>,
    next_channel: AtomicU64,
    failure: OnceLock<NetError>,
    task: Mutex<Option<AbortHandle>>,
}

struct OutChannel {
    key: ChannelKey,
    gate: CreditGate,
    forwarder: AbortHandle,
}

impl Link {
    /// Starts a link to `peer` at `address`: connects in the background;
    /// channels opened meanwhile wait for credits.
    pub fn spawn(shared: &Arc<Shared>, peer: WorkerId, address: String) -> Arc<Link> {
        let (frames, frames_rx) = mpsc::channel(shared.config.link_frames_max);
        let link = Arc::new(Link {
            peer,
            frames,
            channels: Mutex::default(),
            next_channel: AtomicU64::new(1),
            failure: OnceLock::new(),
            task: Mutex::default(),
        });
        let task = tokio::spawn(run(Arc::downgrade(shared), link.clone(), address, frames_rx));
        *link.task.lock().expect("link task lock") = Some(task.abort_handle());
        link
    }

    pub fn channel_count(&self) -> usize {
        self.channels.lock().expect("link channels lock").len()
    }

    pub fn is_failed(&self) -> bool {
        self.failure.get().is_some()
    }

    /// A new channel on this link; its sender gets credits once the peer's
    /// receiver has registered the key and granted them.
    pub fn open(self: &Arc<Self>, shared: &Arc<Shared>, key: ChannelKey) -> ChannelSender {
        let credits_max = shared.config.channel_credits;
        let (sender, receiver, gate) = forwarding_channel(credits_max, shared.counters.credit_wait_ns.clone());
        let id = self.next_channel.fetch_add(1, Ordering::Relaxed);
        let mut channels = self.channels.lock().expect("link channels lock");
        let forwarder = tokio::spawn(forward(Arc::downgrade(shared), self.clone(), id, key, receiver));
        channels.insert(
            id,
            OutChannel {
                key,
                gate,
                forwarder: forwarder.abort_handle(),
            },
        );
        drop(channels);
        // The link may have failed between the caller's check and the
        // insert: its failure report missed this channel.
        if let Some(error) = self.failure.get() {
            shared.report(key.pipeline, key.deployment, &self.peer, error.clone());
        }
        sender
    }

    /// Closes this link's channels of a deployment: their senders fail
    /// with `Closed`, the peer is told (if the frame queue has room; the
    /// peer's own `close_deployment` covers the rest).
    pub fn close_deployment(&self, pipeline: PipelineId, deployment: u64) {
        let mut channels = self.channels.lock().expect("link channels lock");
        channels.retain(|&id, c| {
            if c.key.pipeline != pipeline || c.key.deployment != deployment {
                return true;
            }
            c.forwarder.abort();
            c.gate.close();
            let _ = self.frames.try_send(DataFrame {
                channel: id,
                body: Some(Body::Close(Empty {})),
            });
            false
        });
    }

    /// Drops the connection (shutdown).
    pub fn abort(&self) {
        if let Some(task) = self.task.lock().expect("link task lock").take() {
            task.abort();
        }
        for (_, c) in self.channels.lock().expect("link channels lock").drain() {
            c.forwarder.abort();
        }
    }

    fn apply(&self, shared: &Shared, credit: Credit) {
        let mut channels = self.channels.lock().expect("link channels lock");
        if credit.closed {
            if let Some(c) = channels.remove(&credit.channel) {
                c.gate.close();
                if !credit.error.is_empty() {
                    drop(channels);
                    let error = NetError::Refused {
                        peer: self.peer.0.clone(),
                        reason: credit.error,
                    };
                    shared.report(c.key.pipeline, c.key.deployment, &self.peer, error);
                }
            }
        } else if let Some(c) = channels.get(&credit.channel) {
            c.gate.grant(credit.credits);
        }
    }

    /// Marks the link failed and reports it once per deployment that had
    /// channels on it. Their senders stay open (no credits come), so no
    /// task takes the failure for an end of input.
    fn fail(&self, shared: &Shared, error: NetError) {
        if self.failure.set(error.clone()).is_err() {
            return;
        }
        add(&shared.counters.link_failures, 1);
        let deployments: BTreeSet<(PipelineId, u64)> = self
            .channels
            .lock()
            .expect("link channels lock")
            .values()
            .map(|c| (c.key.pipeline, c.key.deployment))
            .collect();
        if deployments.is_empty() {
            tracing::warn!(peer = %self.peer, "data plane link failed with no channel open: {error}");
        }
        for (pipeline, deployment) in deployments {
            shared.report(pipeline, deployment, &self.peer, error.clone());
        }
    }
}

/// Connects, then reads credits until the link fails.
async fn run(shared: Weak<Shared>, link: Arc<Link>, address: String, frames: mpsc::Receiver<DataFrame>) {
    let error = exchange(&shared, &link, &address, frames).await;
    if let Some(shared) = shared.upgrade() {
        // Among the failed links before the failure is reported: whoever
        // closes the deployment on the report (a supervisor) must find the
        // link to close its channels. Reported first, a close in between
        // saw the link in neither list and left its senders waiting.
        let mut links = shared.links.lock().expect("links lock");
        if links.get(&link.peer).is_some_and(|l| Arc::ptr_eq(l, &link)) {
            links.remove(&link.peer);
        }
        drop(links);
        if link.channel_count() > 0 {
            shared
                .failed_links
                .lock()
                .expect("failed links lock")
                .push(link.clone());
        }
        link.fail(&shared, error);
    }
}

async fn exchange(shared: &Weak<Shared>, link: &Link, address: &str, frames: mpsc::Receiver<DataFrame>) -> NetError {
    let link_error = |reason: String| NetError::Link {
        peer: link.peer.0.clone(),
        reason,
    };
    let Some(strong) = shared.upgrade() else {
        return link_error("data plane dropped".into());
    };
    let mut channel = match connect(&strong, address).await {
        Ok(channel) => channel,
        Err(e) => return link_error(format!("cannot connect to {address}: {e}")),
    };
    add(&strong.counters.links_opened, 1);
    let config = &strong.config;
    let hello = DataFrames {
        protocol_version: config.protocol_version,
        sender: strong.me.0.clone(),
        frames: Vec::new(),
    };
    let requests = futures::stream::once(async move { hello }).chain(batched(
        frames,
        config.message_frames_max,
        config.message_bytes_target,
        shared.clone(),
    ));
    // Each message as gRPC DATA chunks, its IPC bodies not copied
    // (`grpc::encode_frames`); one over the limit ends the stream with an
    // error, and the link fails with its reason.
    let limit = config.message_bytes_max;
    let refused: Arc<OnceLock<String>> = Arc::default();
    let refusal = refused.clone();
    let chunks = requests.flat_map(move |message| {
        let frames: Vec<Result<http_body::Frame<Bytes>, tonic::Status>> = match grpc::encode_frames(&message, limit) {
            Ok(chunks) => chunks.into_iter().map(|c| Ok(http_body::Frame::data(c))).collect(),
            Err(reason) => {
                let _ = refusal.set(reason.clone());
                vec![Err(tonic::Status::out_of_range(reason))]
            }
        };
        futures::stream::iter(frames)
    });
    let request = grpc::request(
        inbound::EXCHANGE_PATH,
        tonic::body::Body::new(http_body_util::StreamBody::new(chunks)),
    );
    let ours = config.protocol_version;
    drop(strong);
    let error = async {
        let response = match futures::future::poll_fn(|cx| channel.poll_ready(cx)).await {
            Ok(()) => channel.call(request).await,
            Err(e) => Err(e),
        };
        let response = match response {
            Ok(response) => response,
            Err(e) => return link_error(format!("the data plane call to {address} failed: {e}")),
        };
        let mut responses = match Messages::<CreditFrames>::response(response, limit) {
            Ok(responses) => responses,
            Err(status) => return inbound::status_error(&link.peer, status),
        };
        let mut first = true;
        loop {
            let frames = match responses.message().await {
                Ok(Some((frames, _))) => frames,
                Ok(None) => return link_error("the peer ended the stream".into()),
                Err(status) => return inbound::status_error(&link.peer, status),
            };
            if first && frames.protocol_version != ours {
                return NetError::VersionMismatch(sluice_proto::version_mismatch(ours, frames.protocol_version));
            }
            first = false;
            let Some(shared) = shared.upgrade() else {
                return link_error("data plane dropped".into());
            };
            for credit in frames.credits {
                link.apply(&shared, credit);
            }
        }
    }
    .await;
    match refused.get() {
        // The stream broke because this side refused to send a message.
        Some(reason) => NetError::Protocol {
            peer: link.peer.0.clone(),
            reason: reason.clone(),
        },
        None => error,
    }
}

async fn connect(shared: &Shared, address: &str) -> Result<Channel, String> {
    let c = &shared.config;
    let endpoint = Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(c.connect_timeout)
        .tcp_nodelay(true)
        .initial_stream_window_size(c.window_bytes)
        .initial_connection_window_size(c.window_bytes)
        .max_frame_size(c.frame_bytes_max)
        .http2_keep_alive_interval(c.keepalive_interval)
        .keep_alive_timeout(c.keepalive_timeout)
        .keep_alive_while_idle(true);
    let mut last = String::new();
    for attempt in 0..c.connect_attempts_max {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) => {
                last = format!(
                    "{e}: {}",
                    std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default()
                )
            }
        }
        if attempt + 1 < c.connect_attempts_max {
            tokio::time::sleep(Duration::from_millis(100 << attempt.min(6))).await;
        }
    }
    Err(format!("{} attempts, last: {last}", c.connect_attempts_max))
}

/// The link's queued frames, packed into gRPC messages: whatever is queued
/// when the writer asks, up to `frames_max` frames or `bytes_target` bytes;
/// it never waits to fill a message.
fn batched(
    frames: mpsc::Receiver<DataFrame>,
    frames_max: usize,
    bytes_target: usize,
    shared: Weak<Shared>,
) -> impl Stream<Item = DataFrames> {
    futures::stream::unfold(frames, move |mut frames| {
        let shared = shared.clone();
        async move {
            let first = frames.recv().await?;
            let mut bytes = first.encoded_len();
            let mut message = DataFrames {
                protocol_version: 0,
                sender: String::new(),
                frames: vec![first],
            };
            while message.frames.len() < frames_max && bytes < bytes_target {
                match frames.try_recv() {
                    Ok(frame) => {
                        bytes += frame.encoded_len();
                        message.frames.push(frame);
                    }
                    Err(_) => break,
                }
            }
            if let Some(shared) = shared.upgrade() {
                add(&shared.counters.bytes_sent, message.encoded_len() as u64);
                add(&shared.counters.grpc_messages_sent, 1);
            }
            Some((message, frames))
        }
    })
}

/// Opens the channel at the peer, then encodes and queues its messages
/// until its sender is dropped, and closes it. Runs on the channel's own
/// task, so channels encode in parallel.
async fn forward(shared: Weak<Shared>, link: Arc<Link>, id: u64, key: ChannelKey, mut receiver: ForwardingReceiver) {
    let Some(credits_max) = shared.upgrade().map(|s| s.config.channel_credits) else {
        return;
    };
    let frame = |body| DataFrame {
        channel: id,
        body: Some(body),
    };
    if link
        .frames
        .send(frame(Body::Open(open_frame(key, credits_max))))
        .await
        .is_err()
    {
        return drain(receiver).await;
    }
    let mut encoder = ChannelEncoder::default();
    let mut bodies = Vec::new();
    while let Some(message) = receiver.recv().await {
        let rows = message.rows() as u64;
        if let Err(e) = encoder.encode(message, &mut bodies) {
            if let Some(shared) = shared.upgrade() {
                let error = NetError::Protocol {
                    peer: link.peer.0.clone(),
                    reason: format!("cannot encode a batch of channel {key:?}: {e}"),
                };
                shared.report(key.pipeline, key.deployment, &link.peer, error);
            }
            return drain(receiver).await;
        }
        if let Some(shared) = shared.upgrade() {
            add(&shared.counters.messages_sent, 1);
            add(&shared.counters.rows_sent, rows);
        }
        for body in bodies.drain(..) {
            if link.frames.send(frame(body)).await.is_err() {
                return drain(receiver).await;
            }
        }
    }
    let _ = link.frames.send(frame(Body::Close(Empty {}))).await;
    link.channels.lock().expect("link channels lock").remove(&id);
}

/// After the link failed: takes (and drops) what the task had credits for,
/// until the task drops its sender, so the sender never sees the channel
/// close (the failure is reported, not an end of input).
async fn drain(mut receiver: ForwardingReceiver) {
    while receiver.recv().await.is_some() {}
}
