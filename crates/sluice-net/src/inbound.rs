//! The receiving side: the `Exchange` service, one demultiplexer per
//! incoming stream, and the registry that matches a sender's `Open` with
//! the local task's `receiver_from`, whichever comes first.
//!
//! The demultiplexer never waits on a channel: a frame is decoded and
//! queued on its local channel with credits the channel's granter took
//! from the local consumer beforehand (`reserve_credits`), so one slow
//! consumer cannot stall the other channels of its stream — the HTTP/2
//! trap of many streams sharing one window does not arise, since the
//! sender never has more in flight than its credits.

use crate::Shared;
use crate::codec::{ChannelDecoder, Decoded, open_key};
use crate::error::NetError;
use crate::grpc::{self, Messages};
use crate::metrics::add;
use futures::{Stream, StreamExt};
use sluice_dataflow::channel::{ChannelKey, ChannelReceiver, ChannelSender, channel};
use sluice_proto::v1::data_frame::Body;
use sluice_proto::v1::{ChannelOpen, Credit, CreditFrames, DataFrame, DataFrames};
use sluice_types::{Error, PipelineId, WorkerId};
use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tonic::Status;
use tonic::codegen::Service as TowerService;
use tonic::codegen::http;

/// Credits per `CreditFrames` message at most.
const CREDITS_PER_MESSAGE_MAX: usize = 1024;

/// Channels expected, opened early, and the live streams.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
    next_stream: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Registered by `receiver_from`, not yet opened by their sender.
    expected: HashMap<ChannelKey, Expected>,
    /// Opened by their sender, not yet registered (at most
    /// `pending_opens_max`; no data comes before registration, since
    /// credits come only then).
    pending: HashMap<ChannelKey, PendingOpen>,
    streams: HashMap<u64, Arc<InStream>>,
    /// Local ends of channels whose stream broke, kept open (their
    /// consumers must not see an end of input) until `close_deployment`.
    orphans: HashMap<(PipelineId, u64), Vec<ChannelSender>>,
}

struct Expected {
    peer: WorkerId,
    sender: ChannelSender,
}

struct PendingOpen {
    stream: u64,
    channel: u64,
}

/// One incoming `Exchange` stream (one peer's link).
struct InStream {
    id: u64,
    peer: WorkerId,
    slots: Mutex<HashMap<u64, Slot>>,
    replies: mpsc::Sender<Reply>,
}

enum Slot {
    Pending(ChannelKey),
    Bound(Bound),
}

struct Bound {
    key: ChannelKey,
    sender: ChannelSender,
    /// Credits granted and not yet spent by the remote sender.
    outstanding: Arc<AtomicU64>,
    decoder: ChannelDecoder,
    granter: AbortHandle,
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.granter.abort();
    }
}

enum Reply {
    Credit(Credit),
    Fail(Status),
}

fn matches(key: &ChannelKey, pipeline: PipelineId, deployment: u64) -> bool {
    key.pipeline == pipeline && key.deployment == deployment
}

/// A gRPC status from the peer, as this side's error.
pub(crate) fn status_error(peer: &WorkerId, status: Status) -> NetError {
    if status.code() == tonic::Code::FailedPrecondition && status.message().contains("protocol version mismatch") {
        NetError::VersionMismatch(status.message().to_string())
    } else {
        NetError::Link {
            peer: peer.0.clone(),
            reason: format!("{:?}: {}", status.code(), status.message()),
        }
    }
}

impl Registry {
    /// `receiver_from`: the local end of a channel from `peer`, bound now if
    /// its sender already opened it.
    pub fn expect(&self, shared: &Arc<Shared>, key: ChannelKey, peer: WorkerId) -> Result<ChannelReceiver, Error> {
        let (sender, receiver) = channel(shared.config.channel_credits);
        let mut state = self.state.lock().expect("registry lock");
        if state.expected.contains_key(&key) {
            return Err(NetError::Usage(format!("channel {key:?} is already registered")).into());
        }
        if let Some(open) = state.pending.remove(&key)
            && let Some(stream) = state.streams.get(&open.stream).cloned()
        {
            if stream.peer == peer {
                stream.bind(shared, open.channel, key, sender);
                return Ok(receiver);
            }
            stream.slots.lock().expect("slots lock").remove(&open.channel);
            stream.refuse(
                open.channel,
                format!("the receiver expects channel {key:?} from worker {peer}"),
            );
        }
        state.expected.insert(key, Expected { peer, sender });
        Ok(receiver)
    }

