//! Starting a Sluice process: the playground (master, worker, pgwire and
//! HTTP in one process), a cluster master, or a worker.

use crate::engine::Engine;
use crate::http::HttpState;
use crate::metrics_history::{MetricsHistory, run_sampler};
use sluice_cluster::Master;
use sluice_cluster::scheduler::LocalScheduler;
use sluice_cluster::worker::Worker;
use sluice_connectors::Connectors;
use sluice_dataflow::channel::InProcessTransport;
use sluice_dataflow::deploy::DeployConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where a server listens and keeps its data.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub pg_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// Authentication, TLS, file root (`crate::security`).
    pub security: crate::security::SecurityConfig,
}

/// A running server.
pub struct ServerHandle {
    pub pg_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// A cluster master's control-plane address (workers connect there).
    pub control_addr: Option<SocketAddr>,
    pub engine: Arc<Engine>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

impl ServerHandle {
    /// Stops accepting clients, closes connections and stops pipelines.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Starts the embedded playground: a master and one worker in this process.
pub async fn start(config: ServerConfig) -> startup::Result<ServerHandle> {
    std::fs::create_dir_all(&config.data_dir)?;
    let connectors = Connectors::default();
    let worker = Arc::new(Worker::new(
        connectors.clone(),
        InProcessTransport::default(),
        DeployConfig::default(),
    ));
    let scheduler = Arc::new(LocalScheduler { worker: worker.clone() });
    let master = Arc::new(Master::open(&config.data_dir, scheduler)?);
    crate::security::bootstrap_superuser(&master, &config.security).await?;
    let engine = Engine::with_security(master, connectors, config.security.clone())?;
    serve_front(
        engine,
        worker,
        None,
        (config.pg_addr, config.http_addr),
        CancellationToken::new(),
    )
    .await
}

/// Serves pgwire and HTTP for `engine`.
async fn serve_front(
    engine: Arc<Engine>,
    worker: Arc<Worker>,
    cluster: Option<Arc<sluice_cluster::control::Cluster>>,
    (pg_addr, http_addr): (SocketAddr, SocketAddr),
    shutdown: CancellationToken,
) -> startup::Result<ServerHandle> {
    let pg = tokio::net::TcpListener::bind(pg_addr).await?;
    let http = tokio::net::TcpListener::bind(http_addr).await?;
    let (pg_addr, http_addr) = (pg.local_addr()?, http.local_addr()?);
    let history = Arc::new(MetricsHistory::default());
    if let Some(c) = &cluster {
        let _ = engine.cluster.set(c.clone());
    }
    let http_state = HttpState {
        engine: engine.clone(),
        history: history.clone(),
        worker,
        cluster,
    };
    let sampler = run_sampler(engine.master.clone(), history, shutdown.clone());
    let tasks = vec![
        tokio::spawn(crate::pgwire::serve(pg, engine.clone(), shutdown.clone())),
        tokio::spawn(crate::http::serve(http, http_state, shutdown.clone())),
        tokio::spawn(async move {
            sampler.await;
            Ok(())
        }),
    ];
    Ok(ServerHandle {
        pg_addr,
        http_addr,
        control_addr: None,
        engine,
        shutdown,
        tasks,
    })
}

/// Where a cluster master listens and keeps its data (`sluice master`).
#[derive(Debug, Clone)]
pub struct MasterConfig {
    pub id: String,
    /// The control plane (workers' sessions).
    pub listen: SocketAddr,
    /// The master's own worker's data plane (tasks pinned to the master:
    /// session query results, memory streams). Port 0: any free port on
    /// the control address's host.
    pub data_listen: SocketAddr,
    /// The data-plane address workers dial for the master's own worker
    /// (default: the address `data_listen` bound).
    pub advertise: Option<String>,
    pub pg_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Where workers write task snapshots: a directory every worker
    /// reaches, or `hdfs://host:port/dir`.
    pub checkpoint_dir: String,
    pub worker_timeout: std::time::Duration,
    /// `spread` or `pack`.
    pub placement: String,
    pub security: crate::security::SecurityConfig,
    /// The other masters of the quorum (id → their `listen` address);
    /// empty for a single master.
    pub peers: std::collections::BTreeMap<String, String>,
}

/// Starts a cluster master: catalog, planning, pgwire and HTTP, the
/// workers' control plane, and the master's own worker.
pub async fn start_master(config: MasterConfig) -> startup::Result<ServerHandle> {
    use sluice_cluster::control::{Cluster, ClusterScheduler, MASTER_WORKER_PREFIX, MasterWorker};
    std::fs::create_dir_all(&config.data_dir)?;
    if !config.checkpoint_dir.contains("://") {
        std::fs::create_dir_all(&config.checkpoint_dir)?;
    }
    let connectors = Connectors::default();
    let master_worker = sluice_types::WorkerId(format!("{MASTER_WORKER_PREFIX}{}", config.id));
    let data_listener = tokio::net::TcpListener::bind(config.data_listen).await?;
    let data = sluice_net::DataPlane::start(master_worker.clone(), data_listener, Default::default())?;
    let data_address = advertised(data.local_addr(), config.advertise.clone(), "--data-listen")?;
    let cluster = Cluster::new(
        config.id.clone(),
        config.checkpoint_dir.clone(),
        config.worker_timeout,
        MasterWorker {
            id: master_worker,
            data_address,
            connectors: connectors.clone(),
            transport: data.clone(),
        },
    );
    let control = tokio::net::TcpListener::bind(config.listen).await?;
    let control_addr = control.local_addr()?;
    cluster.set_control_address(control_addr.to_string());
    let shutdown = CancellationToken::new();
    // The master quorum (--peers): its protocol and the forwarded DDL are
    // served on the control address too.
    let quorum = if config.peers.is_empty() {
        None
    } else {
        // Whichever master leads first creates the role `sluice` with the
        // password it was given; one without would leave a quorum nobody
        // can log in to. So a master that has never been part of the
        // quorum (no quorum.json yet) needs the password, as a single
        // master needs it on its first start.
        if config.security.auth == crate::security::AuthMethod::ScramSha256
            && config.security.superuser_password.is_none()
            && !config.data_dir.join("quorum.json").exists()
        {
            return Err(sluice_types::Error::invalid_option(
                "authentication is scram-sha-256 and this master joins the master quorum for the first time: \
                 set SLUICE_SUPERUSER_PASSWORD or --superuser-password-file (the same on every master; \
                 the first leader creates the superuser \"sluice\" with it)",
            )
            .into());
        }
        let node = sluice_quorum::QuorumNode::start(
            config.id.clone(),
            config.peers.clone(),
            sluice_quorum::Config::default(),
            &config.data_dir,
        )
        .map_err(|e| sluice_types::Error::external(e.to_string()))?;
        cluster.set_quorum(node.clone());
        Some(sluice_cluster::replication::QuorumCatalog::new(node, &connectors))
    };
    let router = tonic::transport::Server::builder()
        .add_service(cluster.service())
        .add_optional_service(quorum.as_ref().map(|q| q.node().service()))
        .add_optional_service(quorum.as_ref().map(|q| q.service()));
    // A graceful stop of the control server waits for every open stream,
    // and a worker's session stays open for the worker's life: stopping
    // hung while a worker was registered. End the sessions first; the
    // workers stop their tasks and go to another master (or wait for
    // this one), as when a leader is deposed.
    let ending = (cluster.clone(), shutdown.clone());
    tokio::spawn(async move {
        ending.1.cancelled().await;
        ending.0.disconnect_all("the master is shutting down");
    });
    let control_shutdown = shutdown.clone();
    let control_task = tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(control),
                control_shutdown.cancelled_owned(),
            )
            .await
            .map_err(std::io::Error::other)
    });
    tracing::info!(id = %config.id, control = %control_addr, data = %data.local_addr(), "master listening for workers");
    let strategy = sluice_cluster::placement::strategy(&config.placement)?;
    let scheduler = Arc::new(ClusterScheduler::new(
        cluster.clone(),
        DeployConfig::default(),
        strategy,
    ));
    let master = match &quorum {
        None => {
            let master = Arc::new(Master::open_with(&config.data_dir, &config.checkpoint_dir, scheduler)?);
            crate::security::bootstrap_superuser(&master, &config.security).await?;
            master
        }
        Some(q) => {
            let master = Arc::new(Master::open_replicated(
                &config.data_dir,
                &config.checkpoint_dir,
                scheduler,
                q.clone(),
                q.catalog()?,
            )?);
            q.set_master(Arc::downgrade(&master));
            let node = q.node().clone();
            let id = config.id.clone();
            cluster.set_admission(Box::new(move || {
                let status = node.status();
                // Only while it holds its lease: a registration counts for
                // the worker as a word from its leader, like a keepalive
                // (`sluice_quorum::fence`).
                (status.role != sluice_quorum::RoleName::Leader || !node.is_leader()).then(|| {
                    let leader = status.leader.unwrap_or_else(|| "not known".into());
                    let address = node.peers().get(&leader).cloned().unwrap_or_default();
                    (
                        format!("master {id} does not lead the master quorum (the leader: {leader})"),
                        address,
                    )
                })
            }));
            tokio::spawn(lead(
                q.clone(),
                Arc::downgrade(&master),
                cluster.clone(),
                config.security.clone(),
                shutdown.clone(),
            ));
            tokio::spawn(record_checkpoints(Arc::downgrade(&master), shutdown.clone()));
            tokio::spawn(record_cluster(Arc::downgrade(&cluster), shutdown.clone()));
            master
        }
    };
    let engine = Engine::with_security(master, connectors.clone(), config.security.clone())?;
    let worker = Arc::new(Worker::new(
        connectors,
        InProcessTransport::default(),
        DeployConfig::default(),
    ));
    let mut handle = serve_front(
        engine,
        worker,
        Some(cluster),
        (config.pg_addr, config.http_addr),
        shutdown,
    )
    .await?;
    handle.tasks.push(control_task);
    handle.control_addr = Some(control_addr);
    Ok(handle)
}

