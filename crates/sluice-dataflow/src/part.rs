//! The tasks of one deployment that run in this process (its *part*).
//!
//! A deployment is placed task by task ([`Placement`]: which worker runs
//! each operator instance; an operator chained into its upstream's task
//! runs where that task runs). Every process running some of its tasks
//! calls [`start_part`] with the same DAG and placement: it opens only the
//! channel ends its tasks hold ([`Transport::local`] when both ends are
//! here, [`Transport::sender_to`] / [`Transport::receiver_from`] when the
//! other end is on another worker), builds its tasks (every one before any
//! starts, so a connector that cannot open leaves nothing running), runs
//! them under supervision and reports to the deployment's owner through
//! [`PartEvent`]s: a task's failure, each stored checkpoint state (the
//! part's state writer stores its tasks' snapshots), and the exit of its
//! last task. The owner ([`crate::deploy`]) turns the events of all parts
//! into the pipeline's status; it cancels a part through the part's
//! cancellation token.

use crate::channel::{ChannelKey, ChannelReceiver, ChannelSender, Transport};
use crate::checkpoint::coordinator::{self, AckEvent, BarrierSignals, CheckpointHandles, CoordinatorEvent};
use crate::checkpoint::{RestoredCheckpoint, StateStore, TaskCheckpoint, TaskIdentity, TaskState};
use crate::computed::ComputedColumnsReader;
use crate::exchange::{Blame, Chained, Output, OutputEdge};
use crate::join::JoinOperator;
use crate::metrics::{TaskMetrics, Timed};
use crate::operator::Operator;
use crate::project::ProjectOperator;
use crate::source::{SourceReader, SourceTask};
use crate::task::Task;
use crate::watermark_alignment::{AlignmentGroup, SplitAlignment};
use crate::window::build_window_operator;
use arrow::datatypes::SchemaRef;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use sluice_plan::diff::StateHandoff;
use sluice_plan::{EdgeSpec, OperatorKind, OperatorSpec, Partitioning, PhysicalDag, SinkSpec, SourceSpec};
use sluice_types::{Error, OperatorId, PipelineId, Result, SqlCode, WorkerId};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
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

/// Why a task (or the checkpoint coordinator) failed, as its supervisor
/// records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub error: String,
    /// The SQLSTATE class of a user error.
    pub code: Option<SqlCode>,
    /// The task's downstream went away ([`Error::DownstreamClosed`]): the
    /// consequence of a failure downstream, which replaces it when it comes.
    pub consequence: bool,
}

impl Failure {
    pub fn of(e: &Error) -> Self {
        Failure {
            error: e.to_string(),
            code: match e {
                Error::User { code, .. } => Some(*code),
                _ => None,
            },
            consequence: matches!(e, Error::DownstreamClosed),
        }
    }

    pub fn message(error: String) -> Self {
        Failure {
            error,
            code: None,
            consequence: false,
        }
    }

    pub fn panic(panic: &Box<dyn std::any::Any + Send>) -> Self {
        Failure {
            error: format!("task panicked: {}", panic_message(panic)),
            code: None,
            consequence: false,
        }
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

/// Which worker runs each operator instance of a deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// `(operator, instance, worker)` for every operator instance, chained
    /// ones included (on their upstream's worker).
    pub tasks: Vec<(OperatorId, u32, WorkerId)>,
}

impl Placement {
    /// Every instance on `worker` (one process runs the whole pipeline).
    pub fn all_on(dag: &PhysicalDag, worker: &WorkerId) -> Self {
        Placement::new(dag, &DeployConfig::default(), |_, _| worker.clone())
    }

    /// Places each task with `place(operator, instance)`; operators
    /// chained into another's task (by `config`) go where that task goes.
    pub fn new(
        dag: &PhysicalDag,
        config: &DeployConfig,
        mut place: impl FnMut(&OperatorSpec, u32) -> WorkerId,
    ) -> Self {
        let mut by_task: HashMap<(OperatorId, u32), WorkerId> = HashMap::new();
        // Upstreams come first in the planner's order, so a chained
        // operator's task root is placed before it.
        for op in &dag.operators {
            for instance in 0..op.parallelism {
                let worker = match task_root(dag, config, op.id) {
                    root if root != op.id => by_task.get(&(root, instance)).cloned(),
                    _ => None,
                };
                let worker = worker.unwrap_or_else(|| place(op, instance));
                by_task.insert((op.id, instance), worker);
            }
        }
        let mut tasks: Vec<_> = by_task.into_iter().map(|((o, i), w)| (o, i, w)).collect();
        tasks.sort();
        Placement { tasks }
    }

