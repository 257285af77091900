//! The checkpoint coordinator of one pipeline deployment, and the state
//! writer of each process running its tasks.
//!
//! The coordinator lives with the deployment's owner (the master): every
//! interval it asks the sources to inject barrier `n` (at most
//! [`CHECKPOINTS_IN_FLIGHT_MAX`] pending), records each task's stored file
//! as its acknowledgement arrives, writes the manifest once every task
//! acknowledged, tells the tasks (two-phase-commit sinks commit then), and
//! deletes old checkpoints. It never sees task state.
//!
//! The state writer ([`write_states`]) runs in each process that runs
//! tasks: tasks hand their snapshots (Arrow arrays) to it, off the data
//! path; it encodes and stores each into the shared checkpoint store and
//! passes the stored file's entry on to the coordinator
//! ([`CoordinatorEvent::Stored`]) — in-process through a channel, across
//! processes through the worker's session with the master.
//!
//! The bookkeeping is the pure [`PendingCheckpoints`]; [`run`] is the
//! async shell around it.

use super::manifest::{self, FileRef, MANIFEST_FILE, Manifest, TaskEntry};
use super::state::TaskState;
use super::store::StateStore;
use serde::Serialize;
use sluice_types::{OperatorId, OperatorUid, PipelineId, now_ms};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Checkpoints started and not yet complete, at most.
pub const CHECKPOINTS_IN_FLIGHT_MAX: usize = 1;
/// The value of the `stop_at` signal once every task of the pipeline
/// finished (its inputs ended): no checkpoint starts or completes any
/// more, so the finished tasks, which acknowledge checkpoints with their
/// final state until then ([`super::TaskCheckpoint::next_after_finish`]),
/// exit. (A two-phase-commit sink waiting for a checkpoint has not
/// finished, so the checkpoint it waits for completes: the finished tasks
/// acknowledge it.)
pub const CHECKPOINTS_ENDED: u64 = u64::MAX;
/// Completed checkpoints kept by default (older ones are deleted).
pub const CHECKPOINTS_RETAINED_DEFAULT: usize = 3;
/// Completed checkpoints listed in the status (SHOW PIPELINES, REST).
pub const CHECKPOINT_HISTORY_MAX: usize = 10;
/// Default time between checkpoints.
pub const CHECKPOINT_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);

/// How a pipeline checkpoints.
#[derive(Clone)]
pub struct CheckpointConfig {
    pub interval: Duration,
    pub retained: usize,
    /// A checkpoint not complete after this fails the pipeline (which then
    /// restarts from the last complete one).
    pub timeout: Duration,
    pub store: Arc<dyn StateStore>,
    /// Shared across restarts of the pipeline.
    pub stats: Arc<CheckpointStats>,
    /// False for a pipeline whose checkpoints are off: it checkpoints only
    /// to stop at a barrier (`ALTER PIPELINE`); `interval` then only paces
    /// the timeout check.
    pub periodic: bool,
}

impl CheckpointConfig {
    pub fn new(interval: Duration, store: Arc<dyn StateStore>, stats: Arc<CheckpointStats>) -> Self {
        CheckpointConfig {
            interval,
            retained: CHECKPOINTS_RETAINED_DEFAULT,
            timeout: (interval * 10).max(Duration::from_secs(120)),
            store,
            stats,
            periodic: true,
        }
    }

    /// A pipeline whose checkpoints are off: it checkpoints only when asked
    /// to stop at a barrier, into `store`.
    pub fn on_demand(store: Arc<dyn StateStore>, stats: Arc<CheckpointStats>) -> Self {
        CheckpointConfig {
            periodic: false,
            ..CheckpointConfig::new(CHECKPOINT_INTERVAL_DEFAULT, store, stats)
        }
    }
}

