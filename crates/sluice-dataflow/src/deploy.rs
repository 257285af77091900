//! Turning a [`PhysicalDag`] into running, supervised tasks.
//!
//! [`deploy`] opens one channel per (edge, upstream instance, downstream
//! instance) through the [`Transport`], builds each operator instance, and
//! spawns it as a tokio task (a filter/projection behind a forward edge runs
//! inside its upstream's task instead: operator chaining, see
//! [`crate::exchange`]) under a supervisor: a task that returns an
//! error or panics marks the pipeline failed (with its operator id and the
//! error) and stops the pipeline's other tasks. Nothing outside the pipeline
//! is affected.

use crate::channel::{ChannelKey, ChannelReceiver, ChannelSender, Transport};
use crate::checkpoint::coordinator::{self, CheckpointHandles, CoordinatorChannels, PendingCheckpoints};
use crate::checkpoint::{CheckpointConfig, RestoredCheckpoint, TaskCheckpoint, TaskIdentity, TaskState};
use crate::computed::ComputedColumnsReader;
use crate::exchange::{Blame, Chained, Output, OutputEdge};
use crate::join::JoinOperator;
use crate::metrics::{TaskMetrics, Timed};
use crate::operator::Operator;
use crate::project::ProjectOperator;
use crate::source::{SourceReader, SourceTask};
use crate::task::Task;
use crate::watermark_alignment::AlignmentGroup;
use crate::window::build_window_operator;
use arrow::datatypes::SchemaRef;
use futures::FutureExt;
use sluice_plan::{EdgeSpec, OperatorKind, OperatorSpec, Partitioning, PhysicalDag, SinkSpec, SourceSpec};
use sluice_types::{Error, OperatorId, PipelineId, Result, SqlCode};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Which task instance a connector builds a reader or sink for.
#[derive(Debug, Clone)]
pub struct InstanceContext {
    pub pipeline: PipelineId,
    pub instance: u32,
    pub parallelism: u32,
    /// The task's metrics: connectors count malformed records and report
    /// transient conditions (e.g. a broker that is down) here.
    pub metrics: Arc<TaskMetrics>,
}

/// Builds sources and sinks for connector names. Implemented by the
/// connectors crate; the runtime only calls it.
pub trait ConnectorFactory: Send + Sync {
    /// The reader of one source instance.
    fn source(&self, spec: &SourceSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn SourceReader>>;
    /// A sink operator instance.
    fn sink(&self, spec: &SinkSpec, schema: &SchemaRef, ctx: &InstanceContext) -> Result<Box<dyn Operator>>;
}

/// Runtime settings of a deployment.
#[derive(Debug, Clone)]
pub struct DeployConfig {
    /// Largest batch a source emits.
    pub batch_rows_max: usize,
    /// Operator chaining: filters/projections behind a forward edge run in
    /// their upstream's task ([`PhysicalDag::chained_into`]).
    pub chain_operators: bool,
}

impl Default for DeployConfig {
    fn default() -> Self {
        DeployConfig {
            batch_rows_max: 8192,
            chain_operators: true,
        }
    }
}

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
    status: Arc<StatusCell>,
    cancel: CancellationToken,
    done: watch::Receiver<bool>,
    paused: watch::Sender<bool>,
    /// Stops the pipeline at a barrier (a checkpointed deployment).
    stop: Option<coordinator::StopHandles>,
}

