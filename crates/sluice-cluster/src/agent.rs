//! A worker process's side of the control plane (`sluice worker`): it
//! keeps one session with a master (`proto/sluice/v1/control.proto`),
//! registers its slots and labels, sends a heartbeat with its tasks'
//! metrics every second, and runs the parts of deployments the master
//! places on it ([`sluice_dataflow::part::start_part`]), reporting their
//! events up the session.
//!
//! Commands are fenced: each deployment has the master's epoch, and a
//! worker drops commands for an epoch it already stopped. A session with a
//! single master that ends stops every task of the worker (the master,
//! which no longer hears from it, places them elsewhere) and the worker
//! connects again, as a new worker with nothing running — so a worker cut
//! off from its master never keeps a second copy of a task running.
//!
//! With a master quorum, a session with the leader that *breaks* (the
//! connection reset or closed: the leader died or stopped, not a silence
//! that may be this worker's own cable) leaves the parts running as
//! orphans for [`Timing::orphan_grace`]: the worker registers with the next
//! master, reporting them (`Register.running`: the DAG, the placement and
//! the barrier signals each part last had), and a new leader adopts them —
//! it sends their signals, and the worker sends again the checkpoint
//! acknowledgements of checkpoints not known complete — or stops them.
//! Orphans nobody claimed within the grace are stopped. A session that
//! ends in silence (no word, or HTTP/2 pings timing out: a leader frozen
//! or cut off, or this worker's own cable) keeps the parts only if the
//! worker registers with a leader of a newer term within
//! [`Timing::silent_orphan_grace`]; the leader moves a silent worker's tasks later
//! than that. A master that declares this worker lost says so (`Refused`
//! in the session): its tasks then stop at once, as they run elsewhere.
//!
//! On SIGTERM ([`AgentConfig::shutdown`]) the worker drains: it tells the
//! master, which moves its tasks (their pipelines restart from their last
//! checkpoint on the other workers) and the worker exits once its tasks
//! have stopped.

