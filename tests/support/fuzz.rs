//! What every fuzz target shares (included by `#[path]` from
//! tests/integration/fuzz_targets.rs, tests/integration/limits.rs and
//! crates/sluice-connectors/tests/decoder_fuzz.rs): proptest's runner,
//! set up from the environment.
//!
//! - `SLUICE_FUZZ_CASES`: cases per target (each target has its default,
//!   small enough for the normal suite);
//! - `SLUICE_FUZZ_SEED`: the run's seed (printed first; a new one by
//!   default), so a run replays exactly;
//! - `SLUICE_FUZZ_SECONDS`: a time bound per target (`scripts/fuzz.sh`);
//!   once it has passed, the remaining cases pass without running.
//!
//! A failing case is shrunk to a minimal input, which the panic message
//! prints, and its seed is appended to the target's file under
//! `tests/fuzz-regressions/`: committed, those seeds are replayed first by
//! every later run, so each crash found stays a regression test in the
//! normal suite.

use proptest::strategy::Strategy;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner,
};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// One target's run: its runner, seed and time bound.
pub struct Fuzz {
    name: &'static str,
    seed: u64,
    runner: TestRunner,
    deadline: Option<Instant>,
}

/// Target `name`: `default_cases` cases unless `SLUICE_FUZZ_CASES` says
/// otherwise, failures kept in `regressions` (an absolute path: targets
/// run from different crates' directories), shrinking bounded by
/// `shrink_iters` (each case against a live server costs a round trip).
pub fn fuzz(name: &'static str, default_cases: u32, regressions: &'static str, shrink_iters: u32) -> Fuzz {
    let env = |key: &str| std::env::var(key).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = env("SLUICE_FUZZ_CASES").map_or(default_cases, |c| c.min(u32::MAX as u64) as u32);
    let seed = env("SLUICE_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    let deadline = env("SLUICE_FUZZ_SECONDS").map(|s| Instant::now() + Duration::from_secs(s));
    eprintln!("{name}: {cases} cases, SLUICE_FUZZ_SEED={seed}");
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        max_shrink_iters: shrink_iters,
        // Shrinking stops after 2 minutes: the input found by then is printed.
        max_shrink_time: 120_000,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    Fuzz {
        name,
        seed,
        runner,
        deadline,
    }
}

impl Fuzz {
    /// Runs `test` on the persisted failures, then on generated inputs;
    /// panics with the minimal failing input and the seed. A case that
    /// panics fails as one that returns an error does.
    pub fn run<S>(mut self, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
    where
        S: Strategy,
        S::Value: Debug,
    {
        let deadline = self.deadline;
        let started = Instant::now();
        let skipped = std::cell::Cell::new(0usize);
        let result = self.runner.run(&strategy, |value| {
            if deadline.is_some_and(|d| Instant::now() > d) {
                skipped.set(skipped.get() + 1);
                return Ok(());
            }
            test(value)
        });
        let (name, seed) = (self.name, self.seed);
        if skipped.get() > 0 {
            eprintln!(
                "{name}: time bound reached after {:?}; {} cases not run",
                started.elapsed(),
                skipped.get()
            );
        }
        match result {
            Ok(()) => {}
            Err(TestError::Fail(why, minimal)) => {
                panic!("{name} (SLUICE_FUZZ_SEED={seed}) failed: {why}\nminimal failing input: {minimal:#?}")
            }
            Err(TestError::Abort(why)) => panic!("{name} (SLUICE_FUZZ_SEED={seed}) aborted: {why}"),
        }
    }
}
