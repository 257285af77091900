//! Starting a whole Sluice process: master, worker, pgwire and HTTP.

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
    let pg = tokio::net::TcpListener::bind(config.pg_addr).await?;
    let http = tokio::net::TcpListener::bind(config.http_addr).await?;
    let (pg_addr, http_addr) = (pg.local_addr()?, http.local_addr()?);
    let shutdown = CancellationToken::new();
    let history = Arc::new(MetricsHistory::default());
    let http_state = HttpState {
        engine: engine.clone(),
        history: history.clone(),
        worker,
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
        engine,
        shutdown,
        tasks,
    })
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
