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
pub mod manifest;
pub mod state;
pub mod store;

pub use coordinator::{CheckpointConfig, CheckpointInfo, CheckpointStats};
pub use manifest::RestoredCheckpoint;
pub use state::TaskState;
pub use store::{LocalStateStore, StateStore};

/// Key under which a task stores its low watermark (so replayed rows that
/// were late before the crash are late again).
pub const LOW_WATERMARK_KEY: &str = "__task.low_watermark";

/// What one task needs to take part in checkpoints.
pub struct TaskCheckpoint {
    pub handles: coordinator::CheckpointHandles,
    pub operator: sluice_types::OperatorId,
    pub instance: u32,
    /// The restored checkpoint's id and this task's state in it.
    pub restored: Option<(u64, TaskState)>,
}

impl TaskCheckpoint {
    /// Hands a snapshot to the coordinator.
    pub fn ack(&self, checkpoint_id: u64, state: TaskState) {
        let _ = self.handles.acks.send(coordinator::AckEvent::Ack {
            checkpoint_id,
            operator: self.operator,
            instance: self.instance,
            state,
        });
    }

    /// Tells the coordinator this task finished.
    pub fn finished(&self) {
        let _ = self.handles.acks.send(coordinator::AckEvent::Finished {
            operator: self.operator,
            instance: self.instance,
        });
    }
}
