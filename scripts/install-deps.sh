#!/usr/bin/env bash
# Installs what building, running and testing Sluice need on a fresh Debian
# machine and is missing here; installs nothing when everything is there.
#   scripts/install-deps.sh        # for scripts/test.sh and scripts/bench.sh
#   scripts/install-deps.sh run    # for scripts/playground.sh: the same
#                                  # without Chromium (only the browser test uses it)
# Rust itself (rustup) must be installed first.
set -euo pipefail

mode="${1:-all}"
case "$mode" in
    all | run) ;;
    *) echo "usage: $0 [run]" >&2; exit 2 ;;
esac

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: install Rust (https://rustup.rs) first" >&2
    exit 1
fi

need_apt=()
want() { # want PACKAGE: add it once
    local p
    for p in "${need_apt[@]}"; do [ "$p" = "$1" ] && return 0; done
    need_apt+=("$1")
}
# A C and C++ compiler and make: librdkafka is built from source by rdkafka-sys
# with its own configure script (it needs neither cmake nor curl's headers, see
# the workspace Cargo.toml) and runs python3 to write its linker script;
# mimalloc and zstd are C too. pkg-config finds the system's zlib (without it
# libz-sys builds its own).
command -v cc >/dev/null 2>&1 || want build-essential
command -v c++ >/dev/null 2>&1 || want build-essential
command -v make >/dev/null 2>&1 || want build-essential
command -v pkg-config >/dev/null 2>&1 || want pkg-config
command -v python3 >/dev/null 2>&1 || want python3
# >>> dashboard (issue 4): npm builds the embedded UI (crates/sluice-server/build.rs),
# Chromium runs the browser test (tests/dashboard.rs). Debian's nodejs is enough for
# the build; the browser test's playwright-core wants Node.js 20 or later.
command -v npm >/dev/null 2>&1 || want npm
command -v node >/dev/null 2>&1 || want nodejs
if [ "$mode" = all ]; then
    [ -x /usr/bin/chromium ] || want chromium
fi
# <<< dashboard
# psql: the README's first steps, and the tests.
command -v psql >/dev/null 2>&1 || want postgresql-client
# curl: the HTTPS test (tests/integration/tls.rs) checks the server's
# certificate with a client that is not Sluice's own TLS stack.
if [ "$mode" = all ]; then
    command -v curl >/dev/null 2>&1 || want curl
fi

if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing system packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
if [ "$mode" = all ]; then
    # scripts/test.sh checks formatting and lints.
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
