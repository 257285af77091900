#!/usr/bin/env bash
# Runs the random deep-and-wide statement test of tests/integration/limits.rs
# for longer than the normal suite does: SLUICE_FUZZ_CASES statements
# (default 500) against a live server, each of which must be answered or
# refused with a SQLSTATE other than XX000, the session surviving each.
# SLUICE_FUZZ_SEED replays a run (the seed is printed at its start).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
export SLUICE_FUZZ_CASES="${SLUICE_FUZZ_CASES:-500}"
exec cargo test --test integration limits::random_deep_and_wide_statements_never_crash_the_server -- --nocapture
