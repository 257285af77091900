//! The master's side of the control plane (`sluice master`): the workers'
//! sessions (the `Master` gRPC service of `proto/sluice/v1/control.proto`),
//! the registry of live workers, and [`ClusterScheduler`], which places a
//! deployment's tasks on them and owns the deployment.
//!
//! A deployment is owned here ([`sluice_dataflow::deploy::own`]: status,
//! checkpoint coordinator) and run by parts: one per worker holding some of
//! its tasks, plus one on the master's own worker for tasks whose state
//! lives in the master (a session query's results, a memory stream's log:
//! [`crate::placement::MasterOwned`]). Worker reports are routed to the
//! deployment by `(pipeline, epoch)`; the coordinator's barrier signals,
//! a pause and a stop are forwarded to every worker of the deployment.
//! A materialized view's sink runs on a worker, which answers the master's
//! `FetchView` with its rows ([`Cluster::worker_view`]).
//!
//! A new leader of a master quorum adopts what the workers kept running
//! ([`Cluster::open_adoption`]): workers whose session with the old leader
//! broke report their parts when they register; a deployment every part of
//! which is reported, with the DAG the catalog has, is owned here as it
//! runs (a coordinator resuming its checkpoint in flight) instead of
//! restarting; the other reported parts are stopped.
//!
//! A worker is dead when its session breaks or it sends no heartbeat for
//! the worker timeout: each deployment it took part in fails ("worker …
//! lost"), which stops the deployment's other parts; the pipeline's
//! supervisor places it again on the workers left, restored from its last
//! checkpoint. A dead worker's session is closed, so a worker that was only
//! cut off stops its tasks and registers again with nothing running.

use crate::placement::{Constraints, MasterOwned, Pinned, Strategy, WorkerSlots, place};
use crate::scheduler::Scheduler;
use crate::view_cache::{VIEW_PIECE_BYTES, WORKER_VIEW_BYTES_MAX};
use crate::wire::{DeploymentKey, apply_metrics, event_from_wire};
use sluice_connectors::views::PublishedView;
use sluice_dataflow::checkpoint::coordinator::BarrierSignals;
use sluice_dataflow::deploy::{
    CheckpointPlan, DeployConfig, Failure, OwnerCheckpoint, PipelineRuntime, PipelineStatus, own, with_uids,
};
use sluice_dataflow::metrics::TaskMetrics;
use sluice_dataflow::part::{
    PartCheckpoint, PartControl, PartEvent, PartSpec, Placement, instance_metrics, start_part, task_instances,
};
use sluice_plan::PhysicalDag;
use sluice_proto::v1 as pb;
use sluice_proto::{PROTOCOL_VERSION, version_mismatch};
use sluice_types::{Error, OperatorId, PipelineId, Result, SqlCode, WorkerId};
use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

mod memory_logs;

/// Commands queued for one worker, at most.
pub const COMMAND_QUEUE_MAX: usize = 1024;
/// Heartbeat interval the master asks workers for.
pub const HEARTBEAT_INTERVAL: Duration = crate::agent::TIMING.heartbeat;
/// A worker silent this long is dead (`--worker-timeout`).
pub const WORKER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// A draining worker's deployments stop at a barrier within this, or fail
/// over from their last checkpoint.
pub const DRAIN_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A live worker as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkerInfo {
    pub id: String,
    pub data_address: String,
    pub slots: u32,
    pub used_slots: u32,
    pub labels: BTreeMap<String, String>,
    pub heartbeat_age_ms: u64,
    /// `healthy`, `late` (no heartbeat for two intervals) or `draining`.
    pub health: String,
    pub rss_bytes: u64,
    pub cpu_ns: u64,
    pub data_bytes_sent: u64,
    pub data_bytes_received: u64,
    /// Time its tasks' senders waited for remote credits, ns.
    pub credit_wait_ns: u64,
}

/// A worker the master stopped listing (declared dead, timed out, drained
/// away), kept for REST and the dashboard until it registers again or
/// [`LOST_WORKERS_MAX`] later losses push it out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LostWorker {
    pub id: String,
    pub data_address: String,
    pub slots: u32,
    pub labels: BTreeMap<String, String>,
    /// When it was declared lost, ms since the epoch.
    pub lost_at_ms: i64,
    pub why: String,
}

/// Lost workers remembered at most (the oldest is forgotten first).
pub const LOST_WORKERS_MAX: usize = 64;

/// Records `worker` as the latest loss: an earlier entry of the same id
/// goes, and past [`LOST_WORKERS_MAX`] the oldest.
fn remember_lost(lost: &mut std::collections::VecDeque<LostWorker>, worker: LostWorker) {
    lost.retain(|l| l.id != worker.id);
    if lost.len() >= LOST_WORKERS_MAX {
        lost.pop_front();
    }
    lost.push_back(worker);
}

struct WorkerConn {
    data_address: String,
    slots: u32,
    labels: BTreeMap<String, String>,
    last_heartbeat: Instant,
    draining: bool,
    process: pb::ProcessMetrics,
    commands: mpsc::Sender<std::result::Result<pb::MasterCommand, Status>>,
    /// Tells this connection from an earlier one of the same worker id.
    session: u64,
}

/// A deployment as the master routes to it.
struct Route {
    events: mpsc::UnboundedSender<PartEvent>,
    /// Remote workers with a part, and whether that part exited.
    parts: HashMap<WorkerId, bool>,
    /// Whether `StartTasks` may have gone to the workers (set, under the
    /// routes lock, before the first is sent; an adopted deployment runs
    /// already). A worker lost before holds nothing of this deployment:
    /// its part is settled at once, not kept vacating for an orphan's
    /// grace.
    started: bool,
    /// Slots each remote worker gives this deployment.
    slots: HashMap<WorkerId, u32>,
    metrics: HashMap<(OperatorId, u32), Arc<TaskMetrics>>,
}

/// Parts workers reported running when they registered with a new leader,
/// by deployment.
#[derive(Default)]
struct Adoption {
    /// True while this master, new leader, waits for its workers.
    open: bool,
    /// Counts the openings (a late close of an earlier one does nothing).
    generation: u64,
    /// The quorum term of the last opening: until this master opened
    /// adoption in its term as leader it takes no worker (a worker taken
    /// before would have its parts stopped, not adopted).
    term: u64,
    reports: HashMap<DeploymentKey, Reported>,
    /// Where the old leader recorded each pipeline's tasks (the workers to
    /// wait for).
    recorded: BTreeMap<PipelineId, crate::recorded::RecordedPlacement>,
    /// Deployments taken for adoption whose route is not in place yet: the
    /// events of their parts meanwhile (`None`: the worker was lost), for
    /// the route once it is (a part's exit lost here would leave its owner
    /// waiting for good). Bounded: a deployment stays here for the moment
    /// between [`Cluster::adoptable`] and [`ClusterScheduler::adopt`].
    taken: HashMap<DeploymentKey, Vec<(WorkerId, Option<PartEvent>)>>,
    /// When this master last opened adoption (took the lead).
    opened_at: Option<Instant>,
}

/// One deployment as its workers reported it.
struct Reported {
    dag_json: Vec<u8>,
    placement: Vec<pb::Placement>,
    checkpointed: bool,
    /// Per reporting worker: trigger, stop_at, completed.
    by: HashMap<WorkerId, (u64, u64, u64)>,
}

impl Reported {
    fn workers(&self) -> std::collections::BTreeSet<WorkerId> {
        self.placement.iter().map(|p| WorkerId(p.worker_id.clone())).collect()
    }

    /// Every worker of the placement reported it.
    fn complete(&self) -> bool {
        self.workers().iter().all(|w| self.by.contains_key(w))
    }

    /// Some of its tasks ran on another master's own worker (gone with
    /// that master, or stopped when it stepped down): it cannot be adopted.
    fn hopeless(&self, local: &WorkerId) -> bool {
        self.workers()
            .iter()
            .any(|w| w.0.starts_with(MASTER_WORKER_PREFIX) && w != local)
    }
}

/// Parts that may still run on a worker though no deployment of this
/// master owns them, each until it surely stopped at the latest (see
/// [`Cluster::vacating`]). Bounded: an entry is made only by a stop or a
/// worker's loss, and lasts at most [`sluice_quorum::fence::Timing::adoption_wait`].
#[derive(Default)]
struct Vacating {
    parts: HashMap<(DeploymentKey, WorkerId), Instant>,
}

impl Vacating {
    /// Part `key` on `worker` may run until `until` (the later of two).
    fn vacate(&mut self, key: DeploymentKey, worker: &WorkerId, until: Instant) {
        let at = self.parts.entry((key, worker.clone())).or_insert(until);
        *at = (*at).max(until);
    }

    /// Its exit was heard; true if it was vacating.
    fn gone(&mut self, key: DeploymentKey, worker: &WorkerId) -> bool {
        self.parts.remove(&(key, worker.clone())).is_some()
    }

    /// `worker` registered again, running `running`: what it does not run
    /// is gone.
    fn registered(&mut self, worker: &WorkerId, running: &std::collections::HashSet<DeploymentKey>) {
        self.parts.retain(|(k, w), _| w != worker || running.contains(k));
    }

    fn contains(&self, key: DeploymentKey, worker: &WorkerId) -> bool {
        self.parts.contains_key(&(key, worker.clone()))
    }

    /// Forgets parts past their deadline at `now`; of those `which`
    /// matches, the earliest deadline (`None`: none may run).
    fn next(&mut self, now: Instant, which: impl Fn(&DeploymentKey, &WorkerId) -> bool) -> Option<Instant> {
        self.parts.retain(|_, until| *until > now);
        self.parts
            .iter()
            .filter(|((k, w), _)| which(k, w))
            .map(|(_, at)| *at)
            .min()
    }
}

/// The id of a master's own worker is this prefix and the master's id.
pub const MASTER_WORKER_PREFIX: &str = "master:";

/// The master's own worker: runs the tasks pinned to the master.
pub struct MasterWorker {
    pub id: WorkerId,
    /// Its data-plane address as workers reach it.
    pub data_address: String,
    pub connectors: sluice_connectors::Connectors,
    pub transport: Arc<sluice_net::DataPlane>,
}

