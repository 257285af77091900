//! The standard Nexmark event generator, producing Arrow record batches.
//!
//! Nexmark models an online auction house with three streams: `person` (new
//! users), `auction` (items put up for sale) and `bid`. This module follows the
//! generator that Apache Beam, Flink's nexmark benchmark and RisingWave share
//! (`NexmarkGenerator`), with its default configuration.
//!
//! # The model
//!
//! * **One global event sequence.** Events are numbered `n = 0, 1, 2, …` across
//!   all three tables. The number alone decides the kind of event: within each
//!   block of 50, `n % 50 == 0` is a person, `1..=3` an auction, the other 46
//!   are bids.
//! * **Ids are arithmetic.** Person ids and auction ids count up from 1000 in
//!   event order, so the person or auction created by event `n` has an id
//!   computed from `n` (no state). Bids and auctions refer to people and
//!   auctions through the standard "hot" and "active" rules: most bids go to
//!   the first auction of the latest block of 100 auctions, most sellers and
//!   bidders are the first or second person of the latest block of 100 people,
//!   and the rest pick among the recently created ones plus a small lead of not
//!   yet created ids (so a bid may, as in the reference, name an auction or
//!   person a few events in its future).
//! * **Time is arithmetic.** Event `n` happens at
//!   `base_time_ms + n * 1_000_000 / events_per_second_for_timestamps` µs,
//!   floored to milliseconds. Event time has nothing to do with wall-clock time;
//!   pacing a source is the connector's business.
//! * **Randomness is per event.** Every event draws from its own random stream,
//!   seeded from `(seed, n)`. So the rows depend only on the seed and the event
//!   numbers, never on how the sequence is cut into batches or partitions.
//! * **Partitions interleave.** Partition `p` of `k` owns the event numbers
//!   with `n % k == p`; a generator for one table emits the owned events of its
//!   kind and skips the rest arithmetically. The union of the `k` partitions is
//!   exactly the single-partition output.
//!
//! Known differences from the Java reference, all deliberate: the random
//! generator is a per-event SplitMix64 stream rather than `java.util.Random`
//! (values differ, distributions match); bid `bidder` ids add the first person
//! id once (Flink's generator adds it twice, a known bug; Beam adds it once);
//! the channel URLs that Flink draws once per process are derived from the
//! seed, so runs are reproducible.
//!
//! # Entry points
//!
//! [`nexmark_schema`] gives a table's Arrow schema; [`NexmarkGenerator`] yields
//! its batches, with [`NexmarkGenerator::position`] and
//! [`NexmarkGenerator::seek`] for checkpoints.

mod auction;
mod bid;
mod channels;
mod generator;
mod ids;
mod person;
mod random;
mod rows;
mod schedule;
mod strings;
#[cfg(test)]
mod tests;

use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use sluice_types::{Error, Result};

pub use generator::{EmittedBefore, NexmarkGenerator};

/// Which Nexmark table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NexmarkTable {
    /// New users of the auction house.
    Person,
    /// Items put up for sale.
    Auction,
    /// Bids on auctions.
    Bid,
}

impl NexmarkTable {
    /// The three tables, in the order of their share of the event sequence.
    pub const ALL: [NexmarkTable; 3] = [NexmarkTable::Person, NexmarkTable::Auction, NexmarkTable::Bid];

    /// Parses a table name (`person`, `auction` or `bid`, any case).
    pub fn parse(name: &str) -> Result<Self> {
        NexmarkTable::ALL
            .into_iter()
            .find(|table| table.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| {
                Error::invalid_option(format!(
                    "unknown nexmark table '{name}'; valid tables are: person, auction, bid"
                ))
            })
    }

    /// The table's name in lower case.
    pub fn name(self) -> &'static str {
        match self {
            NexmarkTable::Person => "person",
            NexmarkTable::Auction => "auction",
            NexmarkTable::Bid => "bid",
        }
    }
}

/// What to generate. The shape of the data (proportions, hot ratios, sizes)
/// is the standard Nexmark default and is not configurable.
#[derive(Debug, Clone)]
pub struct NexmarkConfig {
    /// Seed of every event's random stream.
    pub seed: u64,
    /// Total events over all three tables (the global event count); `None`
    /// for an unbounded sequence.
    pub events_max: Option<u64>,
    /// Event time of event 0, in ms since the Unix epoch. Fixed by default so
    /// that runs are reproducible.
    pub base_time_ms: i64,
    /// Spacing of event timestamps: event `n` is `n / rate` seconds after
    /// `base_time_ms`. Only shapes event time; it does not pace anything.
    pub events_per_second_for_timestamps: u64,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        NexmarkConfig {
            seed: 0,
            events_max: None,
            base_time_ms: 1_700_000_000_000,
            events_per_second_for_timestamps: 10_000,
        }
    }
}

impl NexmarkConfig {
    /// Checks the values a user may have given. The generator itself treats a
    /// zero rate as 1 event/s rather than failing.
    pub fn validate(&self) -> Result<()> {
        if self.events_per_second_for_timestamps == 0 {
            return Err(Error::invalid_option(
                "nexmark events per second for timestamps must be at least 1",
            ));
        }
        Ok(())
    }
}

/// The Arrow schema of a table. All columns are non-nullable; times are
/// `Timestamp(Millisecond, None)`.
pub fn nexmark_schema(table: NexmarkTable) -> SchemaRef {
    static SCHEMAS: OnceLock<[SchemaRef; 3]> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| [person_schema(), auction_schema(), bid_schema()]);
    match table {
        NexmarkTable::Person => Arc::clone(&schemas[0]),
        NexmarkTable::Auction => Arc::clone(&schemas[1]),
        NexmarkTable::Bid => Arc::clone(&schemas[2]),
    }
}

fn int64(name: &str) -> Field {
    Field::new(name, DataType::Int64, false)
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}

fn timestamp_ms(name: &str) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, None), false)
}

fn person_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        int64("id"),
        utf8("name"),
        utf8("email_address"),
        utf8("credit_card"),
        utf8("city"),
        utf8("state"),
        timestamp_ms("date_time"),
        utf8("extra"),
    ]))
}

fn auction_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        int64("id"),
        utf8("item_name"),
        utf8("description"),
        int64("initial_bid"),
        int64("reserve"),
        timestamp_ms("date_time"),
        timestamp_ms("expires"),
        int64("seller"),
        int64("category"),
        utf8("extra"),
    ]))
}

fn bid_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        int64("auction"),
        int64("bidder"),
        int64("price"),
        utf8("channel"),
        utf8("url"),
        timestamp_ms("date_time"),
        utf8("extra"),
    ]))
}
