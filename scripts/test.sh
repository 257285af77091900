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

need_apt=()
command -v psql >/dev/null 2>&1 || need_apt+=(postgresql-client)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# librdkafka (built from source by rdkafka's cmake-build) includes curl's headers.
[ -e /usr/include/curl/curl.h ] || [ -e /usr/include/x86_64-linux-gnu/curl/curl.h ] \
    || need_apt+=(libcurl4-openssl-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing system packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
# >>> dashboard (issue 4): npm builds the embedded UI (crates/sluice-server/build.rs),
# Chromium runs the browser test (tests/dashboard.rs). Debian's nodejs is enough for
# the build; the browser test's playwright-core wants Node.js 20 or later.
need_ui=()
command -v npm >/dev/null 2>&1 || need_ui+=(npm)
command -v node >/dev/null 2>&1 || need_ui+=(nodejs)
[ -x /usr/bin/chromium ] || need_ui+=(chromium)
if [ ${#need_ui[@]} -gt 0 ]; then
    echo "installing system packages for the dashboard: ${need_ui[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_ui[@]}"
fi
# <<< dashboard
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== format"
cargo fmt --all -- --check
echo "== lint"
cargo clippy --workspace --all-targets -- -D warnings
echo "== build"
cargo build --workspace --all-targets
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
# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) == "passed;") p += $i; if ($(i+1) == "failed;") f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
