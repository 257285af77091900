//! What travels on a channel between tasks.

use arrow::record_batch::RecordBatch;
use sluice_types::Watermark;

/// A checkpoint barrier (carried in-band; aligned by multi-input tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint_id: u64,
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
