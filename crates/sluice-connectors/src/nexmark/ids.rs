//! The arithmetic of the event sequence: which kind of event `n` is, which
//! person and auction ids exist by then, and how events refer to them
//! (Nexmark's `GeneratorConfig`, `PersonGenerator` and `AuctionGenerator`
//! id functions, with the reference's default configuration).
//!
//! "Base 0" ids count from 0; the emitted ids add [`FIRST_PERSON_ID`] or
//! [`FIRST_AUCTION_ID`].

use super::NexmarkTable;
use super::random::EventRng;

/// The first person id.
pub(super) const FIRST_PERSON_ID: u64 = 1000;
/// The first auction id.
pub(super) const FIRST_AUCTION_ID: u64 = 1000;
/// The first category id.
pub(super) const FIRST_CATEGORY_ID: u64 = 10;
/// Categories are few, so that category queries find results early.
pub(super) const CATEGORIES: u64 = 5;

/// Persons per block of [`PROPORTION_TOTAL`] events.
pub(super) const PROPORTION_PERSON: u64 = 1;
/// Auctions per block of [`PROPORTION_TOTAL`] events.
pub(super) const PROPORTION_AUCTION: u64 = 3;
/// Events per block; the rest of a block are bids.
pub(super) const PROPORTION_TOTAL: u64 = 50;

/// People eligible as random sellers and bidders (the most recent ones).
const ACTIVE_PEOPLE: u64 = 1000;
/// Auctions eligible for random bids (the most recent ones).
pub(super) const IN_FLIGHT_AUCTIONS: u64 = 100;
/// Not yet created person ids a random reference may name.
pub(super) const PERSON_ID_LEAD: u64 = 10;
/// Not yet created auction ids a random reference may name.
pub(super) const AUCTION_ID_LEAD: u64 = 10;

/// Hot persons and auctions are the first (or second) of each block of this
/// many ids (the reference's `HOT_*_RATIO` constants).
pub(super) const HOT_BLOCK: u64 = 100;
/// A bid is for the hot auction with probability `1 - 1/HOT_AUCTION_ODDS`
/// (the reference's `hotAuctionRatio`).
pub(super) const HOT_AUCTION_ODDS: u64 = 2;
/// An auction's seller is hot with probability `1 - 1/HOT_SELLER_ODDS`.
pub(super) const HOT_SELLER_ODDS: u64 = 4;
/// A bid's bidder is hot with probability `1 - 1/HOT_BIDDER_ODDS`.
pub(super) const HOT_BIDDER_ODDS: u64 = 4;

/// The kind of event number `n`.
pub(super) fn event_kind(n: u64) -> NexmarkTable {
    let offset = n % PROPORTION_TOTAL;
    if offset < PROPORTION_PERSON {
        NexmarkTable::Person
    } else if offset < PROPORTION_PERSON + PROPORTION_AUCTION {
        NexmarkTable::Auction
    } else {
        NexmarkTable::Bid
    }
}

/// The last person id created at or before event `n` (the id of the person
/// event `n` creates, if it creates one).
pub(super) fn last_base0_person_id(n: u64) -> u64 {
    let epoch = n / PROPORTION_TOTAL;
    let offset = n % PROPORTION_TOTAL;
    // An auction or bid: the last person is this block's last.
    let offset = if offset < PROPORTION_PERSON {
        offset
    } else {
        PROPORTION_PERSON - 1
    };
    epoch * PROPORTION_PERSON + offset
}

/// The last auction id created at or before event `n` (the id of the
/// auction event `n` creates, if it creates one). Saturates at 0 for the
/// events before the first auction.
pub(super) fn last_base0_auction_id(n: u64) -> u64 {
    let epoch = n / PROPORTION_TOTAL;
    let offset = n % PROPORTION_TOTAL;
    if offset < PROPORTION_PERSON {
        // A person: the last auction is the previous block's last.
        (epoch * PROPORTION_AUCTION).saturating_sub(1)
    } else if offset < PROPORTION_PERSON + PROPORTION_AUCTION {
        epoch * PROPORTION_AUCTION + offset - PROPORTION_PERSON
    } else {
        epoch * PROPORTION_AUCTION + PROPORTION_AUCTION - 1
    }
}

