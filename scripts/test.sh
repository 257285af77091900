#!/usr/bin/env bash
# Runs every test of Sluice on a fresh machine: installs what is missing,
# checks formatting and lints, builds, starts the real Kafka and HDFS
# (scripts/services.sh), and runs unit, integration and sqllogictest suites
# (the latter against a live server over pgwire).
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep one target directory between runs: rebuilding DataFusion costs minutes.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
export CARGO_TERM_COLOR=never
mkdir -p "$CARGO_TARGET_DIR"

scripts/install-deps.sh

echo "== format"
cargo fmt --all -- --check
echo "== lint"
cargo clippy --workspace --all-targets -- -D warnings
echo "== build"
cargo build --workspace --all-targets
echo "== no-op build"
# Nothing changed, so nothing may compile (a build script that always reruns,
# e.g. for a rerun-if-changed path that does not exist, relinks every binary).
noop="$(cargo build --workspace --all-targets 2>&1)"
if grep -E '^ *(Compiling|Running) ' <<<"$noop"; then
    echo "FAIL: a second build with nothing changed compiled the above" >&2
    exit 1
fi
echo "== services"
# Real Kafka and HDFS (Maven Central, Java 17) for the connector tests. Stop
# them at the end only if this run started them.
started=()
for service in kafka hdfs; do
    if ! scripts/services.sh status "$service" | grep -q running; then
        started+=("$service")
    fi
done
scripts/services.sh start all
stop_started() {
    for service in "${started[@]}"; do scripts/services.sh stop "$service" || true; done
}
trap stop_started EXIT

echo "== test"
log="$(mktemp)"
status=0
cargo test --workspace --lib --bins --tests --no-fail-fast -- --test-threads 2 2>&1 | tee "$log" || status=$?
# The windows reference tests again, against a cluster: a master and two
# worker processes (tests/common: SLUICE_TEST_WORKERS), so every exchange
# crosses the data plane.
echo "== windows reference tests on a two-worker cluster"
SLUICE_TEST_WORKERS=2 cargo test --test integration --no-fail-fast windows:: -- --test-threads 2 2>&1 | tee -a "$log" || status=$?
# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) == "passed;") p += $i; if ($(i+1) == "failed;") f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
