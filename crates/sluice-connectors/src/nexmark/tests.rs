//! Behaviour of the generator as a whole. Expected counts and ids come from
//! hand computation over the 1:3:46 pattern, not from earlier output.

use arrow::array::{Array, AsArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;

use super::*;

fn bounded(seed: u64, events_max: u64) -> NexmarkConfig {
    NexmarkConfig {
        seed,
        events_max: Some(events_max),
        ..NexmarkConfig::default()
    }
}

fn drain(
    config: &NexmarkConfig,
    table: NexmarkTable,
    partition: u32,
    partitions: u32,
    rows_max: usize,
) -> Vec<RecordBatch> {
    let mut generator = NexmarkGenerator::new(config.clone(), table, partition, partitions);
    let mut batches = Vec::new();
    while let Some(batch) = generator.next_batch(rows_max) {
        assert!(
            batch.num_rows() >= 1 && batch.num_rows() <= rows_max,
            "{} rows",
            batch.num_rows()
        );
        batches.push(batch);
    }
    batches
}

fn concat(table: NexmarkTable, batches: &[RecordBatch]) -> RecordBatch {
    concat_batches(&nexmark_schema(table), batches).expect("same schema")
}

fn all_rows(config: &NexmarkConfig, table: NexmarkTable) -> RecordBatch {
    concat(table, &drain(config, table, 0, 1, 4096))
}

/// Every row as text, for comparing sets of rows.
fn row_strings(batch: &RecordBatch) -> Vec<String> {
    (0..batch.num_rows())
        .map(|row| {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .map(|column| array_value_to_string(column, row).expect("displayable"))
                .collect();
            cells.join("|")
        })
        .collect()
}

fn int64s(batch: &RecordBatch, name: &str) -> Vec<i64> {
    let column = batch.column_by_name(name).expect(name);
    column.as_primitive::<Int64Type>().values().to_vec()
}

fn times(batch: &RecordBatch, name: &str) -> Vec<i64> {
    let column = batch.column_by_name(name).expect(name);
    column.as_primitive::<TimestampMillisecondType>().values().to_vec()
}

fn strings(batch: &RecordBatch, name: &str) -> Vec<String> {
    let column = batch.column_by_name(name).expect(name);
    column
        .as_string::<i32>()
        .iter()
        .map(|s| s.expect("non-null").to_owned())
        .collect()
}

#[test]
fn same_seed_gives_identical_batches_and_another_seed_differs() {
    for table in NexmarkTable::ALL {
        let first = drain(&bounded(1, 5_000), table, 0, 1, 500);
        let again = drain(&bounded(1, 5_000), table, 0, 1, 500);
        assert_eq!(first, again, "{table:?}");
        let other = drain(&bounded(2, 5_000), table, 0, 1, 500);
        assert_eq!(first.len(), other.len());
        assert_ne!(first, other, "{table:?}");
    }
}

#[test]
fn partitions_together_give_exactly_the_single_partition_rows() {
    let config = bounded(7, 10_000);
    for table in NexmarkTable::ALL {
        let mut single = row_strings(&all_rows(&config, table));
        single.sort();
        for partitions in [3, 7, 50] {
            let mut union: Vec<String> = (0..partitions)
                .flat_map(|p| row_strings(&concat(table, &drain(&config, table, p, partitions, 333))))
                .collect();
            union.sort();
            assert_eq!(union, single, "{table:?} over {partitions} partitions");
        }
    }
}

#[test]
fn batch_size_does_not_change_the_rows() {
    let config = bounded(3, 6_000);
    for table in NexmarkTable::ALL {
        let small = concat(table, &drain(&config, table, 1, 2, 7));
        let large = concat(table, &drain(&config, table, 1, 2, 1000));
        assert_eq!(small, large, "{table:?}");
    }
}

#[test]
fn fifty_thousand_events_are_one_three_forty_six() {
    let config = bounded(0, 50_000);
    let counts: Vec<usize> = NexmarkTable::ALL
        .iter()
        .map(|&table| all_rows(&config, table).num_rows())
        .collect();
    assert_eq!(counts, [1_000, 3_000, 46_000]);
}

#[test]
fn bounded_generators_emit_events_max_events_then_end() {
    // 12_345 events = 246 blocks of 50 + 45: persons 246 + 1, auctions
    // 246 * 3 + 3, bids 246 * 46 + 41.
    let config = bounded(0, 12_345);
    for partitions in [1, 4] {
        let mut counts = [0usize; 3];
        for (slot, table) in NexmarkTable::ALL.into_iter().enumerate() {
            for partition in 0..partitions {
                let mut generator = NexmarkGenerator::new(config.clone(), table, partition, partitions);
                while let Some(batch) = generator.next_batch(1000) {
                    counts[slot] += batch.num_rows();
                }
                assert!(generator.next_batch(1000).is_none());
                assert_eq!(generator.position(), 12_345);
            }
        }
        assert_eq!(counts, [247, 741, 11_357], "{partitions} partitions");
        assert_eq!(counts.iter().sum::<usize>(), 12_345);
    }
}

#[test]
fn unbounded_generators_keep_going() {
    let mut generator = NexmarkGenerator::new(NexmarkConfig::default(), NexmarkTable::Person, 0, 1);
    for _ in 0..3 {
        assert_eq!(generator.next_batch(1000).map(|b| b.num_rows()), Some(1000));
    }
    // Person 2999 is event 50 * 2999.
    assert_eq!(generator.position(), 149_951);
}

#[test]
fn partitions_owning_no_events_of_a_table_end_at_once() {
    // With 50 partitions partition 0 owns only persons, partition 1 only auctions.
    let mut bids = NexmarkGenerator::new(NexmarkConfig::default(), NexmarkTable::Bid, 0, 50);
    assert!(bids.next_batch(10).is_none());
    let mut persons = NexmarkGenerator::new(NexmarkConfig::default(), NexmarkTable::Person, 1, 50);
    assert!(persons.next_batch(10).is_none());
    let mut persons = NexmarkGenerator::new(NexmarkConfig::default(), NexmarkTable::Person, 0, 50);
    let ids = int64s(&persons.next_batch(3).expect("persons"), "id");
    assert_eq!(ids, [1000, 1001, 1002]);
}

#[test]
fn seek_to_a_position_resumes_the_same_rows() {
    let config = bounded(11, 20_000);
    let mut original = NexmarkGenerator::new(config.clone(), NexmarkTable::Bid, 0, 1);
    original.next_batch(100).expect("first batch");
    // Bids are 4..=49, 54..=99, 104..: the 100th is event 111.
    assert_eq!(original.position(), 112);
    let checkpoint = original.position();
    let expected = [original.next_batch(250), original.next_batch(250)];

    let mut resumed = NexmarkGenerator::new(config, NexmarkTable::Bid, 0, 1);
    resumed.seek(checkpoint);
    assert_eq!(resumed.position(), checkpoint);
    let got = [resumed.next_batch(250), resumed.next_batch(250)];
    assert!(got[0].is_some());
    assert_eq!(got, expected);
    assert_eq!(resumed.position(), original.position());
}

#[test]
fn seek_into_a_gap_starts_at_the_next_owned_event() {
    let mut auctions = NexmarkGenerator::new(NexmarkConfig::default(), NexmarkTable::Auction, 0, 1);
    auctions.seek(10); // a bid; the next auctions are events 51..=53
    let ids = int64s(&auctions.next_batch(4).expect("auctions"), "id");
    assert_eq!(ids, [1003, 1004, 1005, 1006]);
    assert_eq!(auctions.position(), 102);
}

#[test]
fn person_and_auction_ids_count_up_from_one_thousand() {
    let config = bounded(5, 10_000);
    let persons: Vec<i64> = int64s(&all_rows(&config, NexmarkTable::Person), "id");
    assert_eq!(persons, (1000..1200).collect::<Vec<i64>>());
    let auctions: Vec<i64> = int64s(&all_rows(&config, NexmarkTable::Auction), "id");
    assert_eq!(auctions, (1000..1600).collect::<Vec<i64>>());
}

#[test]
fn bids_and_auctions_refer_to_existing_or_near_future_ids() {
    let config = bounded(13, 50_000);
    let bids = all_rows(&config, NexmarkTable::Bid);
    let auction_ids = int64s(&bids, "auction");
    let bidders = int64s(&bids, "bidder");
    // 1000 persons (ids to 1999) and 3000 auctions (ids to 3999) exist; a lead
    // of 10 not yet created ids is allowed.
    assert!(auction_ids.iter().all(|id| (1000..4010).contains(id)));
    assert!(bidders.iter().all(|id| (1000..2010).contains(id)));
    let sellers = int64s(&all_rows(&config, NexmarkTable::Auction), "seller");
    assert!(sellers.iter().all(|id| (1000..2010).contains(id)));

    // Half the bids go to the hot auction of the latest block (plus the ~1%
    // random picks that land on one), three quarters come from hot bidders.
    let share = |hits: usize| hits as f64 / bids.num_rows() as f64;
    let hot_auctions = share(auction_ids.iter().filter(|&&id| (id - 1000) % 100 == 0).count());
    assert!((0.48..0.54).contains(&hot_auctions), "{hot_auctions}");
    let hot_bidders = share(bidders.iter().filter(|&&id| (id - 1000) % 100 == 1).count());
    assert!((0.73..0.78).contains(&hot_bidders), "{hot_bidders}");
    let hot_sellers = sellers.iter().filter(|&&id| (id - 1000) % 100 == 0).count();
    assert!((2_150..2_400).contains(&hot_sellers), "{hot_sellers} of 3000");
}

#[test]
fn timestamps_follow_event_numbers_and_never_decrease() {
    let config = bounded(0, 20_000);
    for table in NexmarkTable::ALL {
        let batch = concat(table, &drain(&config, table, 1, 3, 256));
        let times = times(&batch, "date_time");
        assert!(times.windows(2).all(|pair| pair[0] <= pair[1]), "{table:?}");
        // 20_000 events at 10_000/s span two seconds.
        assert!(times.iter().all(|t| (1_700_000_000_000..1_700_000_002_000).contains(t)));
    }
    let persons = all_rows(&config, NexmarkTable::Person);
    let times = times(&persons, "date_time");
    // Person k is event 50k: 5k ms after the base.
    assert_eq!(times[0], 1_700_000_000_000);
    assert_eq!(times[3], 1_700_000_000_015);
    let generator = NexmarkGenerator::new(config, NexmarkTable::Person, 0, 1);
    assert_eq!(generator.event_time_ms(150), 1_700_000_000_015);
    assert_eq!(generator.event_time_ms(159), 1_700_000_000_015);
}

#[test]
fn auction_values_have_the_standard_ranges() {
    let auctions = all_rows(&bounded(17, 20_000), NexmarkTable::Auction);
    let initial = int64s(&auctions, "initial_bid");
    let reserve = int64s(&auctions, "reserve");
    assert!(initial.iter().all(|p| (100..=100_000_000).contains(p)));
    assert!(initial.iter().zip(&reserve).all(|(i, r)| r - i >= 100));
    assert!(int64s(&auctions, "category").iter().all(|c| (10..=14).contains(c)));
    // An auction lasts 1 ms up to twice the time 100 more auctions take:
    // 1666 events = 166.6 ms, so at most 1 + 2 * 167 ms.
    let lengths: Vec<i64> = times(&auctions, "expires")
        .iter()
        .zip(times(&auctions, "date_time"))
        .map(|(e, d)| e - d)
        .collect();
    assert!(lengths.iter().all(|l| (1..=335).contains(l)), "{lengths:?}");
    let names = strings(&auctions, "item_name");
    assert!(
        names
            .iter()
            .all(|n| n.len() < 20 && n.bytes().all(|b| b == b' ' || b.is_ascii_lowercase()))
    );
    // Each event averages 500 bytes by the reference's count.
    let extra_total: usize = strings(&auctions, "extra").iter().map(String::len).sum();
    let extra_average = extra_total / auctions.num_rows();
    assert!((360..420).contains(&extra_average), "{extra_average}");
}

#[test]
fn person_values_have_the_standard_shapes() {
    let persons = all_rows(&bounded(19, 20_000), NexmarkTable::Person);
    for card in strings(&persons, "credit_card") {
        let groups: Vec<&str> = card.split(' ').collect();
        assert_eq!(groups.len(), 4, "{card}");
        assert!(
            groups
                .iter()
                .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_digit())),
            "{card}"
        );
    }
    for email in strings(&persons, "email_address") {
        assert!(email.ends_with(".com") && email.matches('@').count() == 1, "{email}");
    }
    let states = strings(&persons, "state");
    assert!(
        states
            .iter()
            .all(|s| ["AZ", "CA", "ID", "OR", "WA", "WY"].contains(&s.as_str()))
    );
    assert!(strings(&persons, "name").iter().all(|n| n.split(' ').count() == 2));
    assert!(strings(&persons, "city").contains(&"Seattle".to_owned()));
}

