//! One task's snapshots through the real checkpoint path — the state
//! writer ([`write_states`]), the coordinator's bookkeeping and manifest,
//! pruning — and read back as a restore reads them ([`read_checkpoint`]).
//! For the tests of operators whose snapshots are incremental (the stream
//! join here, the materialized view's sink in `sluice-connectors`), which
//! only the files on a store can check: a reference resolves from the
//! checkpoint that wrote the batch, through the manifest's list.

use super::coordinator::{AckEvent, CoordinatorEvent, PendingCheckpoints, write_states};
use super::keyed::{Part, assemble};
use super::manifest::{self, MANIFEST_FILE, Manifest, TaskEntry, list_ids, prune, read_checkpoint};
use super::{StateStore, TaskIdentity, TaskState};
use crate::operator::Operator;
use sluice_plan::{KEY_GROUPS_DEFAULT, KeyGroupRange, key_group_range};
use sluice_types::{Error, OperatorId, PipelineId, Result};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A pipeline of one task checkpointing into a store.
pub struct CheckpointLoop {
    store: Arc<dyn StateStore>,
    pipeline: PipelineId,
    task: TaskIdentity,
    acks: mpsc::UnboundedSender<AckEvent>,
    events: Arc<Mutex<Vec<CoordinatorEvent>>>,
    writer: tokio::task::JoinHandle<()>,
    book: PendingCheckpoints,
    complete: Vec<u64>,
    retained: usize,
}

impl CheckpointLoop {
    /// Checkpoints into `store`, keeping the newest `retained` (and what
    /// they reference).
    pub fn new(store: Arc<dyn StateStore>, retained: usize) -> Self {
        let pipeline = PipelineId(1);
        let task = TaskIdentity::single(OperatorId(0));
        let (acks, rx) = mpsc::unbounded_channel();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let writer = tokio::spawn(write_states(
            pipeline,
            store.clone(),
            rx,
            move |e| sink.lock().expect("events").push(e),
            |_| None,
        ));
        CheckpointLoop {
            store,
            pipeline,
            task,
            acks,
            events,
            writer,
            book: PendingCheckpoints::new([(task.operator, 0)], 1, sluice_plan::KEY_GROUPS_DEFAULT),
            complete: Vec::new(),
            retained,
        }
    }

    /// The next checkpoint's id (its barrier: snapshot the task with it).
    pub fn start(&mut self) -> u64 {
        self.book.start(0).expect("one checkpoint in flight at a time")
    }

