//! The values a group's distinct counts have seen, each with the bits of
//! the distinct counts that saw it.
//!
//! Integer ids are mostly handed out in sequence (database keys, Nexmark's
//! persons and auctions), and the values a stream names at any moment are
//! mostly recent ones: a few thousand neighbours among millions seen. A map
//! from value to bits scatters those neighbours over the whole table, one
//! cache line (and often one page) each: perf of Nexmark q15 had 31 % of
//! the server's samples on the two loads of such lookups. So values are
//! kept in blocks of [`BLOCK`] neighbours, a map from `value / BLOCK` to
//! the block's bits: neighbours share a line, and a dense range holds
//! 4.5 bytes a value instead of 17.
//!
//! Sparse values (random 64-bit ids, hashes, or a group seeing a few of
//! many ids, as Nexmark q16's 10 000 rare channels do) would leave blocks
//! nearly empty, 72 bytes a value against 17 in a map from value to bits.
//! So a group starts as such a map, and each time the number of its values
//! doubles from [`FIRST_CHECK`] it counts the blocks they fill: blocks at
//! least a quarter full (at most 18 bytes a value) and the group keeps its
//! values in blocks, otherwise in the map. Counting is one pass over the
//! values at each doubling: amortized, one step per value.

use hashbrown::{HashMap, HashSet};

/// Neighbouring values a block holds: 16 × 4 bytes, one cache line.
const BLOCK: i64 = 16;
/// A group's layout is first chosen when it holds this many values.
const FIRST_CHECK: usize = 64;

#[derive(Debug)]
pub(super) struct Seen {
    layout: Layout,
    /// Values seen.
    values: usize,
    /// The layout is chosen again when `values` reaches this.
    check_at: usize,
}

#[derive(Debug)]
enum Layout {
    /// Value → bits (never 0).
    Values(HashMap<i64, u32>),
    /// `value >> 4` → the bits of the 16 values of that block (0: unseen).
    Blocks(HashMap<i64, [u32; BLOCK as usize]>),
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            layout: Layout::Values(HashMap::new()),
            values: 0,
            check_at: FIRST_CHECK,
        }
    }
}

impl Seen {
    /// Marks `v` seen by the distinct counts in `bits` (not 0); returns
    /// those of them that had not seen it.
    pub(super) fn insert(&mut self, v: i64, bits: u32) -> u32 {
        debug_assert_ne!(bits, 0);
        let slot = match &mut self.layout {
            Layout::Values(map) => map.entry(v).or_insert(0),
            Layout::Blocks(blocks) => {
                &mut blocks.entry(v >> 4).or_insert([0; BLOCK as usize])[(v & (BLOCK - 1)) as usize]
            }
        };
        let new = bits & !*slot;
        let first = *slot == 0;
        *slot |= bits;
        if first {
            self.values += 1;
            if self.values >= self.check_at {
                self.choose_layout();
                self.check_at = self.values.saturating_mul(2);
            }
        }
        new
    }

    /// Keeps the values in blocks when those they fill are at least a
    /// quarter full, else in a map.
    fn choose_layout(&mut self) {
        let blocks = match &self.layout {
            Layout::Blocks(blocks) => blocks.len(),
            Layout::Values(map) => map.keys().map(|v| v >> 4).collect::<HashSet<i64>>().len(),
        };
        let dense = blocks * BLOCK as usize <= 4 * self.values;
        match (&self.layout, dense) {
            (Layout::Values(map), true) => {
                let mut blocks: HashMap<i64, [u32; BLOCK as usize]> = HashMap::with_capacity(blocks);
                for (v, bits) in map {
                    blocks.entry(v >> 4).or_insert([0; BLOCK as usize])[(v & (BLOCK - 1)) as usize] = *bits;
                }
                self.layout = Layout::Blocks(blocks);
            }
            (Layout::Blocks(_), false) => self.layout = Layout::Values(self.iter().collect()),
            _ => {}
        }
    }

