#!/usr/bin/env bash
# Runs the Sluice playground on a fresh machine (the README's first command):
# installs what is missing (scripts/install-deps.sh run), builds, and runs
# `sluice playground` in the foreground; Ctrl-C stops it.
#   scripts/playground.sh [--release] [--data-dir DIR] [--pg-listen ADDR] [--http-listen ADDR]
#
# A debug build by default, the very build scripts/test.sh makes (same
# packages, targets and target directory): the two commands then compile
# DataFusion once between them, and CI (.ci/run runs this first) does not
# build twice. Building only the binary would not share it: the test targets'
# dev-dependencies (reqwest, tokio's test-util) turn on more features of
# tokio, serde, hyper and tower, and a dependency built with other features
# is another build of it and of everything above it. The test targets cost
# about a minute on the first run (14 of them compiled and linked in 55 s on
# two cores), plus a few dev-dependencies, and nothing after.
# --release builds what scripts/bench.sh builds instead (optimised, a
# separate full build of every dependency), for measuring.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
mkdir -p "$CARGO_TARGET_DIR"

release=0
if [ "${1:-}" = --release ]; then
    release=1
    shift
fi

scripts/install-deps.sh run

if [ "$release" = 1 ]; then
    cargo build --release -p sluice -p sluice-bench --bins
    binary="$CARGO_TARGET_DIR/release/sluice"
else
    cargo build --workspace --all-targets
    binary="$CARGO_TARGET_DIR/debug/sluice"
fi
exec "$binary" playground "$@"
