//! Turning a [`PhysicalDag`] into running, supervised tasks, and the
//! owner's view of them.
//!
//! A deployment has one *owner* ([`own`]: the [`PipelineRuntime`] the
//! master holds, the checkpoint coordinator, and the loop that follows the
//! parts' reports) and one *part* per process running some of its tasks
//! ([`crate::part::start_part`]). A part opens one channel per (edge,
//! upstream instance, downstream instance) end it holds through the
//! [`Transport`], builds each operator instance, and spawns it as a tokio
//! task (a filter/projection behind a forward edge runs inside its
//! upstream's task instead: operator chaining, see [`crate::exchange`])
//! under a supervisor. A task that returns an error or panics is reported;
//! the owner marks the pipeline failed (with its operator id and the error)
//! and cancels every part. Nothing outside the pipeline is affected.
//!
//! [`deploy_with`] runs owner and part in this process (the playground).
//! In a cluster the master owns the deployment and each worker runs a part;
//! the same [`PartEvent`]s travel over the worker's session.

use crate::channel::Transport;
use crate::checkpoint::coordinator::{self, BarrierSignals, CHECKPOINTS_ENDED, CoordinatorEvent, PendingCheckpoints};
use crate::checkpoint::{CheckpointConfig, RestoredCheckpoint};
use crate::metrics::TaskMetrics;
pub use crate::part::{ConnectorFactory, DeployConfig, Failure, InstanceContext};
use crate::part::{PartCheckpoint, PartControl, PartEvent, PartSpec, Placement, instance_metrics, start_part};
use sluice_plan::PhysicalDag;
use sluice_types::{Error, OperatorId, PipelineId, Result, SqlCode, WorkerId};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Where a pipeline is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineStatus {
    Running,
    /// Every input ended and every task finished.
    Finished,
    /// Stopped on request.
    Stopped,
    /// A task failed; the pipeline's tasks were stopped.
    Failed {
        operator: OperatorId,
        instance: u32,
        error: String,
        /// The SQLSTATE class when the error was the data's or the query's fault.
        code: Option<SqlCode>,
    },
}

impl PipelineStatus {
    /// `running`, `finished`, `stopped`, `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            PipelineStatus::Running => "running",
            PipelineStatus::Finished => "finished",
            PipelineStatus::Stopped => "stopped",
            PipelineStatus::Failed { .. } => "failed",
        }
    }
}

/// A deployed pipeline: watch it, stop it, wait for it.
pub struct PipelineRuntime {
    pub id: PipelineId,
    /// One per operator instance, chained ones included.
    pub metrics: Vec<Arc<TaskMetrics>>,
    /// Tasks running the pipeline (operator instances not chained into another's task).
    pub tasks: usize,
    /// Which worker runs each operator instance.
    pub placement: Placement,
    status: Arc<StatusCell>,
    cancel: CancellationToken,
    done: watch::Receiver<bool>,
    paused: watch::Sender<bool>,
    /// Stops the pipeline at a barrier (a checkpointed deployment).
    stop: Option<coordinator::StopHandles>,
    /// Set when it stops at a barrier only to run again elsewhere (a
    /// draining worker): its supervisor restarts it from that barrier's
    /// checkpoint at once, as no failure.
    relocating: std::sync::atomic::AtomicBool,
}

impl PipelineRuntime {
    pub fn status(&self) -> PipelineStatus {
        self.status.get()
    }