/// The registry of workers and deployments, and the `Master` service.
pub struct Cluster {
    master_id: String,
    control_address: Mutex<String>,
    checkpoint_dir: String,
    worker_timeout: Duration,
    workers: Mutex<HashMap<WorkerId, WorkerConn>>,
    /// The latest lost workers, oldest first (bounded).
    lost: Mutex<std::collections::VecDeque<LostWorker>>,
    routes: Mutex<HashMap<DeploymentKey, Route>>,
    /// The running deployment of each pipeline (stop by id); a deployment
    /// leaves when all its parts exited.
    /// (Keyed by pipeline, with the deployment's epoch: a deployment being
    /// replaced is told from its successor.)
    runtimes: Mutex<HashMap<PipelineId, (u64, Arc<PipelineRuntime>)>>,
    next_session: AtomicU64,
    next_epoch: AtomicU64,
    local: MasterWorker,
    /// With a master quorum: why this master takes no workers now (it is
    /// not the leader), and where the leader is, if known.
    admission: Mutex<Option<Admission>>,
    /// This master's quorum member (`--peers`), for `/api/v1/cluster`.
    quorum: Mutex<Option<sluice_quorum::QuorumNode>>,
    /// Parts reported by workers, while a new leader may adopt them.
    adoption: Mutex<Adoption>,
    /// With a quorum: parts that may still run on a worker though no
    /// deployment here owns them (told to stop, or on a worker lost that
    /// may keep them as orphans), each until it surely stopped at the
    /// latest. A pipeline is started anew, and a lost worker's pipelines
    /// fail over, only once none of its parts is here (never two copies
    /// of a task): an entry goes when its part's exit is heard, when its
    /// worker registers again without it, or at its deadline.
    vacating: Mutex<Vacating>,
    vacated: tokio::sync::Notify,
    /// The term this master last took the lead in (0: never, or a single
    /// master): what its commands carry.
    led_term: AtomicU64,
    /// Held while a placement register is written, so that a removal
    /// decided on a snapshot cannot overwrite a newer placement.
    placement_writes: tokio::sync::Mutex<()>,
    /// Views' rows asked of workers (`FetchView`) and not answered yet, by
    /// request id (at most [`VIEW_REQUESTS_MAX`]).
    view_requests: Mutex<HashMap<u64, ViewRequest>>,
    next_request: AtomicU64,
    /// Copies of views' rows taken from workers, by view (the worker and
    /// publication they are of): a read asks only whether they are current.
    view_copies: Mutex<crate::view_cache::ViewCache>,
    /// With a master quorum: where memory streams' logs live, and the
    /// appends sent there ([`memory_logs`]).
    memory: memory_logs::MemoryHomes,
    me: std::sync::Weak<Cluster>,
}

/// Views' reads waiting for workers at once, at most; past it a read is
/// refused with `53300` (each may bring up to
/// [`crate::replication::LEADER_VIEW_BYTES_MAX`] bytes).
pub const VIEW_REQUESTS_MAX: usize = 16;
/// How long a worker has to answer a `FetchView`, all its pieces.
const VIEW_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// A `FetchView` waiting for its answer: where to hand it, and what came
/// of it so far (the reply, its rows' bytes).
struct ViewRequest {
    tx: tokio::sync::oneshot::Sender<pb::ViewRowsReply>,
    reply: Option<pb::ViewRowsReply>,
    ipc: Vec<u8>,
}

/// Decides whether this master may take workers' sessions: `None` yes,
/// `Some((reason, leader's control address))` no.
pub type Admission = Box<dyn Fn() -> Option<(String, String)> + Send + Sync>;

impl Cluster {
    pub fn new(master_id: String, checkpoint_dir: String, worker_timeout: Duration, local: MasterWorker) -> Arc<Self> {
        let cluster = Arc::new_cyclic(|me| Cluster {
            me: me.clone(),
            vacating: Mutex::default(),
            vacated: tokio::sync::Notify::new(),
            led_term: AtomicU64::new(0),
            placement_writes: tokio::sync::Mutex::new(()),
            view_requests: Mutex::default(),
            next_request: AtomicU64::new(1),
            view_copies: Mutex::new(crate::view_cache::ViewCache::new(
                crate::view_cache::LEADER_VIEW_BYTES_MAX,
            )),
            memory: Default::default(),
            master_id,
            control_address: Mutex::default(),
            checkpoint_dir,
            worker_timeout,
            workers: Mutex::default(),
            lost: Mutex::default(),
            routes: Mutex::default(),
            runtimes: Mutex::default(),
            next_session: AtomicU64::new(1),
            // Epochs differ across master restarts too (a restarted master
            // must not reuse an epoch a worker may still hold).
            next_epoch: AtomicU64::new((sluice_types::now_ms().max(0) as u64) << 8),
            local,
            admission: Mutex::default(),
            quorum: Mutex::default(),
            adoption: Mutex::default(),
        });
        tokio::spawn(watchdog(Arc::downgrade(&cluster)));
        tokio::spawn(link_failures(
            Arc::downgrade(&cluster),
            cluster.local.transport.failures(),
        ));
        cluster
    }

    /// Makes this master refuse workers while `admission` says so (a
    /// follower of the master quorum sends them to the leader).
    pub fn set_admission(&self, admission: Admission) {
        *self.admission.lock().expect("admission lock") = Some(admission);
    }

    /// The term every command carries: the quorum leader's (workers refuse
    /// a lower one than they have seen), 0 for a single master.
    pub fn term(&self) -> u64 {
        self.quorum
            .lock()
            .expect("quorum lock")
            .as_ref()
            .map_or(0, |q| q.term())
    }

    /// The term every command to a worker carries: the one in which this
    /// master took the lead (opened adoption), 0 for a single master. Not
    /// the quorum's current term: a master that stepped down has seen a
    /// newer term, and its commands stamped with it would be obeyed.
    fn command_term(&self) -> u64 {
        // An atomic, not the adoption lock: callers hold the workers lock,
        // which `adoptable` takes under the adoption lock.
        self.led_term.load(Ordering::SeqCst)
    }

    /// Records this master's quorum member (shown by `/api/v1/cluster`).
    pub fn set_quorum(&self, node: sluice_quorum::QuorumNode) {
        *self.quorum.lock().expect("quorum lock") = Some(node);
    }

    pub fn quorum(&self) -> Option<sluice_quorum::QuorumNode> {
        self.quorum.lock().expect("quorum lock").clone()
    }

    /// This master became the quorum's leader: until
    /// [`Cluster::close_adoption`], parts workers report when they register
    /// are kept, and a deployment of a pipeline every part of which was
    /// reported is adopted by [`ClusterScheduler`] instead of placed anew.
    /// Returns the opening's generation, for [`Cluster::close_adoption`].
    pub fn open_adoption(&self) -> u64 {
        let term = self.term();
        let recorded = self
            .quorum()
            .map(|q| crate::recorded::placements(&q.state()))
            .unwrap_or_default();
        let mut a = self.adoption.lock().expect("adoption lock");
        a.open = true;
        a.term = term;
        self.led_term.store(term, Ordering::SeqCst);
        a.generation += 1;
        a.reports.clear();
        a.taken.clear();
        a.recorded = recorded;
        a.opened_at = Some(Instant::now());
        let generation = a.generation;
        drop(a);
        // Where logs live is read from the replicated state again.
        self.memory.forget_homes();
        generation
    }

    /// True when waiting longer changes nothing for any pipeline of
    /// `pipelines`: it has a deployment whose parts were all reported, or
    /// one that can never be adopted (tasks on another master's own
    /// worker), or every worker its recorded placement names has
    /// registered (and reported what it runs).
    pub fn adoption_ready(&self, pipelines: &[PipelineId]) -> bool {
        let registered: std::collections::HashSet<WorkerId> =
            self.workers.lock().expect("workers lock").keys().cloned().collect();
        let a = self.adoption.lock().expect("adoption lock");
        let hopeless = |workers: &std::collections::BTreeSet<WorkerId>| {
            workers
                .iter()
                .any(|w| w.0.starts_with(MASTER_WORKER_PREFIX) && *w != self.local.id)
        };
        pipelines.iter().all(|id| {
            let reported = a
                .reports
                .iter()
                .any(|(k, r)| k.pipeline == *id && (r.complete() || r.hopeless(&self.local.id)));
            // No recorded placement: nothing of it runs (a placement is
            // recorded before its parts start, and stays while the
            // pipeline exists).
            reported
                || a.recorded.get(id).is_none_or(|p| {
                    let workers = p.workers();
                    hopeless(&workers) || workers.iter().all(|w| registered.contains(w))
                })
        })
    }

    /// On a quorum's leader that took over (opened adoption in its term):
    /// records the registered workers in the replicated state
    /// ([`crate::recorded`]) when they changed, and removes the placements
    /// of pipelines nothing of which may run any more (once adoption
    /// closed). Placements themselves are written as deployments start
    /// ([`Cluster::prepare_start`]).
    pub async fn record(&self) -> std::result::Result<(), String> {
        let Some(node) = self.quorum() else { return Ok(()) };
        if !node.is_leader() {
            return Ok(());
        }
        // A removal is decided below on a snapshot: no placement may be
        // written meanwhile.
        let _writing = self.placement_writes.lock().await;
        let (adopting, taken_over) = {
            let a = self.adoption.lock().expect("adoption lock");
            (a.open, a.term == node.term())
        };
        if !taken_over {
            // Leading, but not yet taken over (the lead loop opens the
            // adoption a moment after the election): no worker registered
            // and no deployment runs here yet, so what is recorded would
            // all look gone — the placements the adoption waits on first.
            return Ok(());
        }
        use crate::recorded::{RecordedPlacement, RecordedWorker};
        let workers: Vec<RecordedWorker> = self
            .workers
            .lock()
            .expect("workers lock")
            .iter()
            .map(|(id, w)| RecordedWorker {
                id: id.0.clone(),
                data_address: w.data_address.clone(),
                slots: w.slots,
                labels: w.labels.clone(),
            })
            .collect();
        let placements: BTreeMap<PipelineId, RecordedPlacement> = self
            .runtimes
            .lock()
            .expect("runtimes lock")
            .iter()
            .map(|(id, (epoch, runtime))| {
                let tasks = runtime
                    .placement
                    .tasks
                    .iter()
                    .map(|(op, instance, w)| (op.0, *instance, w.0.clone()))
                    .collect();
                (*id, RecordedPlacement { epoch: *epoch, tasks })
            })
            .collect();
        let want = crate::recorded::registers(&workers, &placements);
        let state = node.state();
        let mut writes = crate::recorded::writes(&state, &want);
        // Placements are written as deployments start (before their parts
        // do: `prepare_start`), never from here. One goes once nothing of
        // its pipeline may run: no deployment of it routed here (a
        // deployment leaves the routes when all its parts exited, or were
        // lost and surely stopped) and no part vacating — until then it
        // names the workers a next leader must wait for. While adopting,
        // the old leader's placements stay.
        let settled = |id: u64| {
            let id = PipelineId(id);
            !self
                .routes
                .lock()
                .expect("routes lock")
                .keys()
                .any(|k| k.pipeline == id)
                && self
                    .vacating
                    .lock()
                    .expect("vacating lock")
                    .next(Instant::now(), |k, _| k.pipeline == id)
                    .is_none()
        };
        writes.retain(|(k, v)| match k.strip_prefix(crate::recorded::PLACEMENT) {
            None => true,
            Some(id) => !adopting && v.is_none() && id.parse().is_ok_and(settled),
        });
        if writes.is_empty() {
            return Ok(());
        }
        node.propose(writes).await.map(|_| ()).map_err(|e| e.to_string())
    }

    /// The workers the quorum's leader recorded (what a follower lists).
    pub fn recorded_workers(&self) -> Vec<crate::recorded::RecordedWorker> {
        self.quorum()
            .map(|q| crate::recorded::workers(&q.state()))
            .unwrap_or_default()
    }

