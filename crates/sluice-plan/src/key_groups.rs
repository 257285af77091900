//! Key groups: the unit keyed state is routed, stored and redistributed by.
//!
//! A hash-partitioned edge sends a row to key group `hash(key) % key_groups`
//! and key group `g` belongs to instance `g * parallelism / key_groups` of
//! the downstream operator: contiguous ranges, as Flink assigns them. The
//! number of key groups is fixed per pipeline ([`PhysicalDag::key_groups`],
//! [`KEY_GROUPS_DEFAULT`] for new plans) and is a power of two, so routing a
//! row is a mask, a multiply and a shift. Keyed operators (windows, joins)
//! write their state per key group; a restore at another parallelism gives
//! each instance the groups of its range, from whichever old instances held
//! them.
//!
//! [`PhysicalDag::key_groups`]: crate::PhysicalDag::key_groups

/// Key groups of a new pipeline: the most instances a keyed operator can
/// ever have. Stored in each DAG, so it can change for new pipelines
/// without breaking stored ones.
pub const KEY_GROUPS_DEFAULT: u32 = 256;

/// The key groups of one operator instance: `start..end` (possibly empty
/// when there are more instances than groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyGroupRange {
    pub start: u32,
    pub end: u32,
}

impl KeyGroupRange {
    pub fn contains(&self, group: u32) -> bool {
        self.start <= group && group < self.end
    }

    pub fn overlaps(&self, other: &KeyGroupRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    pub fn len(&self) -> u32 {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Routing by key groups for one edge (or one operator's instances): the
/// per-row arithmetic, precomputed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupRouter {
    /// `key_groups - 1` (a power of two minus one).
    mask: u64,
    /// `log2(key_groups)`.
    shift: u32,
    parallelism: u64,
}

impl KeyGroupRouter {
    /// Routing over `key_groups` groups (a power of two, checked by
    /// [`validate`]) to `parallelism` instances.
    pub fn new(key_groups: u32, parallelism: u32) -> Self {
        debug_assert!(validate(key_groups).is_ok(), "key groups must be a power of two");
        KeyGroupRouter {
            mask: u64::from(key_groups) - 1,
            shift: key_groups.trailing_zeros(),
            parallelism: u64::from(parallelism.max(1)),
        }
    }

    /// The key group of a key's hash.
    #[inline]
    pub fn key_group(&self, hash: u64) -> u32 {
        (hash & self.mask) as u32
    }

    /// The instance that owns key group `group`.
    #[inline]
    pub fn instance_of_group(&self, group: u32) -> u32 {
        ((u64::from(group) * self.parallelism) >> self.shift) as u32
    }

    /// The instance a key's hash goes to.
    #[inline]
    pub fn instance(&self, hash: u64) -> u32 {
        self.instance_of_group(self.key_group(hash))
    }
}

/// The key groups instance `instance` of `parallelism` owns: every `g` with
/// `g * parallelism / key_groups == instance`.
pub fn key_group_range(instance: u32, parallelism: u32, key_groups: u32) -> KeyGroupRange {
    let (k, p) = (u64::from(key_groups), u64::from(parallelism.max(1)));
    // The smallest g with g * p >= i * k, i.e. ceil(i * k / p).
    let first = |i: u64| (i * k).div_ceil(p).min(k) as u32;
    KeyGroupRange {
        start: first(u64::from(instance)),
        end: first(u64::from(instance) + 1),
    }
}

/// Checks a DAG's key group count: a power of two from 1 to 2^16 (a key
/// group is stored as a u16 next to each row of keyed state).
pub fn validate(key_groups: u32) -> Result<(), String> {
    if key_groups.is_power_of_two() && key_groups <= 1 << 16 {
        Ok(())
    } else {
        Err(format!(
            "a pipeline's key groups must be a power of two up to 65536, not {key_groups}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every group is owned by exactly one instance, the ranges are
    /// contiguous and in instance order, and the router agrees with them.
    #[test]
    fn ranges_cover_every_group_exactly_once() {
        let k = KEY_GROUPS_DEFAULT;
        for p in (1..=8).chain([3, 7, 100, 255, 256, 300]) {
            let router = KeyGroupRouter::new(k, p);
            let mut next = 0;
            for i in 0..p {
                let r = key_group_range(i, p, k);
                assert_eq!(r.start, next, "p={p} i={i}: ranges are contiguous");
                for g in r.start..r.end {
                    assert_eq!(router.instance_of_group(g), i, "p={p}: group {g}");
                }
                next = r.end;
            }
            assert_eq!(next, k, "p={p}: every group is owned");
            // Ranges differ in size by at most one (where p <= k).
            if p <= k {
                let sizes: Vec<u32> = (0..p).map(|i| key_group_range(i, p, k).len()).collect();
                assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "p={p}");
            }
        }
    }

    #[test]
    fn every_hash_of_a_group_lands_on_the_groups_instance() {
        for p in 1..=8 {
            let router = KeyGroupRouter::new(256, p);
            for hash in (0..10_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) {
                let g = router.key_group(hash);
                assert_eq!(g as u64, hash % 256);
                assert_eq!(router.instance(hash), g * p / 256);
                assert!(key_group_range(router.instance(hash), p, 256).contains(g));
            }
        }
    }

    #[test]
    fn key_group_counts_are_powers_of_two() {
        assert!(validate(256).is_ok());
        assert!(validate(1).is_ok());
        assert!(validate(1 << 16).is_ok());
        assert!(validate(0).is_err());
        assert!(validate(100).is_err());
        assert!(validate(1 << 17).is_err());
    }
}
