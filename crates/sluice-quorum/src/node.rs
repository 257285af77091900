//! A master's quorum member on a real network: drives a [`Replica`] with the
//! process's monotonic clock, persists its [`Durable`](crate::Durable) part
//! before anything that depends on it leaves, and carries messages over the
//! `Quorum` gRPC service (`proto/sluice/v1/quorum.proto`).
//!
//! Each peer has one sender task fed by a bounded queue; a full queue or a
//! failed call drops the message (the protocol resends what matters), so a
//! dead or slow peer costs nothing but its own messages. Incoming calls are
//! handled at once under one lock, like timer ticks every
//! [`TICK`]: the replica is a small state machine, and its only slow step —
//! writing `quorum.json` — must finish before the answer is sent anyway.

use crate::replica::{Config, MasterId, Message, QuorumError, Replica, Status};
use crate::state::{ReplicatedState, Stamp};
use crate::store::{DurableStore, StoreError};
use sluice_proto::v1::quorum_client::QuorumClient;
use sluice_proto::v1::quorum_server::{Quorum, QuorumServer};
use sluice_proto::v1::{QuorumAck, QuorumEnvelope};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// How often timers are advanced.
pub const TICK: Duration = Duration::from_millis(10);
/// Messages waiting for one peer at most; more are dropped.
pub const PEER_QUEUE: usize = 1024;
/// A call to a peer gives up after this long (the message counts as lost).
const CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest message (a whole state in anti-entropy, a vote).
const MESSAGE_BYTES_MAX: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    #[error("this master is shutting down or stopped taking part in the quorum")]
    ShutDown,
}

struct Inner {
    replica: Replica,
    store: DurableStore,
    waiters: HashMap<Stamp, oneshot::Sender<Result<(), QuorumError>>>,
    /// A failed write of `quorum.json`: the master stops taking part (its
    /// promises would not survive a restart).
    broken: Option<String>,
}

/// One master's quorum member. Cheap to clone.
#[derive(Clone)]
pub struct QuorumNode {
    inner: Arc<Mutex<Inner>>,
    start: Instant,
    peers: Arc<BTreeMap<MasterId, mpsc::Sender<QuorumEnvelope>>>,
    addresses: Arc<BTreeMap<MasterId, String>>,
    id: MasterId,
    changes: watch::Sender<Stamp>,
    stop: CancellationToken,
}

impl QuorumNode {
    /// Starts the member `id` with its `peers` (id → `host:port` of their
    /// gRPC listener), loading what `data_dir` holds. Serve
    /// [`QuorumNode::service`] on this master's listener for peers to reach it.
    pub fn start(
        id: MasterId,
        peers: BTreeMap<MasterId, String>,
        config: Config,
        data_dir: &Path,
    ) -> Result<QuorumNode, NodeError> {
        let store = DurableStore::new(data_dir);
        let durable = store.load()?;
        let members: Vec<MasterId> = peers.keys().cloned().chain([id.clone()]).collect();
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = u64::from(std::process::id()) ^ clock ^ fxhash(&id);
        let replica = Replica::new(id.clone(), members, config, durable, 0, seed);
        let stop = CancellationToken::new();
        let mut senders = BTreeMap::new();
        for (peer, address) in &peers {
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            senders.insert(peer.clone(), tx);
            tokio::spawn(send_loop(address.clone(), rx, stop.clone()));
        }
        let version = replica.state().version();
        let node = QuorumNode {
            inner: Arc::new(Mutex::new(Inner {
                replica,
                store,
                waiters: HashMap::new(),
                broken: None,
            })),
            start: Instant::now(),
            peers: Arc::new(senders),
            addresses: Arc::new(peers),
            id,
            changes: watch::channel(version).0,
            stop,
        };
        let ticker = node.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticker.stop.cancelled() => return,
                    _ = interval.tick() => ticker.with(|r, now| r.tick(now)),
                }
            }
        });
        Ok(node)
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Runs `f` on the replica, then carries out its output: persist, send,
    /// complete waiters.
    fn with<T>(&self, f: impl FnOnce(&mut Replica, u64) -> T) -> T {
        let now = self.now();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let result = f(&mut inner.replica, now);
        let out = inner.replica.take_output();
        if inner.broken.is_some() {
            return result;
        }
        if out.persist {
            let durable = inner.replica.durable().clone();
            if let Err(e) = inner.store.save(&durable) {
                tracing::error!("{e}; this master stops taking part in the quorum");
                inner.broken = Some(e.to_string());
                self.stop.cancel();
                return result;
            }
        }
        for (to, message) in out.send {
            let Some(tx) = self.peers.get(&to) else { continue };
            let Ok(bytes) = serde_json::to_vec(&message) else {
                continue;
            };
            let envelope = QuorumEnvelope {
                version: sluice_proto::PROTOCOL_VERSION,
                from: self.id.clone(),
                to,
                message: bytes.into(),
            };
            // Full queue: the peer is slow or gone; the message is lost.
            let _ = tx.try_send(envelope);
        }
        for (stamp, outcome) in out.completed {
            if let Some(waiter) = inner.waiters.remove(&stamp) {
                let _ = waiter.send(outcome);
            }
        }
        self.changes.send_if_modified(|v| {
            let now = inner.replica.state().version();
            (now != *v).then(|| *v = now).is_some()
        });
        result
    }

    /// Proposes writes as one change; returns once a majority of masters
    /// holds it (or with why not).
    pub async fn propose(&self, writes: Vec<(String, Option<String>)>) -> Result<Stamp, NodeError> {
        let (tx, rx) = oneshot::channel();
        let stamp = {
            let now = self.now();
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if inner.broken.is_some() {
                return Err(NodeError::ShutDown);
            }
            let stamp = inner.replica.propose(now, writes)?;
            // Registered before the output is carried out, so even a lone
            // master's immediate completion finds its waiter.
            inner.waiters.insert(stamp, tx);
            stamp
        };
        self.with(|_, _| ());
        match rx.await {
            Ok(Ok(())) => Ok(stamp),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(NodeError::ShutDown),
        }
    }

    /// Whether this master leads and holds its lease (may decide now).
    pub fn is_leader(&self) -> bool {
        let now = self.now();
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replica
            .is_leader(now)
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).replica.term()
    }

    pub fn status(&self) -> Status {
        let now = self.now();
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).replica.status(now)
    }

    /// The replicated state as this master holds it (possibly stale on a
    /// follower).
    pub fn state(&self) -> ReplicatedState {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replica
            .state()
            .clone()
    }

    /// Changes to the state's version.
    pub fn changes(&self) -> watch::Receiver<Stamp> {
        self.changes.subscribe()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Peers' ids and addresses as configured.
    pub fn peers(&self) -> &BTreeMap<MasterId, String> {
        &self.addresses
    }

    /// The gRPC service peers call; add it to this master's server.
    pub fn service(&self) -> QuorumServer<QuorumNode> {
        QuorumServer::new(self.clone())
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    }

    /// Stops timers and senders; the service answers nothing after it.
    pub fn shutdown(&self) {
        self.stop.cancel();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.broken.get_or_insert_with(|| "shut down".into());
        inner.waiters.clear();
    }
}