    pub fn close_deployment(&self, pipeline: PipelineId, deployment: u64) {
        let mut state = self.state.lock().expect("registry lock");
        state.expected.retain(|key, _| !matches(key, pipeline, deployment));
        state.orphans.remove(&(pipeline, deployment));
        let pending: Vec<(ChannelKey, u64)> = state
            .pending
            .iter()
            .filter(|(key, _)| matches(key, pipeline, deployment))
            .map(|(key, open)| (*key, open.stream))
            .collect();
        for (key, _) in &pending {
            state.pending.remove(key);
        }
        for stream in state.streams.values() {
            let mut slots = stream.slots.lock().expect("slots lock");
            slots.retain(|&id, slot| {
                let key = match slot {
                    Slot::Pending(key) => key,
                    Slot::Bound(bound) => &bound.key,
                };
                if !matches(key, pipeline, deployment) {
                    return true;
                }
                stream.refuse(id, String::new());
                false
            });
        }
    }

    pub fn gauges(&self, metrics: &mut crate::DataPlaneMetrics) {
        let state = self.state.lock().expect("registry lock");
        metrics.receivers_waiting = state.expected.len();
        metrics.opens_waiting = state.pending.len();
        metrics.receivers_orphaned = state.orphans.values().map(Vec::len).sum();
        metrics.channels_in = state
            .streams
            .values()
            .map(|s| {
                let slots = s.slots.lock().expect("slots lock");
                slots.values().filter(|slot| matches!(slot, Slot::Bound(_))).count()
            })
            .sum();
    }

    /// Drops every stream (shutdown): their peers see the stream end.
    pub fn abort_streams(&self) {
        let streams: Vec<_> = self.state.lock().expect("registry lock").streams.drain().collect();
        drop(streams);
    }

    fn forget_pending(&self, key: &ChannelKey, stream: u64, channel: u64) {
        let mut state = self.state.lock().expect("registry lock");
        if state
            .pending
            .get(key)
            .is_some_and(|p| p.stream == stream && p.channel == channel)
        {
            state.pending.remove(key);
        }
    }
}

impl InStream {
    /// Starts granting credits for a channel: the local consumer's free
    /// credits, as it frees them.
    fn bind(self: &Arc<Self>, shared: &Arc<Shared>, channel: u64, key: ChannelKey, sender: ChannelSender) {
        let outstanding = Arc::new(AtomicU64::new(0));
        let mut slots = self.slots.lock().expect("slots lock");
        let granter = tokio::spawn(grant(
            Arc::downgrade(shared),
            sender.clone(),
            channel,
            outstanding.clone(),
            self.replies.clone(),
        ));
        slots.insert(
            channel,
            Slot::Bound(Bound {
                key,
                sender,
                outstanding,
                decoder: ChannelDecoder::default(),
                granter: granter.abort_handle(),
            }),
        );
    }

    /// Closes a channel at the sender (`reason` empty: a normal close).
    fn refuse(&self, channel: u64, reason: String) {
        let reply = Reply::Credit(Credit {
            channel,
            credits: 0,
            closed: true,
            error: reason,
        });
        if let Err(mpsc::error::TrySendError::Full(reply)) = self.replies.try_send(reply) {
            let replies = self.replies.clone();
            tokio::spawn(async move { replies.send(reply).await });
        }
    }

