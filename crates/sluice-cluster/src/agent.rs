//! A worker process's side of the control plane (`sluice worker`): it
//! keeps one session with a master (`proto/sluice/v1/control.proto`),
//! registers its slots and labels, sends a heartbeat with its tasks'
//! metrics every second, and runs the parts of deployments the master
//! places on it ([`sluice_dataflow::part::start_part`]), reporting their
//! events up the session.
//!
//! Commands are fenced: each deployment has the master's epoch, and a
//! worker drops commands for an epoch it already stopped. A session that
//! breaks stops every task of the worker (the master, which no longer
//! hears from it, places them elsewhere) and the worker connects again,
//! as a new worker with nothing running — so a worker cut off from its
//! master never keeps a second copy of a task running.
//!
//! On SIGTERM ([`AgentConfig::shutdown`]) the worker drains: it tells the
//! master, which moves its tasks (their pipelines restart from their last
//! checkpoint on the other workers) and the worker exits once its tasks
//! have stopped.

use crate::wire::{DeploymentKey, event_to_wire, metrics_to_wire, watermarks_from_wire, watermarks_to_wire};
use sluice_dataflow::checkpoint::coordinator::BarrierSignals;
use sluice_dataflow::checkpoint::manifest::read_checkpoint;
use sluice_dataflow::deploy::{ConnectorFactory, DeployConfig, Failure};
use sluice_dataflow::metrics::TaskMetrics;
use sluice_dataflow::part::{
    PartCheckpoint, PartControl, PartEvent, PartSpec, Placement, instance_metrics, start_part,
};
use sluice_dataflow::watermark_alignment::{SPLIT_REPORT_INTERVAL, SplitAlignment};
use sluice_net::DataPlane;
use sluice_plan::PhysicalDag;
use sluice_proto::v1 as pb;
use sluice_proto::{PROTOCOL_VERSION, version_mismatch};
use sluice_types::{Error, OperatorId, PipelineId, Result, WorkerId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// Events queued for the master, at most (the session's send buffer).
pub const SESSION_QUEUE_MAX: usize = 1024;
/// Stopped deployments remembered per session (a start command for one
/// arriving after its stop is dropped); the master never resends a start,
/// so forgetting old ones is safe.
const STOPPED_REMEMBERED_MAX: usize = 4096;
/// A drained worker (no part left running) waits at most this long for
/// the master to stop the deployments its parts belonged to before it
/// exits (their channels may still carry its last rows and barrier).
const DRAIN_LINGER_MAX: Duration = Duration::from_secs(10);
/// Heartbeat intervals without a message from the master after which a
/// worker stops its tasks (the master declares a silent worker dead after
/// its --worker-timeout, 5 s by default: the two sides give up alike).
const MASTER_SILENCE_MAX: u32 = 5;
/// How long connecting to a master, or a full queue towards it, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Between two connection attempts to the masters.
const RECONNECT_WAIT: Duration = Duration::from_millis(500);

/// How a worker process runs.
pub struct AgentConfig {
    pub id: WorkerId,
    /// Masters' control addresses (`host:port`), tried in turn.
    pub masters: Vec<String>,
    /// This worker's data-plane address as other workers reach it.
    pub data_address: String,
    pub slots: u32,
    pub labels: BTreeMap<String, String>,
    /// Cancelled on SIGTERM: drain, then return.
    pub shutdown: CancellationToken,
}

/// A deployment's part on this worker.
struct Running {
    cancel: CancellationToken,
    paused: watch::Sender<bool>,
    trigger: watch::Sender<u64>,
    stop_at: watch::Sender<u64>,
    completed: watch::Sender<u64>,
    /// The part's tasks' metrics (every operator instance placed here).
    metrics: Vec<Arc<TaskMetrics>>,
    /// Alignment groups of sources that also run on other workers, with
    /// what this worker last reported of its instances in each.
    alignment: Vec<(SplitAlignment, Reported)>,
}

/// A worker's instances in a split alignment group and their watermarks.
type Reported = Vec<(u32, Option<i64>)>;

/// The worker's state between sessions: what runs, what connectors and
/// transport parts use.
pub struct Agent {
    /// The highest master term seen in any session: a master of a lower
    /// term (a deposed quorum leader) is not obeyed.
    term: std::sync::atomic::AtomicU64,
    config: AgentConfig,
    connectors: Arc<dyn ConnectorFactory>,
    data: Arc<DataPlane>,
    deploy: DeployConfig,
}

impl Agent {
    pub fn new(
        config: AgentConfig,
        connectors: Arc<dyn ConnectorFactory>,
        data: Arc<DataPlane>,
        deploy: DeployConfig,
    ) -> Self {
        Agent {
            term: std::sync::atomic::AtomicU64::new(0),
            config,
            connectors,
            data,
            deploy,
        }
    }

    /// Runs sessions with the masters until shutdown (after draining).
    /// Fails only when a master refuses this worker (another protocol
    /// version, a duplicate id).
    pub async fn run(&self) -> Result<()> {
        let mut attempt = 0usize;
        loop {
            if self.config.shutdown.is_cancelled() {
                return Ok(());
            }
            let master = &self.config.masters[attempt % self.config.masters.len().max(1)];
            attempt += 1;
            match self.session(master).await {
                Ok(SessionEnd::Shutdown) => return Ok(()),
                Ok(SessionEnd::Lost(why)) => {
                    tracing::warn!(worker = %self.config.id, %master, %why, "session with the master ended; tasks stopped, reconnecting");
                }
                Err(SessionError::Refused(why)) => return Err(Error::external(why)),
                Err(SessionError::Connect(why)) => {
                    tracing::debug!(worker = %self.config.id, %master, %why, "master not reachable");
                }
            }
            tokio::select! {
                _ = self.config.shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(RECONNECT_WAIT) => {}
            }
        }
    }

    async fn session(&self, master: &str) -> std::result::Result<SessionEnd, SessionError> {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{master}"))
            .map_err(|e| SessionError::Refused(format!("--masters {master}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            // A connection that silently died (a cut cable, not a reset)
            // is noticed by HTTP/2 pings, not only by the silence below.
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(CONNECT_TIMEOUT)
            .keep_alive_while_idle(true);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| SessionError::Connect(e.to_string()))?;
        let mut client = pb::master_client::MasterClient::new(channel);
        let (up, up_rx) = mpsc::channel::<pb::WorkerEvent>(SESSION_QUEUE_MAX);
        let event = |e| pb::WorkerEvent {
            protocol_version: PROTOCOL_VERSION,
            event: Some(e),
        };
        up.send(event(pb::worker_event::Event::Register(pb::Register {
            worker_id: self.config.id.0.clone(),
            data_address: self.config.data_address.clone(),
            slots: self.config.slots,
            labels: self.config.labels.clone().into_iter().collect(),
            running: vec![],
        })))
        .await
        .map_err(|_| SessionError::Connect("session closed".into()))?;
        let mut down = client
            .session(ReceiverStream::new(up_rx))
            .await
            .map_err(|e| SessionError::Connect(e.message().to_string()))?
            .into_inner();
        let first = down
            .message()
            .await
            .map_err(|e| SessionError::Connect(e.message().to_string()))?;
        let first_term = first.as_ref().map_or(0, |c| c.term);
        let registered = match first.and_then(|c| c.command.map(|x| (c.protocol_version, x))) {
            // A follower of the master quorum: try the next master.
            Some((_, pb::master_command::Command::Refused(r))) if r.not_leader => {
                return Err(SessionError::Connect(r.reason));
            }
            Some((_, pb::master_command::Command::Refused(r))) => return Err(SessionError::Refused(r.reason)),
            Some((v, _)) if v != PROTOCOL_VERSION => {
                return Err(SessionError::Refused(version_mismatch(PROTOCOL_VERSION, v)));
            }
            Some((_, pb::master_command::Command::Registered(_)))
                if first_term < self.term.load(std::sync::atomic::Ordering::Relaxed) =>
            {
                return Err(SessionError::Connect(format!(
                    "the master's term {first_term} is older than term {} this worker followed: a deposed leader",
                    self.term.load(std::sync::atomic::Ordering::Relaxed)
                )));
            }
            Some((_, pb::master_command::Command::Registered(r))) => r,
            _ => {
                return Err(SessionError::Connect(
                    "the master did not answer the registration".into(),
                ));
            }
        };
        tracing::info!(worker = %self.config.id, %master, master_id = %registered.master_id, "registered with the master");
        // Part events, bounded by construction: per task one failure and
        // its checkpoint acknowledgements (CHECKPOINTS_IN_FLIGHT_MAX + the
        // stop checkpoint), per part one exit.
        let (events_tx, mut events) = mpsc::unbounded_channel::<(DeploymentKey, PartEvent)>();
        let mut session = Session {
            agent: self,
            up,
            events: events_tx,
            running: HashMap::new(),
            stopped: HashSet::new(),
            closing: HashSet::new(),
            checkpoint_dir: registered.checkpoint_dir,
            term: first_term,
        };
        self.term.fetch_max(first_term, std::sync::atomic::Ordering::Relaxed);
        let mut heartbeat = tokio::time::interval(Duration::from_millis(u64::from(
            registered.heartbeat_interval_ms.max(100),
        )));
        // Watermark alignment across workers: reports of this worker's
        // source instances (every tenth carries all of them).
        let mut alignment = tokio::time::interval(SPLIT_REPORT_INTERVAL);
        alignment.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut alignment_reports = 0u64;
        let mut draining = false;
        // Once draining and no part runs here: exit when the master stopped
        // every deployment they belonged to, or at this deadline.
        let mut leave_by: Option<tokio::time::Instant> = None;
        let mut link_failures = self.data.failures();
        // The master speaks at least once per heartbeat interval; silence
        // for MASTER_SILENCE_MAX intervals means it is gone or cut off.
        let silence_max = heartbeat.period() * MASTER_SILENCE_MAX;
        let mut last_heard = tokio::time::Instant::now();
        let end = loop {
            if draining && session.running.is_empty() {
                if session.closing.is_empty() {
                    break SessionEnd::Shutdown;
                }
                leave_by.get_or_insert_with(|| tokio::time::Instant::now() + DRAIN_LINGER_MAX);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(leave_by.unwrap_or(last_heard + silence_max)), if leave_by.is_some() => {
                    tracing::warn!(worker = %self.config.id, "drained, but the master did not stop every deployment in time; leaving");
                    break SessionEnd::Shutdown;
                }
                _ = tokio::time::sleep_until(last_heard + silence_max) => {
                    break SessionEnd::Lost(format!("no word from the master for {silence_max:?}"));
                }
                failure = link_failures.recv() => {
                    use tokio::sync::broadcast::error::RecvError;
                    let failed: Vec<(DeploymentKey, String)> = match failure {
                        Ok(f) => vec![(
                            DeploymentKey { pipeline: f.pipeline, epoch: f.deployment },
                            format!("the data link to worker {} failed: {}", f.peer, f.error),
                        )],
                        // Missed some: every deployment is suspect.
                        Err(RecvError::Lagged(_)) => session
                            .running
                            .keys()
                            .map(|k| (*k, "data links failed (reports were missed)".to_string()))
                            .collect(),
                        Err(RecvError::Closed) => vec![],
                    };
                    for (key, why) in failed {
                        session.fail(key, why);
                    }
                }
                _ = self.config.shutdown.cancelled(), if !draining => {
                    draining = true;
                    tracing::info!(worker = %self.config.id, "draining: asking the master to move this worker's tasks");
                    if session.send(pb::worker_event::Event::Drain(pb::Drain {})).await.is_err() {
                        break SessionEnd::Shutdown;
                    }
                }
                command = down.message() => match command {
                    Ok(Some(c)) => {
                        last_heard = tokio::time::Instant::now();
                        if c.protocol_version != PROTOCOL_VERSION {
                            break SessionEnd::Lost(version_mismatch(PROTOCOL_VERSION, c.protocol_version));
                        }
                        if let Err(e) = session.on_command(c).await {
                            tracing::warn!(worker = %self.config.id, error = %e, "command failed");
                        }
                    }
                    Ok(None) => break SessionEnd::Lost("the master closed the session".into()),
                    Err(e) => break SessionEnd::Lost(e.message().to_string()),
                },
                Some((key, event)) = events.recv() => {
                    let exited = event == PartEvent::Exited;
                    if exited {
                        // Its tasks' final counters first: the master keeps
                        // the last it heard (a finished pipeline's rows).
                        let last = session.final_counters(key);
                        if session.send(pb::worker_event::Event::Heartbeat(last)).await.is_err() {
                            break SessionEnd::Lost("the master closed the session".into());
                        }
                    }
                    match event_to_wire(key, &event) {
                        Ok(e) => {
                            if session.send(e).await.is_err() {
                                break SessionEnd::Lost("the master closed the session".into());
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "event not sent"),
                    }
                    if exited {
                        // Its channels stay until the master says the whole
                        // deployment stopped: the data plane may still be
                        // sending what the part's last tasks wrote (a
                        // draining worker waits for that before it exits).
                        if session.running.remove(&key).is_some() {
                            if session.closing.len() >= STOPPED_REMEMBERED_MAX {
                                session.closing.clear();
                            }
                            session.closing.insert(key);
                        }
                    }
                }
                _ = alignment.tick(), if session.running.values().any(|r| !r.alignment.is_empty()) => {
                    alignment_reports += 1;
                    for report in session.watermark_reports(alignment_reports.is_multiple_of(10)) {
                        if session.send(pb::worker_event::Event::SourceWatermarks(report)).await.is_err() {
                            break;
                        }
                    }
                }
                _ = heartbeat.tick() => {
                    if session.send(pb::worker_event::Event::Heartbeat(session.heartbeat())).await.is_err() {
                        break SessionEnd::Lost("the master closed the session".into());
                    }
                }
            }
        };
        // Nothing runs without a master that knows it.
        for (key, r) in session.running.drain() {
            r.cancel.cancel();
            self.data.close_deployment(key.pipeline, key.epoch);
        }
        Ok(end)
    }
}

enum SessionEnd {
    Shutdown,
    Lost(String),
}

enum SessionError {
    Refused(String),
    Connect(String),
}

/// One session's state.
struct Session<'a> {
    agent: &'a Agent,
    up: mpsc::Sender<pb::WorkerEvent>,
    /// Where parts report (read by the session loop).
    events: mpsc::UnboundedSender<(DeploymentKey, PartEvent)>,
    running: HashMap<DeploymentKey, Running>,
    /// Deployments stopped in this session: later commands for them are
    /// stale.
    stopped: HashSet<DeploymentKey>,
    /// Deployments whose part here exited and that the master has not
    /// stopped yet (their channels may still carry this worker's last
    /// rows and barrier).
    closing: HashSet<DeploymentKey>,
    checkpoint_dir: String,
    /// The highest master term seen (commands of a lower one are refused).
    term: u64,
}

impl Session<'_> {
    /// Queues an event for the master; fails when the session is gone or
    /// the master has not taken an event for [`CONNECT_TIMEOUT`] with the
    /// queue full.
    async fn send(&self, event: pb::worker_event::Event) -> std::result::Result<(), ()> {
        let event = pb::WorkerEvent {
            protocol_version: PROTOCOL_VERSION,
            event: Some(event),
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, self.up.send(event)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    /// Fails this worker's part of a deployment (a broken data link): the
    /// owner fails the pipeline, which restarts from its last checkpoint.
    fn fail(&mut self, key: DeploymentKey, why: String) {
        let Some(r) = self.running.get(&key) else { return };
        tracing::warn!(pipeline = %key.pipeline, epoch = key.epoch, %why, "deployment part failed");
        let _ = self.events.send((
            key,
            PartEvent::Failed {
                operator: OperatorId(0),
                instance: 0,
                failure: Failure::message(why),
                after_cancel: r.cancel.is_cancelled(),
            },
        ));
        r.cancel.cancel();
    }

    /// A heartbeat carrying only the counters of deployment `key`'s part
    /// here (sent as it exits).
    fn final_counters(&self, key: DeploymentKey) -> pb::Heartbeat {
        let tasks = self
            .running
            .get(&key)
            .map(|r| r.metrics.iter().map(|m| metrics_to_wire(key, m)).collect())
            .unwrap_or_default();
        pb::Heartbeat {
            sent_ms: sluice_types::now_ms().max(0) as u64,
            tasks,
            process: Some(crate::process::metrics(&self.agent.data.metrics())),
        }
    }

    /// This worker's source instances' watermarks in split alignment
    /// groups: those that changed since the last report, or all (`full`).
    fn watermark_reports(&mut self, full: bool) -> Vec<pb::SourceWatermarks> {
        let mut reports = Vec::new();
        for (key, r) in self.running.iter_mut() {
            for (split, reported) in &mut r.alignment {
                let now = split.local_watermarks();
                if full || now != *reported {
                    reports.push(watermarks_to_wire(*key, split.operator, &now));
                    *reported = now;
                }
            }
        }
        reports
    }

    fn heartbeat(&self) -> pb::Heartbeat {
        let tasks = self
            .running
            .iter()
            .flat_map(|(key, r)| r.metrics.iter().map(move |m| metrics_to_wire(*key, m)))
            .collect();
        pb::Heartbeat {
            sent_ms: sluice_types::now_ms().max(0) as u64,
            tasks,
            process: Some(crate::process::metrics(&self.agent.data.metrics())),
        }
    }

    async fn on_command(&mut self, command: pb::MasterCommand) -> Result<()> {
        if command.term < self.term {
            return Err(Error::external(format!(
                "refused a command of term {} (this worker follows term {})",
                command.term, self.term
            )));
        }
        self.term = command.term;
        self.agent
            .term
            .fetch_max(command.term, std::sync::atomic::Ordering::Relaxed);
        use pb::master_command::Command;
        let key = |pipeline, epoch| DeploymentKey {
            pipeline: PipelineId(pipeline),
            epoch,
        };
        match command.command {
            Some(Command::Start(start)) => {
                let k = key(start.pipeline, start.epoch);
                if self.stopped.contains(&k) || self.running.contains_key(&k) {
                    return Ok(());
                }
                let report = self.events.clone();
                if let Err(e) = self.start(k, start).await {
                    // The owner learns it as this part's failure and exit.
                    let _ = report.send((
                        k,
                        PartEvent::Failed {
                            operator: OperatorId(0),
                            instance: 0,
                            failure: Failure::of(&e),
                            after_cancel: false,
                        },
                    ));
                    let _ = report.send((k, PartEvent::Exited));
                }
            }
            Some(Command::Stop(stop)) => {
                let k = key(stop.pipeline, stop.epoch);
                if self.stopped.len() >= STOPPED_REMEMBERED_MAX {
                    self.stopped.clear();
                }
                self.stopped.insert(k);
                self.closing.remove(&k);
                if let Some(r) = self.running.get(&k) {
                    r.cancel.cancel();
                }
                self.agent.data.close_deployment(k.pipeline, k.epoch);
            }
            Some(Command::Checkpoint(c)) => {
                if let Some(r) = self.running.get(&key(c.pipeline, c.epoch)) {
                    // Stop first: a source injecting barrier n reads stop_at.
                    r.stop_at
                        .send_if_modified(|v| std::mem::replace(v, c.stop_at) != c.stop_at);
                    r.completed
                        .send_if_modified(|v| std::mem::replace(v, c.completed) != c.completed);
                    r.trigger
                        .send_if_modified(|v| std::mem::replace(v, c.trigger) != c.trigger);
                }
            }
            Some(Command::Paused(p)) => {
                if let Some(r) = self.running.get(&key(p.pipeline, p.epoch)) {
                    r.paused.send_replace(p.paused);
                }
            }
            Some(Command::Peers(p)) => self.agent.data.set_peers(peers(p.data_addresses)),
            Some(Command::SourceWatermarks(w)) => {
                let Some(r) = self.running.get(&key(w.pipeline, w.epoch)) else {
                    return Ok(());
                };
                for (split, _) in r.alignment.iter().filter(|(s, _)| s.operator.0 == w.operator) {
                    for (instance, watermark) in watermarks_from_wire(&w) {
                        split.apply_remote(instance, watermark);
                    }
                }
            }
            Some(Command::Registered(_)) | Some(Command::Refused(_)) | None => {}
        }
        Ok(())
    }

    /// Starts this worker's part of a deployment.
    async fn start(&mut self, key: DeploymentKey, start: pb::StartTasks) -> Result<()> {
        let dag: PhysicalDag = serde_json::from_slice(&start.dag_json)
            .map_err(|e| Error::internal(format!("a deployment's DAG did not decode: {e}")))?;
        let placement = Placement {
            tasks: start
                .placement
                .iter()
                .map(|p| (OperatorId(p.operator), p.instance, WorkerId(p.worker_id.clone())))
                .collect(),
        };
        self.agent.data.set_peers(peers(start.peers));
        let (metrics, metrics_of) = instance_metrics(&dag);
        let me = &self.agent.config.id;
        let local: Vec<Arc<TaskMetrics>> = metrics
            .into_iter()
            .filter(|m| placement.worker_of(m.operator, m.instance) == Some(me))
            .collect();
        let cancel = CancellationToken::new();
        let (paused, paused_rx) = watch::channel(false);
        let (trigger, trigger_rx) = watch::channel(0);
        let (stop_at, stop_at_rx) = watch::channel(0);
        let restored_id = start.checkpoint.as_ref().map_or(0, |c| c.restored_id);
        let (completed, completed_rx) = watch::channel(restored_id);
        let checkpoint = match &start.checkpoint {
            None => None,
            Some(plan) => {
                let location = if plan.store.is_empty() {
                    self.checkpoint_dir.as_str()
                } else {
                    plan.store.as_str()
                };
                let store =
                    sluice_connectors::state_store::open_state_store(Some(location), std::path::Path::new(location))?;
                let restored = if plan.restored_id > 0 {
                    Some(Arc::new(
                        read_checkpoint(store.as_ref(), key.pipeline, plan.restored_id)
                            .await
                            .map_err(|e| Error::external(format!("checkpoint {}: {e}", plan.restored_id)))?,
                    ))
                } else {
                    None
                };
                let handoff = if plan.handoff_json.is_empty() {
                    None
                } else {
                    Some(
                        serde_json::from_slice(&plan.handoff_json)
                            .map_err(|e| Error::internal(format!("a state hand-off did not decode: {e}")))?,
                    )
                };
                Some(PartCheckpoint {
                    store,
                    signals: BarrierSignals {
                        trigger: trigger_rx,
                        stop_at: stop_at_rx,
                        completed: completed_rx,
                    },
                    restored,
                    handoff,
                })
            }
        };
        let spec = PartSpec {
            id: key.pipeline,
            deployment: key.epoch,
            dag: &dag,
            placement: &placement,
            me,
            connectors: self.agent.connectors.as_ref(),
            transport: self.agent.data.as_ref(),
            config: &self.agent.deploy,
            metrics: &metrics_of,
            control: PartControl {
                cancel: cancel.clone(),
                paused: paused_rx,
            },
            checkpoint,
        };
        let (events, k) = (self.events.clone(), key);
        let started = start_part(spec, move |e| {
            let _ = events.send((k, e));
        })?;
        let tasks = started.tasks;
        tracing::info!(worker = %me, pipeline = %key.pipeline, epoch = key.epoch, tasks, "deployment part started");
        self.running.insert(
            key,
            Running {
                cancel,
                paused,
                trigger,
                stop_at,
                completed,
                metrics: local,
                alignment: started
                    .split_alignment
                    .into_iter()
                    .map(|split| (split, Vec::new()))
                    .collect(),
            },
        );
        Ok(())
    }
}

fn peers(addresses: HashMap<String, String>) -> HashMap<WorkerId, String> {
    addresses.into_iter().map(|(k, v)| (WorkerId(k), v)).collect()
}