    /// Stores the task's snapshot for checkpoint `id`, completes the
    /// checkpoint (its manifest written) and prunes; returns the manifest.
    pub async fn complete(&mut self, id: u64, mut state: TaskState) -> Result<Manifest> {
        state.key_groups = sluice_plan::KEY_GROUPS_DEFAULT;
        self.acks
            .send(AckEvent::Ack {
                checkpoint_id: id,
                task: self.task,
                state,
            })
            .map_err(|_| Error::internal("the state writer stopped"))?;
        let event = loop {
            if let Some(e) = self.events.lock().expect("events").pop() {
                break e;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let CoordinatorEvent::Stored { entry, .. } = event else {
            return Err(Error::internal(format!("the snapshot was not stored: {event:?}")));
        };
        let m = self
            .book
            .on_ack(id, (self.task.operator, 0), entry, self.pipeline, 0)
            .ok_or_else(|| Error::internal("the checkpoint did not complete"))?;
        let dir = manifest::checkpoint_dir(self.pipeline, id);
        self.store.put(&format!("{dir}/{MANIFEST_FILE}"), m.encode()?).await?;
        self.complete.push(id);
        prune(self.store.as_ref(), self.pipeline, &self.complete, self.retained).await?;
        Ok(m)
    }

    /// The checkpoints whose directories are on the store.
    pub async fn kept(&self) -> Result<Vec<u64>> {
        list_ids(self.store.as_ref(), self.pipeline).await
    }

    /// The task's state of checkpoint `id`, read from the store as a
    /// restore reads it (references resolved).
    pub async fn read(&self, id: u64) -> Result<TaskState> {
        let mut restored = read_checkpoint(self.store.as_ref(), self.pipeline, id)
            .await
            .map_err(Error::internal)?;
        let (_, state) = restored
            .tasks
            .pop()
            .ok_or_else(|| Error::internal(format!("checkpoint {id} holds no task")))?;
        Ok(state)
    }

    /// Stores the task's snapshot for checkpoint `id` ([`Self::complete`])
    /// and reads it back ([`Self::read`]): the task's manifest entry (its
    /// bytes, the files it references) and its state as a restore sees it.
    pub async fn complete_and_read(&mut self, id: u64, state: TaskState) -> Result<(TaskEntry, TaskState)> {
        let m = self.complete(id, state).await?;
        let entry = m
            .tasks
            .into_iter()
            .next()
            .ok_or_else(|| Error::internal(format!("checkpoint {id} lists no task")))?;
        Ok((entry, self.read(id).await?))
    }

    /// Stops the state writer.
    pub async fn finish(self) {
        drop(self.acks);
        self.writer.await.expect("the state writer");
    }
}

/// The bytes `state` encodes to, as the state writer stores it (what a
/// full snapshot of the same state costs, for a restored operator's first).
pub fn encoded_len(mut state: TaskState) -> u64 {
    state.key_groups = KEY_GROUPS_DEFAULT;
    state.encode().expect("a snapshot encodes").len() as u64
}

/// `state` (read back from a checkpoint) as `instances` instances of a
/// rescale take it, each with its key groups; `what` names the operator in
/// errors.
pub fn rescaled(state: &TaskState, instances: u32, what: &str) -> Vec<(KeyGroupRange, TaskState)> {
    (0..instances)
        .map(|instance| {
            let mine = key_group_range(instance, instances, KEY_GROUPS_DEFAULT);
            let part = Part {
                instance: 0,
                same: false,
                legacy: false,
                state: state.clone(),
            };
            let state = assemble(vec![part], mine, KEY_GROUPS_DEFAULT, &|s| Ok(s), what).expect("assembles");
            (mine, state)
        })
        .collect()
}

/// How incremental a run of checkpoints was: how many were taken and how
/// many referenced earlier ones.
#[derive(Debug, Default)]
pub struct Incrementality {
    pub taken: usize,
    pub referencing: usize,
}

impl Incrementality {
    /// Counts checkpoint `id` (its task `entry`); one that references
    /// earlier ones must be smaller than `full` bytes (a full snapshot of
    /// the same state) once past checkpoint `warm_up` (until then the state
    /// is small and the references weigh as much as the rows).
    pub fn count(&mut self, id: u64, entry: &TaskEntry, full: u64, warm_up: u64) {
        self.taken += 1;
        if entry.references.is_empty() {
            return;
        }
        self.referencing += 1;
        assert!(
            id <= warm_up || entry.bytes < full,
            "checkpoint {id}: {} bytes, a full one {full}",
            entry.bytes
        );
    }
}

/// Copies of an operator restored from checkpoint `id` (its task `entry`
/// and its state read back, `restored`): for each number of instances in
/// `rescales`, that many made by `new_op` (given the number), each restored
/// with its key groups as a rescale restores them. The checkpoint is
/// counted in `counted` against a full snapshot of the same state — the
/// first single copy's first snapshot, nothing of it written yet.
pub async fn restored_copies<O: Operator>(
    id: u64,
    entry: &TaskEntry,
    restored: &TaskState,
    rescales: &[u32],
    new_op: impl Fn(u32) -> O,
    (counted, warm_up): (&mut Incrementality, u64),
) -> Vec<Vec<(KeyGroupRange, O)>> {
    let mut copies = Vec::new();
    let mut full = None;
    for &n in rescales {
        let mut instances = Vec::new();
        for (range, state) in rescaled(restored, n, "copy") {
            let mut o = new_op(n);
            o.restore(Some((id, state))).await.expect("restores");
            instances.push((range, o));
        }
        if n == 1 && full.is_none() {
            let first = instances[0].1.snapshot(id + 1_000_000).await.expect("snapshots");
            full = Some(encoded_len(first));
        }
        copies.push(instances);
    }
    counted.count(id, entry, full.expect("a single copy among the rescales"), warm_up);
    copies
}

/// The rows of `batches` as text, one string a row, in order.
pub fn row_strings(batches: &[arrow::record_batch::RecordBatch]) -> Vec<String> {
    use arrow::util::display::array_value_to_string;
    batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows()).map(move |i| {
                b.columns()
                    .iter()
                    .map(|c| array_value_to_string(c, i).expect("displays"))
                    .collect::<Vec<_>>()
                    .join("|")
            })
        })
        .collect()
}