/// On the quorum's leader, every second: writes each pipeline's newest
/// completed checkpoint to the replicated catalog (one write at a time; a
/// write that fails is retried on the next tick).
async fn record_checkpoints(master: std::sync::Weak<Master>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
        let Some(master) = master.upgrade() else { return };
        if let Err(e) = master.record_checkpoints().await {
            tracing::debug!("recording checkpoints in the master quorum: {e}");
        }
    }
}

/// On the quorum's leader, every second: records the workers and the
/// running deployments' placements in the replicated state (for followers
/// to list, and for the next leader to know whom to wait for).
async fn record_cluster(cluster: std::sync::Weak<sluice_cluster::control::Cluster>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
        let Some(cluster) = cluster.upgrade() else { return };
        if let Err(e) = cluster.record().await {
            tracing::debug!("recording workers and placements in the master quorum: {e}");
        }
    }
}

/// How long a new leader waits for the workers to report the tasks they
/// kept running before it starts the pipelines it could not adopt. Workers
/// try the masters every half second, so those that lost the old leader
/// report within a second or two of the election, and the wait ends then;
/// it lasts its whole length only for a worker named in a placement that
/// does not register — which may still run those tasks as orphans until
/// their grace ends, so the wait outlasts it ([`sluice_quorum::fence`]).
const ADOPTION_WAIT: std::time::Duration = sluice_cluster::agent::TIMING.adoption_wait;