impl PipelineRuntime {
    pub fn status(&self) -> PipelineStatus {
        self.status.get()
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

/// Why a task (or the checkpoint coordinator) failed, as its supervisor
/// records it.
#[derive(Debug, Clone)]
struct Failure {
    error: String,
    /// The SQLSTATE class of a user error.
    code: Option<SqlCode>,
    /// The task's downstream went away ([`Error::DownstreamClosed`]): the
    /// consequence of a failure downstream, which replaces it when it comes.
    consequence: bool,
}

impl Failure {
    fn of(e: &Error) -> Self {
        Failure {
            error: e.to_string(),
            code: match e {
                Error::User { code, .. } => Some(*code),
                _ => None,
            },
            consequence: matches!(e, Error::DownstreamClosed),
        }
    }

    fn message(error: String) -> Self {
        Failure {
            error,
            code: None,
            consequence: false,
        }
    }

    fn panic(panic: &Box<dyn std::any::Any + Send>) -> Self {
        Failure {
            error: format!("task panicked: {}", panic_message(panic)),
            code: None,
            consequence: false,
        }
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

/// A task instance's body, ready to spawn.
type TaskFuture = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>;

type Channels = (
    HashMap<(OperatorId, u32), Vec<OutputEdge>>,
    HashMap<(OperatorId, u32), Vec<ChannelReceiver>>,
);

/// Opens the channels of every edge, except edges into chained operators
/// (those run in their upstream's task).
fn open_channels(
    id: PipelineId,
    dag: &PhysicalDag,
    transport: &dyn Transport,
    chained: &dyn Fn(OperatorId) -> bool,
) -> Result<Channels> {
    sluice_plan::key_groups::validate(dag.key_groups).map_err(Error::internal)?;
    let mut outputs: HashMap<(OperatorId, u32), Vec<OutputEdge>> = HashMap::new();
    let mut inputs: HashMap<(OperatorId, u32), Vec<ChannelReceiver>> = HashMap::new();
    for edge in dag.edges.iter().filter(|e| !chained(e.to)) {
        let from = dag
            .operator(edge.from)
            .ok_or_else(|| Error::internal("edge from unknown operator"))?;
        let to = dag
            .operator(edge.to)
            .ok_or_else(|| Error::internal("edge to unknown operator"))?;
        open_edge(
            id,
            (edge, dag.key_groups),
            from,
            to,
            transport,
            &mut outputs,
            &mut inputs,
        )?;
    }
    Ok((outputs, inputs))
}

fn open_edge(
    id: PipelineId,
    (edge, key_groups): (&EdgeSpec, u32),
    from: &OperatorSpec,
    to: &OperatorSpec,
    transport: &dyn Transport,
    outputs: &mut HashMap<(OperatorId, u32), Vec<OutputEdge>>,
    inputs: &mut HashMap<(OperatorId, u32), Vec<ChannelReceiver>>,
) -> Result<()> {
    let key = |f: u32, t: u32| ChannelKey {
        pipeline: id,
        deployment: 0,
        edge: edge.id,
        from: f,
        to: t,
    };
    if edge.partitioning == Partitioning::Forward {
        if from.parallelism != to.parallelism {
            return Err(Error::internal("forward edge between different parallelisms"));
        }
        for i in 0..from.parallelism {
            let (tx, rx) = transport.local(key(i, i));
            outputs.entry((from.id, i)).or_default().push(OutputEdge::new(
                Partitioning::Forward,
                vec![tx],
                0,
                key_groups,
            ));
            inputs.entry((to.id, i)).or_default().push(rx);
        }
        return Ok(());
    }
    let mut senders: Vec<Vec<ChannelSender>> = vec![Vec::new(); from.parallelism as usize];
    for t in 0..to.parallelism {
        for f in 0..from.parallelism {
            let (tx, rx) = transport.local(key(f, t));
            senders[f as usize].push(tx);
            inputs.entry((to.id, t)).or_default().push(rx);
        }
    }
    for (f, s) in senders.into_iter().enumerate() {
        let edge = OutputEdge::new(edge.partitioning.clone(), s, f, key_groups);
        outputs.entry((from.id, f as u32)).or_default().push(edge);
    }
    Ok(())
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

/// Deploys `dag` as pipeline `id`, checkpointing by `plan` and restoring
/// every task from its restored checkpoint.
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
    // A DAG built without the planner (tests, the benchmark) may have no
    // uids yet: its state needs them.
    let filled;
    let dag = if dag.operators.iter().any(|o| o.uid.is_unset()) {
        let mut d = dag.clone();
        d.fill_uids();
        filled = d;
        &filled
    } else {
        dag
    };
    check_keyed_state(dag)?;
    let chained = |op: OperatorId| config.chain_operators && dag.chained_into(op).is_some();
    let channels = open_channels(id, dag, transport, &chained)?;
    let checkpointing = plan.map(Checkpointing::new);
    let stop = checkpointing.as_ref().map(|c| c.stop.clone());
    let cancel = CancellationToken::new();
    let (paused, paused_rx) = watch::channel(false);
    let (metrics, metrics_of) = instance_metrics(dag);
    let builder = TaskBuilder {
        id,
        dag,
        connectors,
        config,
        chained: &chained,
        metrics: &metrics_of,
        control: TaskControl {
            cancel: cancel.clone(),
            paused: paused_rx,
            alignment: None,
        },
        alignment: watermark_alignment_groups(dag),
        checkpointing: checkpointing.as_ref(),
    };
    let tasks = builder.build_all(channels)?;
    let status = Arc::new(StatusCell::new());
    let coordinator_stop = cancel.child_token();
    if let Some(checkpointing) = checkpointing {
        let task_ids = tasks.iter().map(|t| (t.operator, t.instance)).collect();
        checkpointing.start_coordinator(
            (id, dag.key_groups),
            task_ids,
            &status,
            &cancel,
            coordinator_stop.clone(),
        );
    }
    let task_count = tasks.len();
    let done = supervise(id, tasks, &status, &cancel, &coordinator_stop);
    Ok(PipelineRuntime {
        id,
        metrics,
        tasks: task_count,
        status,
        cancel,
        done,
        paused,
        stop,
    })
}

/// Each operator instance's metrics.
type MetricsByInstance = HashMap<(OperatorId, u32), Arc<TaskMetrics>>;

/// Every operator instance's metrics, chained ones included: in the DAG's
/// order, and by (operator, instance).
fn instance_metrics(dag: &PhysicalDag) -> (Vec<Arc<TaskMetrics>>, MetricsByInstance) {
    let mut metrics = Vec::new();
    let mut metrics_of = HashMap::new();
    for op in &dag.operators {
        for instance in 0..op.parallelism {
            let m = TaskMetrics::new(op.id, instance, op.kind.name());
            metrics.push(m.clone());
            metrics_of.insert((op.id, instance), m);
        }
    }
    (metrics, metrics_of)
}

/// One watermark alignment group per aligned source operator (more than
/// one instance and `alignment_max_drift_ms` set), shared by its instances.
fn watermark_alignment_groups(dag: &PhysicalDag) -> HashMap<OperatorId, Arc<AlignmentGroup>> {
    dag.operators
        .iter()
        .filter_map(|op| match &op.kind {
            OperatorKind::Source(spec) if op.parallelism > 1 => spec.alignment_max_drift_ms.map(|ms| {
                let group = AlignmentGroup::new(op.parallelism as usize, Duration::from_millis(ms));
                (op.id, group)
            }),
            _ => None,
        })
        .collect()
}

/// A checkpointed deployment: its plan and the coordinator's channels.
struct Checkpointing {
    plan: CheckpointPlan,
    handles: CheckpointHandles,
    coordinator: CoordinatorChannels,
    stop: coordinator::StopHandles,
    /// The restored checkpoint's id (0: a fresh start).
    restored_id: u64,
}

impl Checkpointing {
    fn new(plan: CheckpointPlan) -> Self {
        let restored_id = plan.restored.as_ref().map_or(0, |r| r.id);
        let (handles, coordinator, stop) = coordinator::channels(restored_id);
        Checkpointing {
            plan,
            handles,
            coordinator,
            stop,
            restored_id,
        }
    }

    /// What instance `instance` of `op` needs to take part, with its
    /// restored state (split or merged by key group when its parallelism
    /// changed; migrated from a checkpoint before key groups).
    fn task(&self, dag: &PhysicalDag, op: &OperatorSpec, instance: u32) -> Result<TaskCheckpoint> {
        let restored = match &self.plan.restored {
            Some(r) => Some((r.id, self.restored_state(r, dag, op, instance)?)),
            None => None,
        };
        Ok(TaskCheckpoint {
            handles: CheckpointHandles::clone(&self.handles),
            operator: op.id,
            instance,
            identity: TaskIdentity::of(dag, op, instance),
            restored,
        })
    }

    /// The state instance `instance` of `op` restores from `r`: its own, or
    /// after an `ALTER PIPELINE` the state of the operator it replaces
    /// (none when it starts empty). A sink whose parallelism changed
    /// starts empty: an ALTER stops at a barrier its old instances
    /// committed, so nothing of theirs is pending.
    fn restored_state(
        &self,
        r: &RestoredCheckpoint,
        dag: &PhysicalDag,
        op: &OperatorSpec,
        instance: u32,
    ) -> Result<TaskState> {
        let migrate = |state| migrate_legacy_state(op, state);
        let handoff = self.plan.handoff.as_ref().filter(|h| h.checkpoint == r.id);
        let Some(handoff) = handoff else {
            return r.state_for(op, instance, dag.key_groups, &migrate);
        };
        let Some(from) = handoff.source_of(op.uid) else {
            return Ok(TaskState::default());
        };
        let rescaled = r.parallelism_of(from).is_some_and(|p| p != op.parallelism);
        if rescaled && matches!(op.kind, OperatorKind::Sink(_)) {
            return Ok(TaskState::default());
        }
        if rescaled && matches!(op.kind, OperatorKind::Source(_)) {
            // Every old instance's positions; the reader keeps its own
            // partitions' (`SourceReader::restore_rescaled`).
            let parts = r
                .tasks
                .iter()
                .filter(|(t, _)| t.uid == from)
                .map(|(_, s)| s.clone())
                .collect();
            return Ok(crate::source::pack_rescaled(parts));
        }
        let stored = OperatorSpec {
            uid: from,
            ..op.clone()
        };
        r.state_for(&stored, instance, dag.key_groups, &migrate)
    }

    /// Spawns the coordinator of `tasks` (the running task instances): a
    /// checkpoint that fails fails the pipeline.
    fn start_coordinator(
        self,
        (id, key_groups): (PipelineId, u32),
        tasks: Vec<(OperatorId, u32)>,
        status: &Arc<StatusCell>,
        cancel: &CancellationToken,
        stop: CancellationToken,
    ) {
        let book = PendingCheckpoints::new(tasks, self.plan.highest_id.max(self.restored_id) + 1, key_groups);
        let (status, cancel) = (status.clone(), cancel.clone());
        let fail = move |error: String| {
            tracing::warn!(pipeline = %id, %error, "checkpoint failed");
            let failure = Failure {
                error,
                code: None,
                consequence: false,
            };
            status.fail(OperatorId(0), 0, failure, false);
            cancel.cancel();
        };
        tokio::spawn(coordinator::run(
            id,
            self.plan.config,
            book,
            self.coordinator,
            stop,
            fail,
        ));
    }
}

/// A built task, not yet spawned.
struct SupervisedTask {
    operator: OperatorId,
    instance: u32,
    /// Set by a chained operator that fails inside the task.
    blame: Blame,
    future: TaskFuture,
}

/// What building each of a pipeline's tasks needs.
struct TaskBuilder<'a> {
    id: PipelineId,
    dag: &'a PhysicalDag,
    connectors: &'a dyn ConnectorFactory,
    config: &'a DeployConfig,
    chained: &'a dyn Fn(OperatorId) -> bool,
    metrics: &'a MetricsByInstance,
    /// Shared by every task (`alignment` is set per source instance).
    control: TaskControl,
    alignment: HashMap<OperatorId, Arc<AlignmentGroup>>,
    checkpointing: Option<&'a Checkpointing>,
}

impl TaskBuilder<'_> {
    /// One task per instance of every operator not chained into another's
    /// task, taking their ends of `channels`.
    fn build_all(&self, (mut outputs, mut inputs): Channels) -> Result<Vec<SupervisedTask>> {
        let mut tasks = Vec::new();
        for op in self.dag.operators.iter().filter(|o| !(self.chained)(o.id)) {
            for instance in 0..op.parallelism {
                tasks.push(self.build(op, instance, &mut outputs, &mut inputs)?);
            }
        }
        Ok(tasks)
    }

    fn build(
        &self,
        op: &OperatorSpec,
        instance: u32,
        outputs: &mut HashMap<(OperatorId, u32), Vec<OutputEdge>>,
        inputs: &mut HashMap<(OperatorId, u32), Vec<ChannelReceiver>>,
    ) -> Result<SupervisedTask> {
        let m = self.metrics[&(op.id, instance)].clone();
        let blame = Blame::default();
        let chain = TaskChain {
            dag: self.dag,
            chained: self.chained,
            metrics: self.metrics,
            blame: &blame,
        };
        let output = chain.output(op.id, instance, outputs)?;
        let task_inputs = inputs.remove(&(op.id, instance)).unwrap_or_default();
        let control = TaskControl {
            alignment: self.alignment.get(&op.id).map(|g| (g.clone(), instance as usize)),
            ..self.control.clone()
        };
        let checkpoint = self.checkpointing.map(|c| c.task(self.dag, op, instance)).transpose()?;
        let future = build_task(
            self.id,
            op,
            (instance, left_inputs(self.dag, op)),
            self.connectors,
            self.config,
            output,
            task_inputs,
            m.clone(),
            control,
            checkpoint,
        )?;
        Ok(SupervisedTask {
            operator: op.id,
            instance,
            blame,
            future: Box::pin(Timed::new(future, m)),
        })
    }
}

/// Spawns every task under a supervisor; the receiver turns true when the
/// last task has exited (the coordinator is then stopped and the status
/// settled).
fn supervise(
    id: PipelineId,
    tasks: Vec<SupervisedTask>,
    status: &Arc<StatusCell>,
    cancel: &CancellationToken,
    coordinator_stop: &CancellationToken,
) -> watch::Receiver<bool> {
    let (done_tx, done_rx) = watch::channel(false);
    let done_tx = Arc::new(done_tx);
    let remaining = Arc::new(AtomicUsize::new(tasks.len()));
    for task in tasks {
        let (status, cancel, remaining, done_tx) = (status.clone(), cancel.clone(), remaining.clone(), done_tx.clone());
        let coordinator_stop = coordinator_stop.clone();
        tokio::spawn(async move {
            run_supervised(id, task, &status, &cancel).await;
            if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                coordinator_stop.cancel();
                status.settle(cancel.is_cancelled());
                let _ = done_tx.send(true);
            }
        });
    }
    done_rx
}

/// Runs one task to its end; an error or a panic fails the pipeline
/// (recorded in `status`) and cancels its other tasks.
async fn run_supervised(id: PipelineId, task: SupervisedTask, status: &StatusCell, cancel: &CancellationToken) {
    let outcome = AssertUnwindSafe(task.future).catch_unwind().await;
    let failure = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(e)) => Failure::of(&e),
        Err(panic) => Failure::panic(&panic),
    };
    // An operator chained into this task may be the one that failed.
    let (operator, instance) = task.blame.get().copied().unwrap_or((task.operator, task.instance));
    let after_cancel = cancel.is_cancelled();
    if !after_cancel {
        tracing::warn!(pipeline = %id, operator = %operator, instance, error = %failure.error, "task failed");
    }
    status.fail(operator, instance, failure, after_cancel);
    cancel.cancel();
}