/// What tasks tell their process's state writer.
#[derive(Debug)]
pub enum AckEvent {
    /// A task took its snapshot for `checkpoint_id`.
    Ack {
        checkpoint_id: u64,
        task: super::TaskIdentity,
        state: TaskState,
    },
    /// A task finished (its inputs ended); it goes on acknowledging
    /// checkpoints with its final state until every task finished.
    Finished { operator: OperatorId, instance: u32 },
}

/// What the state writers tell the coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub enum CoordinatorEvent {
    /// Task `(operator, instance)` stored its state for `checkpoint_id`.
    Stored {
        checkpoint_id: u64,
        operator: OperatorId,
        instance: u32,
        entry: TaskEntry,
    },
    /// A task finished (its inputs ended).
    Finished { operator: OperatorId, instance: u32 },
    /// A task's state could not be stored: the checkpoint fails.
    WriteFailed { checkpoint_id: u64, error: String },
}

/// One completed checkpoint, as the status shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckpointInfo {
    pub id: u64,
    pub completed_ms: i64,
    pub size_bytes: u64,
    pub duration_ms: u64,
}

/// Checkpoint history of a pipeline (survives its restarts).
#[derive(Debug, Default)]
pub struct CheckpointStats {
    inner: Mutex<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    completed: VecDeque<CheckpointInfo>,
    restored_from: Option<u64>,
    failed: u64,
}

impl CheckpointStats {
    pub fn completed(&self) -> Vec<CheckpointInfo> {
        self.inner
            .lock()
            .expect("stats lock")
            .completed
            .iter()
            .cloned()
            .collect()
    }
    pub fn last(&self) -> Option<CheckpointInfo> {
        self.inner.lock().expect("stats lock").completed.back().cloned()
    }
    pub fn restored_from(&self) -> Option<u64> {
        self.inner.lock().expect("stats lock").restored_from
    }
    pub fn failed(&self) -> u64 {
        self.inner.lock().expect("stats lock").failed
    }
    pub fn set_restored_from(&self, id: Option<u64>) {
        self.inner.lock().expect("stats lock").restored_from = id;
    }
    fn record(&self, info: CheckpointInfo) {
        let mut s = self.inner.lock().expect("stats lock");
        s.completed.push_back(info);
        while s.completed.len() > CHECKPOINT_HISTORY_MAX {
            s.completed.pop_front();
        }
    }
    fn record_failure(&self) {
        self.inner.lock().expect("stats lock").failed += 1;
    }
}

/// One pending checkpoint.
#[derive(Debug)]
struct Pending {
    started_ms: i64,
    acked: BTreeMap<(OperatorId, u32), TaskEntry>,
}

/// Which checkpoints are pending and which tasks acknowledged them.
#[derive(Debug)]
pub struct PendingCheckpoints {
    tasks: BTreeSet<(OperatorId, u32)>,
    pending: BTreeMap<u64, Pending>,
    next_id: u64,
    /// The tasks that finished; once all have, no checkpoint starts.
    finished: BTreeSet<(OperatorId, u32)>,
    /// The pipeline's key group count (in each manifest).
    key_groups: u32,
}

impl PendingCheckpoints {
    /// `tasks`: every task instance of the pipeline; ids start at `next_id`.
    pub fn new(tasks: impl IntoIterator<Item = (OperatorId, u32)>, next_id: u64, key_groups: u32) -> Self {
        PendingCheckpoints {
            tasks: tasks.into_iter().collect(),
            pending: BTreeMap::new(),
            next_id: next_id.max(1),
            finished: BTreeSet::new(),
            key_groups,
        }
    }

