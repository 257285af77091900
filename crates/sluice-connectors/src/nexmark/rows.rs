//! What every table's row builder shares: the generation context and the
//! [`TableRows`] trait the generator drives.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::channels::ChannelUrls;
use super::schedule::EventClock;

/// What the row builders of every table share while generating.
pub(super) struct EventContext {
    pub(super) seed: u64,
    pub(super) clock: EventClock,
    /// Reused buffer for composing string values.
    pub(super) scratch: String,
    /// Reused buffer for filler letters.
    pub(super) letters: Vec<u8>,
    pub(super) channels: ChannelUrls,
}

/// The columns of one table's batch under construction.
pub(super) trait TableRows: Sized {
    fn with_capacity(rows: usize) -> Self;
    /// Appends the row of event `n`, which must be of this table's kind.
    fn append(&mut self, n: u64, context: &mut EventContext);
    fn finish(self, schema: SchemaRef) -> RecordBatch;
}