/// `batch`'s rows whose key (`key_columns`) is in `range`'s key groups:
/// what an instance of a rescale is given.
pub fn of_key_groups(
    batch: &arrow::record_batch::RecordBatch,
    key_columns: &[usize],
    range: KeyGroupRange,
) -> arrow::record_batch::RecordBatch {
    let groups = super::keyed::label(batch, key_columns, KEY_GROUPS_DEFAULT).expect("labels");
    let mine: arrow::array::BooleanArray = groups
        .values()
        .iter()
        .map(|g| Some(range.contains(u32::from(*g))))
        .collect();
    arrow::compute::filter_record_batch(batch, &mine).expect("filters")
}

/// An operator that emits what each input batch causes, for
/// [`copies_go_on_as_the_operator`].
pub type Update<'a, O> =
    &'a mut dyn FnMut(&mut O, usize, &arrow::record_batch::RecordBatch) -> Vec<arrow::record_batch::RecordBatch>;

/// Runs an operator made by `new_op` over `inputs` (each batch with its
/// input), checkpointing into directory `dir` every 3rd batch through the
/// real writer,
/// manifest, pruning and reader (keeping one checkpoint and what it
/// references); a copy restored from each checkpoint, and from the one
/// at batch 68 also the two instances of a rescale (each given the rows of
/// its key groups: `key_columns` of an input), go on beside it and must
/// emit what it emits for each batch — with `in_order` a single copy in
/// the same order, else (and a rescaled one) the same rows. Returns how
/// incremental the checkpoints were.
pub async fn copies_go_on_as_the_operator<O: Operator>(
    dir: &std::path::Path,
    inputs: &[(usize, arrow::record_batch::RecordBatch)],
    key_columns: &dyn Fn(usize) -> Vec<usize>,
    new_op: &dyn Fn() -> O,
    update: Update<'_, O>,
    (what, in_order): (&str, bool),
) -> Incrementality {
    let store: Arc<dyn StateStore> = Arc::new(super::LocalStateStore::new(dir));
    let mut checkpoints = CheckpointLoop::new(store, 1);
    let mut op = new_op();
    let mut copies: Vec<Vec<(KeyGroupRange, O)>> = Vec::new();
    let mut counted = Incrementality::default();
    for (i, (input, batch)) in inputs.iter().enumerate() {
        if i % 3 == 2 {
            let id = checkpoints.start();
            let state = op.snapshot(id).await.expect("snapshots");
            let (entry, restored) = checkpoints.complete_and_read(id, state).await.expect("checkpoints");
            let rescales: &[u32] = if i == 68 { &[1, 2] } else { &[1] };
            let more = restored_copies(id, &entry, &restored, rescales, |_| new_op(), (&mut counted, 5)).await;
            copies.extend(more);
        }
        let want = row_strings(&update(&mut op, *input, batch));
        for (c, copy) in copies.iter_mut().enumerate() {
            let mut got = Vec::new();
            for (range, o) in copy.iter_mut() {
                got.extend(update(o, *input, &of_key_groups(batch, &key_columns(*input), *range)));
            }
            let mut got = row_strings(&got);
            if copy.len() == 1 && in_order {
                assert_eq!(got, want, "{what}: copy {c}, batch {i}");
            } else {
                let mut want = want.clone();
                got.sort();
                want.sort();
                assert_eq!(got, want, "{what}: rescaled copy {c}, batch {i}");
            }
        }
    }
    checkpoints.finish().await;
    counted
}