    /// The new leader's pipelines were deployed (adopted or placed anew):
    /// every reported part not adopted is stopped, and parts reported from
    /// now on are stopped at registration. Does nothing when adoption was
    /// opened again since `generation`.
    pub fn close_adoption(&self, generation: u64) {
        self.end_adoption(generation, true);
    }

    /// This master lost the lead while adopting: the reports are forgotten,
    /// not stopped — they are the next leader's to adopt (its workers'
    /// sessions end next).
    pub fn abandon_adoption(&self, generation: u64) {
        self.end_adoption(generation, false);
    }

    fn end_adoption(&self, generation: u64, stop: bool) {
        let reports = {
            let mut a = self.adoption.lock().expect("adoption lock");
            if a.generation != generation {
                return;
            }
            a.open = false;
            std::mem::take(&mut a.reports)
        };
        if !stop {
            return;
        }
        for (key, r) in reports {
            tracing::info!(pipeline = %key.pipeline, epoch = key.epoch, "stopping parts of a deployment not adopted");
            for w in r.by.keys() {
                self.stop_part(key, w);
            }
        }
    }

    /// Tells `worker` to stop its part of `key`, which runs on until its
    /// exit is heard (or an orphan's grace at the latest).
    fn stop_part(&self, key: DeploymentKey, worker: &WorkerId) {
        self.vacate(
            key,
            worker,
            Instant::now() + crate::agent::TIMING.orphans_gone_after(false, self.worker_timeout),
        );
        self.send(worker, stop_command(key));
    }

    /// A registering worker's running parts: kept while adoption is open,
    /// else stopped (this master does not know them).
    fn reported(&self, worker: &WorkerId, running: Vec<pb::DeploymentRef>) {
        // What it does not report it does not run (any more).
        let keys: std::collections::HashSet<DeploymentKey> = running
            .iter()
            .map(|d| DeploymentKey {
                pipeline: PipelineId(d.pipeline),
                epoch: d.epoch,
            })
            .collect();
        self.vacating.lock().expect("vacating lock").registered(worker, &keys);
        self.vacated.notify_waiters();
        let mut a = self.adoption.lock().expect("adoption lock");
        for d in running {
            let key = DeploymentKey {
                pipeline: PipelineId(d.pipeline),
                epoch: d.epoch,
            };
            // Told to stop before, or of a pipeline that runs another
            // deployment already: not to be adopted.
            let stopping = self.vacating.lock().expect("vacating lock").contains(key, worker)
                || self
                    .runtimes
                    .lock()
                    .expect("runtimes lock")
                    .get(&key.pipeline)
                    .is_some_and(|(epoch, _)| *epoch != key.epoch);
            if !a.open || stopping {
                drop(a);
                self.stop_part(key, worker);
                a = self.adoption.lock().expect("adoption lock");
                continue;
            }
            let r = a.reports.entry(key).or_insert_with(|| Reported {
                dag_json: d.dag_json.to_vec(),
                placement: d.placement.clone(),
                checkpointed: d.checkpointed,
                by: HashMap::new(),
            });
            r.by.insert(worker.clone(), (d.trigger, d.stop_at, d.completed));
        }
    }

    /// Takes the reported deployment of pipeline `id` if it can be adopted
    /// as `dag` (with checkpoints or not): every part reported by a live
    /// worker, the same DAG, no stop at a barrier under way.
    fn adoptable(&self, id: PipelineId, dag: &PhysicalDag, checkpointed: bool) -> Option<(DeploymentKey, Reported)> {
        let mut a = self.adoption.lock().expect("adoption lock");
        if !a.open {
            return None;
        }
        let live: std::collections::HashSet<WorkerId> =
            self.workers.lock().expect("workers lock").keys().cloned().collect();
        let want = serde_json::to_value(dag).ok()?;
        let key = a.reports.iter().find_map(|(k, r)| {
            let fits = k.pipeline == id
                && r.complete()
                && r.workers().iter().all(|w| live.contains(w))
                && r.checkpointed == checkpointed
                && r.by.values().all(|(_, stop_at, completed)| *stop_at <= *completed)
                && serde_json::from_slice::<serde_json::Value>(&r.dag_json).ok().as_ref() == Some(&want);
            if !fits && k.pipeline == id {
                tracing::info!(pipeline = %id, epoch = k.epoch, complete = r.complete(), "a reported deployment cannot be adopted; it restarts");
            }
            fits.then_some(*k)
        })?;
        let reported = a.reports.remove(&key)?;
        a.taken.insert(key, Vec::new());
        Some((key, reported))
    }

    /// Pipeline `id` is placed anew: the parts workers reported of it stop
    /// first (never two copies of a task).
    fn discard_reports(&self, id: PipelineId) {
        let discarded: Vec<(DeploymentKey, Reported)> = {
            let mut a = self.adoption.lock().expect("adoption lock");
            let keys: Vec<DeploymentKey> = a.reports.keys().filter(|k| k.pipeline == id).copied().collect();
            keys.into_iter()
                .filter_map(|k| a.reports.remove(&k).map(|r| (k, r)))
                .collect()
        };
        for (key, r) in discarded {
            for w in r.by.keys() {
                self.stop_part(key, w);
            }
        }
    }

    /// Ends every worker's session (this master stopped leading): each
    /// worker stops its tasks and registers with the next master.
    pub fn disconnect_all(&self, why: &str) {
        let sessions: Vec<(WorkerId, u64)> = self
            .workers
            .lock()
            .expect("workers lock")
            .iter()
            .map(|(id, w)| (id.clone(), w.session))
            .collect();
        for (id, session) in sessions {
            self.worker_lost(&id, session, why, false, false);
        }
    }

    /// The gRPC service workers open their sessions with.
    pub fn service(self: &Arc<Self>) -> pb::master_server::MasterServer<Service> {
        pb::master_server::MasterServer::new(Service(self.clone()))
            // A worker's answer to `FetchView` carries a piece of a view's rows.
            .max_decoding_message_size(VIEW_PIECE_BYTES + (1 << 20))
    }

    pub fn master_id(&self) -> &str {
        &self.master_id
    }

    /// Where workers reach this master (set once it listens).
    pub fn control_address(&self) -> String {
        self.control_address.lock().expect("address lock").clone()
    }

    pub fn set_control_address(&self, address: String) {
        *self.control_address.lock().expect("address lock") = address;
    }

    /// The workers lost lately and not back, oldest first (at most
    /// [`LOST_WORKERS_MAX`]).
    pub fn lost_workers(&self) -> Vec<LostWorker> {
        self.lost.lock().expect("lost lock").iter().cloned().collect()
    }

    /// The live workers.
    pub fn workers(&self) -> Vec<WorkerInfo> {
        let used = self.used_slots();
        let workers = self.workers.lock().expect("workers lock");
        let mut list: Vec<WorkerInfo> = workers
            .iter()
            .map(|(id, w)| {
                let age = w.last_heartbeat.elapsed();
                WorkerInfo {
                    id: id.0.clone(),
                    data_address: w.data_address.clone(),
                    slots: w.slots,
                    used_slots: used.get(id).copied().unwrap_or(0),
                    labels: w.labels.clone(),
                    heartbeat_age_ms: age.as_millis() as u64,
                    health: if w.draining {
                        "draining"
                    } else if age > HEARTBEAT_INTERVAL * 2 {
                        "late"
                    } else {
                        "healthy"
                    }
                    .to_string(),
                    rss_bytes: w.process.rss_bytes,
                    cpu_ns: w.process.cpu_ns,
                    data_bytes_sent: w.process.data_bytes_sent,
                    data_bytes_received: w.process.data_bytes_received,
                    credit_wait_ns: w.process.credit_waits_ns,
                }
            })
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    fn used_slots(&self) -> HashMap<WorkerId, u32> {
        let mut used: HashMap<WorkerId, u32> = HashMap::new();
        for r in self.routes.lock().expect("routes lock").values() {
            for (w, n) in &r.slots {
                if r.parts.get(w) == Some(&false) {
                    *used.entry(w.clone()).or_default() += n;
                }
            }
        }
        used
    }

    /// Part `key` on `worker` may run until `until` (see [`Cluster::vacating`]).
    fn vacate(&self, key: DeploymentKey, worker: &WorkerId, until: Instant) {
        if self.quorum().is_none() {
            return;
        }
        self.vacating.lock().expect("vacating lock").vacate(key, worker, until);
    }

    /// Part `key` on `worker` stopped (its exit was heard).
    fn part_gone(&self, key: DeploymentKey, worker: &WorkerId) {
        if self.vacating.lock().expect("vacating lock").gone(key, worker) {
            self.vacated.notify_waiters();
        }
    }

    /// Waits until no part matching `which` may still run.
    async fn until_vacated(&self, which: impl Fn(&DeploymentKey, &WorkerId) -> bool) {
        loop {
            let notified = self.vacated.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = self
                .vacating
                .lock()
                .expect("vacating lock")
                .next(Instant::now(), &which);
            let Some(at) = next else { return };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(at.into()) => {}
            }
        }
    }

    /// Before deployment `key`'s parts start: the parts of the pipeline's
    /// other deployments that may still run stop (or are surely gone), and
    /// the placement is written to the quorum (a majority holds it).
    async fn prepare_start(
        &self,
        key: DeploymentKey,
        recorded: &crate::recorded::RecordedPlacement,
        homes: &[(String, WorkerId)],
    ) -> std::result::Result<(), String> {
        self.until_vacated(|k, _| k.pipeline == key.pipeline && *k != key).await;
        let Some(node) = self.quorum() else { return Ok(()) };
        let json = serde_json::to_string(recorded).map_err(|e| e.to_string())?;
        let register = format!("{}{}", crate::recorded::PLACEMENT, key.pipeline.0);
        let mut writes = vec![(register, Some(json))];
        writes.extend(self.home_registers(homes));
        let _writing = self.placement_writes.lock().await;
        // A log placed with this deployment may have moved meanwhile (its
        // worker lost, an INSERT placing it anew): recording the old home
        // would overwrite the new. The deployment is placed again instead.
        if !self.homes_current(homes) {
            return Err("a memory stream's log it reads or writes moved meanwhile".into());
        }
        node.propose(writes)
            .await
            .map(|_| self.homes_recorded(homes))
            .map_err(|e| format!("its placement was not recorded by a majority of masters: {e}"))
    }

    /// Deployment `key`'s parts may be started from now on (before the
    /// first `StartTasks` is sent): its workers whose parts have not
    /// exited, to start them on.
    fn mark_started(&self, key: DeploymentKey) -> Vec<WorkerId> {
        let mut routes = self.routes.lock().expect("routes lock");
        let Some(route) = routes.get_mut(&key) else {
            return Vec::new();
        };
        route.started = true;
        route
            .parts
            .iter()
            .filter(|(_, exited)| !**exited)
            .map(|(w, _)| w.clone())
            .collect()
    }

