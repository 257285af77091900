//! [`NexmarkGenerator`]: batches of one table for one partition.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::auction::AuctionRows;
use super::bid::BidRows;
use super::channels::ChannelUrls;
use super::person::PersonRows;
use super::rows::{EventContext, TableRows};
use super::schedule::{EventClock, OwnedEvents};
use super::{NexmarkConfig, NexmarkTable, nexmark_schema};

/// Builders are preallocated for at most this many rows; a larger batch
/// grows them as it goes.
const BATCH_ROWS_PREALLOCATED_MAX: usize = 8192;

/// Generates the rows of one table for one partition: partition `p` of `k`
/// owns the global event numbers `n` with `n % k == p`; events of the other
/// tables are skipped, not emitted.
pub struct NexmarkGenerator {
    table: NexmarkTable,
    schema: SchemaRef,
    owned: OwnedEvents,
    /// One past the last event number of the sequence (`u64::MAX` if unbounded).
    end: u64,
    /// The event number the next batch starts scanning from.
    position: u64,
    /// After a re-split: events an earlier split already emitted.
    emitted: Vec<EmittedBefore>,
    context: EventContext,
}

/// What one earlier split of the sequence emitted: partition `i` of
/// `positions.len()` emitted its events (`n % len == i`) below
/// `positions[i]`. Restoring at another parallelism, a generator skips
/// these events between the lowest and the highest position.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EmittedBefore {
    pub positions: Vec<u64>,
}

impl EmittedBefore {
    fn covers(&self, n: u64) -> bool {
        n < self.positions[(n % self.positions.len() as u64) as usize]
    }

    /// The first event number at or after which it covers nothing.
    pub fn end(&self) -> u64 {
        self.positions.iter().copied().max().unwrap_or(0)
    }

    /// The lowest position: every event below it was emitted.
    pub fn start(&self) -> u64 {
        self.positions.iter().copied().min().unwrap_or(0)
    }
}

impl NexmarkGenerator {
    /// A generator starting at event 0.
    ///
    /// # Panics
    ///
    /// If `partitions` is 0 or `partition >= partitions`: the caller's
    /// partitioning is broken, not the user's input.
    pub fn new(config: NexmarkConfig, table: NexmarkTable, partition: u32, partitions: u32) -> Self {
        NexmarkGenerator {
            table,
            schema: nexmark_schema(table),
            owned: OwnedEvents::new(table, partition, partitions),
            end: config.events_max.unwrap_or(u64::MAX),
            position: 0,
            emitted: Vec::new(),
            context: EventContext {
                seed: config.seed,
                clock: EventClock::new(config.base_time_ms, config.events_per_second_for_timestamps),
                scratch: String::new(),
                channels: ChannelUrls::new(config.seed),
                unread: 0,
            },
        }
    }

    /// Leaves the string columns numbered in `columns` empty (no query
    /// reads them): they cost most of the generation. The values of the
    /// other columns stay exactly as without this.
    pub fn skip_columns(&mut self, columns: &[usize]) {
        self.context.unread = columns
            .iter()
            .filter(|&&c| c < self.schema.fields().len())
            .fold(0, |mask, c| mask | 1 << c);
    }

    /// The table this generator produces.
    pub fn table(&self) -> NexmarkTable {
        self.table
    }

    /// The schema of the batches.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Up to `rows_max` rows (at least 1) of this table, in event-number
    /// order; `None` once the sequence is exhausted for this table and
    /// partition. Never an empty batch.
    pub fn next_batch(&mut self, rows_max: usize) -> Option<RecordBatch> {
        self.next_batch_before(rows_max, u64::MAX)
    }

    /// As [`NexmarkGenerator::next_batch`], but only events numbered below
    /// `limit` (the events due, when paced); `None` also when the next
    /// event is not below it.
    pub fn next_batch_before(&mut self, rows_max: usize, limit: u64) -> Option<RecordBatch> {
        let rows_max = rows_max.max(1);
        match self.table {
            NexmarkTable::Person => self.fill::<PersonRows>(rows_max, limit),
            NexmarkTable::Auction => self.fill::<AuctionRows>(rows_max, limit),
            NexmarkTable::Bid => self.fill::<BidRows>(rows_max, limit),
        }
    }

    /// The number of the next event this generator emits; `None` when the
    /// sequence is exhausted for it.
    pub fn next_event(&self) -> Option<u64> {
        self.owned
            .iter_from(self.position)
            .find(|&n| n >= self.end || !self.emitted.iter().any(|e| e.covers(n)))
            .filter(|&n| n < self.end)
    }

    fn fill<R: TableRows>(&mut self, rows_max: usize, limit: u64) -> Option<RecordBatch> {
        let mut rows: Option<R> = None;
        let mut emitted = 0;
        let mut owned = self.owned.iter_from(self.position);
        let mut next_position = self.position;
        while emitted < rows_max {
            let Some(n) = owned.next().filter(|&n| n < self.end) else {
                next_position = self.end.max(self.position);
                break;
            };
            if n >= limit {
                break;
            }
            if self.emitted.iter().any(|e| e.covers(n)) {
                next_position = n + 1;
                continue;
            }
            rows.get_or_insert_with(|| R::with_capacity(rows_max.min(BATCH_ROWS_PREALLOCATED_MAX), &self.context))
                .append(n, &mut self.context);
            emitted += 1;
            next_position = n + 1;
        }
        self.position = next_position;
        let position = self.position;
        self.emitted.retain(|e| e.end() > position);
        rows.map(|rows| rows.finish(self.schema.clone()))
    }

    /// The event number the next call starts scanning from (for checkpoints).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Resumes from a position returned by [`NexmarkGenerator::position`].
    pub fn seek(&mut self, position: u64) {
        self.position = position;
    }

    /// What earlier splits emitted that this generator must skip (empty
    /// once it is past them): stored with its position.
    pub fn emitted_before(&self) -> &[EmittedBefore] {
        &self.emitted
    }

    /// Resumes a re-split sequence: from the lowest position of `emitted`,
    /// skipping what they emitted.
    pub fn resume(&mut self, position: u64, emitted: Vec<EmittedBefore>) {
        self.position = position;
        self.emitted = emitted.into_iter().filter(|e| e.end() > position).collect();
    }

    /// Event time (ms) of global event number `n`.
    pub fn event_time_ms(&self, n: u64) -> i64 {
        self.context.clock.time_ms(n)
    }
}