/// Builds a task's [`Output`] with the operators chained into it.
struct TaskChain<'a> {
    dag: &'a PhysicalDag,
    chained: &'a dyn Fn(OperatorId) -> bool,
    metrics: &'a MetricsByInstance,
    blame: &'a Blame,
}

impl TaskChain<'_> {
    /// The output of instance `instance` of `op`: its channel edges, and
    /// each chained downstream operator with its own output (recursively;
    /// chained operators are reached by forward edges, so same instance).
    fn output(
        &self,
        op: OperatorId,
        instance: u32,
        channels: &mut HashMap<(OperatorId, u32), Vec<OutputEdge>>,
    ) -> Result<Output> {
        let edges = channels.remove(&(op, instance)).unwrap_or_default();
        let mut chain = Vec::new();
        for edge in self.dag.outputs_of(op).into_iter().filter(|e| (self.chained)(e.to)) {
            let to = self
                .dag
                .operator(edge.to)
                .ok_or_else(|| Error::internal("edge to unknown operator"))?;
            let OperatorKind::Project(spec) = &to.kind else {
                return Err(Error::internal("only filters/projections are chained"));
            };
            chain.push(Chained {
                operator: to.id,
                instance,
                project: Box::new(ProjectOperator::new(spec, to.output_schema.clone())?),
                metrics: self.metrics[&(to.id, instance)].clone(),
                output: self.output(to.id, instance, channels)?,
                blame: self.blame.clone(),
            });
        }
        Ok(Output::with_chained(
            edges,
            chain,
            self.metrics[&(op, instance)].clone(),
        ))
    }
}

