//! Checkpoints: barriers injected at the sources travel in-band, are
//! aligned at multi-input tasks ([`barrier_alignment`]), and make every task snapshot
//! its state ([`state`]); the [`coordinator`] stores the snapshots in a
//! [`store`] and completes a checkpoint with its [`manifest`] once every
//! task acknowledged. Two-phase-commit sinks pre-commit at the barrier and
//! commit when the checkpoint completes. Recovery restores every task from
//! the newest complete, intact checkpoint and replays the sources from its
//! positions.

pub mod background;
pub mod barrier_alignment;
pub mod coordinator;
pub mod incremental;
pub mod key_groups;
pub mod keyed;
pub mod ledger;
pub mod manifest;
pub mod state;
pub mod store;
/// For tests of operators with incremental snapshots (also other crates').
#[doc(hidden)]
pub mod testing;

pub use coordinator::{CheckpointConfig, CheckpointInfo, CheckpointStats};
pub use manifest::RestoredCheckpoint;
pub use state::TaskState;
pub use store::{LocalStateStore, StateStore};

/// Key under which a task stores its low watermark (so replayed rows that
/// were late before the crash are late again).
pub const LOW_WATERMARK_KEY: &str = "__task.low_watermark";

/// Which task a snapshot is of, as checkpoints name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskIdentity {
    /// The operator's number in this deployment (bookkeeping).
    pub operator: sluice_types::OperatorId,
    /// What its state is stored under.
    pub uid: sluice_types::OperatorUid,
    pub instance: u32,
    pub parallelism: u32,
    /// The key groups this instance owns (of `key_group_count`).
    pub key_groups: sluice_plan::KeyGroupRange,
    pub key_group_count: u32,
}

impl TaskIdentity {
    /// Instance `instance` of `op` in `dag`.
    pub fn of(dag: &sluice_plan::PhysicalDag, op: &sluice_plan::OperatorSpec, instance: u32) -> Self {
        TaskIdentity {
            operator: op.id,
            uid: op.uid,
            instance,
            parallelism: op.parallelism,
            key_groups: sluice_plan::key_group_range(instance, op.parallelism, dag.key_groups),
            key_group_count: dag.key_groups,
        }
    }

    /// The single instance of an operator numbered `operator` (tests).
    #[doc(hidden)]
    pub fn single(operator: sluice_types::OperatorId) -> Self {
        TaskIdentity {
            operator,
            uid: sluice_types::OperatorUid(u64::from(operator.0) + 1),
            instance: 0,
            parallelism: 1,
            key_groups: sluice_plan::key_group_range(0, 1, sluice_plan::KEY_GROUPS_DEFAULT),
            key_group_count: sluice_plan::KEY_GROUPS_DEFAULT,
        }
    }
}

/// What one task needs to take part in checkpoints.
pub struct TaskCheckpoint {
    pub handles: coordinator::CheckpointHandles,
    pub operator: sluice_types::OperatorId,
    pub instance: u32,
    /// Its uid, parallelism and key groups, for the manifest.
    pub identity: TaskIdentity,
    /// The restored checkpoint's id and this task's state in it.
    pub restored: Option<(u64, TaskState)>,
}

impl TaskCheckpoint {
    /// Hands a snapshot to the coordinator (keyed values are labelled by
    /// the pipeline's key group count when it writes them).
    pub fn ack(&self, checkpoint_id: u64, mut state: TaskState) {
        state.key_groups = self.identity.key_group_count;
        let _ = self.handles.acks.send(coordinator::AckEvent::Ack {
            checkpoint_id,
            task: self.identity,
            state,
        });
    }

    /// After the task finished (its end of input sent on): the next
    /// checkpoint it must still acknowledge — with its final state, which
    /// every checkpoint after its end holds (Flink's FLIP-147), so
    /// checkpoints go on while other tasks of the pipeline run; `None` once
    /// it may exit: every task finished
    /// ([`coordinator::CHECKPOINTS_ENDED`]), or `cancel`. `last`: the last
    /// checkpoint it acknowledged. After acknowledging a stop barrier
    /// ([`TaskCheckpoint::stops_at`]) it exits too.
    pub async fn next_after_finish(&mut self, last: u64, cancel: &tokio_util::sync::CancellationToken) -> Option<u64> {
        loop {
            if *self.handles.stop_at.borrow() == coordinator::CHECKPOINTS_ENDED {
                return None;
            }
            let id = *self.handles.trigger.borrow_and_update();
            if id > last {
                return Some(id);
            }
            tokio::select! {
                _ = cancel.cancelled() => return None,
                changed = self.handles.trigger.changed() => changed.ok()?,
                changed = self.handles.stop_at.changed() => changed.ok()?,
            }
        }
    }

    /// Checkpoint `id` is the one the pipeline stops at.
    pub fn stops_at(&self, id: u64) -> bool {
        *self.handles.stop_at.borrow() == id
    }

    /// Tells the coordinator this task finished.
    pub fn finished(&self) {
        let _ = self.handles.acks.send(coordinator::AckEvent::Finished {
            operator: self.operator,
            instance: self.instance,
        });
    }
}