    /// The worker of instance `instance` of `op`.
    pub fn worker_of(&self, op: OperatorId, instance: u32) -> Option<&WorkerId> {
        self.tasks
            .iter()
            .find(|(o, i, _)| *o == op && *i == instance)
            .map(|(_, _, w)| w)
    }

    /// The workers taking part, each once, in order.
    pub fn workers(&self) -> Vec<WorkerId> {
        let mut w: Vec<WorkerId> = self.tasks.iter().map(|(_, _, w)| w.clone()).collect();
        w.sort();
        w.dedup();
        w
    }
}

/// The operator whose task runs `op`: itself, or (chained) the task its
/// forward input runs in.
pub fn task_root(dag: &PhysicalDag, config: &DeployConfig, op: OperatorId) -> OperatorId {
    let mut op = op;
    while config.chain_operators
        && let Some(up) = dag.chained_into(op)
    {
        op = up;
    }
    op
}

/// The task instances (operator instances not chained into another's task)
/// of a deployment.
pub fn task_instances(dag: &PhysicalDag, config: &DeployConfig) -> Vec<(OperatorId, u32)> {
    dag.operators
        .iter()
        .filter(|o| task_root(dag, config, o.id) == o.id)
        .flat_map(|o| (0..o.parallelism).map(move |i| (o.id, i)))
        .collect()
}

/// What a part reports to its deployment's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PartEvent {
    /// A task failed (or panicked); the part cancelled its other tasks.
    Failed {
        operator: OperatorId,
        instance: u32,
        failure: Failure,
        /// The part was already cancelled when it failed.
        after_cancel: bool,
    },
    /// For the checkpoint coordinator.
    Checkpoint(CoordinatorEvent),
    /// Every task of the part exited (and its state writer drained).
    Exited,
}

/// How the owner controls a part.
#[derive(Clone)]
pub struct PartControl {
    /// Stops the part's tasks.
    pub cancel: CancellationToken,
    /// Pauses (true) the part's sources.
    pub paused: watch::Receiver<bool>,
}

/// A checkpointed part: where its tasks' state goes, the coordinator's
/// signals, and what it restores.
pub struct PartCheckpoint {
    pub store: Arc<dyn StateStore>,
    pub signals: BarrierSignals,
    /// The checkpoint every task restores from (None: a fresh start).
    pub restored: Option<Arc<RestoredCheckpoint>>,
    /// After `ALTER PIPELINE`: where the new version's operators find
    /// their state in the checkpoint the old version stopped at.
    pub handoff: Option<StateHandoff>,
}

/// Everything [`start_part`] needs.
pub struct PartSpec<'a> {
    pub id: PipelineId,
    /// The deployment's epoch (keeps its channels apart from a previous
    /// deployment's).
    pub deployment: u64,
    pub dag: &'a PhysicalDag,
    pub placement: &'a Placement,
    /// This process's worker.
    pub me: &'a WorkerId,
    pub connectors: &'a dyn ConnectorFactory,
    pub transport: &'a dyn Transport,
    pub config: &'a DeployConfig,
    /// Every operator instance's metrics (the part fills its own).
    pub metrics: &'a MetricsByInstance,
    pub control: PartControl,
    pub checkpoint: Option<PartCheckpoint>,
}

/// What [`start_part`] started.
pub struct StartedPart {
    /// How many tasks run here.
    pub tasks: usize,
    /// Alignment groups of sources whose other instances run on other
    /// workers: the caller exchanges their watermarks (see
    /// [`SplitAlignment`]).
    pub split_alignment: Vec<SplitAlignment>,
}