/// What the pipeline tells every task: stop, and (sources) pause and keep
/// aligned with their siblings.
#[derive(Clone)]
struct TaskControl {
    cancel: CancellationToken,
    paused: watch::Receiver<bool>,
    alignment: Option<(Arc<AlignmentGroup>, usize)>,
}

#[allow(clippy::too_many_arguments)]
fn build_task(
    id: PipelineId,
    op: &OperatorSpec,
    (instance, left_inputs): (u32, usize),
    connectors: &dyn ConnectorFactory,
    config: &DeployConfig,
    output: Output,
    inputs: Vec<ChannelReceiver>,
    metrics: Arc<TaskMetrics>,
    control: TaskControl,
    checkpoint: Option<TaskCheckpoint>,
) -> Result<TaskFuture> {
    let TaskControl {
        cancel,
        paused,
        alignment,
    } = control;
    let instance_ctx = InstanceContext {
        pipeline: id,
        instance,
        parallelism: op.parallelism,
        metrics: metrics.clone(),
    };
    let operator: Box<dyn Operator> = match &op.kind {
        OperatorKind::Source(spec) => {
            let connector_schema = spec.connector_schema(&op.output_schema);
            let mut reader = connectors.source(spec, &connector_schema, &instance_ctx)?;
            if !spec.computed.is_empty() {
                reader = Box::new(ComputedColumnsReader::new(
                    reader,
                    &connector_schema,
                    &op.output_schema,
                    &spec.computed,
                )?);
            }
            let task = SourceTask {
                reader,
                watermark: spec.watermark.clone(),
                idle_timeout: Duration::from_millis(spec.idle_timeout_ms.max(1)),
                batch_rows_max: config.batch_rows_max,
                output,
                metrics,
                cancel,
                paused,
                checkpoint,
                alignment,
            };
            return Ok(Box::pin(task.run()));
        }
        OperatorKind::Project(spec) => Box::new(ProjectOperator::new(spec, op.output_schema.clone())?),
        OperatorKind::WindowAggregate(spec) => build_window_operator(spec, op.output_schema.clone())?,
        OperatorKind::Join(spec) => Box::new(JoinOperator::new(spec, op.output_schema.clone(), left_inputs)?),
        OperatorKind::Sink(spec) => connectors.sink(spec, &op.output_schema, &instance_ctx)?,
    };
    let task = Task {
        operator,
        inputs,
        output,
        metrics,
        cancel,
        checkpoint,
    };
    Ok(Box::pin(task.run()))
}