use crate::wire::{DeploymentKey, event_to_wire, metrics_to_wire, watermarks_from_wire, watermarks_to_wire};
use sluice_connectors::MemoryLogs;
use sluice_connectors::views::Views;
use sluice_dataflow::checkpoint::coordinator::{BarrierSignals, CoordinatorEvent};
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
use sluice_quorum::fence::{Admission, Fence, SessionEnd as Ended, Timing};
use sluice_types::{Error, OperatorId, PipelineId, Result, SqlCode, WorkerId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
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
/// When parts keep running without a master, and for how long: the rules
/// and durations of [`sluice_quorum::fence`] (the master quorum's
/// simulation checks them with the leaders' placement rules). A worker
/// that hears nothing from its master for [`Timing::master_silence`] ends
/// the session (the master declares a silent worker dead after its
/// --worker-timeout, 5 s by default: the two sides give up alike).
pub const TIMING: Timing = Timing::DEFAULT;
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
    /// What the part was started with (reported to a new leader).
    start: pb::StartTasks,
    /// Its checkpoint acknowledgements for checkpoints not known complete
    /// and its tasks' finish notices (sent again to a new leader that
    /// adopts the part); bounded by its tasks × the checkpoints in flight.
    acks: Vec<PartEvent>,
    /// [`CLAIMED`], [`ORPHAN`] (no master has claimed it since the session
    /// it ran under ended) or [`ABANDONED`] (nobody claimed it in time: it
    /// is stopping). Shared with the orphans' timer.
    state: Arc<AtomicU8>,
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

/// A part's [`Running::state`].
const CLAIMED: u8 = 0;
const ORPHAN: u8 = 1;
const ABANDONED: u8 = 2;

/// A worker's instances in a split alignment group and their watermarks.
type Reported = Vec<(u32, Option<i64>)>;

/// The worker's state between sessions: what runs, what connectors and
/// transport parts use.
pub struct Agent {
    config: AgentConfig,
    connectors: Arc<dyn ConnectorFactory>,
    /// The rows the materialized views' sinks here published (the
    /// connectors' store): `FetchView` is answered from it.
    views: Arc<Views>,
    /// The memory streams' logs that live here (with a master quorum,
    /// each log lives on one worker): `AppendMemory` appends to them.
    memory: Arc<MemoryLogs>,
    data: Arc<DataPlane>,
    deploy: DeployConfig,
}

impl Agent {
    pub fn new(
        config: AgentConfig,
        (connectors, views, memory): (Arc<dyn ConnectorFactory>, Arc<Views>, Arc<MemoryLogs>),
        data: Arc<DataPlane>,
        deploy: DeployConfig,
    ) -> Self {
        Agent {
            config,
            connectors,
            views,
            memory,
            data,
            deploy,
        }
    }

    /// Runs sessions with the masters until shutdown (after draining).
    /// Fails only when a master refuses this worker (another protocol
    /// version, a duplicate id).
    pub async fn run(&self) -> Result<()> {
        let mut attempt = 0usize;
        let (events, events_rx) = mpsc::unbounded_channel();
        let mut parts = Parts {
            running: HashMap::new(),
            events,
            events_rx,
            orphan_deadline: Arc::default(),
            fence: Fence::new(),
            data: self.data.clone(),
            views: self.views.clone(),
        };
        let outcome = loop {
            if self.config.shutdown.is_cancelled() {
                break Ok(());
            }
            let master = &self.config.masters[attempt % self.config.masters.len().max(1)];
            attempt += 1;
            match self.session(master, &mut parts).await {
                Ok(SessionEnd::Shutdown) => break Ok(()),
                Ok(SessionEnd::Lost {
                    why,
                    end,
                    term,
                    last_heard,
                }) => {
                    let running = !parts.running.is_empty();
                    let now = tokio::time::Instant::now();
                    match parts.fence.ended(term, end, running, now, last_heard, &TIMING) {
                        Some(until) => {
                            if end == Ended::Silent {
                                tracing::warn!(worker = %self.config.id, %master, %why, parts = parts.running.len(),
                                    "the quorum leader fell silent; tasks keep running if a leader of a newer term is found");
                            } else {
                                tracing::warn!(worker = %self.config.id, %master, %why, parts = parts.running.len(),
                                    "session with the quorum leader broke; tasks keep running for a new leader to adopt");
                            }
                            parts.orphan(until);
                        }
                        None => {
                            tracing::warn!(worker = %self.config.id, %master, %why, "session with the master ended; tasks stopped, reconnecting");
                            parts.stop_all();
                        }
                    }
                }
                Err(SessionError::Refused(why)) => break Err(Error::external(why)),
                Err(SessionError::Connect(why)) => {
                    tracing::debug!(worker = %self.config.id, %master, %why, "master not reachable");
                }
            }
            parts.settle_orphans();
            tokio::select! {
                _ = self.config.shutdown.cancelled() => break Ok(()),
                _ = tokio::time::sleep(RECONNECT_WAIT) => {}
            }
        };
        parts.stop_all();
        outcome
    }

    async fn session(&self, master: &str, parts: &mut Parts) -> std::result::Result<SessionEnd, SessionError> {
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
        // Commands are small but for an INSERT's rows (`AppendMemory`).
        let mut client = pb::master_client::MasterClient::new(channel)
            .max_decoding_message_size(crate::view_cache::INSERT_BYTES_MAX + (1 << 20));
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
            running: parts.report(),
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
        let followed = parts.fence.term();
        let registered = match first.and_then(|c| c.command.map(|x| (c.protocol_version, x))) {
            // A follower of the master quorum: try the next master.
            Some((_, pb::master_command::Command::Refused(r))) if r.not_leader => {
                return Err(SessionError::Connect(r.reason));
            }
            Some((_, pb::master_command::Command::Refused(r))) => return Err(SessionError::Refused(r.reason)),
            Some((v, _)) if v != PROTOCOL_VERSION => {
                return Err(SessionError::Refused(version_mismatch(PROTOCOL_VERSION, v)));
            }
            Some((_, pb::master_command::Command::Registered(_))) if first_term < followed => {
                return Err(SessionError::Connect(format!(
                    "the master's term {first_term} is older than term {followed} this worker followed: a deposed leader"
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
        // Parts kept after a silent leader live on only under a newer one.
        match parts.fence.admit(first_term, tokio::time::Instant::now(), &TIMING) {
            Admission::Admitted => parts.follow_fence(),
            Admission::AdmittedStopOrphans => {
                tracing::warn!(worker = %self.config.id, term = first_term, "no newer leader: the kept tasks stop (they run elsewhere)");
                parts.stop_all();
            }
            Admission::Deposed { followed } => {
                return Err(SessionError::Connect(format!(
                    "the master's term {first_term} is older than term {followed} this worker followed: a deposed leader"
                )));
            }
        }
        let mut session = Session {
            agent: self,
            up,
            events: parts.events.clone(),
            running: std::mem::take(&mut parts.running),
            stopped: HashSet::new(),
            closing: HashSet::new(),
            checkpoint_dir: registered.checkpoint_dir,
            fence: &mut parts.fence,
        };
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
        // for longer than TIMING.master_silence means it is gone or cut off.
        let silence_max = TIMING.master_silence;
        let mut last_heard = tokio::time::Instant::now();
        let events = &mut parts.events_rx;
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
                    // Perhaps this worker's own cable: the master moves its
                    // tasks, so they stop here.
                    break SessionEnd::Lost {
                        why: format!("no word from the master for {silence_max:?}"),
                        end: Ended::Silent,
                        term: session.fence.term(),
                        last_heard,
                    };
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
                        // Only keepalives count as a quorum leader's word: it
                        // sends them only while it holds its lease
                        // (`sluice_quorum::fence`), other commands a deposed
                        // one may still send. A single master (term 0)
                        // keeps no orphans: any command is a sign of life.
                        let keepalive = matches!(c.command, Some(pb::master_command::Command::Peers(_)));
                        if (keepalive || session.fence.term() == 0) && c.term >= session.fence.term() {
                            last_heard = tokio::time::Instant::now();
                        }
                        if c.protocol_version != PROTOCOL_VERSION {
                            break session.released(version_mismatch(PROTOCOL_VERSION, c.protocol_version));
                        }
                        // The master let this worker go (declared it lost):
                        // its tasks run elsewhere now.
                        if let Some(pb::master_command::Command::Refused(r)) = &c.command
                            && c.term >= session.fence.term()
                        {
                            break session.released(r.reason.clone());
                        }
                        if let Err(e) = session.on_command(c).await {
                            tracing::warn!(worker = %self.config.id, error = %e, "command failed");
                        }
                    }
                    Ok(None) => break session.lost("the master closed the session".into(), last_heard),
                    Err(e) => break session.lost(e.message().to_string(), last_heard),
                },
                Some((key, event)) = events.recv() => {
                    let exited = event == PartEvent::Exited;
                    if exited {
                        // Its tasks' final counters first: the master keeps
                        // the last it heard (a finished pipeline's rows).
                        let last = session.final_counters(key);
                        if session.send(pb::worker_event::Event::Heartbeat(last)).await.is_err() {
                            break session.lost("the master closed the session".into(), last_heard);
                        }
                    }
                    session.keep_ack(key, &event);
                    match event_to_wire(key, &event) {
                        Ok(e) => {
                            if session.send(e).await.is_err() {
                                break session.lost("the master closed the session".into(), last_heard);
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "event not sent"),
                    }
                    if exited {
                        // Its channels stay until the master says the whole
                        // deployment stopped: the data plane may still be
                        // sending what the part's last tasks wrote (a
                        // draining worker waits for that before it exits).
                        if let Some(r) = session.running.remove(&key) {
                            // An orphan nobody claimed: no master will ask
                            // for its view's rows nor tell it to stop.
                            if r.state.load(Ordering::SeqCst) == ABANDONED {
                                forget_views(&self.views, &session.running, key);
                            }
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
                        break session.lost("the master closed the session".into(), last_heard);
                    }
                }
            }
        };
        // What runs goes back to the worker: stopped, or kept for a new
        // leader when the session with a quorum leader broke.
        parts.running = std::mem::take(&mut session.running);
        if matches!(end, SessionEnd::Shutdown) {
            parts.stop_all();
        }
        Ok(end)
    }
}

enum SessionEnd {
    Shutdown,
    /// The session with a master of `term` (0: not a quorum's) ended as
    /// `end`, the master's last keepalive heard at `last_heard`;
    /// [`Fence::ended`] says whether the parts wait for the next leader.
    Lost {
        why: String,
        end: Ended,
        term: u64,
        last_heard: tokio::time::Instant,
    },
}

/// The worker's deployment parts, kept across sessions.
struct Parts {
    running: HashMap<DeploymentKey, Running>,
    /// Where parts report (read by the session loop; events arriving
    /// between sessions wait here). Bounded by construction: per task one
    /// failure and its checkpoint acknowledgements (CHECKPOINTS_IN_FLIGHT_MAX
    /// + the stop checkpoint), per part one exit.
    events: mpsc::UnboundedSender<(DeploymentKey, PartEvent)>,
    events_rx: mpsc::UnboundedReceiver<(DeploymentKey, PartEvent)>,
    /// While some parts are orphans: when those still unclaimed are given
    /// up (read by the orphans' timer, which keeps waiting while it moves
    /// later, and ends when it is cleared).
    orphan_deadline: Arc<Mutex<Option<tokio::time::Instant>>>,
    /// The highest term followed, and the orphans' deadline and condition.
    fence: Fence<tokio::time::Instant>,
    data: Arc<DataPlane>,
    views: Arc<Views>,
}

impl Parts {
    /// Every part is an orphan until a master claims it or `until` (or
    /// until a master the fence does not admit them under takes this
    /// worker). A timer gives up those unclaimed at the deadline, whatever
    /// the worker is doing then (a connection attempt to a master cut off
    /// may take seconds).
    fn orphan(&mut self, until: tokio::time::Instant) {
        let orphans: Vec<(DeploymentKey, Arc<AtomicU8>, CancellationToken)> = self
            .running
            .iter()
            .map(|(k, r)| {
                r.state.store(ORPHAN, Ordering::SeqCst);
                (*k, r.state.clone(), r.cancel.clone())
            })
            .collect();
        *self.orphan_deadline.lock().expect("deadline lock") = Some(until);
        let (deadline, events, data) = (self.orphan_deadline.clone(), self.events.clone(), self.data.clone());
        tokio::spawn(async move {
            loop {
                let Some(at) = *deadline.lock().expect("deadline lock") else {
                    return;
                };
                if tokio::time::Instant::now() >= at {
                    break;
                }
                tokio::time::sleep_until(at).await;
            }
            for (key, state, cancel) in orphans {
                if state
                    .compare_exchange(ORPHAN, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    continue;
                }
                tracing::warn!(pipeline = %key.pipeline, epoch = key.epoch, "no master adopted this part in time; stopping it");
                // A master that adopts it after all hears that it failed
                // (its pipeline restarts from its checkpoint) rather than
                // that it ended.
                let _ = events.send((
                    key,
                    PartEvent::Failed {
                        operator: OperatorId(0),
                        instance: 0,
                        failure: Failure::message(
                            "no master adopted this worker's part in time after it lost the leader".to_string(),
                        ),
                        after_cancel: false,
                    },
                ));
                cancel.cancel();
                data.close_deployment(key.pipeline, key.epoch);
            }
        });
    }

    /// The orphans' timer follows the fence's deadline (moved when they
    /// found a newer leader: they wait for its claim).
    fn follow_fence(&self) {
        let mut deadline = self.orphan_deadline.lock().expect("deadline lock");
        if let (Some(_), Some(orphans)) = (*deadline, self.fence.orphans()) {
            *deadline = Some(orphans.until);
        }
    }

    fn stop_all(&mut self) {
        for (key, r) in self.running.drain() {
            r.cancel.cancel();
            self.data.close_deployment(key.pipeline, key.epoch);
            self.views.forget_of(key.pipeline);
        }
        *self.orphan_deadline.lock().expect("deadline lock") = None;
        self.fence.clear_orphans();
    }

    /// Between sessions: takes the parts' events (a failed or exited part
    /// is no orphan any more; acknowledgements are kept to be sent again).
    fn settle_orphans(&mut self) {
        while let Ok((key, event)) = self.events_rx.try_recv() {
            match event {
                PartEvent::Failed { .. } | PartEvent::Exited => {
                    if let Some(r) = self.running.remove(&key) {
                        r.cancel.cancel();
                        self.data.close_deployment(key.pipeline, key.epoch);
                        // No master will take a view's rows from it now.
                        forget_views(&self.views, &self.running, key);
                    }
                }
                PartEvent::Checkpoint(_) => {
                    if let Some(r) = self.running.get_mut(&key) {
                        r.acks.push(event);
                    }
                }
            }
        }
    }

    /// The running parts as a registration reports them.
    fn report(&self) -> Vec<pb::DeploymentRef> {
        self.running
            .iter()
            .filter(|(_, r)| r.state.load(Ordering::SeqCst) != ABANDONED)
            .map(|(key, r)| pb::DeploymentRef {
                pipeline: key.pipeline.0,
                epoch: key.epoch,
                dag_json: r.start.dag_json.clone(),
                placement: r.start.placement.clone(),
                trigger: *r.trigger.borrow(),
                stop_at: *r.stop_at.borrow(),
                completed: *r.completed.borrow(),
                checkpointed: r.start.checkpoint.is_some(),
            })
            .collect()
    }
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
    /// The highest master term followed (commands of a lower one are
    /// refused): this session's master's, once it registered the worker.
    fence: &'a mut Fence<tokio::time::Instant>,
}

impl Session<'_> {
    /// How a session that broke ends: after a reset or after silence
    /// (the master last heard at `last_heard`); with a quorum leader its
    /// parts may be kept for the next one ([`Fence::ended`]).
    fn lost(&self, why: String, last_heard: tokio::time::Instant) -> SessionEnd {
        SessionEnd::Lost {
            why,
            end: Fence::broke(tokio::time::Instant::now(), last_heard, &TIMING),
            term: self.fence.term(),
            last_heard,
        }
    }

    /// The master let this worker go (or speaks another protocol): its
    /// parts stop.
    fn released(&self, why: String) -> SessionEnd {
        SessionEnd::Lost {
            why,
            end: Ended::Released,
            term: self.fence.term(),
            last_heard: tokio::time::Instant::now(),
        }
    }

    /// Keeps a part's checkpoint event to send again to a new leader.
    fn keep_ack(&mut self, key: DeploymentKey, event: &PartEvent) {
        if let (PartEvent::Checkpoint(_), Some(r)) = (event, self.running.get_mut(&key)) {
            r.acks.push(event.clone());
        }
    }

    /// The master addressed deployment `key`: an orphan part is adopted;
    /// its kept acknowledgements go to the master again.
    async fn claim(&mut self, key: DeploymentKey) {
        let Some(r) = self.running.get_mut(&key) else { return };
        if r.state
            .compare_exchange(ORPHAN, CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        let acks = r.acks.clone();
        tracing::info!(pipeline = %key.pipeline, epoch = key.epoch, acks = acks.len(), "deployment part adopted by the master");
        for event in acks {
            match event_to_wire(key, &event) {
                Ok(e) => {
                    let _ = self.send(e).await;
                }
                Err(e) => tracing::error!(error = %e, "event not sent"),
            }
        }
    }

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
        if !self.fence.obey(command.term) {
            return Err(Error::external(format!(
                "refused a command of term {} (this worker follows term {})",
                command.term,
                self.fence.term()
            )));
        }
        use pb::master_command::Command;
        let request_id = command.request_id;
        let key = |pipeline, epoch| DeploymentKey {
            pipeline: PipelineId(pipeline),
            epoch,
        };
        let addressed = match &command.command {
            Some(Command::Checkpoint(c)) => Some(key(c.pipeline, c.epoch)),
            Some(Command::Paused(p)) => Some(key(p.pipeline, p.epoch)),
            _ => None,
        };
        if let Some(k) = addressed {
            self.claim(k).await;
        }
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
                // The view's sink runs elsewhere next, or nowhere (a
                // finished view's rows went to the master first).
                forget_views(&self.agent.views, &self.running, k);
            }
            Some(Command::FetchView(fetch)) => self.answer_view(request_id, fetch),
            Some(Command::AppendMemory(append)) => self.append_memory(request_id, append).await,
            Some(Command::DropMemory(drop)) => self.agent.memory.remove(&drop.stream),
            Some(Command::Checkpoint(c)) => {
                if let Some(r) = self.running.get_mut(&key(c.pipeline, c.epoch)) {
                    // Signals only rise (a new leader's coordinator starts
                    // from what the workers reported). Stop first: a source
                    // injecting barrier n reads stop_at.
                    let raise = |to: u64| move |v: &mut u64| (to > *v).then(|| *v = to).is_some();
                    r.stop_at.send_if_modified(raise(c.stop_at));
                    r.completed.send_if_modified(raise(c.completed));
                    r.trigger.send_if_modified(raise(c.trigger));
                    let completed = *r.completed.borrow();
                    r.acks.retain(|e| match e {
                        PartEvent::Checkpoint(CoordinatorEvent::Stored { checkpoint_id, .. })
                        | PartEvent::Checkpoint(CoordinatorEvent::WriteFailed { checkpoint_id, .. }) => {
                            *checkpoint_id > completed
                        }
                        _ => true,
                    });
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

    /// Answers the master's `FetchView` with the rows the view's sink here
    /// (pipeline `fetch.pipeline`'s, not an earlier one of the same name)
    /// last published; encoded off the session's loop.
    fn answer_view(&self, request_id: u64, fetch: pb::FetchView) {
        let request = fetch.request.unwrap_or_default();
        let view = self.agent.views.get_of(&request.name, PipelineId(fetch.pipeline));
        let me = self.agent.config.id.clone();
        let up = self.up.clone();
        tokio::spawn(async move {
            let name = request.name;
            let known = request.known_publication;
            let reply = tokio::task::spawn_blocking(move || {
                let missing = || {
                    Error::user(
                        SqlCode::ObjectNotInPrerequisiteState,
                        format!("materialized view {name} has no rows on worker {me} (its sink has not published there)"),
                    )
                };
                let too_big = |bytes| {
                    format!(
                        "materialized view {name}'s rows ({bytes} bytes) are more than a master takes from a worker ({} bytes)",
                        crate::view_cache::WORKER_VIEW_BYTES_MAX
                    )
                };
                let bytes_max = crate::view_cache::WORKER_VIEW_BYTES_MAX;
                crate::view_cache::reply_within(view.as_deref(), known, bytes_max, missing, too_big)
            })
            .await;
            let reply = reply.unwrap_or_else(|e| {
                let e = Error::internal(format!("encoding a view's rows failed: {e}"));
                pb::ViewRowsReply {
                    sqlstate: e.sqlstate().to_string(),
                    message: e.to_string(),
                    ..Default::default()
                }
            });
            // The rows in pieces, the first with the reply's other fields.
            let ipc = reply.ipc.clone();
            let piece = crate::view_cache::VIEW_PIECE_BYTES;
            let pieces = ipc.len().div_ceil(piece).max(1);
            for i in 0..pieces {
                let part = ipc.slice(i * piece..((i + 1) * piece).min(ipc.len()));
                let reply = if i == 0 {
                    pb::ViewRowsReply {
                        ipc: part,
                        ..reply.clone()
                    }
                } else {
                    pb::ViewRowsReply {
                        ipc: part,
                        ..Default::default()
                    }
                };
                let event = pb::WorkerEvent {
                    protocol_version: PROTOCOL_VERSION,
                    event: Some(pb::worker_event::Event::ViewRows(pb::WorkerViewRows {
                        request_id,
                        reply: Some(reply),
                        more: i + 1 < pieces,
                    })),
                };
                // The master gives up on its own after a while: a full
                // queue drops the answer.
                if tokio::time::timeout(CONNECT_TIMEOUT, up.send(event)).await.is_err() {
                    return;
                }
            }
        });
    }

    /// Appends an INSERT's rows to a memory stream's log here and tells
    /// the master how it went (a `CommandResult` with its request id).
    async fn append_memory(&self, request_id: u64, append: pb::AppendMemory) {
        let options: std::collections::BTreeMap<String, String> = append.options.into_iter().collect();
        let appended = crate::view_cache::decode_rows(&append.ipc)
            .map_err(|e| Error::internal(format!("an INSERT's rows do not decode: {e}")))
            .and_then(|(_, rows)| self.agent.memory.get_or_create(&append.stream, &options)?.append(rows));
        let (error, sqlstate) = match appended {
            Ok(_) => (String::new(), String::new()),
            Err(e) => (e.to_string(), e.sqlstate().to_string()),
        };
        let event = pb::WorkerEvent {
            protocol_version: PROTOCOL_VERSION,
            event: Some(pb::worker_event::Event::Result(pb::CommandResult {
                request_id,
                error,
                sqlstate,
            })),
        };
        // Off the session's loop (its other commands go on); the master
        // gives up on its own after a while.
        let up = self.up.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CONNECT_TIMEOUT, up.send(event)).await;
        });
    }

    /// Starts this worker's part of a deployment.
    async fn start(&mut self, key: DeploymentKey, mut start: pb::StartTasks) -> Result<()> {
        let dag: PhysicalDag = serde_json::from_slice(&start.dag_json)
            .map_err(|e| Error::internal(format!("a deployment's DAG did not decode: {e}")))?;
        let placement = Placement {
            tasks: start
                .placement
                .iter()
                .map(|p| (OperatorId(p.operator), p.instance, WorkerId(p.worker_id.clone())))
                .collect(),
        };
        // Kept with the part without the peers' addresses (every keepalive
        // brings them).
        self.agent.data.set_peers(peers(std::mem::take(&mut start.peers)));
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
                start,
                acks: Vec::new(),
                state: Arc::new(AtomicU8::new(CLAIMED)),
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

/// Forgets the views' rows deployment `key`'s sink published here, unless
/// another deployment of its pipeline runs here (whose sink may have
/// published since).
fn forget_views(views: &Views, running: &HashMap<DeploymentKey, Running>, key: DeploymentKey) {
    if !running
        .keys()
        .any(|k| k.pipeline == key.pipeline && k.epoch != key.epoch)
    {
        views.forget_of(key.pipeline);
    }
}

fn peers(addresses: HashMap<String, String>) -> HashMap<WorkerId, String> {
    addresses.into_iter().map(|(k, v)| (WorkerId(k), v)).collect()
}