/// Builds and starts the tasks of `spec.dag` placed on `spec.me`. Events
/// go to `report`, in order; the last one is [`PartEvent::Exited`]. On an
/// error nothing was started (and nothing will be reported).
pub fn start_part(spec: PartSpec<'_>, report: impl Fn(PartEvent) + Send + Sync + 'static) -> Result<StartedPart> {
    let dag = spec.dag;
    if dag.operators.iter().any(|o| o.uid.is_unset()) {
        return Err(Error::internal(
            "a deployed DAG needs operator uids (PhysicalDag::fill_uids)",
        ));
    }
    check_keyed_state(dag)?;
    let chained = |op: OperatorId| spec.config.chain_operators && dag.chained_into(op).is_some();
    let worker_of = |op: OperatorId, instance: u32| -> Result<&WorkerId> {
        spec.placement
            .worker_of(op, instance)
            .ok_or_else(|| Error::internal(format!("operator {op} instance {instance} is not placed")))
    };
    for op in &dag.operators {
        for instance in 0..op.parallelism {
            worker_of(op.id, instance)?;
        }
    }
    let local = |op: OperatorId, instance: u32| worker_of(op, instance).is_ok_and(|w| w == spec.me);
    let ends = Ends {
        transport: spec.transport,
        worker_of: &|op, instance| worker_of(op, instance).ok().cloned().unwrap_or_default(),
        me: spec.me,
    };
    let channels = open_channels((spec.id, spec.deployment), dag, &ends, &chained)?;
    let (acks_tx, acks_rx) = mpsc::unbounded_channel();
    let checkpointing = spec.checkpoint.map(|c| PartCheckpointing {
        signals: c.signals,
        acks: acks_tx,
        restored: c.restored,
        handoff: c.handoff,
        store: c.store,
    });
    let (groups, split_alignment) = watermark_alignment_groups(dag, &local);
    let builder = TaskBuilder {
        id: spec.id,
        dag,
        local: &local,
        connectors: spec.connectors,
        config: spec.config,
        chained: &chained,
        metrics: spec.metrics,
        control: TaskControl {
            cancel: spec.control.cancel.clone(),
            paused: spec.control.paused.clone(),
            alignment: None,
        },
        alignment: groups,
        checkpointing: checkpointing.as_ref(),
    };
    let tasks = builder.build_all(channels)?;
    let count = tasks.len();
    let report: Arc<dyn Fn(PartEvent) + Send + Sync> = Arc::new(report);
    // The state writer ends when every task's handle is gone (the builder's
    // goes with `checkpointing` here).
    let writer = checkpointing.map(|c| {
        let report = report.clone();
        let metrics = spec.metrics.clone();
        let kinds: HashMap<OperatorId, &'static str> = metrics.iter().map(|((op, _), m)| (*op, m.kind)).collect();
        let slow = move |op: OperatorId| kinds.get(&op).and_then(|kind| crate::fault::slow_state(kind));
        tokio::spawn(coordinator::write_states(
            spec.id,
            c.store,
            acks_rx,
            move |e| {
                if let CoordinatorEvent::Stored {
                    operator,
                    instance,
                    entry,
                    ..
                } = &e
                    && let Some(m) = metrics.get(&(*operator, *instance))
                {
                    m.state_bytes.store(entry.bytes, std::sync::atomic::Ordering::Relaxed);
                }
                report(PartEvent::Checkpoint(e))
            },
            slow,
        ))
    });
    supervise(spec.id, tasks, spec.control.cancel, report, writer);
    Ok(StartedPart {
        tasks: count,
        split_alignment,
    })
}

/// Which channel ends this process opens.
struct Ends<'a> {
    transport: &'a dyn Transport,
    worker_of: &'a dyn Fn(OperatorId, u32) -> WorkerId,
    me: &'a WorkerId,
}

impl Ends<'_> {
    /// The ends of channel `key` from `(op, instance)` to `(op, instance)`
    /// that run here: both (in-process), one (bridged to the other
    /// worker), or none.
    fn open(
        &self,
        key: ChannelKey,
        from: (OperatorId, u32),
        to: (OperatorId, u32),
    ) -> Result<(Option<ChannelSender>, Option<ChannelReceiver>)> {
        let (f, t) = ((self.worker_of)(from.0, from.1), (self.worker_of)(to.0, to.1));
        match (&f == self.me, &t == self.me) {
            (true, true) => {
                let (tx, rx) = self.transport.local(key);
                Ok((Some(tx), Some(rx)))
            }
            (true, false) => Ok((Some(self.transport.sender_to(key, &t)?), None)),
            (false, true) => Ok((None, Some(self.transport.receiver_from(key, &f)?))),
            (false, false) => Ok((None, None)),
        }
    }
}

/// A task instance's body, ready to spawn.
type TaskFuture = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>;

type Channels = (
    HashMap<(OperatorId, u32), Vec<OutputEdge>>,
    HashMap<(OperatorId, u32), Vec<ChannelReceiver>>,
);

/// Opens this process's ends of the channels of every edge, except edges into chained operators
/// (those run in their upstream's task).
fn open_channels(
    (id, deployment): (PipelineId, u64),
    dag: &PhysicalDag,
    ends: &Ends<'_>,
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
            (id, deployment),
            (edge, dag.key_groups),
            from,
            to,
            ends,
            &mut outputs,
            &mut inputs,
        )?;
    }
    Ok((outputs, inputs))
}