#[tonic::async_trait]
impl Quorum for QuorumNode {
    async fn deliver(
        &self,
        request: tonic::Request<QuorumEnvelope>,
    ) -> Result<tonic::Response<QuorumAck>, tonic::Status> {
        let envelope = request.into_inner();
        if envelope.version != sluice_proto::PROTOCOL_VERSION {
            return Err(tonic::Status::failed_precondition(sluice_proto::version_mismatch(
                sluice_proto::PROTOCOL_VERSION,
                envelope.version,
            )));
        }
        if envelope.to != self.id {
            return Err(tonic::Status::invalid_argument(format!(
                "this master is {}, not {}: the masters' --peers lists disagree",
                self.id, envelope.to
            )));
        }
        if !self.addresses.contains_key(&envelope.from) {
            return Err(tonic::Status::permission_denied(format!(
                "{} is not among this master's --peers",
                envelope.from
            )));
        }
        if self.stop.is_cancelled() {
            return Err(tonic::Status::unavailable("this master is shutting down"));
        }
        let message: Message = serde_json::from_slice(&envelope.message)
            .map_err(|e| tonic::Status::invalid_argument(format!("malformed quorum message: {e}")))?;
        self.with(|r, now| r.handle(now, &envelope.from, message));
        Ok(tonic::Response::new(QuorumAck {}))
    }
}

async fn send_loop(address: String, mut rx: mpsc::Receiver<QuorumEnvelope>, stop: CancellationToken) {
    let mut client: Option<QuorumClient<tonic::transport::Channel>> = None;
    loop {
        let envelope = tokio::select! {
            _ = stop.cancelled() => return,
            e = rx.recv() => match e { Some(e) => e, None => return },
        };
        if client.is_none() {
            let Ok(endpoint) = tonic::transport::Endpoint::from_shared(format!("http://{address}")) else {
                tracing::error!("quorum peer address {address} is not a host:port");
                return;
            };
            // Lazy: connects on the first call and again after a failure.
            let channel = endpoint
                .connect_timeout(CALL_TIMEOUT)
                .timeout(CALL_TIMEOUT)
                .tcp_nodelay(true)
                .connect_lazy();
            client = Some(
                QuorumClient::new(channel)
                    .max_decoding_message_size(MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(MESSAGE_BYTES_MAX),
            );
        }
        let c = client.as_mut().expect("set above");
        if let Err(status) = c.deliver(envelope).await {
            if matches!(
                status.code(),
                tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument | tonic::Code::PermissionDenied
            ) {
                tracing::error!("quorum peer {address} refused a message: {}", status.message());
            } else {
                tracing::debug!("quorum peer {address} unreachable: {}", status.message());
            }
            client = None;
        }
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
