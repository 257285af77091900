//! What every fuzz target shares (included by `#[path]` from
//! tests/integration/fuzz_targets.rs and
//! crates/sluice-connectors/tests/decoder_fuzz.rs): a small seeded
//! generator, so the targets need no dependency, and the run's plan from
//! the environment — `SLUICE_FUZZ_CASES` cases (each target has its
//! default), `SLUICE_FUZZ_SEED` replays a run (the seed is printed), and
//! `SLUICE_FUZZ_SECONDS` bounds the time (`scripts/fuzz.sh`).

use std::time::Duration;

/// SplitMix64, seeded.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Target `name`'s cases, seed and time bound; prints the seed.
pub fn plan(name: &str, default_cases: usize) -> (usize, u64, Option<Duration>) {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    let seed = std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let seconds = std::env::var("SLUICE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs);
    eprintln!("{name}: {cases} cases, SLUICE_FUZZ_SEED={seed}");
    (cases, seed, seconds)
}