    fn on_open(self: &Arc<Self>, shared: &Arc<Shared>, channel: u64, open: ChannelOpen) {
        let key = open_key(&open);
        if open.credits_max != shared.config.channel_credits {
            return self.refuse(
                channel,
                format!(
                    "the sender's channel credits ({}) differ from the receiver's ({}); every worker must use the same",
                    open.credits_max, shared.config.channel_credits
                ),
            );
        }
        if shared.is_closed(&key) {
            return self.refuse(
                channel,
                format!("deployment {} of pipeline {} is closed", key.deployment, key.pipeline.0),
            );
        }
        let mut state = shared.inbound.state.lock().expect("registry lock");
        match state.expected.remove(&key) {
            Some(expected) if expected.peer == self.peer => self.bind(shared, channel, key, expected.sender),
            Some(expected) => {
                let peer = expected.peer.clone();
                state.expected.insert(key, expected);
                self.refuse(
                    channel,
                    format!("the receiver expects channel {key:?} from worker {peer}"),
                );
            }
            None if state.pending.contains_key(&key) => self.refuse(channel, format!("channel {key:?} opened twice")),
            None if state.pending.len() >= shared.config.pending_opens_max => self.refuse(
                channel,
                format!(
                    "{} channels already wait for their receiver (pending_opens_max)",
                    state.pending.len()
                ),
            ),
            None => {
                state.pending.insert(
                    key,
                    PendingOpen {
                        stream: self.id,
                        channel,
                    },
                );
                self.slots
                    .lock()
                    .expect("slots lock")
                    .insert(channel, Slot::Pending(key));
            }
        }
    }