#[test]
fn bid_values_have_the_standard_shapes() {
    let bids = all_rows(&bounded(23, 10_000), NexmarkTable::Bid);
    assert!(int64s(&bids, "price").iter().all(|p| (100..=100_000_000).contains(p)));
    let channels = strings(&bids, "channel");
    let hot = channels
        .iter()
        .filter(|c| ["Google", "Facebook", "Baidu", "Apple"].contains(&c.as_str()))
        .count();
    assert!(channels.iter().all(|c| c.len() < 15));
    assert!(channels.iter().filter(|c| c.starts_with("channel-")).count() + hot == channels.len());
    let hot_share = hot as f64 / channels.len() as f64;
    assert!((0.47..0.53).contains(&hot_share), "{hot_share}");
    assert!(
        strings(&bids, "url")
            .iter()
            .all(|u| u.starts_with("https://www.nexmark.com/"))
    );
    let extra_total: usize = strings(&bids, "extra").iter().map(String::len).sum();
    let extra_average = extra_total / bids.num_rows();
    assert!((66..=69).contains(&extra_average), "{extra_average}");
}

#[test]
fn schemas_have_the_documented_columns() {
    let described = |table| -> Vec<(String, DataType, bool)> {
        nexmark_schema(table)
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
            .collect()
    };
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    let expected = |columns: &[(&str, &DataType)]| -> Vec<(String, DataType, bool)> {
        columns
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).clone(), false))
            .collect()
    };
    let (i, s) = (&DataType::Int64, &DataType::Utf8);
    assert_eq!(
        described(NexmarkTable::Person),
        expected(&[
            ("id", i),
            ("name", s),
            ("email_address", s),
            ("credit_card", s),
            ("city", s),
            ("state", s),
            ("date_time", &ts),
            ("extra", s)
        ])
    );
    assert_eq!(
        described(NexmarkTable::Auction),
        expected(&[
            ("id", i),
            ("item_name", s),
            ("description", s),
            ("initial_bid", i),
            ("reserve", i),
            ("date_time", &ts),
            ("expires", &ts),
            ("seller", i),
            ("category", i),
            ("extra", s),
        ])
    );
    assert_eq!(
        described(NexmarkTable::Bid),
        expected(&[
            ("auction", i),
            ("bidder", i),
            ("price", i),
            ("channel", s),
            ("url", s),
            ("date_time", &ts),
            ("extra", s)
        ])
    );
    let batch = all_rows(&bounded(0, 100), NexmarkTable::Bid);
    assert!(batch.columns().iter().all(|c| c.null_count() == 0));
}

