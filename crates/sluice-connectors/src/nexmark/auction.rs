//! Auction rows (Nexmark's `AuctionGenerator`).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::ids::{
    CATEGORIES, FIRST_AUCTION_ID, FIRST_CATEGORY_ID, IN_FLIGHT_AUCTIONS, PROPORTION_AUCTION, PROPORTION_TOTAL,
    last_base0_auction_id, next_seller_id,
};
use super::random::EventRng;
use super::rows::{EventContext, TableRows};
use super::schedule::EventClock;
use super::strings::{FillerColumn, push_string};

/// The `extra` column's number in the schema (its generation can be skipped).
pub(super) const AUCTION_EXTRA: usize = 9;

/// Average size of an auction event in bytes; `extra` pads up to it.
const AUCTION_SIZE_AVERAGE: usize = 500;
/// `item_name` is shorter than this.
const ITEM_NAME_LEN_MAX: u64 = 20;
/// `description` is shorter than this.
const DESCRIPTION_LEN_MAX: u64 = 100;
/// Events until [`IN_FLIGHT_AUCTIONS`] more auctions have been created.
const EVENTS_FOR_IN_FLIGHT_AUCTIONS: u64 = IN_FLIGHT_AUCTIONS * PROPORTION_TOTAL / PROPORTION_AUCTION;

/// The columns of an auction batch under construction.
pub(super) struct AuctionRows {
    id: Int64Builder,
    item_name: StringBuilder,
    description: StringBuilder,
    initial_bid: Int64Builder,
    reserve: Int64Builder,
    date_time: TimestampMillisecondBuilder,
    expires: TimestampMillisecondBuilder,
    seller: Int64Builder,
    category: Int64Builder,
    extra: FillerColumn,
}

/// An auction's length, ms: uniform in `1..=2h` where `h` is the event time
/// it takes to create [`IN_FLIGHT_AUCTIONS`] more auctions, so that about
/// that many are open at any time.
fn auction_length_ms(n: u64, time_ms: i64, clock: &EventClock, rng: &mut EventRng) -> i64 {
    let horizon_ms = clock.time_ms(n.saturating_add(EVENTS_FOR_IN_FLIGHT_AUCTIONS)) - time_ms;
    let bound = horizon_ms.saturating_mul(2).max(1) as u64;
    1 + rng.below(bound) as i64
}

impl TableRows for AuctionRows {
    fn with_capacity(rows: usize, context: &EventContext) -> Self {
        AuctionRows {
            id: Int64Builder::with_capacity(rows),
            item_name: StringBuilder::with_capacity(rows, rows * 11),
            description: StringBuilder::with_capacity(rows, rows * 51),
            initial_bid: Int64Builder::with_capacity(rows),
            reserve: Int64Builder::with_capacity(rows),
            date_time: TimestampMillisecondBuilder::with_capacity(rows),
            expires: TimestampMillisecondBuilder::with_capacity(rows),
            seller: Int64Builder::with_capacity(rows),
            category: Int64Builder::with_capacity(rows),
            extra: FillerColumn::with_capacity(rows, if context.reads(AUCTION_EXTRA) { rows * 400 } else { 0 }),
        }
    }

    fn append(&mut self, n: u64, context: &mut EventContext) {
        let mut rng = EventRng::for_event(context.seed, n);
        let scratch = &mut context.scratch;
        let time_ms = context.clock.time_ms(n);
        self.id
            .append_value((last_base0_auction_id(n) + FIRST_AUCTION_ID) as i64);
        self.seller.append_value(next_seller_id(n, &mut rng));
        self.category
            .append_value((FIRST_CATEGORY_ID + rng.below(CATEGORIES)) as i64);
        let initial_bid = rng.next_price();
        self.initial_bid.append_value(initial_bid);
        self.date_time.append_value(time_ms);
        let length_ms = auction_length_ms(n, time_ms, &context.clock, &mut rng);
        self.expires.append_value(time_ms.saturating_add(length_ms));

        scratch.clear();
        push_string(&mut rng, ITEM_NAME_LEN_MAX, ' ', scratch);
        self.item_name.append_value(scratch.as_str());
        let mut size = 8 + scratch.len();
        scratch.clear();
        push_string(&mut rng, DESCRIPTION_LEN_MAX, ' ', scratch);
        self.description.append_value(scratch.as_str());
        size += scratch.len() + 5 * 8;

        self.reserve.append_value(initial_bid + rng.next_price());
        self.extra.append(
            context.reads(AUCTION_EXTRA).then_some(&mut rng),
            size,
            AUCTION_SIZE_AVERAGE,
        );
    }

    fn finish(mut self, schema: SchemaRef) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.item_name.finish()),
            Arc::new(self.description.finish()),
            Arc::new(self.initial_bid.finish()),
            Arc::new(self.reserve.finish()),
            Arc::new(self.date_time.finish()),
            Arc::new(self.expires.finish()),
            Arc::new(self.seller.finish()),
            Arc::new(self.category.finish()),
            Arc::new(self.extra.finish()),
        ];
        RecordBatch::try_new(schema, columns).expect("auction columns match the auction schema")
    }
}
