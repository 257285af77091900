//! What every fuzz target shares (included by `#[path]` from
//! tests/integration/fuzz_targets.rs, tests/integration/limits.rs and
//! crates/sluice-connectors/tests/decoder_fuzz.rs): proptest's runner,
//! set up from the environment.
//!
//! - `SLUICE_FUZZ_CASES`: cases per target (each target has its default,
//!   small enough for the normal suite);
//! - `SLUICE_FUZZ_SEED`: the run's seed (printed first; a new one by
//!   default), so a run replays exactly;
//! - `SLUICE_FUZZ_SECONDS`: a time bound per target (`scripts/fuzz.sh`):
//!   cases run in rounds of the target's default count, each round from
//!   its own seed derived from the run's, and the run ends with the round
//!   the bound falls in (its remaining cases pass without running).
//!
//! A failing case is shrunk to a minimal input, which the panic message
//! prints, and its seed is appended to the target's file under
//! `tests/fuzz-regressions/`: committed, those seeds are replayed first by
//! every later run, so each crash found stays a regression test in the
//! normal suite.

use proptest::sample::Index;
use proptest::strategy::Strategy;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner,
};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// One target's run: its plan from the environment.
pub struct Fuzz {
    name: &'static str,
    seed: u64,
    cases: u32,
    /// Cases per round: a fresh runner each round, so a time bound ends
    /// the run between rounds instead of generating every remaining case.
    round: u32,
    regressions: &'static str,
    shrink_iters: u32,
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
    eprintln!("{name}: up to {cases} cases, SLUICE_FUZZ_SEED={seed}");
    Fuzz {
        name,
        seed,
        cases,
        round: default_cases.max(1),
        regressions,
        shrink_iters,
        deadline,
    }
}

impl Fuzz {
    /// Runs `test` on the persisted failures, then on generated inputs, in
    /// rounds until the cases are done or the time bound has passed; panics
    /// with the minimal failing input and the seed. A case that panics
    /// fails as one that returns an error does.
    pub fn run<S>(self, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
    where
        S: Strategy,
        S::Value: Debug,
    {
        let (name, seed) = (self.name, self.seed);
        let started = Instant::now();
        let out_of_time = || self.deadline.is_some_and(|d| Instant::now() > d);
        let mut done = 0u32;
        let mut round = 0u64;
        while done < self.cases && (round == 0 || !out_of_time()) {
            let cases = self.round.min(self.cases - done);
            let config = Config {
                cases,
                failure_persistence: Some(Box::new(FileFailurePersistence::Direct(self.regressions))),
                max_shrink_iters: self.shrink_iters,
                // Shrinking stops after 2 minutes: the input found by then is printed.
                max_shrink_time: 120_000,
                rng_algorithm: RngAlgorithm::ChaCha,
                ..Config::default()
            };
            // Round r of seed s: the same inputs on every replay of s.
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&seed.to_le_bytes());
            key[8..16].copy_from_slice(&round.to_le_bytes());
            let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
            // Past the time bound the rest of a round passes without running.
            let result = runner.run(&strategy, |value| if out_of_time() { Ok(()) } else { test(value) });
            match result {
                Ok(()) => {}
                Err(TestError::Fail(why, minimal)) => panic!(
                    "{name} (SLUICE_FUZZ_SEED={seed}, round {round}) failed: {why}\nminimal failing input: {minimal:#?}"
                ),
                Err(TestError::Abort(why)) => panic!("{name} (SLUICE_FUZZ_SEED={seed}) aborted: {why}"),
            }
            done += cases;
            round += 1;
        }
        eprintln!(
            "{name}: {round} round(s) of up to {} cases in {:?}",
            self.round,
            started.elapsed()
        );
    }
}

/// One edit of a byte stream (a wire message, a record). Positions are
/// proptest `Index`es taken modulo the length at that step, so they
/// shrink towards the start; each target generates the edits it needs.
#[derive(Debug, Clone)]
pub enum Edit {
    Set(Index, u8),
    Drop(Index, usize),
    Insert(Index, Vec<u8>),
    /// Four bytes overwritten with a length field's (edge) value.
    Length(Index, u32),
    Truncate(Index),
    /// The bytes written twice from here.
    Double(Index),
}

/// `bytes` with `edits` applied in order (an edit that does not fit, such
/// as setting a byte of nothing, is skipped).
pub fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len();
        match edit {
            Edit::Set(at, b) if len > 0 => bytes[at.index(len)] = *b,
            Edit::Drop(at, n) if len > 0 => {
                let from = at.index(len);
                bytes.drain(from..(from + n).min(len));
            }
            Edit::Insert(at, piece) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, piece.iter().copied());
            }
            Edit::Length(at, v) if len >= 4 => {
                let at = at.index(len - 3);
                bytes[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            Edit::Truncate(at) => bytes.truncate(at.index(len + 1)),
            Edit::Double(at) => {
                let at = at.index(len + 1);
                let copy = bytes.clone();
                bytes.splice(at..at, copy);
            }
            _ => {}
        }
    }
    bytes
}