/// How long after a new leader started its pipelines the parts workers
/// reported and it did not adopt are stopped (its supervisors have read
/// their checkpoint stores and deployed by then; a pipeline placed anew
/// stops its reported parts itself first).
const ADOPTION_CLOSE_AFTER: std::time::Duration = sluice_cluster::agent::TIMING.adoption_close_after;

/// Follows this master's role in the quorum: on becoming leader it takes
/// the replicated catalog, starts the pipelines and makes sure the first
/// superuser exists; on losing leadership it stops its pipelines and sends
/// its workers away (to the next master in their list); as a follower it
/// keeps its catalog equal to the replicated one.
async fn lead(
    quorum: Arc<sluice_cluster::replication::QuorumCatalog>,
    master: std::sync::Weak<Master>,
    cluster: Arc<sluice_cluster::control::Cluster>,
    security: crate::security::SecurityConfig,
    shutdown: CancellationToken,
) {
    let node = quorum.node().clone();
    let mut changes = node.changes();
    let mut leading = false;
    let mut mirrored = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            _ = changes.changed() => {}
        }
        let Some(master) = master.upgrade() else { return };
        let status = node.status();
        if !leading && node.is_leader() {
            // Workers whose session with the old leader broke kept their
            // tasks: wait (a little) for them to register and report, so
            // their deployments are adopted rather than restarted.
            let generation = cluster.open_adoption();
            let pipelines: Vec<sluice_types::PipelineId> = quorum
                .catalog()
                .map(|c| c.pipelines.values().map(|p| p.id).collect())
                .unwrap_or_default();
            let deadline = tokio::time::Instant::now() + ADOPTION_WAIT;
            while tokio::time::Instant::now() < deadline && node.is_leader() && !cluster.adoption_ready(&pipelines) {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
                }
            }
            if !node.is_leader() {
                // Lost the lead while waiting: the workers taken go to the
                // next master (a follower keeping them would never place
                // anything on them).
                cluster.abandon_adoption(generation);
                cluster.disconnect_all("this master lost the lead of the master quorum while taking it");
                continue;
            }
            let promoted = quorum.catalog().and_then(|c| master.promote(c));
            // Supervisors deploy from their checkpoint stores a moment
            // later; what is still reported after that is stopped.
            let closing = cluster.clone();
            tokio::spawn(async move {
                tokio::time::sleep(ADOPTION_CLOSE_AFTER).await;
                closing.close_adoption(generation);
            });
            match promoted {
                Ok(()) => {
                    leading = true;
                    tracing::info!(
                        term = status.term,
                        "this master leads the master quorum; pipelines started"
                    );
                    if let Err(e) = crate::security::bootstrap_superuser(&master, &security).await {
                        tracing::error!("first superuser: {e}");
                    }
                }
                Err(e) => tracing::error!("taking the lead: {e}"),
            }
        } else if leading && status.role != sluice_quorum::RoleName::Leader {
            leading = false;
            master.demote();
            cluster.disconnect_all("this master stopped leading the master quorum");
            tracing::warn!(
                term = status.term,
                "this master no longer leads the master quorum; its pipelines stopped"
            );
        }
        if !leading && mirrored != Some(status.version) {
            match quorum.catalog().and_then(|c| master.mirror(c)) {
                Ok(()) => mirrored = Some(status.version),
                Err(e) => tracing::error!("following the replicated catalog: {e}"),
            }
        }
    }
}

