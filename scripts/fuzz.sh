#!/usr/bin/env bash
# Runs every fuzz target for a bounded time, longer than the normal suite
# does (where each runs a few hundred cases at most):
#
#   - Kafka record decoders, JSON and CSV (crates/sluice-connectors/tests/decoder_fuzz.rs):
#     random bytes, edited and structurally broken records; every payload a
#     row or a bad record, valid records never shifted onto others' rows;
#   - pgwire message decoder (tests/integration/fuzz_targets.rs): random
#     first packets, random bytes after startup, edited valid message
#     streams; no connection task may die of a panic, the server answers;
#   - REST JSON bodies (same file): random JSON and non-JSON to every POST
#     route; never a 5xx;
#   - the SQL entry point (tests/integration/limits.rs): random deep and wide
#     statements, run and EXPLAINed; never XX000, the session survives.
#
# SLUICE_FUZZ_SECONDS: time per target (default 60). SLUICE_FUZZ_CASES: an
# upper bound on cases per target (default: unbounded within the time).
# SLUICE_FUZZ_SEED: the seed every target uses (default: a new one,
# printed first); set it to replay a failing run. The targets are proptest
# strategies (tests/support/fuzz.rs): a failure is shrunk to a minimal input,
# printed, and its seed appended to tests/fuzz-regressions/<target>.txt;
# commit that file and the normal suite replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
export SLUICE_FUZZ_SECONDS="${SLUICE_FUZZ_SECONDS:-60}"
export SLUICE_FUZZ_CASES="${SLUICE_FUZZ_CASES:-100000000}"
export SLUICE_FUZZ_SEED="${SLUICE_FUZZ_SEED:-$(od -An -N7 -tu8 /dev/urandom | tr -d ' ')}"
echo "fuzz: SLUICE_FUZZ_SEED=$SLUICE_FUZZ_SEED, ${SLUICE_FUZZ_SECONDS}s per target"
cargo test --workspace --test decoder_fuzz -- --nocapture
cargo test --test integration -- --nocapture --test-threads=1 \
    fuzz_targets::garbage_and_edited_pgwire_messages_never_take_the_server_down \
    fuzz_targets::random_json_bodies_to_post_routes_are_never_5xx \
    limits::random_deep_and_wide_statements_never_crash_the_server
echo "fuzz: every target passed (SLUICE_FUZZ_SEED=$SLUICE_FUZZ_SEED)"