    /// The workers running the tasks, each with its number of task
    /// instances (`w1 (2), w2 (2)`): SHOW PIPELINES.
    pub fn workers(&self) -> String {
        let mut count: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for (_, _, w) in &self.placement.tasks {
            *count.entry(w.0.as_str()).or_default() += 1;
        }
        count
            .iter()
            .map(|(w, n)| format!("{w} ({n})"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Pauses (true) or resumes (false) the pipeline's sources; the rest of
    /// the pipeline drains what is in flight and waits.
    pub fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// True while paused.
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// True when the deployment can stop at a barrier
    /// ([`PipelineRuntime::stop_at_barrier`]).
    pub fn can_stop_at_barrier(&self) -> bool {
        self.stop.is_some()
    }

    /// Stops the pipeline at a barrier to run it again from that barrier's
    /// checkpoint, placed anew (a worker drains): nothing read before the
    /// barrier is read again, nothing after it is lost. On an error the
    /// pipeline failed instead and restarts from its last checkpoint.
    pub async fn relocate(&self, timeout: Duration) -> Result<u64> {
        self.relocating.store(true, std::sync::atomic::Ordering::SeqCst);
        self.stop_at_barrier(timeout).await
    }

    /// True once [`PipelineRuntime::relocate`] was asked.
    pub fn relocating(&self) -> bool {
        self.relocating.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Asks every task to stop.
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    /// Stops the pipeline at an aligned barrier carrying
    /// [`Mutation::Stop`](crate::message::Mutation::Stop): every task
    /// snapshots for it and exits, two-phase-commit sinks commit it, and
    /// this returns the id of that checkpoint once it is complete (stored,
    /// with its manifest) and every task has exited. Every row read before
    /// the barrier went through the whole pipeline; none after it was
    /// read. The status is then `Stopped`.
    ///
    /// Fails — and fails the pipeline, which its supervisor restarts from
    /// its last complete checkpoint — when a task fails meanwhile, the
    /// pipeline finishes first, or the barrier does not complete within
    /// `timeout`.
    pub async fn stop_at_barrier(&self, timeout: Duration) -> Result<u64> {
        let Some(stop) = &self.stop else {
            return Err(Error::internal(
                "this deployment has no checkpoint coordinator to stop at a barrier",
            ));
        };
        self.status.set_stopping();
        stop.request.send_replace(true);
        let (mut stop_at, mut completed, mut done) = (stop.stop_at.clone(), stop.completed.clone(), self.done.clone());
        let wait = async {
            let id = tokio::select! {
                id = stop_at.wait_for(|id| *id > 0) => id.map(|id| *id).ok(),
                _ = done.wait_for(|d| *d) => None,
            };
            let Some(id) = id.or_else(|| Some(*stop_at.borrow()).filter(|id| *id > 0)) else {
                return Err(self.not_stopped());
            };
            if id == CHECKPOINTS_ENDED {
                self.status.clear_stopping();
                stop.request.send_replace(false);
                return Err(Error::external(
                    "the pipeline's input ended: every task finished, so it stops at no barrier",
                ));
            }
            let _ = completed.wait_for(|c| *c >= id).await;
            let _ = done.wait_for(|d| *d).await;
            if *completed.borrow() >= id && self.status() == PipelineStatus::Stopped {
                Ok(id)
            } else {
                Err(self.not_stopped())
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let error = format!("the pipeline did not stop at a barrier within {timeout:?}");
                self.status
                    .fail(OperatorId(0), 0, Failure::message(error.clone()), false);
                self.cancel.cancel();
                Err(Error::external(error))
            }
        }
    }

    /// Why a stop at a barrier did not happen.
    fn not_stopped(&self) -> Error {
        match self.status() {
            PipelineStatus::Failed { error, .. } => {
                Error::external(format!("the pipeline failed before it stopped at the barrier: {error}"))
            }
            PipelineStatus::Finished => Error::external("the pipeline's input ended before it stopped at the barrier"),
            other => Error::external(format!(
                "the pipeline did not stop at the barrier (it is {})",
                other.name()
            )),
        }
    }

    /// Waits until every task has exited; returns the final status.
    pub async fn wait(&self) -> PipelineStatus {
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
        self.status()
    }
}

/// A pipeline's status, shared by its tasks' supervisors and its
/// [`PipelineRuntime`].
#[derive(Debug)]
struct StatusCell(Mutex<Recorded>);

#[derive(Debug)]
struct Recorded {
    status: PipelineStatus,
    /// The failure in `status` is a consequence ([`Failure::consequence`]).
    consequence: bool,
    /// Asked to stop at a barrier: tasks that exit settle it as stopped.
    stopping: bool,
}

impl StatusCell {
    fn new() -> Self {
        StatusCell(Mutex::new(Recorded {
            status: PipelineStatus::Running,
            consequence: false,
            stopping: false,
        }))
    }

    fn get(&self) -> PipelineStatus {
        self.0.lock().expect("status lock").status.clone()
    }

    /// Records a failure of instance `instance` of `operator`. The first
    /// failure is kept, except that a cause replaces a consequence (a task
    /// whose downstream went away usually notices before the failed
    /// downstream task reports). After a cancel only a cause replaces a
    /// consequence: a stop on request is not a failure.
    fn fail(&self, operator: OperatorId, instance: u32, failure: Failure, after_cancel: bool) {
        let mut r = self.0.lock().expect("status lock");
        let replace = match r.status {
            PipelineStatus::Running => !after_cancel,
            PipelineStatus::Failed { .. } => r.consequence && !failure.consequence,
            _ => false,
        };
        if replace {
            r.consequence = failure.consequence;
            r.status = PipelineStatus::Failed {
                operator,
                instance,
                error: failure.error,
                code: failure.code,
            };
        }
    }

    fn set_stopping(&self) {
        self.0.lock().expect("status lock").stopping = true;
    }

    fn clear_stopping(&self) {
        self.0.lock().expect("status lock").stopping = false;
    }

    /// Every task exited: a running pipeline stopped (when cancelled or
    /// stopped at a barrier) or finished.
    fn settle(&self, cancelled: bool) {
        let mut r = self.0.lock().expect("status lock");
        if r.status == PipelineStatus::Running {
            r.status = if cancelled || r.stopping {
                PipelineStatus::Stopped
            } else {
                PipelineStatus::Finished
            };
        }
    }
}

/// How a deployment checkpoints, and the checkpoint it starts from.
pub struct CheckpointPlan {
    pub config: CheckpointConfig,
    /// The newest complete checkpoint (None: a fresh start).
    pub restored: Option<RestoredCheckpoint>,
    /// The highest checkpoint id used before (new ids are above it).
    pub highest_id: u64,
    /// After `ALTER PIPELINE`: where the new version's operators find
    /// their state in the checkpoint the old version stopped at. Applies
    /// only when that checkpoint is the one restored.
    pub handoff: Option<sluice_plan::diff::StateHandoff>,
}

/// Deploys `dag` as pipeline `id` without checkpoints: every task is
/// running when this returns.
pub fn deploy(
    id: PipelineId,
    dag: &PhysicalDag,
    connectors: &dyn ConnectorFactory,
    transport: &dyn Transport,
    config: &DeployConfig,
) -> Result<PipelineRuntime> {
    deploy_with(id, dag, connectors, transport, config, None)
}

/// A DAG built without the planner (tests, the benchmark) may have no uids
/// yet: its state needs them.
pub fn with_uids(dag: &PhysicalDag) -> std::borrow::Cow<'_, PhysicalDag> {
    if dag.operators.iter().any(|o| o.uid.is_unset()) {
        let mut d = dag.clone();
        d.fill_uids();
        std::borrow::Cow::Owned(d)
    } else {
        std::borrow::Cow::Borrowed(dag)
    }
}

/// Deploys `dag` as pipeline `id` in this process, checkpointing by `plan`
/// and restoring every task from its restored checkpoint: the owner and
/// one part holding every task.
///
/// Every task is built before anything starts, so a connector that cannot
/// open leaves nothing running; then the checkpoint coordinator starts, and
/// the tasks, each under its supervisor.
pub fn deploy_with(
    id: PipelineId,
    dag: &PhysicalDag,
    connectors: &dyn ConnectorFactory,
    transport: &dyn Transport,
    config: &DeployConfig,
    plan: Option<CheckpointPlan>,
) -> Result<PipelineRuntime> {
    let dag = with_uids(dag);
    let dag = dag.as_ref();
    let me = WorkerId::local();
    let placement = Placement::all_on(dag, &me);
    let (metrics, metrics_of) = instance_metrics(dag);
    let tasks = crate::part::task_instances(dag, config);
    let (checkpoint, restored) = match plan {
        Some(plan) => {
            let restored = plan.restored.map(Arc::new);
            let owner = OwnerCheckpoint {
                config: plan.config,
                restored_id: restored.as_ref().map_or(0, |r| r.id),
                highest_id: plan.highest_id,
                resume: None,
            };
            (Some(owner), Some((restored, plan.handoff)))
        }
        None => (None, None),
    };
    let owned = own(id, dag, tasks, metrics, 1, checkpoint);
    let part = PartSpec {
        id,
        deployment: 0,
        dag,
        placement: &placement,
        me: &me,
        connectors,
        transport,
        config,
        metrics: &metrics_of,
        control: PartControl {
            cancel: owned.cancel.child_token(),
            paused: owned.paused.clone(),
        },
        checkpoint: match (restored, &owned.signals, &owned.store) {
            (Some((restored, handoff)), Some(signals), Some(store)) => Some(PartCheckpoint {
                store: store.clone(),
                signals: signals.clone(),
                restored,
                handoff,
            }),
            _ => None,
        },
    };
    let events = owned.events.clone();
    match start_part(part, move |e| {
        let _ = events.send(e);
    }) {
        Ok(started) => {
            // Every task is in this process: no group is split.
            debug_assert!(started.split_alignment.is_empty());
            let mut runtime = owned.runtime;
            runtime.tasks = started.tasks;
            runtime.placement = placement;
            Ok(runtime)
        }
        Err(e) => {
            owned.abandon();
            Err(e)
        }
    }
}

/// The checkpointing of an owned deployment.
pub struct OwnerCheckpoint {
    pub config: CheckpointConfig,
    /// The checkpoint the parts restore from (0: a fresh start).
    pub restored_id: u64,
    /// The highest checkpoint id used before.
    pub highest_id: u64,
    /// A checkpoint an earlier owner of these running tasks started and
    /// did not see complete (a new quorum leader adopting a deployment):
    /// the coordinator collects it first.
    pub resume: Option<u64>,
}

/// A deployment's owner side, before its parts start.
pub struct Owned {
    pub runtime: PipelineRuntime,
    /// Where the parts report.
    pub events: mpsc::UnboundedSender<PartEvent>,
    /// Cancelled when the pipeline stops or fails: every part stops then.
    pub cancel: CancellationToken,
    /// True while the pipeline is paused.
    pub paused: watch::Receiver<bool>,
    /// The coordinator's signals to the parts (None without checkpoints).
    pub signals: Option<BarrierSignals>,
    /// Where the parts store their state (None without checkpoints).
    pub store: Option<Arc<dyn crate::checkpoint::StateStore>>,
    parts: usize,
}

impl Owned {
    /// The parts will not start (one could not be built): settles the
    /// deployment as failed-to-start, stopping its coordinator.
    pub fn abandon(self) {
        self.cancel.cancel();
        for _ in 0..self.parts {
            let _ = self.events.send(PartEvent::Exited);
        }
    }
}

/// The owner of deployment `id` of `dag` with `tasks` task instances run by
/// `parts` parts: the runtime (status, metrics, stop, pause), the
/// checkpoint coordinator (with `checkpoint`), and the loop that follows
/// the parts' [`PartEvent`]s. `metrics` are the operator instances'
/// metrics as the owner shows them.
pub fn own(
    id: PipelineId,
    dag: &PhysicalDag,
    tasks: Vec<(OperatorId, u32)>,
    metrics: Vec<Arc<TaskMetrics>>,
    parts: usize,
    checkpoint: Option<OwnerCheckpoint>,
) -> Owned {
    let cancel = CancellationToken::new();
    let (paused, paused_rx) = watch::channel(false);
    let status = Arc::new(StatusCell::new());
    let coordinator_stop = cancel.child_token();
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (signals, store, stop, to_coordinator) = match checkpoint {
        Some(c) => {
            let (signals, channels, stop, to_coordinator) = coordinator::channels(c.restored_id);
            let store = c.config.store.clone();
            let mut book = PendingCheckpoints::new(
                tasks.iter().copied(),
                c.highest_id.max(c.restored_id) + 1,
                dag.key_groups,
            );
            if let Some(id) = c.resume {
                book.resume(id, sluice_types::now_ms());
                channels.resume(id);
            }
            let (status, cancel) = (status.clone(), cancel.clone());
            let fail = move |error: String| {
                tracing::warn!(pipeline = %id, %error, "checkpoint failed");
                status.fail(OperatorId(0), 0, Failure::message(error), false);
                cancel.cancel();
            };
            tokio::spawn(coordinator::run(
                id,
                c.config,
                book,
                channels,
                coordinator_stop.clone(),
                fail,
            ));
            (Some(signals), Some(store), Some(stop), Some(to_coordinator))
        }
        None => (None, None, None, None),
    };
    let (done_tx, done) = watch::channel(false);
    tokio::spawn(follow(
        events_rx,
        parts,
        status.clone(),
        cancel.clone(),
        coordinator_stop,
        to_coordinator,
        done_tx,
    ));
    Owned {
        runtime: PipelineRuntime {
            id,
            metrics,
            tasks: tasks.len(),
            placement: Placement::default(),
            status,
            cancel: cancel.clone(),
            done,
            paused,
            stop,
            relocating: Default::default(),
        },
        events: events_tx,
        cancel,
        paused: paused_rx,
        signals,
        store,
        parts,
    }
}

/// Follows the parts' reports: a failure fails the pipeline and cancels
/// every part; checkpoint events go to the coordinator; once every part
/// exited, the coordinator stops and the status settles.
async fn follow(
    mut events: mpsc::UnboundedReceiver<PartEvent>,
    parts: usize,
    status: Arc<StatusCell>,
    cancel: CancellationToken,
    coordinator_stop: CancellationToken,
    to_coordinator: Option<mpsc::UnboundedSender<CoordinatorEvent>>,
    done: watch::Sender<bool>,
) {
    let mut remaining = parts;
    while remaining > 0 {
        let Some(event) = events.recv().await else { break };
        match event {
            PartEvent::Failed {
                operator,
                instance,
                failure,
                after_cancel,
            } => {
                status.fail(operator, instance, failure, after_cancel || cancel.is_cancelled());
                cancel.cancel();
            }
            PartEvent::Checkpoint(e) => {
                if let Some(c) = &to_coordinator {
                    let _ = c.send(e);
                }
            }
            PartEvent::Exited => remaining -= 1,
        }
    }
    coordinator_stop.cancel();
    status.settle(cancel.is_cancelled());
    let _ = done.send(true);
}

#[cfg(test)]
#[path = "deploy_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "watermark_alignment_tests.rs"]
mod watermark_alignment_tests;

#[cfg(test)]
#[path = "rescale_tests.rs"]
mod rescale_tests;