    /// Starts the next checkpoint, unless too many are pending or a task
    /// has finished.
    pub fn start(&mut self, now_ms: i64) -> Option<u64> {
        if self.ended() || self.pending.len() >= CHECKPOINTS_IN_FLIGHT_MAX {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(
            id,
            Pending {
                started_ms: now_ms,
                acked: BTreeMap::new(),
            },
        );
        Some(id)
    }

    /// Takes over checkpoint `id`, started by an earlier owner of the same
    /// running tasks (a master quorum's new leader adopting a deployment):
    /// it is pending again, collecting the acknowledgements the tasks send
    /// (again), and new checkpoints start after it.
    pub fn resume(&mut self, id: u64, now_ms: i64) {
        self.pending.entry(id).or_insert(Pending {
            started_ms: now_ms,
            acked: BTreeMap::new(),
        });
        self.next_id = self.next_id.max(id + 1);
    }

    /// Records task `key`'s stored file; returns the manifest when the
    /// checkpoint is complete (it leaves the pending set).
    pub fn on_ack(
        &mut self,
        id: u64,
        key: (OperatorId, u32),
        entry: TaskEntry,
        pipeline: PipelineId,
        now_ms: i64,
    ) -> Option<Manifest> {
        let p = self.pending.get_mut(&id)?;
        if !self.tasks.contains(&key) {
            return None;
        }
        p.acked.insert(key, entry);
        if p.acked.len() < self.tasks.len() {
            return None;
        }
        let p = self.pending.remove(&id).expect("pending");
        let tasks: Vec<TaskEntry> = p.acked.into_values().collect();
        Some(Manifest {
            format_version: Manifest::version_for(&tasks),
            pipeline: pipeline.0,
            key_groups: Some(self.key_groups),
            checkpoint_id: id,
            started_ms: p.started_ms,
            completed_ms: now_ms,
            size_bytes: tasks.iter().map(|t| t.bytes).sum(),
            tasks,
        })
    }

    /// Task `key` finished. It still acknowledges checkpoints (with its
    /// final state), so they go on while other tasks run; returns true
    /// once every task finished: then none starts any more, and a pending
    /// one is dropped.
    pub fn on_finished(&mut self, key: (OperatorId, u32)) -> bool {
        if self.tasks.contains(&key) {
            self.finished.insert(key);
        }
        if self.ended() {
            self.pending.clear();
        }
        self.ended()
    }

    /// Every task finished.
    fn ended(&self) -> bool {
        !self.tasks.is_empty() && self.finished.len() == self.tasks.len()
    }

    /// The pending checkpoint started before `deadline_ms`, if any.
    pub fn overdue(&self, deadline_ms: i64) -> Option<u64> {
        self.pending
            .iter()
            .find(|(_, p)| p.started_ms < deadline_ms)
            .map(|(id, _)| *id)
    }

    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// The coordinator's signals, as every process running tasks sees them.
#[derive(Clone)]
pub struct BarrierSignals {
    /// Sources inject barrier `n` when this changes to `n`.
    pub trigger: watch::Receiver<u64>,
    /// The checkpoint the pipeline stops at (0: none): set before its
    /// trigger, so a source injecting barrier `n` knows whether it carries
    /// [`Mutation::Stop`](crate::message::Mutation::Stop).
    pub stop_at: watch::Receiver<u64>,
    /// The newest completed checkpoint id.
    pub completed: watch::Receiver<u64>,
}

/// The ends of the checkpoint channels that tasks hold.
#[derive(Clone)]
pub struct CheckpointHandles {
    pub trigger: watch::Receiver<u64>,
    pub stop_at: watch::Receiver<u64>,
    /// Acks and finish notices, to the process's state writer.
    pub acks: mpsc::UnboundedSender<AckEvent>,
    pub completed: watch::Receiver<u64>,
}

impl CheckpointHandles {
    /// Task handles over `signals`, acknowledging into `acks`.
    pub fn new(signals: &BarrierSignals, acks: mpsc::UnboundedSender<AckEvent>) -> Self {
        CheckpointHandles {
            trigger: signals.trigger.clone(),
            stop_at: signals.stop_at.clone(),
            acks,
            completed: signals.completed.clone(),
        }
    }
}

/// The coordinator's own ends.
pub struct CoordinatorChannels {
    trigger: watch::Sender<u64>,
    stop_at: watch::Sender<u64>,
    /// Becomes true when the pipeline is asked to stop at a barrier.
    stop_requested: watch::Receiver<bool>,
    events: mpsc::UnboundedReceiver<CoordinatorEvent>,
    completed: watch::Sender<u64>,
}

/// What a deployment's owner holds to stop it at a barrier
/// ([`crate::deploy::PipelineRuntime::stop_at_barrier`]).
#[derive(Clone)]
pub struct StopHandles {
    pub request: Arc<watch::Sender<bool>>,
    pub stop_at: watch::Receiver<u64>,
    pub completed: watch::Receiver<u64>,
}

/// Channels between the coordinator, the processes running tasks and the
/// deployment's owner. `restored` is the id of the checkpoint restored (it
/// counts as completed). Returns the signals tasks observe, the
/// coordinator's ends, the owner's stop handles and where state writers
/// send their events.
pub fn channels(
    restored: u64,
) -> (
    BarrierSignals,
    CoordinatorChannels,
    StopHandles,
    mpsc::UnboundedSender<CoordinatorEvent>,
) {
    let (trigger_tx, trigger_rx) = watch::channel(0);
    let (stop_at_tx, stop_at_rx) = watch::channel(0);
    let (request_tx, request_rx) = watch::channel(false);
    // Events are bounded by construction: tasks × (CHECKPOINTS_IN_FLIGHT_MAX
    // + the stop checkpoint) plus one finish notice per task.
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (completed_tx, completed_rx) = watch::channel(restored);
    (
        BarrierSignals {
            trigger: trigger_rx,
            stop_at: stop_at_rx.clone(),
            completed: completed_rx.clone(),
        },
        CoordinatorChannels {
            trigger: trigger_tx,
            stop_at: stop_at_tx,
            stop_requested: request_rx,
            events: events_rx,
            completed: completed_tx,
        },
        StopHandles {
            request: Arc::new(request_tx),
            stop_at: stop_at_rx,
            completed: completed_rx,
        },
        events_tx,
    )
}

impl CoordinatorChannels {
    /// Every task finished: tells them that no checkpoint starts or
    /// completes any more ([`CHECKPOINTS_ENDED`]).
    pub(crate) fn end_checkpoints(&self) {
        self.stop_at.send_replace(CHECKPOINTS_ENDED);
    }

    /// Sources were asked for barrier `id` by an earlier owner (see
    /// [`PendingCheckpoints::resume`]): the trigger says so again, so a
    /// process that never heard it injects it now.
    pub fn resume(&self, id: u64) {
        self.trigger.send_replace(id);
    }
}

/// Task handles whose acknowledgements the test reads itself, and the
/// coordinator's ends (kept alive by the test).
#[cfg(test)]
pub(crate) fn test_handles(
    restored: u64,
) -> (
    CheckpointHandles,
    mpsc::UnboundedReceiver<AckEvent>,
    CoordinatorChannels,
) {
    let (signals, coordinator, _stop, _events) = channels(restored);
    let (acks_tx, acks_rx) = mpsc::unbounded_channel();
    (CheckpointHandles::new(&signals, acks_tx), acks_rx, coordinator)
}

/// The state writer of one process's part of a deployment: stores each
/// snapshot its tasks acknowledge into `store` and passes the entry on to
/// `coordinator`, in order, until every task's handle is gone. Encoding
/// (Arrow IPC + CRC) is CPU work proportional to the state: it runs on the
/// low-priority checkpoint thread, so neither the tasks nor the runtime's
/// workers wait for it or compete with it. The file goes to the store as it
/// is encoded, a buffer at a time, its length and CRC computed on the way
/// (building it whole first touched hundreds of MB of fresh memory per
/// checkpoint of a large join).
///
/// `slow` gives an operator's extra store time (a test hook,
/// [`crate::fault::slow_state`]).
pub async fn write_states(
    pipeline: PipelineId,
    store: Arc<dyn StateStore>,
    mut acks: mpsc::UnboundedReceiver<AckEvent>,
    coordinator: impl Fn(CoordinatorEvent),
    slow: impl Fn(OperatorId) -> Option<Duration>,
) {
    // Per task, the files written lately (checkpoint → length, CRC-32),
    // which its next incremental snapshot may reference: only those the
    // task's latest file references are kept, plus that file.
    let mut written: HashMap<(OperatorUid, u32), BTreeMap<u64, FileRef>> = HashMap::new();
    while let Some(event) = acks.recv().await {
        let (checkpoint_id, task, state) = match event {
            AckEvent::Finished { operator, instance } => {
                coordinator(CoordinatorEvent::Finished { operator, instance });
                continue;
            }
            AckEvent::Ack {
                checkpoint_id,
                task,
                state,
            } => (checkpoint_id, task, state),
        };
        if let Some(delay) = slow(task.operator) {
            tokio::time::sleep(delay).await;
        }
        let dir = manifest::checkpoint_dir(pipeline, checkpoint_id);
        let file = manifest::task_file(task.uid, task.instance);
        let path = format!("{dir}/{file}");
        let files = written.entry((task.uid, task.instance)).or_default();
        let references = match referenced_files(&state, files) {
            Ok(r) => r,
            Err(error) => {
                coordinator(CoordinatorEvent::WriteFailed { checkpoint_id, error });
                continue;
            }
        };
        match store.put_with(&path, Box::new(move |w| state.write_to(w))).await {
            Ok(summary) => {
                files.retain(|c, _| references.iter().any(|r| r.checkpoint == *c));
                files.insert(
                    checkpoint_id,
                    FileRef {
                        checkpoint: checkpoint_id,
                        bytes: summary.bytes,
                        crc32: summary.crc32,
                    },
                );
                coordinator(CoordinatorEvent::Stored {
                    checkpoint_id,
                    operator: task.operator,
                    instance: task.instance,
                    entry: TaskEntry {
                        operator: None,
                        uid: task.uid,
                        instance: task.instance,
                        parallelism: Some(task.parallelism),
                        key_groups: Some(task.key_groups),
                        file,
                        bytes: summary.bytes,
                        crc32: summary.crc32,
                        references,
                    },
                })
            }
            Err(e) => coordinator(CoordinatorEvent::WriteFailed {
                checkpoint_id,
                error: e.to_string(),
            }),
        }
    }
}

/// The files of earlier checkpoints `state` references, from those this
/// writer wrote for the task; an error names one it did not write (the
/// snapshot cannot be restored: the checkpoint fails).
fn referenced_files(state: &TaskState, files: &BTreeMap<u64, FileRef>) -> Result<Vec<FileRef>, String> {
    let wanted = state.referenced_checkpoints().map_err(|e| e.to_string())?;
    wanted
        .into_iter()
        .map(|c| {
            files.get(&c).copied().ok_or_else(|| {
                format!("an incremental snapshot references checkpoint {c}, whose file this writer did not write")
            })
        })
        .collect()
}

/// Runs the coordinator until `cancel`. `fail` fails the pipeline (a store
/// error or a checkpoint timeout); the pipeline then restarts from the
/// last complete checkpoint.
///
/// Checkpoints start every `interval` when `config.periodic`; a stop
/// request starts one more, carrying [`Mutation::Stop`](crate::message::Mutation::Stop),
/// as soon as none is in flight, and no checkpoint starts after it. The
/// tasks exit once they acknowledged it, which cancels the coordinator:
/// it then still records the acknowledgements they sent, so the stop
/// checkpoint completes.
pub async fn run(
    pipeline: PipelineId,
    config: CheckpointConfig,
    mut book: PendingCheckpoints,
    mut ch: CoordinatorChannels,
    cancel: CancellationToken,
    fail: impl Fn(String) + Send + 'static,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + config.interval, config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut complete: Vec<u64> = config.stats.completed().iter().map(|c| c.id).collect();
    complete.extend(config.stats.restored_from());
    complete.sort_unstable();
    complete.dedup();
    // The stop checkpoint, once started.
    let mut stopping: Option<u64> = None;
    let mut owner_gone = false;
    loop {
        if stopping.is_none()
            && *ch.stop_requested.borrow()
            && let Some(id) = book.start(now_ms())
        {
            tracing::debug!(pipeline = %pipeline, checkpoint = id, "stop checkpoint started");
            stopping = Some(id);
            ch.stop_at.send_replace(id);
            ch.trigger.send_replace(id);
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                if stopping.is_some_and(|id| *ch.completed.borrow() < id) {
                    while let Ok(event) = ch.events.try_recv() {
                        if let Err(e) = on_event(pipeline, &config, &mut book, &mut ch, &mut complete, event).await {
                            config.stats.record_failure();
                            fail(format!("checkpoint failed: {e}"));
                            return;
                        }
                    }
                }
                return;
            }
            event = ch.events.recv() => {
                let Some(event) = event else { return };
                if let Err(e) = on_event(pipeline, &config, &mut book, &mut ch, &mut complete, event).await {
                    config.stats.record_failure();
                    fail(format!("checkpoint failed: {e}"));
                    return;
                }
            }
            changed = ch.stop_requested.changed(), if stopping.is_none() && !owner_gone => {
                // The owner going away without asking changes nothing.
                owner_gone = changed.is_err();
            }
            _ = tick.tick() => {
                if let Some(id) = book.overdue(now_ms() - config.timeout.as_millis() as i64) {
                    config.stats.record_failure();
                    fail(format!("checkpoint {id} did not complete within {:?}", config.timeout));
                    return;
                }
                if !config.periodic || stopping.is_some() || *ch.stop_requested.borrow() {
                    continue;
                }
                if let Some(id) = book.start(now_ms()) {
                    tracing::debug!(pipeline = %pipeline, checkpoint = id, "checkpoint started");
                    ch.trigger.send_replace(id);
                }
            }
        }
    }
}

async fn on_event(
    pipeline: PipelineId,
    config: &CheckpointConfig,
    book: &mut PendingCheckpoints,
    ch: &mut CoordinatorChannels,
    complete: &mut Vec<u64>,
    event: CoordinatorEvent,
) -> sluice_types::Result<()> {
    let (id, task, entry) = match event {
        CoordinatorEvent::Finished { operator, instance } => {
            if book.on_finished((operator, instance)) {
                ch.end_checkpoints();
            }
            return Ok(());
        }
        CoordinatorEvent::WriteFailed { checkpoint_id, error } => {
            return Err(sluice_types::Error::external(format!(
                "a task's state for checkpoint {checkpoint_id} could not be stored: {error}"
            )));
        }
        CoordinatorEvent::Stored {
            checkpoint_id,
            operator,
            instance,
            entry,
        } => (checkpoint_id, (operator, instance), entry),
    };
    let dir = manifest::checkpoint_dir(pipeline, id);
    let Some(m) = book.on_ack(id, task, entry, pipeline, now_ms()) else {
        return Ok(());
    };
    config.store.put(&format!("{dir}/{MANIFEST_FILE}"), m.encode()?).await?;
    let info = CheckpointInfo {
        id,
        completed_ms: m.completed_ms,
        size_bytes: m.size_bytes,
        duration_ms: (m.completed_ms - m.started_ms).max(0) as u64,
    };
    tracing::debug!(pipeline = %pipeline, checkpoint = id, bytes = info.size_bytes, "checkpoint complete");
    config.stats.record(info);
    ch.completed.send_replace(id);
    complete.push(id);
    manifest::prune(config.store.as_ref(), pipeline, complete, config.retained).await?;
    let keep_from = complete.len().saturating_sub(config.retained);
    complete.drain(..keep_from);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: u32, instance: u32) -> TaskEntry {
        TaskEntry {
            operator: None,
            uid: sluice_types::OperatorUid(u64::from(op)),
            instance,
            parallelism: Some(2),
            key_groups: Some(sluice_plan::key_group_range(instance, 2, 256)),
            file: manifest::task_file(sluice_types::OperatorUid(u64::from(op)), instance),
            bytes: 4,
            crc32: 0,
            references: vec![],
        }
    }