    /// Deployment `key`'s parts on `workers` never started: each counts as
    /// exited (with `failure`, failed), so the owner settles.
    fn settle_unstarted(&self, key: DeploymentKey, workers: &[WorkerId], failure: Option<String>) {
        let events = {
            let mut routes = self.routes.lock().expect("routes lock");
            let Some(route) = routes.get_mut(&key) else { return };
            let mut events = Vec::new();
            for w in workers {
                if route.parts.insert(w.clone(), true) == Some(false) {
                    events.push(route.events.clone());
                }
            }
            events
        };
        for events in events {
            settle_part(&events, failure.as_deref());
        }
    }

    fn send(&self, worker: &WorkerId, command: pb::master_command::Command) {
        self.send_request(worker, 0, command);
    }

    /// Sends `command` with `request_id` (non-zero: the worker answers
    /// it); false when the worker has no session here or its queue is full.
    fn send_request(&self, worker: &WorkerId, request_id: u64, command: pb::master_command::Command) -> bool {
        let workers = self.workers.lock().expect("workers lock");
        if let Some(w) = workers.get(worker) {
            let message = pb::MasterCommand {
                protocol_version: PROTOCOL_VERSION,
                request_id,
                term: self.command_term(),
                command: Some(command),
            };
            if w.commands.try_send(Ok(message)).is_err() {
                tracing::warn!(%worker, "command queue full or session gone; the worker will be declared dead");
                return false;
            }
            return true;
        }
        false
    }

    /// Materialized view `name` (pipeline `id`, sink operator `sink`) as
    /// the worker running its sink last published it, through the copies
    /// this master keeps; `None` when the sink runs on this master's own
    /// worker, the pipeline has no deployment here, or the worker has not
    /// published it (a deployment starting, or one that just finished and
    /// whose rows this master took, see [`Cluster::bring_finished_view`]).
    pub async fn worker_view(&self, id: PipelineId, sink: OperatorId, name: &str) -> Result<Option<PublishedView>> {
        let worker = {
            let runtimes = self.runtimes.lock().expect("runtimes lock");
            runtimes
                .get(&id)
                .and_then(|(_, r)| r.placement.worker_of(sink, 0).cloned())
        };
        let Some(worker) = worker.filter(|w| *w != self.local.id) else {
            return Ok(None);
        };
        let ask = |known_publication| self.ask_view(&worker, id, name, known_publication);
        let failed = |sqlstate: &str, message: String| match SqlCode::from_sqlstate(sqlstate) {
            Some(code) => Error::user(code, message),
            None => Error::external(format!("worker {worker}: {message}")),
        };
        match crate::view_cache::read_through(&self.view_copies, &worker.0, name, ask, failed).await {
            Ok(view) => Ok(Some(view)),
            Err(e) if e.sqlstate() == SqlCode::ObjectNotInPrerequisiteState.sqlstate() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Asks `worker` for view `name`'s rows (pipeline `id`'s, newer than
    /// publication `known`) and waits for its answer.
    async fn ask_view(&self, worker: &WorkerId, id: PipelineId, name: &str, known: u64) -> Result<pb::ViewRowsReply> {
        let request_id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut requests = self.view_requests.lock().expect("view requests lock");
            if requests.len() >= VIEW_REQUESTS_MAX {
                return Err(Error::user(
                    SqlCode::TooManyConnections,
                    format!(
                        "{VIEW_REQUESTS_MAX} reads of materialized views already wait for their workers; try again"
                    ),
                ));
            }
            requests.insert(
                request_id,
                ViewRequest {
                    tx,
                    reply: None,
                    ipc: Vec::new(),
                },
            );
        }
        let forget = || {
            self.view_requests
                .lock()
                .expect("view requests lock")
                .remove(&request_id);
        };
        let command = pb::master_command::Command::FetchView(pb::FetchView {
            pipeline: id.0,
            request: Some(pb::ViewRowsRequest {
                version: PROTOCOL_VERSION,
                name: name.to_string(),
                known_publication: known,
            }),
        });
        let unreachable = |why: &str| {
            Error::user(
                SqlCode::ConnectionFailure,
                format!("materialized view {name}'s rows are on worker {worker}, which {why}"),
            )
        };
        if !self.send_request(worker, request_id, command) {
            forget();
            return Err(unreachable("is not connected (or its command queue is full)"));
        }
        match tokio::time::timeout(VIEW_FETCH_TIMEOUT, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(unreachable("went away before it answered")),
            Err(_) => {
                forget();
                Err(unreachable(&format!("did not answer within {VIEW_FETCH_TIMEOUT:?}")))
            }
        }
    }

    /// A piece of a worker's answer to a `FetchView`: kept until the last,
    /// then handed to the read waiting for it. An answer past
    /// [`WORKER_VIEW_BYTES_MAX`] fails the read.
    fn view_rows_came(&self, worker: &WorkerId, rows: &pb::WorkerViewRows) {
        let mut requests = self.view_requests.lock().expect("view requests lock");
        let Some(request) = requests.get_mut(&rows.request_id) else {
            return;
        };
        let mut part = rows.reply.clone().unwrap_or_default();
        request.ipc.extend_from_slice(&part.ipc);
        if request.reply.is_none() {
            part.ipc = Default::default();
            request.reply = Some(part);
        }
        let over = request.ipc.len() > WORKER_VIEW_BYTES_MAX;
        if rows.more && !over {
            return;
        }
        let request = requests.remove(&rows.request_id).expect("found above");
        let mut reply = request.reply.unwrap_or_default();
        if over {
            let e = Error::user(
                SqlCode::ProgramLimitExceeded,
                format!("worker {worker} sent more than {WORKER_VIEW_BYTES_MAX} bytes of a view's rows"),
            );
            reply = pb::ViewRowsReply {
                sqlstate: e.sqlstate().to_string(),
                message: e.to_string(),
                ..Default::default()
            };
        } else {
            reply.ipc = request.ipc.into();
        }
        let _ = request.tx.send(reply);
    }

    /// A finished deployment's view rows, on worker `worker` that ran its
    /// sink: published in this master's own `Views` (under pipeline `id`)
    /// before the worker is told the deployment stopped, when it forgets
    /// them. A finished view's rows so stay readable.
    async fn bring_finished_view(&self, id: PipelineId, sink: OperatorId, name: &str) {
        match self.worker_view(id, sink, name).await {
            Ok(Some(view)) => self.local.connectors.views.publish(name, id, view),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(pipeline = %id, view = name, error = %e, "a finished view's rows could not be brought to the master")
            }
        }
    }

    /// Sends every worker the data-plane addresses of all (and so a sign
    /// of life).
    /// With a quorum, only while this master holds its lease: a worker
    /// counts keepalives as its leader's word, and times a broken
    /// session's orphans from the last one ([`sluice_quorum::fence`]).
    fn keepalive(&self) {
        if self.quorum().is_some_and(|q| !q.is_leader()) {
            return;
        }
        let workers = self.workers.lock().expect("workers lock");
        let mut addresses: HashMap<String, String> = workers
            .iter()
            .map(|(id, w)| (id.0.clone(), w.data_address.clone()))
            .collect();
        addresses.insert(self.local.id.0.clone(), self.local.data_address.clone());
        let term = self.command_term();
        for w in workers.values() {
            let _ = w.commands.try_send(Ok(pb::MasterCommand {
                protocol_version: PROTOCOL_VERSION,
                request_id: 0,
                term,
                command: Some(pb::master_command::Command::Peers(pb::Peers {
                    data_addresses: addresses.clone(),
                })),
            }));
        }
    }

    /// A worker is gone: every deployment with a part on it fails. With
    /// `release`, the worker (if it still hears) is told to stop its tasks
    /// before its session closes — they run elsewhere now; without (this
    /// master stops or stops leading), a worker of a quorum keeps them for
    /// the next leader to adopt.
    ///
    /// `silent`: declared lost for silence. With a quorum such a worker
    /// may keep its tasks [`sluice_quorum::fence::Timing::silent_orphan_grace`] longer
    /// (looking for a newer leader), so they move only after
    /// [`sluice_quorum::fence::Timing::silent_worker_move_delay`].
    fn worker_lost(&self, id: &WorkerId, session: u64, why: &str, release: bool, silent: bool) {
        {
            let mut workers = self.workers.lock().expect("workers lock");
            match workers.get(id) {
                Some(w) if w.session == session => {
                    let w = workers.remove(id).expect("present");
                    // INSERTs waiting for it fail now, not at their timeout.
                    self.memory.worker_gone(id);
                    if release {
                        let _ = w.commands.try_send(Ok(pb::MasterCommand {
                            protocol_version: PROTOCOL_VERSION,
                            request_id: 0,
                            term: self.command_term(),
                            command: Some(pb::master_command::Command::Refused(pb::Refused {
                                reason: format!("master {} declared this worker lost: {why}", self.master_id),
                                ..Default::default()
                            })),
                        }));
                    }
                    let entry = LostWorker {
                        id: id.0.clone(),
                        data_address: w.data_address,
                        slots: w.slots,
                        labels: w.labels,
                        lost_at_ms: sluice_types::now_ms(),
                        why: why.to_string(),
                    };
                    remember_lost(&mut self.lost.lock().expect("lost lock"), entry);
                }
                _ => return,
            }
        }
        tracing::warn!(worker = %id, %why, "worker lost; its pipelines restart on the other workers");
        // With a quorum, a lost worker may keep its parts running a while
        // ([`sluice_quorum::fence`]): after silence, its silent grace;
        // after a session that broke or closed (this master cannot tell a
        // worker's death from a reset that left it running orphans for a
        // new leader), an orphan's grace — unless it registers again first
        // and reports what it runs, or its parts' exits are heard.
        // Stepping down (`release` false), this master places nothing more.
        let wait = (self.quorum().is_some() && (silent || release))
            .then(|| Instant::now() + crate::agent::TIMING.orphans_gone_after(silent, self.worker_timeout));
        let reported: Vec<DeploymentKey> = {
            let mut a = self.adoption.lock().expect("adoption lock");
            for events in a.taken.values_mut() {
                events.push((id.clone(), None));
            }
            a.reports
                .iter_mut()
                .filter_map(|(k, r)| r.by.remove(id).map(|_| *k))
                .collect()
        };
        // The owners of its parts hear nothing more from it; they fail
        // (their pipelines move) once its parts surely stopped — at once
        // where no StartTasks went out yet (the placement still being
        // recorded): nothing of the deployment runs there.
        let (owners, unstarted): (Vec<_>, Vec<_>) = {
            let mut routes = self.routes.lock().expect("routes lock");
            routes
                .iter_mut()
                .filter(|(_, route)| route.parts.get(id) == Some(&false))
                .map(|(key, route)| {
                    route.parts.insert(id.clone(), true);
                    (*key, route.events.clone(), route.started)
                })
                .partition(|(_, _, started)| *started)
        };
        let owners: Vec<(DeploymentKey, mpsc::UnboundedSender<PartEvent>)> =
            owners.into_iter().map(|(k, e, _)| (k, e)).collect();
        if let Some(until) = wait {
            for key in reported.iter().chain(owners.iter().map(|(k, _)| k)) {
                self.vacate(*key, id, until);
            }
        }
        let failure = format!("worker {id} was lost: {why}");
        let unstarted = unstarted.into_iter().map(|(k, e, _)| (k, e)).collect();
        self.fail_lost_parts(id, unstarted, false, failure.clone());
        self.fail_lost_parts(id, owners, wait.is_some(), failure);
    }

