//! The data plane: task channels between worker processes.
//!
//! A worker runs one [`DataPlane`]. It implements the runtime's
//! [`Transport`]: a channel whose two tasks run on this worker is an
//! in-process credit channel (no serialisation, unchanged); a channel that
//! crosses to another worker is bridged over gRPC with the same credit
//! protocol.
//!
//! - **Links** (`outbound`): one HTTP/2 connection, and one bidirectional
//!   `Exchange` stream on it, per ordered pair of workers (sender →
//!   receiver), multiplexing every channel from this worker to that peer.
//!   Frames carry record batches as Arrow IPC (the schema once per channel)
//!   and control messages in band, several frames per gRPC message.
//! - **Credits**: the receiving worker grants a channel credits as its local
//!   consumer frees them (its local channel's capacity at first); the task
//!   on the sending worker holds an ordinary [`ChannelSender`] whose credits
//!   are exactly those grants, so the rows between the two tasks never
//!   exceed one channel's capacity, and the receiving demultiplexer
//!   (`inbound`) never waits on a slow channel.
//! - **Failures**: a broken link is reported on [`DataPlane::failures`]
//!   per deployment, never as an end of input; the local ends stay open
//!   until the worker calls [`DataPlane::close_deployment`].
//!
//! Entry point: [`DataPlane::start`]. `docs/architecture.md`, "Data plane",
//! has the design, the bounds and measured numbers.

mod codec;
mod config;
mod error;
mod grpc;
mod inbound;
mod metrics;
mod outbound;

pub use codec::{ChannelDecoder, ChannelEncoder, Decoded};
pub use config::DataPlaneConfig;
pub use error::NetError;
pub use metrics::DataPlaneMetrics;

use metrics::Counters;
use sluice_dataflow::channel::{ChannelKey, ChannelReceiver, ChannelSender, Transport, channel};
use sluice_types::{Error, PipelineId, WorkerId};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// A link failure that cost a deployment some of its channels. The worker
/// fails that deployment (then cancels it and calls
/// [`DataPlane::close_deployment`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFailure {
    pub pipeline: PipelineId,
    pub deployment: u64,
    pub peer: WorkerId,
    pub error: NetError,
}

/// One worker's data plane: its gRPC server and its links to peers.
pub struct DataPlane {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    server: JoinHandle<()>,
}

/// What the server, the links and the public handle share.
pub(crate) struct Shared {
    me: WorkerId,
    config: DataPlaneConfig,
    counters: Counters,
    failures: broadcast::Sender<LinkFailure>,
    closed: Mutex<ClosedDeployments>,
    peers: Mutex<HashMap<WorkerId, String>>,
    links: Mutex<HashMap<WorkerId, Arc<outbound::Link>>>,
    /// Failed links whose channels are still open (their senders wait for
    /// `close_deployment`); dropped from here once they have none.
    failed_links: Mutex<Vec<Arc<outbound::Link>>>,
    inbound: inbound::Registry,
}

/// The most recently closed deployments, to refuse their late channels;
/// at most `closed_deployments_max`, oldest forgotten first.
#[derive(Default)]
struct ClosedDeployments {
    order: VecDeque<(PipelineId, u64)>,
    set: HashSet<(PipelineId, u64)>,
}

impl Shared {
    pub(crate) fn report(&self, pipeline: PipelineId, deployment: u64, peer: &WorkerId, error: NetError) {
        tracing::warn!(pipeline = pipeline.0, deployment, peer = %peer, "data plane: {error}");
        // No subscriber is not an error: the failure is logged.
        let _ = self.failures.send(LinkFailure {
            pipeline,
            deployment,
            peer: peer.clone(),
            error,
        });
    }

    pub(crate) fn is_closed(&self, key: &ChannelKey) -> bool {
        let closed = self.closed.lock().expect("closed deployments lock");
        closed.set.contains(&(key.pipeline, key.deployment))
    }

    fn all_links(&self) -> Vec<Arc<outbound::Link>> {
        let mut links: Vec<_> = self.links.lock().expect("links lock").values().cloned().collect();
        links.extend(self.failed_links.lock().expect("failed links lock").iter().cloned());
        links
    }

    fn check_open(&self, key: &ChannelKey) -> Result<(), Error> {
        if self.is_closed(key) {
            return Err(NetError::Usage(format!(
                "deployment {} of pipeline {} is closed on worker {}",
                key.deployment, key.pipeline.0, self.me
            ))
            .into());
        }
        Ok(())
    }
}