    /// Every value seen and its bits, in no particular order.
    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = (i64, u32)> + '_> {
        match &self.layout {
            Layout::Blocks(blocks) => Box::new(blocks.iter().flat_map(|(b, slots)| {
                slots
                    .iter()
                    .enumerate()
                    .filter(|(_, bits)| **bits != 0)
                    .map(move |(i, bits)| ((b << 4) | i as i64, *bits))
            })),
            Layout::Values(map) => Box::new(map.iter().map(|(v, bits)| (*v, *bits))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The values and bits `seen` holds, in order.
    fn contents(seen: &Seen) -> BTreeMap<i64, u32> {
        seen.iter().collect()
    }

    fn blocks(seen: &Seen) -> Option<usize> {
        match &seen.layout {
            Layout::Blocks(blocks) => Some(blocks.len()),
            Layout::Values(_) => None,
        }
    }

    #[test]
    fn a_value_reports_only_the_counts_that_had_not_seen_it() {
        for dense_first in [false, true] {
            let mut seen = Seen::default();
            if dense_first {
                // Values in blocks from here on.
                (0..FIRST_CHECK as i64).for_each(|v| assert_eq!(seen.insert(1024 + v, 1), 1));
                assert_eq!(blocks(&seen), Some(FIRST_CHECK / BLOCK as usize));
            }
            assert_eq!(seen.insert(5, 0b011), 0b011);
            assert_eq!(seen.insert(5, 0b110), 0b100);
            assert_eq!(seen.insert(5, 0b111), 0);
            // Neighbours in the same block, and negative values (whose
            // block is below 0) stay apart.
            assert_eq!(seen.insert(4, 0b001), 0b001);
            assert_eq!(seen.insert(-5, 0b001), 0b001);
            assert_eq!(seen.insert(-16, 0b001), 0b001);
            assert_eq!(seen.insert(i64::MIN, 0b1), 0b1);
            assert_eq!(seen.insert(i64::MAX, 0b1), 0b1);
            let mut want = BTreeMap::from([(i64::MIN, 1), (-16, 1), (-5, 1), (4, 1), (5, 0b111), (i64::MAX, 1)]);
            if dense_first {
                want.extend((0..FIRST_CHECK as i64).map(|v| (1024 + v, 1)));
            }
            assert_eq!(contents(&seen), want);
            assert_eq!(seen.values, want.len());
        }
    }

    #[test]
    fn sequential_ids_are_kept_in_blocks() {
        let mut seen = Seen::default();
        let (first, last) = (1000, 1000 + 10_000);
        for v in first..=last {
            assert_eq!(seen.insert(v, 1), 1);
            assert_eq!(seen.insert(v, 1), 0);
        }
        // 1000 is not a multiple of 16: the first and last blocks are partial.
        assert_eq!(blocks(&seen), Some((last / BLOCK - first / BLOCK + 1) as usize));
        assert_eq!(contents(&seen), (first..=last).map(|v| (v, 1)).collect());
    }

    #[test]
    fn values_move_between_blocks_and_a_map_as_they_fill_them() {
        let mut seen = Seen::default();
        let mut want = BTreeMap::new();
        // Every 160th value (10 blocks apart): kept in the map at every check.
        for i in 0..1000i64 {
            let v = i * 160 - 49_920;
            assert_eq!(seen.insert(v, 1 << (i % 3)), 1 << (i % 3));
            want.insert(v, 1 << (i % 3));
        }
        assert_eq!(blocks(&seen), None);
        // Their neighbours fill the blocks (the check at 2048 values finds
        // them 13 % full; at 4096, 26 %).
        for i in 0..1000i64 {
            for d in 1..4 {
                let v = i * 160 - 49_920 + d;
                assert_eq!(seen.insert(v, 0b100), 0b100);
                want.insert(v, 0b100);
            }
        }
        assert_eq!(seen.values, 4000);
        assert_eq!(blocks(&seen), None, "not yet checked at 4000 values");
        for i in 0..96i64 {
            let v = i * 160 - 49_920 + 4;
            seen.insert(v, 0b100);
            want.insert(v, 0b100);
        }
        assert_eq!(blocks(&seen), Some(1000));
        // The bits of values already seen are kept across the move.
        assert_eq!(seen.insert(-49_920, 0b011), 0b010);
        want.insert(-49_920, 0b011);
        // Then far-apart values until the check at 8192 finds the blocks
        // under a quarter full: back to a map.
        for i in 0..4096i64 {
            let v = (1 << 40) | (i * 1000);
            seen.insert(v, 1);
            want.insert(v, 1);
        }
        assert_eq!(seen.values, 8192);
        assert_eq!(blocks(&seen), None);
        assert_eq!(contents(&seen), want);
    }
}