    /// The owners of `worker`'s parts `owners` hear that they failed and
    /// exited: once they surely stopped (`wait`), or at once.
    fn fail_lost_parts(
        &self,
        worker: &WorkerId,
        owners: Vec<(DeploymentKey, mpsc::UnboundedSender<PartEvent>)>,
        wait: bool,
        failure: String,
    ) {
        let fail = move |events: mpsc::UnboundedSender<PartEvent>| settle_part(&events, Some(&failure));
        match (wait, self.me.upgrade()) {
            (true, Some(cluster)) => {
                let id = worker.clone();
                tokio::spawn(async move {
                    for (key, events) in owners {
                        cluster.until_vacated(|k, w| *k == key && *w == id).await;
                        fail(events);
                    }
                });
            }
            _ => owners.into_iter().for_each(|(_, events)| fail(events)),
        }
    }

    /// A worker asks to leave: each deployment with a part on it stops at
    /// a barrier and starts again from that barrier's checkpoint on the
    /// other workers (nothing replayed, nothing lost); one that cannot stop
    /// at a barrier, or does not in [`DRAIN_STOP_TIMEOUT`], fails over
    /// from its last checkpoint instead. The worker exits once its parts
    /// exited and their deployments stopped.
    fn drain(&self, id: &WorkerId) {
        if let Some(w) = self.workers.lock().expect("workers lock").get_mut(id) {
            w.draining = true;
        }
        let routes = self.routes.lock().expect("routes lock");
        for (key, route) in routes.iter() {
            if route.parts.get(id) != Some(&false) {
                continue;
            }
            // This very deployment's runtime: one replaced meanwhile (an
            // earlier epoch) is ending anyway and its parts with it.
            let runtime = match self.runtimes.lock().expect("runtimes lock").get(&key.pipeline) {
                Some((epoch, runtime)) if *epoch == key.epoch => Some(runtime.clone()),
                Some(_) => continue,
                None => None,
            };
            match runtime {
                Some(runtime) if runtime.can_stop_at_barrier() => {
                    let (pipeline, worker) = (key.pipeline, id.clone());
                    tokio::spawn(async move {
                        match runtime.relocate(DRAIN_STOP_TIMEOUT).await {
                            Ok(checkpoint) => {
                                tracing::info!(%pipeline, %worker, checkpoint, "stopped at a barrier to leave a draining worker")
                            }
                            Err(e) => {
                                tracing::warn!(%pipeline, %worker, error = %e, "could not stop at a barrier to drain; failing over")
                            }
                        }
                    });
                }
                _ => {
                    let _ = route.events.send(PartEvent::Failed {
                        operator: OperatorId(0),
                        instance: 0,
                        failure: Failure::message(format!("worker {id} is draining; moving its tasks")),
                        after_cancel: false,
                    });
                }
            }
        }
    }

    /// Watermark alignment across workers: a worker's source instances'
    /// watermarks go to every other worker with a part of the deployment.
    /// The master keeps none of them (each worker repeats its own every
    /// second), and a full command queue drops a relay, not the worker:
    /// the next report brings the same values.
    fn relay_watermarks(&self, from: &WorkerId, watermarks: &pb::SourceWatermarks) {
        let key = DeploymentKey {
            pipeline: PipelineId(watermarks.pipeline),
            epoch: watermarks.epoch,
        };
        let to: Vec<WorkerId> = {
            let routes = self.routes.lock().expect("routes lock");
            let Some(route) = routes.get(&key) else { return };
            if route.parts.get(from) != Some(&false) {
                return;
            }
            route
                .parts
                .iter()
                .filter(|(w, exited)| !**exited && *w != from)
                .map(|(w, _)| w.clone())
                .collect()
        };
        let workers = self.workers.lock().expect("workers lock");
        let term = self.command_term();
        for w in to.iter().filter_map(|id| workers.get(id)) {
            let _ = w.commands.try_send(Ok(pb::MasterCommand {
                protocol_version: PROTOCOL_VERSION,
                request_id: 0,
                term,
                command: Some(pb::master_command::Command::SourceWatermarks(watermarks.clone())),
            }));
        }
    }

    fn on_event(&self, worker: &WorkerId, event: pb::worker_event::Event) {
        use pb::worker_event::Event;
        match &event {
            Event::Heartbeat(h) => {
                if let Some(w) = self.workers.lock().expect("workers lock").get_mut(worker) {
                    w.last_heartbeat = Instant::now();
                    w.process = h.process.unwrap_or_default();
                }
                let routes = self.routes.lock().expect("routes lock");
                for t in &h.tasks {
                    let key = DeploymentKey {
                        pipeline: PipelineId(t.pipeline),
                        epoch: t.epoch,
                    };
                    if let Some(m) = routes
                        .get(&key)
                        .and_then(|r| r.metrics.get(&(OperatorId(t.operator), t.instance)))
                    {
                        apply_metrics(m, t);
                    }
                }
                return;
            }
            Event::Drain(_) => return self.drain(worker),
            Event::SourceWatermarks(w) => return self.relay_watermarks(worker, w),
            Event::ViewRows(v) => return self.view_rows_came(worker, v),
            Event::Result(r) => return self.memory.appended(r),
            _ => {}
        }
        match event_from_wire(&event) {
            Ok(Some((key, part_event))) => {
                let mut routes = self.routes.lock().expect("routes lock");
                let owned = routes.get_mut(&key).filter(|r| r.parts.get(worker) == Some(&false));
                // A part no deployment here owns (told to stop, reported
                // and not adopted, or declared lost): its exit is what
                // vacating waits for.
                let Some(route) = owned else {
                    // Routes, then adoption: the order `adopt` takes them in.
                    let unrouted = !routes.contains_key(&key);
                    let mut a = self.adoption.lock().expect("adoption lock");
                    if unrouted && let Some(events) = a.taken.get_mut(&key) {
                        events.push((worker.clone(), Some(part_event)));
                        return;
                    }
                    if part_event == PartEvent::Exited
                        && let Some(r) = a.reports.get_mut(&key)
                    {
                        r.by.remove(worker);
                    }
                    drop(a);
                    drop(routes);
                    if part_event == PartEvent::Exited {
                        self.part_gone(key, worker);
                    }
                    return;
                };
                if part_event == PartEvent::Exited {
                    route.parts.insert(worker.clone(), true);
                }
                let _ = route.events.send(part_event);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%worker, error = %e, "malformed event from a worker"),
        }
    }
}

/// Declares workers without heartbeats dead, and tells every worker the
/// data-plane addresses of all (once per heartbeat interval: the
/// master's own heartbeat — a worker that hears nothing from its master
/// for its timeout stops its tasks).
async fn watchdog(cluster: std::sync::Weak<Cluster>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_keepalive = Instant::now();
    loop {
        tick.tick().await;
        let Some(c) = cluster.upgrade() else { return };
        if last_keepalive.elapsed() >= HEARTBEAT_INTERVAL {
            last_keepalive = Instant::now();
            c.keepalive();
        }
        let silent: Vec<(WorkerId, u64)> = c
            .workers
            .lock()
            .expect("workers lock")
            .iter()
            .filter(|(_, w)| w.last_heartbeat.elapsed() > c.worker_timeout)
            .map(|(id, w)| (id.clone(), w.session))
            .collect();
        for (id, session) in silent {
            let why = format!("no heartbeat for {:?}", c.worker_timeout);
            c.worker_lost(&id, session, &why, true, true);
        }
    }
}

/// A broken data link of the master's own worker fails the deployments
/// whose channels it carried.
async fn link_failures(
    cluster: std::sync::Weak<Cluster>,
    mut failures: tokio::sync::broadcast::Receiver<sluice_net::LinkFailure>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let failed = match failures.recv().await {
            Ok(f) => Some((
                f.pipeline,
                f.deployment,
                format!("the data link to worker {} failed: {}", f.peer, f.error),
            )),
            Err(RecvError::Lagged(_)) => None,
            Err(RecvError::Closed) => return,
        };
        let Some(c) = cluster.upgrade() else { return };
        let routes = c.routes.lock().expect("routes lock");
        for (key, route) in routes.iter() {
            let why = match &failed {
                Some((p, d, why)) if key.pipeline == *p && key.epoch == *d => why.clone(),
                Some(_) => continue,
                None => "data links failed (reports were missed)".to_string(),
            };
            let _ = route.events.send(PartEvent::Failed {
                operator: OperatorId(0),
                instance: 0,
                failure: Failure::message(why),
                after_cancel: false,
            });
        }
    }
}

/// The `Master` gRPC service.
pub struct Service(Arc<Cluster>);

type CommandStream = Pin<Box<dyn Stream<Item = std::result::Result<pb::MasterCommand, Status>> + Send>>;

#[tonic::async_trait]
impl pb::master_server::Master for Service {
    type SessionStream = CommandStream;

