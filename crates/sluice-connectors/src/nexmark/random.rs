//! Per-event random streams.
//!
//! Each event draws from its own SplitMix64 stream whose starting state is a
//! hash of `(seed, domain, key)`. SplitMix64 is used instead of a library RNG
//! because a stream is created for every single event: seeding costs two
//! multiplications here, against a full block computation for ChaCha, and the
//! output is fixed by this file alone (no library release can change it), so
//! a seed reproduces the same rows forever.

/// Increment of the SplitMix64 state (the 64-bit golden ratio).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Domain of the streams that generate events.
pub(super) const DOMAIN_EVENT: u64 = 0;
/// Domain of the streams that generate the channel URL table.
pub(super) const DOMAIN_CHANNEL: u64 = 0x6368_616e_6e65_6c00; // "channel\0"

/// The SplitMix64 finaliser: a bijective 64-bit mix.
pub(super) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small deterministic random stream.
#[derive(Debug, Clone)]
pub(super) struct EventRng {
    state: u64,
}

impl EventRng {
    /// The stream of event `n` under `seed`.
    pub(super) fn for_event(seed: u64, n: u64) -> Self {
        Self::for_key(seed, DOMAIN_EVENT, n)
    }

    /// The stream of `key` within `domain` under `seed`.
    pub(super) fn for_key(seed: u64, domain: u64, key: u64) -> Self {
        EventRng {
            state: mix64(seed ^ mix64(key ^ domain)),
        }
    }

    /// 64 uniformly random bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    /// A uniform value in `[0, bound)` by Lemire's multiply-high (the bias,
    /// below `bound / 2^64`, is irrelevant here). `bound` must be positive.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A uniform index into a slice of `len` elements.
    pub(super) fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// A uniform `f64` in `[0, 1)`.
    pub(super) fn unit_f64(&mut self) -> f64 {
        const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
        (self.next_u64() >> 11) as f64 * SCALE
    }

    /// A price in cents, log-uniform over `[100, 100_000_000]` (Nexmark's
    /// `PriceGenerator.nextPrice`: `round(10^(6u) * 100)`, computed as an `exp`).
    pub(super) fn next_price(&mut self) -> i64 {
        ((self.unit_f64() * (6.0 * std::f64::consts::LN_10)).exp() * 100.0).round() as i64
    }
}

/// Splits one 64-bit draw into several small uniform values: each
/// [`Fraction::take`] multiplies the remaining fraction by the bound and keeps
/// the integer part. Each take spends `log2(bound)` of the 64 bits, so callers
/// take a few values (≤ ~36 bits' worth) before drawing again.
pub(super) struct Fraction(u64);

impl Fraction {
    pub(super) fn new(bits: u64) -> Self {
        Fraction(bits)
    }

    /// A uniform value in `[0, bound)`.
    pub(super) fn take(&mut self, bound: u64) -> u64 {
        let product = u128::from(self.0) * u128::from(bound);
        self.0 = product as u64;
        (product >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_by_seed_and_event_and_repeat_exactly() {
        let draw = |seed, n| EventRng::for_event(seed, n).next_u64();
        assert_eq!(draw(7, 11), draw(7, 11));
        assert_ne!(draw(7, 11), draw(7, 12));
        assert_ne!(draw(7, 11), draw(8, 11));
        assert_ne!(EventRng::for_key(7, DOMAIN_CHANNEL, 11).next_u64(), draw(7, 11));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = EventRng::for_event(1, 2);
        let mut seen = [0u32; 13];
        for _ in 0..13_000 {
            seen[rng.below(13) as usize] += 1;
        }
        // Each value expected 1000 times; a fair stream stays well inside this.
        assert!(seen.iter().all(|&count| (800..1200).contains(&count)), "{seen:?}");
    }

    #[test]
    fn prices_span_cents_to_a_million_dollars() {
        let mut rng = EventRng::for_event(3, 4);
        let prices: Vec<i64> = (0..10_000).map(|_| rng.next_price()).collect();
        assert!(prices.iter().all(|&p| (100..=100_000_000).contains(&p)));
        // Log-uniform over 6 decades: about a sixth fall below $10.
        let cheap = prices.iter().filter(|&&p| p < 1_000).count();
        assert!((1_400..1_950).contains(&cheap), "{cheap}");
    }

    #[test]
    fn fraction_takes_uniform_values() {
        let mut rng = EventRng::for_event(5, 6);
        let mut seen = [0u32; 26];
        for _ in 0..6_500 {
            let mut fraction = Fraction::new(rng.next_u64());
            for _ in 0..4 {
                seen[fraction.take(26) as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&count| (850..1150).contains(&count)), "{seen:?}");
    }
}