#[test]
fn table_names_parse_in_any_case() {
    assert_eq!(NexmarkTable::parse("bid").ok(), Some(NexmarkTable::Bid));
    assert_eq!(NexmarkTable::parse("Person").ok(), Some(NexmarkTable::Person));
    assert_eq!(NexmarkTable::parse("AUCTION").ok(), Some(NexmarkTable::Auction));
    for table in NexmarkTable::ALL {
        assert_eq!(NexmarkTable::parse(table.name()).ok(), Some(table));
    }
    let error = NexmarkTable::parse("bids").expect_err("not a table");
    assert_eq!(error.sqlstate(), "22023");
    let message = error.to_string();
    assert!(
        ["person", "auction", "bid", "bids"].iter().all(|w| message.contains(w)),
        "{message}"
    );
}

/// Skipping unread string columns leaves them empty and changes no value of
/// any other column: the skipped columns' random draws are still made (bid
/// channels) or come last in the event (every table's `extra`).
#[test]
fn skipped_columns_are_empty_and_the_others_unchanged() {
    let config = bounded(11, 20_000);
    let cases: [(NexmarkTable, &[&str]); 5] = [
        (NexmarkTable::Bid, &["channel", "url", "extra"]),
        // q0: the channel's draws come before `extra`'s.
        (NexmarkTable::Bid, &["channel", "url"]),
        (NexmarkTable::Bid, &["extra"]),
        (NexmarkTable::Person, &["extra"]),
        (NexmarkTable::Auction, &["extra"]),
    ];
    for (table, skipped) in cases {
        let schema = nexmark_schema(table);
        let columns: Vec<usize> = skipped.iter().map(|name| schema.index_of(name).expect(name)).collect();
        let full = all_rows(&config, table);
        let mut generator = NexmarkGenerator::new(config.clone(), table, 0, 1);
        generator.skip_columns(&columns);
        let mut batches = Vec::new();
        while let Some(batch) = generator.next_batch(4096) {
            batches.push(batch);
        }
        let pruned = concat(table, &batches);
        assert_eq!(pruned.num_rows(), full.num_rows());
        for (c, field) in schema.fields().iter().enumerate() {
            if columns.contains(&c) {
                assert!(
                    strings(&pruned, field.name()).iter().all(String::is_empty),
                    "{}",
                    field.name()
                );
                assert!(
                    strings(&full, field.name()).iter().any(|s| !s.is_empty()),
                    "{}",
                    field.name()
                );
            } else {
                assert_eq!(
                    pruned.column(c).as_ref(),
                    full.column(c).as_ref(),
                    "{} of {table:?}",
                    field.name()
                );
            }
        }
    }
}