    async fn session(
        &self,
        request: Request<Streaming<pb::WorkerEvent>>,
    ) -> std::result::Result<Response<Self::SessionStream>, Status> {
        let mut events = request.into_inner();
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE_MAX);
        let first = events.message().await?;
        let refuse = |reason: String| pb::MasterCommand {
            protocol_version: PROTOCOL_VERSION,
            request_id: 0,
            term: 0,
            command: Some(pb::master_command::Command::Refused(pb::Refused {
                reason,
                ..Default::default()
            })),
        };
        let not_leader = self
            .0
            .admission
            .lock()
            .expect("admission lock")
            .as_ref()
            .and_then(|admit| admit())
            .or_else(|| {
                // A new leader takes workers once it is ready to adopt
                // what they kept running.
                let starting =
                    self.0.quorum().is_some() && self.0.adoption.lock().expect("adoption lock").term != self.0.term();
                starting.then(|| {
                    (
                        format!("master {} is taking the lead; try again", self.0.master_id),
                        self.0.control_address(),
                    )
                })
            });
        if let Some((reason, leader_address)) = not_leader {
            let _ = tx.try_send(Ok(pb::MasterCommand {
                protocol_version: PROTOCOL_VERSION,
                request_id: 0,
                term: 0,
                command: Some(pb::master_command::Command::Refused(pb::Refused {
                    reason,
                    not_leader: true,
                    leader_address,
                })),
            }));
            return Ok(Response::new(Box::pin(ReceiverStream::new(rx))));
        }
        let register = match first {
            Some(e) if e.protocol_version != PROTOCOL_VERSION => {
                let _ = tx.try_send(Ok(refuse(version_mismatch(PROTOCOL_VERSION, e.protocol_version))));
                return Ok(Response::new(Box::pin(ReceiverStream::new(rx))));
            }
            Some(pb::WorkerEvent {
                event: Some(pb::worker_event::Event::Register(r)),
                ..
            }) => r,
            _ => return Err(Status::invalid_argument("a session starts with Register")),
        };
        let cluster = self.0.clone();
        let id = WorkerId(register.worker_id.clone());
        let session = cluster.next_session.fetch_add(1, Ordering::Relaxed);
        {
            let mut workers = cluster.workers.lock().expect("workers lock");
            if workers.contains_key(&id) {
                drop(workers);
                // The same id again: the old session is stale (a worker that
                // restarted before its timeout); it is declared lost first.
                let old = cluster
                    .workers
                    .lock()
                    .expect("workers lock")
                    .get(&id)
                    .map(|w| w.session);
                if let Some(old) = old {
                    cluster.worker_lost(&id, old, "it registered again", true, false);
                }
                workers = cluster.workers.lock().expect("workers lock");
            }
            cluster.lost.lock().expect("lost lock").retain(|l| l.id != id.0);
            workers.insert(
                id.clone(),
                WorkerConn {
                    data_address: register.data_address.clone(),
                    slots: register.slots,
                    labels: register.labels.into_iter().collect(),
                    last_heartbeat: Instant::now(),
                    draining: false,
                    process: pb::ProcessMetrics::default(),
                    commands: tx.clone(),
                    session,
                },
            );
        }
        let _ = tx.try_send(Ok(pb::MasterCommand {
            protocol_version: PROTOCOL_VERSION,
            request_id: 0,
            term: cluster.command_term(),
            command: Some(pb::master_command::Command::Registered(pb::Registered {
                master_id: cluster.master_id.clone(),
                checkpoint_dir: cluster.checkpoint_dir.clone(),
                heartbeat_interval_ms: HEARTBEAT_INTERVAL.as_millis() as u32,
            })),
        }));
        tracing::info!(worker = %id, address = %register.data_address, slots = register.slots,
            running = register.running.len(), "worker registered");
        cluster.reported(&id, register.running);
        tokio::spawn(async move {
            let why = loop {
                match events.message().await {
                    Ok(Some(e)) if e.protocol_version != PROTOCOL_VERSION => {
                        break version_mismatch(PROTOCOL_VERSION, e.protocol_version);
                    }
                    Ok(Some(pb::WorkerEvent { event: Some(e), .. })) => cluster.on_event(&id, e),
                    Ok(Some(_)) => {}
                    Ok(None) => break "the worker closed its session".to_string(),
                    Err(e) => break format!("its session broke: {}", e.message()),
                }
            };
            cluster.worker_lost(&id, session, &why, true, false);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Places deployments on the cluster's workers.
pub struct ClusterScheduler {
    pub cluster: Arc<Cluster>,
    pub config: DeployConfig,
    pub strategy: Box<dyn Strategy>,
}

impl ClusterScheduler {
    pub fn new(cluster: Arc<Cluster>, config: DeployConfig, strategy: Box<dyn Strategy>) -> Self {
        ClusterScheduler {
            cluster,
            config,
            strategy,
        }
    }

    fn deploy_placed(
        &self,
        id: PipelineId,
        dag: &PhysicalDag,
        plan: Option<CheckpointPlan>,
    ) -> Result<Arc<PipelineRuntime>> {
        let dag = with_uids(dag);
        let dag = dag.as_ref();
        let cluster = &self.cluster;
        if let Some((key, reported)) = cluster.adoptable(id, dag, plan.is_some()) {
            return Ok(self.adopt(key, reported, dag, plan));
        }
        cluster.discard_reports(id);
        let used = cluster.used_slots();
        let workers: Vec<WorkerSlots> = {
            let conns = cluster.workers.lock().expect("workers lock");
            conns
                .iter()
                .filter(|(_, w)| !w.draining)
                .map(|(id, w)| WorkerSlots {
                    id: id.clone(),
                    slots: w.slots,
                    used: used.get(id).copied().unwrap_or(0),
                    labels: w.labels.clone(),
                })
                .collect()
        };
        let constraints = Constraints::parse(dag_placement(dag))?;
        let local = &cluster.local;
        // With a quorum, memory streams' logs live on workers: a log placed
        // now is recorded with the placement, before anything runs there.
        let mut homes: Vec<(String, WorkerId)> = Vec::new();
        let mut unplaced = None;
        let pinned = MasterOwned::of(dag, &local.id, |stream| match cluster.memory_home(stream) {
            Ok(home) => home.map(|(home, unrecorded)| {
                if unrecorded {
                    homes.push((stream.to_string(), home.clone()));
                }
                home
            }),
            Err(e) => {
                unplaced.get_or_insert(e);
                None
            }
        });
        if let Some(e) = unplaced {
            return Err(e);
        }
        let placement = place(
            dag,
            &self.config,
            (self.strategy.as_ref(), &constraints),
            &workers,
            (&local.id, &pinned as &dyn Pinned),
        )?;
        let epoch = cluster.next_epoch.fetch_add(1, Ordering::Relaxed);
        let key = DeploymentKey { pipeline: id, epoch };
        let parts = placement.workers();
        let (metrics, metrics_of) = instance_metrics(dag);
        let (checkpoint, part_plan) = match plan {
            Some(plan) => {
                let restored_id = plan.restored.as_ref().map_or(0, |r| r.id);
                let location = plan.config.store.describe();
                let owner = OwnerCheckpoint {
                    config: plan.config,
                    restored_id,
                    highest_id: plan.highest_id,
                    resume: None,
                };
                (
                    Some(owner),
                    Some((restored_id, plan.restored.map(Arc::new), plan.handoff, location)),
                )
            }
            None => (None, None),
        };
        let owned = own(
            id,
            dag,
            task_instances(dag, &self.config),
            metrics,
            parts.len(),
            checkpoint,
        );
        let remote: Vec<WorkerId> = parts.iter().filter(|w| **w != local.id).cloned().collect();
        let slots = self.slots(dag, &placement);
        cluster.routes.lock().expect("routes lock").insert(
            key,
            Route {
                events: owned.events.clone(),
                parts: remote.iter().map(|w| (w.clone(), false)).collect(),
                started: false,
                slots,
                metrics: metrics_of.clone(),
            },
        );
        // Every worker's data-plane address (the data planes keep one map).
        let mut peers: HashMap<String, String> = cluster
            .workers
            .lock()
            .expect("workers lock")
            .iter()
            .map(|(id, w)| (id.0.clone(), w.data_address.clone()))
            .collect();
        peers.insert(local.id.0.clone(), local.data_address.clone());
        local
            .transport
            .set_peers(peers.iter().map(|(k, v)| (WorkerId(k.clone()), v.clone())).collect());
        // The master's own part (pinned tasks).
        if parts.contains(&local.id) {
            let events = owned.events.clone();
            let spec = PartSpec {
                id,
                deployment: epoch,
                dag,
                placement: &placement,
                me: &local.id,
                connectors: &local.connectors,
                transport: local.transport.as_ref(),
                config: &self.config,
                metrics: &metrics_of,
                control: PartControl {
                    cancel: owned.cancel.child_token(),
                    paused: owned.paused.clone(),
                },
                checkpoint: match (&part_plan, &owned.signals, &owned.store) {
                    (Some((_, restored, handoff, _)), Some(signals), Some(store)) => Some(PartCheckpoint {
                        store: store.clone(),
                        signals: signals.clone(),
                        restored: restored.clone(),
                        handoff: handoff.clone(),
                    }),
                    _ => None,
                },
            };
            // Pinned operators have every instance here, so no alignment
            // group of this part is split across workers.
            if let Err(e) = start_part(spec, move |e| {
                let _ = events.send(e);
            }) {
                cluster.routes.lock().expect("routes lock").remove(&key);
                owned.abandon();
                return Err(e);
            }
        }
        // The workers' parts.
        let dag_json = serde_json::to_vec(dag).map_err(|e| sluice_types::Error::internal(format!("DAG: {e}")))?;
        let start = pb::StartTasks {
            pipeline: id.0,
            epoch,
            dag_json: dag_json.into(),
            placement: placement
                .tasks
                .iter()
                .map(|(o, i, w)| pb::Placement {
                    operator: o.0,
                    instance: *i,
                    worker_id: w.0.clone(),
                })
                .collect(),
            peers,
            checkpoint: part_plan
                .as_ref()
                .map(|(restored_id, _, handoff, location)| pb::CheckpointPlan {
                    restored_id: *restored_id,
                    handoff_json: handoff
                        .as_ref()
                        .and_then(|h| serde_json::to_vec(h).ok())
                        .unwrap_or_default()
                        .into(),
                    store: location.clone(),
                }),
        };
        let recorded = crate::recorded::RecordedPlacement {
            epoch,
            tasks: placement.tasks.iter().map(|(o, i, w)| (o.0, *i, w.0.clone())).collect(),
        };
        tracing::info!(pipeline = %id, epoch, workers = ?placement.workers(), "deployment placed");
        Ok(self.run_owned(
            key,
            owned,
            placement,
            remote,
            Launch::Start(Box::new(Start {
                command: start,
                placement: recorded,
                homes,
            })),
            view_sink(dag),
        ))
    }

    /// The remote workers' task slots in a deployment placed by
    /// `placement` (a slot per task, not per chained operator).
    fn slots(&self, dag: &PhysicalDag, placement: &Placement) -> HashMap<WorkerId, u32> {
        let mut slots: HashMap<WorkerId, u32> = HashMap::new();
        for (op, instance) in task_instances(dag, &self.config) {
            if let Some(w) = placement
                .worker_of(op, instance)
                .filter(|w| **w != self.cluster.local.id)
            {
                *slots.entry(w.clone()).or_default() += 1;
            }
        }
        slots
    }

    /// Holds an owned deployment as the pipeline's running one: its
    /// runtime (with `placement`), and the task forwarding its signals to
    /// `workers` until it ends.
    fn run_owned(
        &self,
        key: DeploymentKey,
        owned: sluice_dataflow::deploy::Owned,
        placement: Placement,
        workers: Vec<WorkerId>,
        launch: Launch,
        view: Option<(String, OperatorId)>,
    ) -> Arc<PipelineRuntime> {
        let cluster = &self.cluster;
        let mut runtime = owned.runtime;
        runtime.placement = placement;
        let runtime = Arc::new(runtime);
        tokio::spawn(forward(
            cluster.clone(),
            key,
            workers,
            runtime.clone(),
            (owned.cancel, owned.paused, owned.signals),
            launch,
            view,
        ));
        cluster
            .runtimes
            .lock()
            .expect("runtimes lock")
            .insert(key.pipeline, (key.epoch, runtime.clone()));
        runtime
    }

    /// Owns deployment `key`, which workers kept running through a change
    /// of the quorum's leader: its tasks go on where they are. The
    /// coordinator continues from the signals the workers had — the newest
    /// completed checkpoint, and the one in flight (if any), which it
    /// completes from the acknowledgements the workers send again.
    fn adopt(
        &self,
        key: DeploymentKey,
        reported: Reported,
        dag: &PhysicalDag,
        plan: Option<CheckpointPlan>,
    ) -> Arc<PipelineRuntime> {
        let cluster = &self.cluster;
        let id = key.pipeline;
        let placement = Placement {
            tasks: reported
                .placement
                .iter()
                .map(|p| (OperatorId(p.operator), p.instance, WorkerId(p.worker_id.clone())))
                .collect(),
        };
        let workers: Vec<WorkerId> = reported.workers().into_iter().collect();
        let trigger = reported.by.values().map(|s| s.0).max().unwrap_or(0);
        let completed = reported.by.values().map(|s| s.2).max().unwrap_or(0);
        let (metrics, metrics_of) = instance_metrics(dag);
        let checkpoint = plan.map(|plan| OwnerCheckpoint {
            config: plan.config,
            restored_id: completed,
            highest_id: plan.highest_id.max(trigger),
            resume: (trigger > completed).then_some(trigger),
        });
        let owned = own(
            id,
            dag,
            task_instances(dag, &self.config),
            metrics,
            workers.len(),
            checkpoint,
        );
        let slots = self.slots(dag, &placement);
        let mut lost = Vec::new();
        {
            // The route and what its parts said since `adoptable` took the
            // deployment, at once (routes, then adoption, as `on_event`).
            let mut routes = cluster.routes.lock().expect("routes lock");
            let mut route = Route {
                events: owned.events.clone(),
                parts: workers.iter().map(|w| (w.clone(), false)).collect(),
                started: true,
                slots,
                metrics: metrics_of,
            };
            let said = cluster
                .adoption
                .lock()
                .expect("adoption lock")
                .taken
                .remove(&key)
                .unwrap_or_default();
            for (w, event) in said {
                if route.parts.get(&w) != Some(&false) {
                    continue;
                }
                match event {
                    Some(event) => {
                        if event == PartEvent::Exited {
                            route.parts.insert(w.clone(), true);
                        }
                        let _ = route.events.send(event);
                    }
                    None => {
                        route.parts.insert(w.clone(), true);
                        lost.push(w);
                    }
                }
            }
            let events = route.events.clone();
            routes.insert(key, route);
            drop(routes);
            for w in lost {
                let until = Instant::now() + crate::agent::TIMING.orphans_gone_after(false, cluster.worker_timeout);
                cluster.vacate(key, &w, until);
                let why = format!("worker {w} was lost while its part was being adopted");
                cluster.fail_lost_parts(&w, vec![(key, events.clone())], true, why);
            }
        }
        tracing::info!(pipeline = %id, epoch = key.epoch, ?workers, trigger, completed, "deployment adopted: its tasks keep running");
        self.run_owned(key, owned, placement, workers, Launch::Adopted, view_sink(dag))
    }
}

/// A materialized view's sink in `dag`: the view's name and the operator.
pub(crate) fn view_sink(dag: &PhysicalDag) -> Option<(String, OperatorId)> {
    dag.operators.iter().find_map(|o| match &o.kind {
        sluice_plan::OperatorKind::Sink(s) if s.connector == "view" => s
            .options
            .get(sluice_connectors::connector::view::VIEW_NAME_OPTION)
            .map(|name| (name.clone(), o.id)),
        _ => None,
    })
}

/// A part its owner will hear nothing more from: it failed (with
/// `failure`) and exited.
fn settle_part(events: &mpsc::UnboundedSender<PartEvent>, failure: Option<&str>) {
    if let Some(why) = failure {
        let _ = events.send(PartEvent::Failed {
            operator: OperatorId(0),
            instance: 0,
            failure: Failure::message(why.to_string()),
            after_cancel: false,
        });
    }
    let _ = events.send(PartEvent::Exited);
}

fn stop_command(key: DeploymentKey) -> pb::master_command::Command {
    pb::master_command::Command::Stop(pb::StopTasks {
        pipeline: key.pipeline.0,
        epoch: key.epoch,
    })
}

/// The placement constraint a DAG carries (its sinks' `placement` option).
fn dag_placement(dag: &PhysicalDag) -> &str {
    dag.operators
        .iter()
        .find_map(|o| match &o.kind {
            sluice_plan::OperatorKind::Sink(s) => s.options.get("placement").map(String::as_str),
            _ => None,
        })
        .unwrap_or("")
}

/// The owner's controls a deployment's workers follow.
type OwnerControls = (
    tokio_util::sync::CancellationToken,
    tokio::sync::watch::Receiver<bool>,
    Option<BarrierSignals>,
);

/// How a deployment's parts on workers get going.
enum Launch {
    /// They run already (a new leader adopted them): they hear the
    /// owner's signals at once.
    Adopted,
    /// Placed anew: started once no part of the pipeline may still run
    /// elsewhere and, with a quorum, the placement is held by a majority
    /// of masters (so the next leader knows whom to wait for).
    Start(Box<Start>),
}

/// A deployment placed anew: what its workers are told, what is recorded
/// before (its placement, and the memory streams' logs placed with it).
struct Start {
    command: pb::StartTasks,
    placement: crate::recorded::RecordedPlacement,
    homes: Vec<(String, WorkerId)>,
}

/// Forwards the owner's signals to the deployment's workers until every
/// part exited. An adopted deployment's workers get them at once: that is
/// how a worker learns its part was adopted.
async fn forward(
    cluster: Arc<Cluster>,
    key: DeploymentKey,
    workers: Vec<WorkerId>,
    runtime: Arc<PipelineRuntime>,
    (cancel, mut paused, signals): OwnerControls,
    launch: Launch,
    view: Option<(String, OperatorId)>,
) {
    let send_all = |command: pb::master_command::Command| {
        for w in &workers {
            cluster.send(w, command.clone());
        }
    };
    let (mut trigger, mut stop_at, mut completed) = match &signals {
        Some(s) => (
            Some(s.trigger.clone()),
            Some(s.stop_at.clone()),
            Some(s.completed.clone()),
        ),
        None => (None, None, None),
    };
    let checkpoint = |t: &Option<tokio::sync::watch::Receiver<u64>>,
                      s: &Option<tokio::sync::watch::Receiver<u64>>,
                      c: &Option<tokio::sync::watch::Receiver<u64>>| {
        pb::master_command::Command::Checkpoint(pb::Checkpoint {
            pipeline: key.pipeline.0,
            epoch: key.epoch,
            trigger: t.as_ref().map_or(0, |r| *r.borrow()),
            stop_at: s.as_ref().map_or(0, |r| *r.borrow()),
            completed: c.as_ref().map_or(0, |r| *r.borrow()),
        })
    };
    async fn changed(r: &mut Option<tokio::sync::watch::Receiver<u64>>) {
        let closed = match r {
            Some(r) => r.changed().await.is_err(),
            None => true,
        };
        if closed {
            std::future::pending::<()>().await;
        }
    }
    let signals_so_far = |paused: &tokio::sync::watch::Receiver<bool>| {
        let p = *paused.borrow();
        send_all(pb::master_command::Command::Paused(pb::SetPaused {
            pipeline: key.pipeline.0,
            epoch: key.epoch,
            paused: p,
        }));
        if signals.is_some() {
            send_all(checkpoint(&trigger, &stop_at, &completed));
        }
    };
    match launch {
        Launch::Adopted => signals_so_far(&paused),
        // A single master records nothing; a deployment with no part on a
        // worker (a session query on the leader's own worker) has nothing
        // to record either: its parts die with this master.
        Launch::Start(launch) if cluster.quorum().is_none() || workers.is_empty() => {
            cluster.mark_started(key);
            send_all(pb::master_command::Command::Start(launch.command));
        }
        Launch::Start(launch) => {
            let Start {
                command: start,
                placement: recorded,
                homes,
            } = *launch;
            let ready = tokio::select! {
                r = cluster.prepare_start(key, &recorded, &homes) => Some(r),
                _ = cancel.cancelled() => None,
            };
            match ready {
                Some(Ok(())) => {
                    // Not to a part the owner counts as exited already (its
                    // worker was lost while this waited).
                    let live = cluster.mark_started(key);
                    for w in &live {
                        cluster.send(w, pb::master_command::Command::Start(start.clone()));
                    }
                    // What the owner signalled while it waited.
                    signals_so_far(&paused);
                }
                Some(Err(why)) => {
                    tracing::warn!(pipeline = %key.pipeline, epoch = key.epoch, %why, "deployment not started");
                    cluster.settle_unstarted(key, &workers, Some(why));
                }
                None => cluster.settle_unstarted(key, &workers, None),
            }
        }
    }
    let mut cancelled = false;
    loop {
        tokio::select! {
            _ = runtime.wait() => break,
            _ = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                send_all(stop_command(key));
            }
            r = paused.changed() => {
                if r.is_err() { continue; }
                let p = *paused.borrow();
                send_all(pb::master_command::Command::Paused(pb::SetPaused { pipeline: key.pipeline.0, epoch: key.epoch, paused: p }));
            }
            _ = changed(&mut trigger) => send_all(checkpoint(&trigger, &stop_at, &completed)),
            _ = changed(&mut stop_at) => send_all(checkpoint(&trigger, &stop_at, &completed)),
            _ = changed(&mut completed) => send_all(checkpoint(&trigger, &stop_at, &completed)),
        }
    }
    // The deployment ended. A finished view's rows come here first: the
    // worker that ran its sink forgets them when told to stop.
    if let Some((name, sink)) = &view
        && runtime.status() == PipelineStatus::Finished
    {
        cluster.bring_finished_view(key.pipeline, *sink, name).await;
    }
    // Its last commit reaches the sinks, its parts are told to stop (a
    // part still running after its owner settled — it cannot, but a
    // stale command costs nothing).
    send_all(checkpoint(&trigger, &stop_at, &completed));
    send_all(stop_command(key));
    cluster.routes.lock().expect("routes lock").remove(&key);
    cluster.local.transport.close_deployment(key.pipeline, key.epoch);
    let mut runtimes = cluster.runtimes.lock().expect("runtimes lock");
    if runtimes
        .get(&key.pipeline)
        .is_some_and(|(_, r)| Arc::ptr_eq(r, &runtime))
    {
        runtimes.remove(&key.pipeline);
    }
}

impl Scheduler for ClusterScheduler {
    fn deploy(&self, id: PipelineId, dag: &PhysicalDag) -> Result<Arc<PipelineRuntime>> {
        self.deploy_placed(id, dag, None)
    }

    fn deploy_checkpointed(
        &self,
        id: PipelineId,
        dag: &PhysicalDag,
        plan: CheckpointPlan,
    ) -> Result<Arc<PipelineRuntime>> {
        self.deploy_placed(id, dag, Some(plan))
    }

    fn stop(&self, id: PipelineId) {
        if let Some((_, r)) = self.cluster.runtimes.lock().expect("runtimes lock").remove(&id) {
            r.stop();
        }
    }

    fn release_stream(&self, stream: &str) {
        // In the master, or with a quorum on a worker.
        self.cluster.local.connectors.memory.remove(stream);
        self.cluster.drop_memory(stream);
    }
    fn append_memory<'a>(
        &'a self,
        stream: &'a str,
        options: &'a BTreeMap<String, String>,
        rows: &'a [arrow::record_batch::RecordBatch],
    ) -> futures::future::BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(self.cluster.append_memory(stream, options, rows))
    }
    fn worker_view<'a>(
        &'a self,
        id: PipelineId,
        sink: OperatorId,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<PublishedView>>> {
        Box::pin(self.cluster.worker_view(id, sink, name))
    }
}

