//! Which global event numbers one generator emits, and when they happen.
//!
//! A generator for table `t` in partition `p` of `k` emits the events `n`
//! with `n % k == p` and `event_kind(n) == t`. Both conditions repeat with
//! period `lcm(k, 50)`, and within a period at most `50 / gcd(k, 50)` numbers
//! pass, so the owned numbers are a short list of offsets repeated forever:
//! the next one is found with a lookup, never by scanning.

use super::NexmarkTable;
use super::ids::{PROPORTION_TOTAL, event_kind};

/// The owned event numbers of one table in one partition.
#[derive(Debug, Clone)]
pub(super) struct OwnedEvents {
    period: u64,
    /// Sorted offsets within a period.
    offsets: Vec<u64>,
}

impl OwnedEvents {
    pub(super) fn new(table: NexmarkTable, partition: u32, partitions: u32) -> Self {
        assert!(partitions > 0, "nexmark generator needs at least one partition");
        assert!(partition < partitions, "nexmark partition {partition} of {partitions}");
        let stride = u64::from(partitions);
        let period = stride / gcd(stride, PROPORTION_TOTAL) * PROPORTION_TOTAL;
        let offsets = (u64::from(partition)..period)
            .step_by(partitions as usize)
            .filter(|&offset| event_kind(offset) == table)
            .collect();
        OwnedEvents { period, offsets }
    }

    /// The owned event numbers from `from` on, in increasing order.
    pub(super) fn iter_from(&self, from: u64) -> OwnedIter<'_> {
        let base = from - from % self.period;
        let index = self.offsets.partition_point(|&offset| offset < from % self.period);
        OwnedIter {
            owned: self,
            base: Some(base),
            index,
        }
    }
}

/// Iterator over owned event numbers; ends only at `u64` overflow (or at
/// once if the partition owns no events of the table).
#[derive(Debug)]
pub(super) struct OwnedIter<'a> {
    owned: &'a OwnedEvents,
    base: Option<u64>,
    index: usize,
}

impl Iterator for OwnedIter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let offsets = &self.owned.offsets;
        if offsets.is_empty() {
            return None;
        }
        if self.index == offsets.len() {
            self.index = 0;
            self.base = self.base?.checked_add(self.owned.period);
        }
        let n = self.base?.checked_add(offsets[self.index]);
        self.index += 1;
        if n.is_none() {
            self.base = None;
        }
        n
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Event time as a pure function of the event number.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventClock {
    base_time_ms: i64,
    events_per_second: u64,
}

impl EventClock {
    /// A zero rate is taken as 1 event/s (`NexmarkConfig::validate` rejects it).
    pub(super) fn new(base_time_ms: i64, events_per_second: u64) -> Self {
        EventClock {
            base_time_ms,
            events_per_second: events_per_second.max(1),
        }
    }

    /// Event time of event `n`, ms: `n` inter-event delays after the base,
    /// computed in whole microseconds and floored to milliseconds.
    pub(super) fn time_ms(&self, n: u64) -> i64 {
        let offset_ms = match n.checked_mul(1_000_000) {
            Some(n_us) => u128::from(n_us / self.events_per_second / 1000),
            None => u128::from(n) * 1_000_000 / u128::from(self.events_per_second) / 1000,
        };
        let offset_ms = i64::try_from(offset_ms).unwrap_or(i64::MAX);
        self.base_time_ms.saturating_add(offset_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: scan every number of 21 periods (so at least 20 hits
    /// if the partition owns any).
    fn scanned(table: NexmarkTable, partition: u32, partitions: u32, from: u64, count: usize) -> Vec<u64> {
        (from..from + 21 * 50 * u64::from(partitions))
            .filter(|&n| n % u64::from(partitions) == u64::from(partition) && event_kind(n) == table)
            .take(count)
            .collect()
    }

    #[test]
    fn lookups_match_a_scan_for_many_partitionings() {
        for partitions in [1, 2, 3, 7, 10, 50, 64, 100] {
            for partition in 0..partitions {
                for table in NexmarkTable::ALL {
                    let owned = OwnedEvents::new(table, partition, partitions);
                    for from in [0, 1, 49, 50, 123, 9_999] {
                        let expected = scanned(table, partition, partitions, from, 20);
                        let got: Vec<u64> = owned.iter_from(from).take(expected.len()).collect();
                        assert_eq!(got, expected, "{table:?} {partition}/{partitions} from {from}");
                    }
                }
            }
        }
    }

    #[test]
    fn partitions_without_events_of_a_table_end_at_once() {
        // With 50 partitions, partition 0 owns only persons.
        assert_eq!(OwnedEvents::new(NexmarkTable::Bid, 0, 50).iter_from(0).next(), None);
        assert_eq!(OwnedEvents::new(NexmarkTable::Person, 1, 50).iter_from(0).next(), None);
    }

    #[test]
    fn iteration_stops_at_overflow() {
        let owned = OwnedEvents::new(NexmarkTable::Bid, 0, 1);
        let tail: Vec<u64> = owned.iter_from(u64::MAX - 3).collect();
        assert!(tail.iter().all(|&n| n >= u64::MAX - 3));
        assert!(tail.len() <= 4);
    }

    #[test]
    fn clock_spaces_events_by_the_rate() {
        let clock = EventClock::new(1_000, 10_000);
        assert_eq!(clock.time_ms(0), 1_000);
        assert_eq!(clock.time_ms(9), 1_000);
        assert_eq!(clock.time_ms(10), 1_001);
        assert_eq!(clock.time_ms(15), 1_001);
        assert_eq!(clock.time_ms(10_000), 2_000);
        // 3 events/s: 333_333 µs apart.
        let clock = EventClock::new(0, 3);
        assert_eq!(clock.time_ms(1), 333);
        assert_eq!(clock.time_ms(2), 666);
        assert_eq!(clock.time_ms(3), 1_000);
        // Beyond u64 microseconds the wide path gives the same answer.
        let huge = u64::MAX / 1_000;
        let expected = (u128::from(huge) * 1_000_000 / 3 / 1000) as i64;
        assert_eq!(clock.time_ms(huge), expected);
    }
}
