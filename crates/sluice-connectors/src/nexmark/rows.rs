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
    pub(super) channels: ChannelUrls,
    /// Bit `c` set: no operator reads column `c`, so a string column is
    /// left empty instead of composed (its random draws are still made, so
    /// the columns that are read do not change).
    pub(super) unread: u64,
}

impl EventContext {
    /// Whether column `column` of the table is read.
    pub(super) fn reads(&self, column: usize) -> bool {
        self.unread & (1 << column) == 0
    }
}

/// The columns of one table's batch under construction.
pub(super) trait TableRows: Sized {
    /// Builders for `rows` rows; columns `context` does not read get no
    /// room for values (their values are empty strings).
    fn with_capacity(rows: usize, context: &EventContext) -> Self;
    /// Appends the row of event `n`, which must be of this table's kind.
    fn append(&mut self, n: u64, context: &mut EventContext);
    fn finish(self, schema: SchemaRef) -> RecordBatch;
}