impl DataPlane {
    /// Serves the data plane on `listener` and returns its handle. Must be
    /// called inside a tokio runtime.
    pub fn start(me: WorkerId, listener: TcpListener, config: DataPlaneConfig) -> Result<Arc<DataPlane>, Error> {
        let local_addr = listener
            .local_addr()
            .map_err(|e| Error::external(format!("data plane listener: {e}")))?;
        let (failures, _) = broadcast::channel(config.failures_max);
        let shared = Arc::new(Shared {
            me,
            counters: Counters::default(),
            failures,
            closed: Mutex::default(),
            peers: Mutex::default(),
            links: Mutex::default(),
            failed_links: Mutex::default(),
            inbound: inbound::Registry::default(),
            config,
        });
        let service = inbound::Service::new(shared.clone());
        let c = &shared.config;
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let server = tonic::transport::Server::builder()
            .initial_stream_window_size(c.window_bytes)
            .initial_connection_window_size(c.window_bytes)
            .max_frame_size(c.frame_bytes_max)
            .http2_keepalive_interval(Some(c.keepalive_interval))
            .http2_keepalive_timeout(Some(c.keepalive_timeout))
            .serve_with_incoming(service, incoming);
        let server = tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::error!("data plane server stopped: {e}");
            }
        });
        Ok(Arc::new(DataPlane {
            shared,
            local_addr,
            server,
        }))
    }

    /// The address the data plane serves on (what peers dial).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This worker's id.
    pub fn worker(&self) -> &WorkerId {
        &self.shared.me
    }

    /// The other workers' data plane addresses (`host:port`), as the master
    /// announces them. Links already open keep their connection.
    pub fn set_peers(&self, peers: HashMap<WorkerId, String>) {
        *self.shared.peers.lock().expect("peers lock") = peers;
    }

    /// Link failures, as they happen (a `broadcast` of
    /// `failures_max`: a subscriber further behind gets `Lagged` and should
    /// treat every deployment with remote channels as suspect).
    pub fn failures(&self) -> broadcast::Receiver<LinkFailure> {
        self.shared.failures.subscribe()
    }

    /// Drops every channel of a deployment, both directions, including
    /// receivers whose sender never connected and local ends kept open
    /// after a link failure; remote peers are told. Later channels of the
    /// deployment are refused.
    pub fn close_deployment(&self, pipeline: PipelineId, deployment: u64) {
        {
            let mut closed = self.shared.closed.lock().expect("closed deployments lock");
            if closed.set.insert((pipeline, deployment)) {
                closed.order.push_back((pipeline, deployment));
                if closed.order.len() > self.shared.config.closed_deployments_max
                    && let Some(oldest) = closed.order.pop_front()
                {
                    closed.set.remove(&oldest);
                }
            }
        }
        for link in self.shared.all_links() {
            link.close_deployment(pipeline, deployment);
        }
        self.shared
            .failed_links
            .lock()
            .expect("failed links lock")
            .retain(|link| link.channel_count() > 0);
        self.shared.inbound.close_deployment(pipeline, deployment);
    }

    /// The counters so far.
    pub fn metrics(&self) -> DataPlaneMetrics {
        let mut metrics = self.shared.counters.snapshot();
        let links = self.shared.all_links();
        metrics.channels_out = links.iter().map(|l| l.channel_count()).sum();
        self.shared.inbound.gauges(&mut metrics);
        metrics
    }

    /// Stops serving and drops every link (their channels see a link
    /// failure on the peers). For tests and process exit.
    pub fn shutdown(&self) {
        self.server.abort();
        let links = self.shared.all_links();
        self.shared.links.lock().expect("links lock").clear();
        self.shared.failed_links.lock().expect("failed links lock").clear();
        for link in links {
            link.abort();
        }
        self.shared.inbound.abort_streams();
    }

    fn link_to(&self, peer: &WorkerId) -> Result<Arc<outbound::Link>, Error> {
        if *peer == self.shared.me {
            return Err(NetError::Usage(format!(
                "a channel from worker {peer} to itself must be local, not remote"
            ))
            .into());
        }
        let mut links = self.shared.links.lock().expect("links lock");
        if let Some(link) = links.get(peer)
            && !link.is_failed()
        {
            return Ok(link.clone());
        }
        let address = self.shared.peers.lock().expect("peers lock").get(peer).cloned();
        let Some(address) = address else {
            return Err(NetError::Usage(format!("no data plane address for worker {peer}")).into());
        };
        let link = outbound::Link::spawn(&self.shared, peer.clone(), address);
        links.insert(peer.clone(), link.clone());
        Ok(link)
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Transport for DataPlane {
    fn local(&self, _key: ChannelKey) -> (ChannelSender, ChannelReceiver) {
        channel(self.shared.config.channel_credits)
    }

    fn sender_to(&self, key: ChannelKey, peer: &WorkerId) -> Result<ChannelSender, Error> {
        self.shared.check_open(&key)?;
        let link = self.link_to(peer)?;
        Ok(link.open(&self.shared, key))
    }

    fn receiver_from(&self, key: ChannelKey, peer: &WorkerId) -> Result<ChannelReceiver, Error> {
        self.shared.check_open(&key)?;
        if *peer == self.shared.me {
            return Err(NetError::Usage(format!(
                "a channel from worker {peer} to itself must be local, not remote"
            ))
            .into());
        }
        self.shared.inbound.expect(&self.shared, key, peer.clone())
    }
}