#[cfg(test)]
mod lost_tests {
    use super::*;

    #[test]
    fn vacating_parts_go_at_their_exit_their_workers_report_or_their_deadline() {
        let key = |pipeline, epoch| DeploymentKey {
            pipeline: PipelineId(pipeline),
            epoch,
        };
        let (w1, w2) = (WorkerId("w1".into()), WorkerId("w2".into()));
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut v = Vacating::default();
        v.vacate(key(1, 7), &w1, t0 + 3 * s);
        v.vacate(key(1, 7), &w1, t0 + s); // the later deadline holds
        v.vacate(key(1, 8), &w2, t0 + 2 * s);
        v.vacate(key(2, 9), &w1, t0 + 5 * s);
        let of = |p| move |k: &DeploymentKey, _: &WorkerId| k.pipeline == PipelineId(p);
        assert_eq!(v.next(t0, of(1)), Some(t0 + 2 * s));
        assert_eq!(v.next(t0, of(3)), None);
        // Past a deadline the part is surely gone.
        assert_eq!(v.next(t0 + 2 * s, of(1)), Some(t0 + 3 * s));
        assert!(!v.contains(key(1, 8), &w2));
        // Its exit heard.
        assert!(v.gone(key(1, 7), &w1));
        assert!(!v.gone(key(1, 7), &w1));
        assert_eq!(v.next(t0, of(1)), None);
        // Its worker registered again without it (another worker's stay).
        v.vacate(key(1, 10), &w2, t0 + 5 * s);
        v.registered(&w1, &std::collections::HashSet::new());
        assert_eq!(v.next(t0, of(2)), None);
        v.registered(&w2, &std::collections::HashSet::from([key(1, 10)]));
        assert_eq!(v.next(t0, of(1)), Some(t0 + 5 * s), "still reported: still vacating");
    }