/// Keyed operators store their state by the key group of the columns their
/// rows are routed by: a window's group keys, a join's equi-join keys. The
/// planner hash-partitions their inputs on exactly those columns; a DAG
/// that does otherwise would put restored keys on the wrong instance.
fn check_keyed_state(dag: &PhysicalDag) -> Result<()> {
    for op in &dag.operators {
        let state_keys = match &op.kind {
            OperatorKind::WindowAggregate(w) if !w.key_columns.is_empty() => vec![w.key_columns.clone()],
            OperatorKind::Join(j) => vec![j.left.keys.clone(), j.right.keys.clone()],
            _ => continue,
        };
        match dag.input_keys(op.id) {
            Some(routed) if routed == state_keys => {}
            // One instance holds every key (and so every key group).
            _ if op.parallelism == 1 => {}
            routed => {
                return Err(Error::internal(format!(
                    "operator {} stores state by keys {state_keys:?} but its rows are routed by {routed:?}",
                    op.id
                )));
            }
        }
    }
    Ok(())
}

/// A checkpoint's state from before key groups, in today's form: the
/// keyed operators' entries marked with their key columns.
fn migrate_legacy_state(op: &OperatorSpec, state: TaskState) -> Result<TaskState> {
    match &op.kind {
        OperatorKind::WindowAggregate(spec) => crate::window::migrate_legacy_state(spec, state),
        OperatorKind::Join(spec) => crate::join::migrate_legacy_state(spec, state),
        _ => Ok(state),
    }
}

/// How many of an operator instance's input channels come from its first
/// input edge (a join's left side): one per upstream instance, or one for a
/// forward edge.
fn left_inputs(dag: &PhysicalDag, op: &OperatorSpec) -> usize {
    match dag.inputs_of(op.id).first() {
        Some(e) if e.partitioning == Partitioning::Forward => 1,
        Some(e) => dag.operator(e.from).map_or(1, |f| f.parallelism as usize),
        None => 0,
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
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