fn open_edge(
    (id, deployment): (PipelineId, u64),
    (edge, key_groups): (&EdgeSpec, u32),
    from: &OperatorSpec,
    to: &OperatorSpec,
    ends: &Ends<'_>,
    outputs: &mut HashMap<(OperatorId, u32), Vec<OutputEdge>>,
    inputs: &mut HashMap<(OperatorId, u32), Vec<ChannelReceiver>>,
) -> Result<()> {
    let key = |f: u32, t: u32| ChannelKey {
        pipeline: id,
        deployment,
        edge: edge.id,
        from: f,
        to: t,
    };
    if edge.partitioning == Partitioning::Forward {
        if from.parallelism != to.parallelism {
            return Err(Error::internal("forward edge between different parallelisms"));
        }
        for i in 0..from.parallelism {
            let (tx, rx) = ends.open(key(i, i), (from.id, i), (to.id, i))?;
            if let Some(tx) = tx {
                outputs.entry((from.id, i)).or_default().push(OutputEdge::new(
                    Partitioning::Forward,
                    vec![tx],
                    0,
                    key_groups,
                ));
            }
            if let Some(rx) = rx {
                inputs.entry((to.id, i)).or_default().push(rx);
            }
        }
        return Ok(());
    }
    let mut senders: Vec<Vec<ChannelSender>> = vec![Vec::new(); from.parallelism as usize];
    for t in 0..to.parallelism {
        for f in 0..from.parallelism {
            let (tx, rx) = ends.open(key(f, t), (from.id, f), (to.id, t))?;
            if let Some(tx) = tx {
                senders[f as usize].push(tx);
            }
            if let Some(rx) = rx {
                inputs.entry((to.id, t)).or_default().push(rx);
            }
        }
    }
    for (f, s) in senders.into_iter().enumerate() {
        // Only instances running here hold senders (one per downstream
        // instance, local or remote).
        if s.is_empty() {
            continue;
        }
        let edge = OutputEdge::new(edge.partitioning.clone(), s, f, key_groups);
        outputs.entry((from.id, f as u32)).or_default().push(edge);
    }
    Ok(())
}

/// Each operator instance's metrics.
pub type MetricsByInstance = HashMap<(OperatorId, u32), Arc<TaskMetrics>>;