    #[test]
    fn lost_workers_are_bounded_oldest_out_and_one_entry_per_id() {
        let worker = |i: usize| LostWorker {
            id: format!("w{i}"),
            data_address: String::new(),
            slots: 1,
            labels: BTreeMap::new(),
            lost_at_ms: i as i64,
            why: "test".into(),
        };
        let mut lost = std::collections::VecDeque::new();
        for i in 0..LOST_WORKERS_MAX {
            remember_lost(&mut lost, worker(i));
        }
        assert_eq!(lost.len(), LOST_WORKERS_MAX);
        remember_lost(&mut lost, worker(LOST_WORKERS_MAX));
        assert_eq!(lost.len(), LOST_WORKERS_MAX, "at the limit the oldest goes");
        assert_eq!(lost.front().unwrap().id, "w1");
        assert_eq!(lost.back().unwrap().id, format!("w{LOST_WORKERS_MAX}"));
        // Lost again: one entry, now the latest.
        remember_lost(&mut lost, worker(5));
        assert_eq!(lost.iter().filter(|l| l.id == "w5").count(), 1);
        assert_eq!(lost.back().unwrap().id, "w5");
        assert_eq!(lost.len(), LOST_WORKERS_MAX);
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    /// A master's cluster, leading a quorum of one (in `dir`).
    pub(super) async fn leading_cluster(dir: &std::path::Path) -> (Arc<Cluster>, sluice_quorum::QuorumNode) {
        let local = WorkerId(format!("{MASTER_WORKER_PREFIX}m1"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let transport = sluice_net::DataPlane::start(local.clone(), listener, Default::default()).unwrap();
        let cluster = Cluster::new(
            "m1".into(),
            dir.join("checkpoints").display().to_string(),
            WORKER_TIMEOUT_DEFAULT,
            MasterWorker {
                id: local,
                data_address: transport.local_addr().to_string(),
                connectors: Default::default(),
                transport,
            },
        );
        let node =
            sluice_quorum::QuorumNode::start("m1".into(), BTreeMap::new(), sluice_quorum::Config::default(), dir)
                .unwrap();
        cluster.set_quorum(node.clone());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !node.is_leader() {
            assert!(Instant::now() < deadline, "a quorum of one elects itself");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (cluster, node)
    }

    /// A new leader records the cluster only once it took over: before its
    /// lead loop opens the adoption, its empty registry would make every
    /// placement the old leader recorded look gone, and the adoption would
    /// then wait for no worker and start the pipelines anew (a CI run of
    /// the quorum test saw it). Once the adoption closed, a placement
    /// nothing runs goes.
    #[tokio::test]
    async fn a_new_leader_keeps_the_recorded_placements_until_it_took_over() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        let pipeline = PipelineId(3);
        let placement = crate::recorded::RecordedPlacement {
            epoch: 9,
            tasks: vec![(0, 0, "w1".into()), (1, 0, "w1".into())],
        };
        let old = crate::recorded::registers(&[], &BTreeMap::from([(pipeline, placement.clone())]));
        node.propose(old.into_iter().map(|(k, v)| (k, Some(v))).collect())
            .await
            .unwrap();
        let recorded = |node: &sluice_quorum::QuorumNode| crate::recorded::placements(&node.state());
        cluster.record().await.unwrap();
        assert_eq!(
            recorded(&node).get(&pipeline),
            Some(&placement),
            "kept before taking over"
        );
        let generation = cluster.open_adoption();
        assert!(
            !cluster.adoption_ready(&[pipeline]),
            "the adoption waits for w1, which the placement names"
        );
        cluster.record().await.unwrap();
        assert_eq!(recorded(&node).get(&pipeline), Some(&placement), "kept while adopting");
        cluster.close_adoption(generation);
        cluster.record().await.unwrap();
        assert_eq!(recorded(&node).get(&pipeline), None, "nothing of it runs: it goes");
        node.shutdown();
    }

    /// A worker lost while a deployment's placement was still being
    /// recorded never got its StartTasks: its part settles at once (the
    /// pipeline moves now), while a part that may have started vacates
    /// until the worker's orphans are surely gone.
    #[tokio::test]
    async fn a_part_lost_before_its_start_settles_at_once_a_started_one_vacates() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        let w1 = WorkerId("w1".into());
        let (commands, _commands_rx) = mpsc::channel(4);
        cluster.workers.lock().unwrap().insert(
            w1.clone(),
            WorkerConn {
                data_address: "127.0.0.1:1".into(),
                slots: 4,
                labels: BTreeMap::new(),
                last_heartbeat: Instant::now(),
                draining: false,
                process: Default::default(),
                commands,
                session: 1,
            },
        );
        let mut owners = Vec::new();
        for (pipeline, started) in [(1, false), (2, true)] {
            let key = DeploymentKey {
                pipeline: PipelineId(pipeline),
                epoch: 1,
            };
            let (events, rx) = mpsc::unbounded_channel();
            cluster.routes.lock().unwrap().insert(
                key,
                Route {
                    events,
                    parts: HashMap::from([(w1.clone(), false)]),
                    started,
                    slots: HashMap::new(),
                    metrics: HashMap::new(),
                },
            );
            owners.push((key, rx));
        }
        cluster.worker_lost(&w1, 1, "connection reset", true, false);
        tokio::task::yield_now().await;
        let [(unstarted, mut unstarted_rx), (started, mut started_rx)] = <[_; 2]>::try_from(owners).unwrap();
        assert!(matches!(unstarted_rx.try_recv(), Ok(PartEvent::Failed { .. })));
        assert!(matches!(unstarted_rx.try_recv(), Ok(PartEvent::Exited)));
        assert!(started_rx.try_recv().is_err(), "a started part's owner waits");
        let vacating = cluster.vacating.lock().unwrap();
        assert!(!vacating.contains(unstarted, &w1), "nothing of it runs on w1");
        assert!(vacating.contains(started, &w1), "it may run on as an orphan");
        drop(vacating);
        node.shutdown();
    }

    /// Reads of views waiting for workers are bounded: at the limit one
    /// more is refused with 53300 and nothing is sent; below it a read of
    /// a worker with no session fails at once with 08006 naming it, and
    /// leaves no request behind.
    /// A read waiting for its worker under `id`.
    fn hold(cluster: &Cluster, id: u64) -> tokio::sync::oneshot::Receiver<pb::ViewRowsReply> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let request = ViewRequest {
            tx,
            reply: None,
            ipc: Vec::new(),
        };
        cluster.view_requests.lock().unwrap().insert(id, request);
        rx
    }

    /// A worker's answer in pieces is put together: the first piece's
    /// fields, every piece's rows in order; only the last hands it over.
    #[tokio::test]
    async fn a_views_rows_come_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        let w1 = WorkerId("w1".into());
        let mut rx = hold(&cluster, 7);
        let piece = |ipc: &'static [u8], first: bool, more: bool| pb::WorkerViewRows {
            request_id: 7,
            reply: Some(pb::ViewRowsReply {
                ipc: ipc.to_vec().into(),
                publication: if first { 42 } else { 0 },
                ..Default::default()
            }),
            more,
        };
        cluster.view_rows_came(&w1, &piece(b"ab", true, true));
        cluster.view_rows_came(&w1, &piece(b"cd", false, true));
        assert!(rx.try_recv().is_err(), "not before the last piece");
        cluster.view_rows_came(&w1, &piece(b"e", false, false));
        let reply = rx.try_recv().unwrap();
        assert_eq!((&reply.ipc[..], reply.publication), (&b"abcde"[..], 42));
        assert!(cluster.view_requests.lock().unwrap().is_empty());
        // A piece for a read that gave up is dropped.
        cluster.view_rows_came(&w1, &piece(b"x", true, false));
        node.shutdown();
    }

    #[tokio::test]
    async fn view_reads_waiting_for_workers_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, node) = leading_cluster(dir.path()).await;
        let w1 = WorkerId("w1".into());
        let mut held = Vec::new();
        for id in 0..VIEW_REQUESTS_MAX as u64 - 1 {
            held.push(hold(&cluster, 1_000_000 + id));
        }
        let e = cluster.ask_view(&w1, PipelineId(1), "v", 0).await.unwrap_err();
        assert_eq!(e.sqlstate(), "08006", "{e}");
        assert!(e.to_string().contains("worker w1"), "{e}");
        assert_eq!(cluster.view_requests.lock().unwrap().len(), VIEW_REQUESTS_MAX - 1);
        held.push(hold(&cluster, 2_000_000));
        let e = cluster.ask_view(&w1, PipelineId(1), "v", 0).await.unwrap_err();
        assert_eq!(e.sqlstate(), "53300", "{e}");
        assert_eq!(cluster.view_requests.lock().unwrap().len(), VIEW_REQUESTS_MAX);
        node.shutdown();
    }
}