    /// One frame; an error fails the whole stream (the peer broke the
    /// protocol). Never waits.
    fn on_frame(self: &Arc<Self>, shared: &Arc<Shared>, frame: DataFrame) -> Result<(), String> {
        let channel = frame.channel;
        match frame.body.ok_or("a frame without a body")? {
            Body::Open(open) => self.on_open(shared, channel, open),
            Body::Close(_) => {
                let slot = self.slots.lock().expect("slots lock").remove(&channel);
                if let Some(Slot::Pending(key)) = slot {
                    shared.inbound.forget_pending(&key, self.id, channel);
                }
            }
            body => {
                let mut slots = self.slots.lock().expect("slots lock");
                match slots.get_mut(&channel) {
                    // Closed here (close_deployment, or refused): frames
                    // that were in flight.
                    None => {}
                    Some(Slot::Pending(key)) => return Err(format!("a frame of channel {key:?} before any credit")),
                    Some(Slot::Bound(bound)) => {
                        if let Decoded::Message(message) = bound.decoder.decode(body)? {
                            let cost = u64::from(bound.sender.credits_for(&message));
                            if bound.outstanding.load(Ordering::Acquire) < cost {
                                return Err(format!("channel {:?} spent credits it was not granted", bound.key));
                            }
                            bound.outstanding.fetch_sub(cost, Ordering::AcqRel);
                            add(&shared.counters.messages_received, 1);
                            add(&shared.counters.rows_received, message.rows() as u64);
                            // A consumer that is gone drops what was in flight.
                            let _ = bound.sender.send_reserved(message);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The stream ended (the link broke, or the peer shut down): channels
    /// still bound keep their local end open, and their deployments hear of
    /// the failure.
    fn end(&self, shared: &Shared, error: Option<NetError>) {
        let slots: Vec<Slot> = self.slots.lock().expect("slots lock").drain().map(|(_, s)| s).collect();
        let mut failed = BTreeSet::new();
        let mut state = shared.inbound.state.lock().expect("registry lock");
        state.streams.remove(&self.id);
        for slot in slots {
            match slot {
                Slot::Pending(key) => {
                    if state.pending.get(&key).is_some_and(|p| p.stream == self.id) {
                        state.pending.remove(&key);
                    }
                }
                Slot::Bound(bound) => {
                    let deployment = (bound.key.pipeline, bound.key.deployment);
                    state.orphans.entry(deployment).or_default().push(bound.sender.clone());
                    failed.insert(deployment);
                }
            }
        }
        drop(state);
        if !failed.is_empty() {
            add(&shared.counters.link_failures, 1);
        }
        let error = error.unwrap_or_else(|| NetError::Link {
            peer: self.peer.0.clone(),
            reason: "the sender's stream ended with channels open".into(),
        });
        for (pipeline, deployment) in failed {
            shared.report(pipeline, deployment, &self.peer, error.clone());
        }
    }
}

/// Grants a channel's free local credits to its remote sender until the
/// consumer is gone (then tells the sender the channel closed).
async fn grant(
    shared: Weak<Shared>,
    sender: ChannelSender,
    channel: u64,
    outstanding: Arc<AtomicU64>,
    replies: mpsc::Sender<Reply>,
) {
    let max = sender.credits_max();
    loop {
        let credit = match sender.reserve_credits(max).await {
            Ok(credits) => {
                outstanding.fetch_add(u64::from(credits), Ordering::AcqRel);
                if let Some(shared) = shared.upgrade() {
                    add(&shared.counters.credits_granted, u64::from(credits));
                }
                Credit {
                    channel,
                    credits,
                    closed: false,
                    error: String::new(),
                }
            }
            Err(_) => Credit {
                channel,
                credits: 0,
                closed: true,
                error: String::new(),
            },
        };
        let closed = credit.closed;
        if replies.send(Reply::Credit(credit)).await.is_err() || closed {
            return;
        }
    }
}

/// Reads one stream's frames until it ends.
async fn demux(shared: Weak<Shared>, stream: Arc<InStream>, first: Vec<DataFrame>, mut requests: Messages<DataFrames>) {
    let mut pending = first;
    let mut gathered = requests.gathered();
    let error = 'read: loop {
        let Some(strong) = shared.upgrade() else { return };
        for frame in pending.drain(..) {
            if let Err(reason) = stream.on_frame(&strong, frame) {
                let _ = stream
                    .replies
                    .try_send(Reply::Fail(Status::invalid_argument(reason.clone())));
                break 'read Some(NetError::Protocol {
                    peer: stream.peer.0.clone(),
                    reason,
                });
            }
        }
        drop(strong);
        match requests.message().await {
            Ok(Some((message, bytes))) => {
                if let Some(strong) = shared.upgrade() {
                    add(&strong.counters.bytes_received, bytes as u64);
                    add(&strong.counters.grpc_messages_received, 1);
                    add(&strong.counters.fields_gathered, requests.gathered() - gathered);
                }
                gathered = requests.gathered();
                pending = message.frames;
            }
            Ok(None) => break None,
            Err(status) => {
                // The sender hears why (a message over the limit, a
                // malformed one), not just that the stream ended.
                let _ = stream.replies.try_send(Reply::Fail(status.clone()));
                break Some(status_error(&stream.peer, status));
            }
        }
    };
    if let Some(shared) = shared.upgrade() {
        stream.end(&shared, error);
    }
}

/// The path of the one method the data plane serves.
pub(crate) const EXCHANGE_PATH: &str = "/sluice.v1.DataPlane/Exchange";

/// The `sluice.v1.DataPlane` service, served by hand rather than by tonic's
/// generated server so that requests are framed by [`grpc`] (no copy of
/// the batches); the wire format is gRPC's.
#[derive(Clone)]
pub(crate) struct Service {
    shared: Weak<Shared>,
}

impl Service {
    pub fn new(shared: Arc<Shared>) -> Self {
        Service {
            shared: Arc::downgrade(&shared),
        }
    }
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<http::Response<tonic::body::Body>, Infallible>> + Send>>;

impl TowerService<http::Request<tonic::body::Body>> for Service {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> ResponseFuture {
        let shared = self.shared.clone();
        Box::pin(async move {
            let path = request.uri().path();
            if path != EXCHANGE_PATH {
                return Ok(Status::unimplemented(format!("the data plane has no method {path}")).into_http());
            }
            Ok(match exchange(shared, request.into_body()).await {
                Ok(body) => {
                    let mut response = http::Response::new(body);
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/grpc"),
                    );
                    response
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

/// One incoming `Exchange` stream: checks the sender's hello, starts its
/// demultiplexer and answers with the stream of credits.
async fn exchange(weak: Weak<Shared>, body: tonic::body::Body) -> Result<tonic::body::Body, Status> {
    let shared = weak
        .upgrade()
        .ok_or_else(|| Status::unavailable("data plane shut down"))?;
    let mut requests = Messages::<DataFrames>::request(body, shared.config.message_bytes_max);
    let hello = match tokio::time::timeout(shared.config.hello_timeout, requests.message()).await {
        Ok(Ok(Some((hello, _)))) => hello,
        Ok(Ok(None)) => return Err(Status::invalid_argument("a data plane stream without a first message")),
        Ok(Err(status)) => return Err(status),
        Err(_) => return Err(Status::deadline_exceeded("no first message on the data plane stream")),
    };
    let ours = shared.config.protocol_version;
    let peer = WorkerId(hello.sender);
    if hello.protocol_version != ours {
        let message = sluice_proto::version_mismatch(ours, hello.protocol_version);
        report_expected(&shared, &peer, NetError::VersionMismatch(message.clone()));
        return Err(Status::failed_precondition(message));
    }
    let (replies, replies_rx) = mpsc::channel(shared.config.credit_queue_max);
    let stream = Arc::new(InStream {
        id: shared.inbound.next_stream.fetch_add(1, Ordering::Relaxed),
        peer,
        slots: Mutex::default(),
        replies,
    });
    shared
        .inbound
        .state
        .lock()
        .expect("registry lock")
        .streams
        .insert(stream.id, stream.clone());
    tokio::spawn(demux(weak, stream, hello.frames, requests));
    Ok(response_body(credit_stream(ours, replies_rx)))
}

/// The credit replies as a gRPC response body: each message a DATA chunk,
/// then the trailers with the stream's status.
fn response_body(replies: impl Stream<Item = Result<CreditFrames, Status>> + Send + 'static) -> tonic::body::Body {
    let frames = futures::stream::unfold(Some(Box::pin(replies)), |replies| async move {
        let mut replies = replies?;
        let frame = match replies.next().await {
            Some(Ok(message)) => return Some((Ok(http_body::Frame::data(grpc::encode(&message))), Some(replies))),
            Some(Err(status)) => grpc::trailers(&status),
            None => grpc::trailers(&Status::ok("")),
        };
        Some((Ok::<_, Infallible>(frame), None))
    });
    tonic::body::Body::new(http_body_util::StreamBody::new(frames))
}

/// Every channel expected from `peer` fails: the peer cannot talk to us.
fn report_expected(shared: &Shared, peer: &WorkerId, error: NetError) {
    let deployments: BTreeSet<(PipelineId, u64)> = shared
        .inbound
        .state
        .lock()
        .expect("registry lock")
        .expected
        .iter()
        .filter(|(_, e)| e.peer == *peer)
        .map(|(key, _)| (key.pipeline, key.deployment))
        .collect();
    if deployments.is_empty() {
        tracing::error!(peer = %peer, "data plane: {error}");
    }
    for (pipeline, deployment) in deployments {
        shared.report(pipeline, deployment, peer, error.clone());
    }
}

/// The replies, packed: the version first, then whatever credits are
/// queued per message; a failure ends the stream.
fn credit_stream(version: u32, replies: mpsc::Receiver<Reply>) -> impl Stream<Item = Result<CreditFrames, Status>> {
    let hello = CreditFrames {
        protocol_version: version,
        credits: Vec::new(),
    };
    let rest = futures::stream::unfold(Some(replies), |replies| async move {
        let mut replies = replies?;
        let mut credits = Vec::new();
        let mut next = replies.recv().await;
        loop {
            match next {
                Some(Reply::Credit(credit)) => credits.push(credit),
                Some(Reply::Fail(status)) => return Some((Err(status), None)),
                None if credits.is_empty() => return None,
                None => break,
            }
            if credits.len() >= CREDITS_PER_MESSAGE_MAX {
                break;
            }
            match replies.try_recv() {
                Ok(reply) => next = Some(reply),
                Err(_) => break,
            }
        }
        let message = CreditFrames {
            protocol_version: 0,
            credits,
        };
        Some((Ok(message), Some(replies)))
    });
    futures::stream::once(async move { Ok(hello) }).chain(rest)
}
