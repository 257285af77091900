#!/usr/bin/env bash
# The Sluice benchmark suite, one command (see README, "Performance"):
#   scripts/bench.sh                  # Nexmark, latency, SOL, Flink side by side
#   SLUICE_BENCH_FLINK=0 scripts/bench.sh   # without Flink
#   scripts/bench.sh --queries q0,q7  # any sluice-bench option (--help lists them)
#   scripts/bench.sh --queries '' --latency-queries '' --checkpoint-queries '' \
#     --alter-switches 0 --sol-messages 0 --cluster-runs 3 --results-dir benches/results/cluster
#                                     # only the cluster runs (stages on two worker
#                                     # processes, kill -9 / SIGSTOP failover)
# Results: benches/results/latest.{md,json} and throughput.svg.
#
# Installs what a fresh Debian machine lacks (scripts/install-deps.sh) and
# builds release binaries (the dashboard included). Flink runs through
# benches/flink/SluicePeer.java, which sluice-bench writes to and compiles in
# ~/.cache/sluice-flink-peer/sluice-peer against the Flink jars of the
# apache-flink 2.3.0 wheel from PyPI, in the .venv created there on first use
# (a JDK 17 with javac, and python3, must be installed).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
scripts/install-deps.sh
cargo build --release -p sluice -p sluice-bench --bins

FLINK_DIR="$HOME/.cache/sluice-flink-peer"
flink_args=()
if [ "${SLUICE_BENCH_FLINK:-1}" = 0 ]; then
  echo "SLUICE_BENCH_FLINK=0: skipping the side-by-side runs" >&2
elif command -v java >/dev/null && command -v javac >/dev/null && command -v python3 >/dev/null; then
  mkdir -p "$FLINK_DIR"
  if [ ! -x "$FLINK_DIR/.venv/bin/python" ] || ! ls "$FLINK_DIR"/.venv/lib/python3*/site-packages/pyflink/lib/*.jar >/dev/null 2>&1; then
    python3 -m venv "$FLINK_DIR/.venv"
    "$FLINK_DIR/.venv/bin/pip" install -q --upgrade pip
    "$FLINK_DIR/.venv/bin/pip" install -q "apache-flink==2.3.0"
  fi
  # sluice-bench writes benches/flink/{SluicePeer.java,log4j2.properties}
  # (built into it) to $FLINK_DIR/sluice-peer and compiles the driver there.
  flink_args=(--flink "$FLINK_DIR")
else
  echo "no java, javac or python3: skipping the side-by-side runs" >&2
fi
exec "$CARGO_TARGET_DIR/release/sluice-bench" --root "$(pwd)" "${flink_args[@]}" "$@"
