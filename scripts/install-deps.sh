#!/usr/bin/env bash
# Installs what building and testing Sluice need on a fresh Debian machine
# and is missing here: the Postgres client, build tools, librdkafka's curl
# headers, Node.js/npm for the dashboard, Chromium for the browser test.
# Called by scripts/test.sh and scripts/bench.sh; safe to run again.
set -euo pipefail

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