/// Every operator instance's metrics, chained ones included: in the DAG's
/// order, and by (operator, instance).
pub fn instance_metrics(dag: &PhysicalDag) -> (Vec<Arc<TaskMetrics>>, MetricsByInstance) {
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
/// one instance and `alignment_max_drift_ms` set) with an instance in this
/// part, shared by its instances here; with the groups of sources that
/// also run on other workers (their watermarks come through the worker).
fn watermark_alignment_groups(
    dag: &PhysicalDag,
    local: &dyn Fn(OperatorId, u32) -> bool,
) -> (HashMap<OperatorId, Arc<AlignmentGroup>>, Vec<SplitAlignment>) {
    let mut groups = HashMap::new();
    let mut split = Vec::new();
    for op in &dag.operators {
        let OperatorKind::Source(spec) = &op.kind else { continue };
        let Some(ms) = spec.alignment_max_drift_ms.filter(|_| op.parallelism > 1) else {
            continue;
        };
        let here: Vec<u32> = (0..op.parallelism).filter(|&i| local(op.id, i)).collect();
        if here.is_empty() {
            continue;
        }
        let group = AlignmentGroup::new(op.parallelism as usize, Duration::from_millis(ms));
        if here.len() < op.parallelism as usize {
            split.push(SplitAlignment {
                operator: op.id,
                group: group.clone(),
                local: here,
            });
        }
        groups.insert(op.id, group);
    }
    (groups, split)
}

/// A checkpointed part: its tasks' handles and what they restore.
struct PartCheckpointing {
    signals: BarrierSignals,
    acks: mpsc::UnboundedSender<AckEvent>,
    restored: Option<Arc<RestoredCheckpoint>>,
    handoff: Option<StateHandoff>,
    store: Arc<dyn StateStore>,
}

impl PartCheckpointing {
    /// What instance `instance` of `op` needs to take part, with its
    /// restored state (split or merged by key group when its parallelism
    /// changed; migrated from a checkpoint before key groups).
    fn task(&self, dag: &PhysicalDag, op: &OperatorSpec, instance: u32) -> Result<TaskCheckpoint> {
        let restored = match &self.restored {
            Some(r) => Some((r.id, self.restored_state(r, dag, op, instance)?)),
            None => None,
        };
        Ok(TaskCheckpoint {
            handles: CheckpointHandles::new(&self.signals, self.acks.clone()),
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
        let handoff = self.handoff.as_ref().filter(|h| h.checkpoint == r.id);
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
    /// This process's tasks.
    local: &'a dyn Fn(OperatorId, u32) -> bool,
    connectors: &'a dyn ConnectorFactory,
    config: &'a DeployConfig,
    chained: &'a dyn Fn(OperatorId) -> bool,
    metrics: &'a MetricsByInstance,
    /// Shared by every task (`alignment` is set per source instance).
    control: TaskControl,
    alignment: HashMap<OperatorId, Arc<AlignmentGroup>>,
    checkpointing: Option<&'a PartCheckpointing>,
}

impl TaskBuilder<'_> {
    /// One task per instance of every operator not chained into another's
    /// task, taking their ends of `channels`.
    fn build_all(&self, (mut outputs, mut inputs): Channels) -> Result<Vec<SupervisedTask>> {
        let mut tasks = Vec::new();
        for op in self.dag.operators.iter().filter(|o| !(self.chained)(o.id)) {
            for instance in (0..op.parallelism).filter(|i| (self.local)(op.id, *i)) {
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

/// Spawns every task under a supervisor; once the last one exited and the
/// state writer drained, reports [`PartEvent::Exited`].
fn supervise(
    id: PipelineId,
    tasks: Vec<SupervisedTask>,
    cancel: CancellationToken,
    report: Arc<dyn Fn(PartEvent) + Send + Sync>,
    writer: Option<tokio::task::JoinHandle<()>>,
) {
    if tasks.is_empty() {
        tokio::spawn(async move {
            if let Some(w) = writer {
                let _ = w.await;
            }
            report(PartEvent::Exited);
        });
        return;
    }
    let remaining = Arc::new(AtomicUsize::new(tasks.len()));
    let writer = Arc::new(std::sync::Mutex::new(writer));
    for task in tasks {
        let (cancel, remaining, report, writer) = (cancel.clone(), remaining.clone(), report.clone(), writer.clone());
        tokio::spawn(async move {
            run_supervised(id, task, &cancel, report.as_ref()).await;
            if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                let writer = writer.lock().expect("writer lock").take();
                if let Some(w) = writer {
                    let _ = w.await;
                }
                report(PartEvent::Exited);
            }
        });
    }
}

/// Runs one task to its end; an error or a panic is reported and cancels
/// the part's other tasks.
async fn run_supervised(
    id: PipelineId,
    task: SupervisedTask,
    cancel: &CancellationToken,
    report: &(dyn Fn(PartEvent) + Send + Sync),
) {
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
    report(PartEvent::Failed {
        operator,
        instance,
        failure,
        after_cancel,
    });
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
        OperatorKind::GroupAggregate(spec) => Box::new(crate::group_aggregate::GroupAggregateOperator::new(
            spec,
            op.output_schema.clone(),
        )?),
        OperatorKind::TopN(spec) => Box::new(crate::top_n::TopNOperator::new(spec, op.output_schema.clone())?),
        OperatorKind::OverAggregate(spec) if spec.op_column.is_some() => Box::new(
            crate::over_aggregate::OverChangelogOperator::new(spec, op.output_schema.clone())?,
        ),
        OperatorKind::OverAggregate(spec) => Box::new(crate::over_aggregate::OverAggregateOperator::new(
            spec,
            op.output_schema.clone(),
        )?),
        OperatorKind::Join(spec) if spec.updating() => Box::new(crate::updating_join::UpdatingJoinOperator::new(
            spec,
            op.output_schema.clone(),
            left_inputs,
        )?),
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
/// planner hash-partitions their inputs on exactly those columns (every
/// input of an operator fed by several edges, as a split distinct
/// aggregation's final level); a DAG that does otherwise would put restored
/// keys on the wrong instance.
fn check_keyed_state(dag: &PhysicalDag) -> Result<()> {
    for op in &dag.operators {
        let every_input = |keys: &[usize]| vec![keys.to_vec(); dag.inputs_of(op.id).len().max(1)];
        let state_keys = match &op.kind {
            OperatorKind::WindowAggregate(w) if !w.key_columns.is_empty() => every_input(&w.key_columns),
            OperatorKind::GroupAggregate(g) if !g.key_columns.is_empty() => every_input(&g.key_columns),
            OperatorKind::TopN(t) if !t.partition_columns.is_empty() => every_input(&t.partition_columns),
            OperatorKind::OverAggregate(o) if !o.partition_columns.is_empty() => every_input(&o.partition_columns),
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