/// A random person among the [`ACTIVE_PEOPLE`] most recent ones, or up to
/// [`PERSON_ID_LEAD`] ids into the future.
pub(super) fn next_base0_person_id(n: u64, rng: &mut EventRng) -> u64 {
    let people = last_base0_person_id(n) + 1;
    let active = people.min(ACTIVE_PEOPLE);
    people - active + rng.below(active + PERSON_ID_LEAD)
}

/// A random auction among the [`IN_FLIGHT_AUCTIONS`] most recent ones, or up
/// to [`AUCTION_ID_LEAD`] ids into the future.
pub(super) fn next_base0_auction_id(n: u64, rng: &mut EventRng) -> u64 {
    let last = last_base0_auction_id(n);
    let first = last.saturating_sub(IN_FLIGHT_AUCTIONS);
    first + rng.below(last - first + 1 + AUCTION_ID_LEAD)
}

/// A seller id (with [`FIRST_PERSON_ID`]): mostly the hot seller of the
/// latest block of people, otherwise a random active person.
pub(super) fn next_seller_id(n: u64, rng: &mut EventRng) -> i64 {
    let base0 = if rng.below(HOT_SELLER_ODDS) > 0 {
        last_base0_person_id(n) / HOT_BLOCK * HOT_BLOCK
    } else {
        next_base0_person_id(n, rng)
    };
    (base0 + FIRST_PERSON_ID) as i64
}

/// A bidder id (with [`FIRST_PERSON_ID`]): mostly the hot bidder (the second
/// person of the latest block, so hot bidders and sellers differ), otherwise
/// a random active person.
pub(super) fn next_bidder_id(n: u64, rng: &mut EventRng) -> i64 {
    let base0 = if rng.below(HOT_BIDDER_ODDS) > 0 {
        last_base0_person_id(n) / HOT_BLOCK * HOT_BLOCK + 1
    } else {
        next_base0_person_id(n, rng)
    };
    (base0 + FIRST_PERSON_ID) as i64
}

/// The auction a bid is for (with [`FIRST_AUCTION_ID`]): mostly the hot
/// auction of the latest block, otherwise a random in-flight auction.
pub(super) fn next_bid_auction_id(n: u64, rng: &mut EventRng) -> i64 {
    let base0 = if rng.below(HOT_AUCTION_ODDS) > 0 {
        last_base0_auction_id(n) / HOT_BLOCK * HOT_BLOCK
    } else {
        next_base0_auction_id(n, rng)
    };
    (base0 + FIRST_AUCTION_ID) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_one_three_forty_six_pattern() {
        let kinds: Vec<NexmarkTable> = (0..100).map(event_kind).collect();
        assert_eq!(kinds[0], NexmarkTable::Person);
        assert_eq!(kinds[1..4], [NexmarkTable::Auction; 3]);
        assert!(kinds[4..50].iter().all(|&k| k == NexmarkTable::Bid));
        assert_eq!(kinds[50], NexmarkTable::Person);
        assert_eq!(kinds[53], NexmarkTable::Auction);
        assert_eq!(kinds[54], NexmarkTable::Bid);
    }

    #[test]
    fn last_ids_match_a_hand_count() {
        // Events 0..=53: person 0 at 0, auctions 0,1,2 at 1..=3, person 1 at 50,
        // auctions 3,4,5 at 51..=53.
        assert_eq!(last_base0_person_id(0), 0);
        assert_eq!(last_base0_person_id(49), 0);
        assert_eq!(last_base0_person_id(50), 1);
        assert_eq!(last_base0_person_id(99), 1);
        assert_eq!(last_base0_auction_id(1), 0);
        assert_eq!(last_base0_auction_id(3), 2);
        assert_eq!(last_base0_auction_id(4), 2);
        assert_eq!(last_base0_auction_id(50), 2);
        assert_eq!(last_base0_auction_id(51), 3);
        assert_eq!(last_base0_auction_id(53), 5);
        assert_eq!(last_base0_auction_id(0), 0);
    }

    #[test]
    fn random_references_stay_within_the_active_window_and_lead() {
        let mut rng = EventRng::for_event(9, 9);
        let n = 999_999; // a bid after 20_000 people and 60_000 auctions
        for _ in 0..10_000 {
            let person = next_base0_person_id(n, &mut rng);
            assert!((19_000..20_010).contains(&person), "{person}");
            let auction = next_base0_auction_id(n, &mut rng);
            assert!((59_899..60_010).contains(&auction), "{auction}");
        }
    }
}
