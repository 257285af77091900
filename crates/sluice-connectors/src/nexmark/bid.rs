//! Bid rows (Nexmark's `BidGenerator`).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::channels::{CHANNELS, HOT_CHANNEL_ODDS, HOT_CHANNELS};
use super::ids::{next_bid_auction_id, next_bidder_id};
use super::random::EventRng;
use super::rows::{EventContext, TableRows};
use super::strings::FillerColumn;

/// Average size of a bid event in bytes; `extra` pads up to it.
const BID_SIZE_AVERAGE: usize = 100;
/// Bytes of a bid's fixed-size fields, as the reference counts them.
const BID_SIZE_FIXED: usize = 4 * 8;
/// Columns of the bid schema whose generation can be skipped.
pub(super) const BID_CHANNEL: usize = 3;
pub(super) const BID_URL: usize = 4;
pub(super) const BID_EXTRA: usize = 6;

/// The columns of a bid batch under construction.
pub(super) struct BidRows {
    auction: Int64Builder,
    bidder: Int64Builder,
    price: Int64Builder,
    channel: StringBuilder,
    url: StringBuilder,
    date_time: TimestampMillisecondBuilder,
    extra: FillerColumn,
}

impl TableRows for BidRows {
    fn with_capacity(rows: usize, context: &EventContext) -> Self {
        // Room for values that are never written still costs: each batch's
        // buffers are fresh allocations, faulted in when first touched.
        let urls = context.reads(BID_CHANNEL) || context.reads(BID_URL);
        let bytes = |read: bool, per_row: usize| if read { rows * per_row } else { 0 };
        BidRows {
            auction: Int64Builder::with_capacity(rows),
            bidder: Int64Builder::with_capacity(rows),
            price: Int64Builder::with_capacity(rows),
            channel: StringBuilder::with_capacity(rows, bytes(urls, 10)),
            url: StringBuilder::with_capacity(rows, bytes(urls, 72)),
            date_time: TimestampMillisecondBuilder::with_capacity(rows),
            extra: FillerColumn::with_capacity(rows, bytes(context.reads(BID_EXTRA), 72)),
        }
    }

    fn append(&mut self, n: u64, context: &mut EventContext) {
        let mut rng = EventRng::for_event(context.seed, n);
        self.auction.append_value(next_bid_auction_id(n, &mut rng));
        self.bidder.append_value(next_bidder_id(n, &mut rng));
        self.price.append_value(rng.next_price());
        let hot = rng.below(HOT_CHANNEL_ODDS) > 0;
        let number = if hot {
            rng.index(HOT_CHANNELS.len())
        } else {
            rng.index(CHANNELS)
        };
        if context.reads(BID_CHANNEL) || context.reads(BID_URL) {
            let (channel, url) = if hot {
                context.channels.hot(number)
            } else {
                context.channels.other(number)
            };
            self.channel.append_value(channel);
            self.url.append_value(url);
        } else {
            self.channel.append_value("");
            self.url.append_value("");
        }
        self.date_time.append_value(context.clock.time_ms(n));
        self.extra.append(
            context.reads(BID_EXTRA).then_some(&mut rng),
            BID_SIZE_FIXED,
            BID_SIZE_AVERAGE,
        );
    }

    fn finish(mut self, schema: SchemaRef) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.auction.finish()),
            Arc::new(self.bidder.finish()),
            Arc::new(self.price.finish()),
            Arc::new(self.channel.finish()),
            Arc::new(self.url.finish()),
            Arc::new(self.date_time.finish()),
            Arc::new(self.extra.finish()),
        ];
        RecordBatch::try_new(schema, columns).expect("bid columns match the bid schema")
    }
}