    fn ack(b: &mut PendingCheckpoints, id: u64, op: u32, instance: u32, now: i64) -> Option<Manifest> {
        b.on_ack(id, (OperatorId(op), instance), entry(op, instance), PipelineId(1), now)
    }

    #[test]
    fn completes_when_every_task_acked() {
        let p = PipelineId(1);
        let _ = p;
        let mut b = PendingCheckpoints::new([(OperatorId(1), 0), (OperatorId(2), 0), (OperatorId(2), 1)], 5, 256);
        assert_eq!(b.start(100), Some(5));
        assert!(ack(&mut b, 5, 1, 0, 110).is_none());
        assert!(ack(&mut b, 5, 2, 1, 120).is_none());
        // A duplicate ack changes nothing.
        assert!(ack(&mut b, 5, 2, 1, 120).is_none());
        let m = ack(&mut b, 5, 2, 0, 130).unwrap();
        assert_eq!(m.key_groups, Some(256));
        assert_eq!((m.checkpoint_id, m.tasks.len(), m.size_bytes), (5, 3, 12));
        assert_eq!(m.completed_ms - m.started_ms, 30);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn a_resumed_checkpoint_completes_from_acks_sent_again_and_later_ids_follow_it() {
        let mut b = PendingCheckpoints::new([(OperatorId(1), 0), (OperatorId(2), 0)], 4, 256);
        b.resume(7, 100);
        assert_eq!(b.in_flight(), 1);
        assert_eq!(b.start(110), None, "the resumed checkpoint is the one in flight");
        assert!(ack(&mut b, 7, 1, 0, 120).is_none());
        assert!(ack(&mut b, 7, 1, 0, 121).is_none(), "an ack sent twice counts once");
        let m = ack(&mut b, 7, 2, 0, 130).unwrap();
        assert_eq!(m.checkpoint_id, 7);
        assert_eq!(b.start(140), Some(8), "new ids come after the resumed one");
    }

    #[test]
    fn pending_checkpoints_are_bounded() {
        let mut b = PendingCheckpoints::new([(OperatorId(1), 0)], 1, 256);
        for _ in 0..CHECKPOINTS_IN_FLIGHT_MAX {
            assert!(b.start(0).is_some());
        }
        assert_eq!(b.start(0), None, "at the in-flight limit no new checkpoint starts");
        assert_eq!(b.in_flight(), CHECKPOINTS_IN_FLIGHT_MAX);
        assert_eq!(b.overdue(1), Some(1));
        assert!(ack(&mut b, 1, 1, 0, 5).is_some());
        assert_eq!(b.start(0), Some(2));
    }

    #[test]
    fn checkpoints_go_on_past_a_finished_task_and_end_with_the_last() {
        let mut b = PendingCheckpoints::new([(OperatorId(1), 0), (OperatorId(2), 0)], 1, 256);
        assert_eq!(b.start(0), Some(1));
        assert!(!b.on_finished((OperatorId(1), 0)), "one task runs on");
        assert_eq!(b.in_flight(), 1, "the checkpoint in flight stays");
        // The finished task acknowledges it with its final state.
        assert!(ack(&mut b, 1, 1, 0, 5).is_none());
        assert!(ack(&mut b, 1, 2, 0, 5).is_some());
        assert_eq!(b.start(0), Some(2));
        assert!(b.on_finished((OperatorId(2), 0)), "every task finished");
        assert_eq!(b.in_flight(), 0);
        assert_eq!(b.start(0), None);
    }
}