/// How a worker process runs (`sluice worker`).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub id: String,
    pub masters: Vec<String>,
    /// The data plane.
    pub listen: SocketAddr,
    /// The data-plane address other workers dial (default: `listen`).
    pub advertise: Option<String>,
    pub slots: u32,
    pub labels: std::collections::BTreeMap<String, String>,
    pub data_dir: PathBuf,
}

/// Runs a worker until `shutdown` (SIGTERM: drain first) or until a master
/// refuses it.
pub async fn run_worker(config: WorkerConfig, shutdown: CancellationToken) -> startup::Result<()> {
    use sluice_cluster::agent::{Agent, AgentConfig};
    std::fs::create_dir_all(&config.data_dir)?;
    let id = sluice_types::WorkerId(config.id.clone());
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let data = sluice_net::DataPlane::start(id.clone(), listener, Default::default())?;
    let address = advertised(data.local_addr(), config.advertise.clone(), "--listen")?;
    tracing::info!(worker = %id, data = %address, slots = config.slots, "worker starting");
    let connectors = Connectors::default();
    let (views, memory) = (connectors.views.clone(), connectors.memory.clone());
    let agent = Agent::new(
        AgentConfig {
            id,
            masters: config.masters.clone(),
            data_address: address,
            slots: config.slots,
            labels: config.labels.clone(),
            shutdown,
        },
        (Arc::new(connectors), views, memory),
        data.clone(),
        DeployConfig::default(),
    );
    let outcome = agent.run().await;
    data.shutdown();
    Ok(outcome?)
}

/// The data-plane address others dial: `advertise`, or the address bound —
/// refused when that is a wildcard (0.0.0.0 or ::), which no peer can dial.
fn advertised(bound: SocketAddr, advertise: Option<String>, listen_flag: &str) -> startup::Result<String> {
    match advertise {
        Some(a) if !a.trim().is_empty() => Ok(a),
        _ if bound.ip().is_unspecified() => Err(sluice_types::Error::invalid_option(format!(
            "the data plane listens on {bound} ({listen_flag}), an address other processes cannot dial: \
             give --advertise HOST:PORT (the address they reach this process at), or a specific address"
        ))
        .into()),
        _ => Ok(bound.to_string()),
    }
}

/// Start-up errors: I/O (ports, data dir) or the catalog.
pub mod startup {
    /// Why the server could not start.
    #[derive(Debug, thiserror::Error)]
    pub enum StartError {
        #[error("{0}")]
        Io(#[from] std::io::Error),
        #[error("{0}")]
        Sluice(#[from] sluice_types::Error),
    }
    pub type Result<T> = std::result::Result<T, StartError>;
}
