//! One task's snapshots through the real checkpoint path — the state
//! writer ([`write_states`]), the coordinator's bookkeeping and manifest,
//! pruning — and read back as a restore reads them ([`read_checkpoint`]).
//! For the tests of operators whose snapshots are incremental (the stream
//! join here, the materialized view's sink in `sluice-connectors`), which
//! only the files on a store can check: a reference resolves from the
//! checkpoint that wrote the batch, through the manifest's list.

use super::coordinator::{AckEvent, CoordinatorEvent, PendingCheckpoints, write_states};
use super::manifest::{self, MANIFEST_FILE, Manifest, list_ids, prune, read_checkpoint};
use super::{StateStore, TaskIdentity, TaskState};
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

    /// Stops the state writer.
    pub async fn finish(self) {
        drop(self.acks);
        self.writer.await.expect("the state writer");
    }
}
