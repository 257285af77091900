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
# builds release binaries (the dashboard included). The Flink peer harness
# (../shared/peers/flink, read-only) is copied to ~/.cache/sluice-flink-peer,
# where its .venv with apache-flink 2.3.0 from PyPI is created on first use
# (Java 17 and python3 must be installed).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
scripts/install-deps.sh
cargo build --release -p sluice -p sluice-bench --bins

FLINK_SRC="${FLINK_HARNESS:-$(pwd)/../shared/peers/flink}"
FLINK_DIR="$HOME/.cache/sluice-flink-peer"
flink_args=()
if [ "${SLUICE_BENCH_FLINK:-1}" = 0 ]; then
  echo "SLUICE_BENCH_FLINK=0: skipping the side-by-side runs" >&2
elif [ -d "$FLINK_SRC" ] && command -v java >/dev/null; then
  mkdir -p "$FLINK_DIR"
  for f in FlinkSqlBench.java bench.py env.sh log4j2.properties summarize.py; do
    install -m 0644 "$FLINK_SRC/$f" "$FLINK_DIR/$f"
  done
  if [ ! -x "$FLINK_DIR/.venv/bin/python" ]; then
    python3 -m venv "$FLINK_DIR/.venv"
    "$FLINK_DIR/.venv/bin/pip" install -q --upgrade pip
    "$FLINK_DIR/.venv/bin/pip" install -q "apache-flink==2.3.0"
  fi
  flink_args=(--flink "$FLINK_DIR")
else
  echo "no Flink harness at $FLINK_SRC (or no java): skipping the side-by-side runs" >&2
fi
exec "$CARGO_TARGET_DIR/release/sluice-bench" --root "$(pwd)" "${flink_args[@]}" "$@"