#[test]
fn config_rejects_a_zero_timestamp_rate() {
    assert!(NexmarkConfig::default().validate().is_ok());
    let zero = NexmarkConfig {
        events_per_second_for_timestamps: 0,
        ..NexmarkConfig::default()
    };
    assert_eq!(zero.validate().expect_err("zero rate").sqlstate(), "22023");
}

/// Generator-only throughput; run with
/// `cargo test -p sluice-connectors nexmark_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "measures speed; not a behaviour test"]
fn nexmark_throughput() {
    let events: u64 = 2_000_000;
    let config = bounded(0, events);
    let mut total_seconds = 0.0;
    for table in NexmarkTable::ALL {
        let started = std::time::Instant::now();
        let mut generator = NexmarkGenerator::new(config.clone(), table, 0, 1);
        let mut rows = 0;
        while let Some(batch) = generator.next_batch(8192) {
            rows += batch.num_rows();
        }
        let seconds = started.elapsed().as_secs_f64();
        total_seconds += seconds;
        println!(
            "{:>8}: {rows:>8} rows in {seconds:.3} s = {:.0} rows/s",
            table.name(),
            rows as f64 / seconds
        );
    }
    println!(
        "all tables: {events} events in {total_seconds:.3} s = {:.0} events/s",
        events as f64 / total_seconds
    );
}
