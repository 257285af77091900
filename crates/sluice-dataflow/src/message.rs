//! What travels on a channel between tasks.

use arrow::record_batch::RecordBatch;
use sluice_types::Watermark;

/// A checkpoint barrier (carried in-band; aligned by multi-input tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint_id: u64,
    /// A change of the pipeline that takes effect at this barrier, after
    /// every task's snapshot for it.
    pub mutation: Option<Mutation>,
}

/// A reconfiguration carried by a barrier (RisingWave's barrier
/// mutations). Pausing and resuming need no barrier — sources stop and
/// start reading, nothing downstream changes — so they are a signal to the
/// sources instead; adding, removing and replacing operators is done by
/// stopping at a barrier and deploying the new version restored from the
/// snapshot that barrier took (see `docs/architecture.md`, "Changing a
/// running pipeline").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Stop after this barrier: each task snapshots, forwards the barrier,
    /// acknowledges (a two-phase-commit sink also waits for the checkpoint
    /// to complete and commits) and exits without ending its downstream —
    /// no end of input, so no window fires early. Sources read nothing
    /// after injecting it.
    Stop,
}

impl Barrier {
    /// A plain checkpoint barrier.
    pub fn checkpoint(checkpoint_id: u64) -> Self {
        Barrier {
            checkpoint_id,
            mutation: None,
        }
    }

    /// True when the pipeline stops at this barrier.
    pub fn stops(&self) -> bool {
        self.mutation == Some(Mutation::Stop)
    }
}

/// One element of a channel. Control messages stay in order with data.
#[derive(Debug, Clone)]
pub enum Message {
    /// Rows.
    Data(RecordBatch),
    /// Event time has advanced: rows with event time below it are late.
    Watermark(Watermark),
    /// The sender has no data for now and must not hold back the receiver's
    /// low watermark until it sends data or a watermark again.
    Idle,
    /// A checkpoint barrier.
    Barrier(Barrier),
    /// The sender will send nothing more.
    EndOfInput,
}

impl Message {
    /// Rows carried (0 for control messages).
    pub fn rows(&self) -> usize {
        match self {
            Message::Data(b) => b.num_rows(),
            _ => 0,
        }
    }
}
