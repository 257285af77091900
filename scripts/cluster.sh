#!/usr/bin/env bash
# A local Sluice cluster on this machine: one master and N workers, each its
# own process on 127.0.0.1, for users and tests.
#   scripts/cluster.sh start [--workers N] [--slots S] [--release] [--dir DIR]
#   scripts/cluster.sh status [--dir DIR]
#   scripts/cluster.sh stop [--dir DIR]
#
# Ports: master control 7070, pgwire 5433, HTTP 8090; worker i's data plane
# 7170+i. Processes' pids, logs and data live under DIR (default
# ./sluice-cluster): DIR/master, DIR/w1, … and DIR/checkpoints, the
# checkpoint directory every worker shares. Stop sends SIGTERM to the master,
# then to each worker (pipelines restart from their checkpoints at the next
# start). To take one worker out of a running cluster, SIGTERM its pid
# (DIR/wN.pid): it drains — its tasks move to the others — and exits.
# (One master: for a quorum of three or five, start `sluice master --peers …`
# processes as the README's cluster section shows.)
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
command="${1:-status}"
shift || true
workers=2
slots=4
release=0
dir="./sluice-cluster"
while [ $# -gt 0 ]; do
    case "$1" in
        --workers) workers="$2"; shift 2 ;;
        --slots) slots="$2"; shift 2 ;;
        --release) release=1; shift ;;
        --dir) dir="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

case "$command" in
    start)
        if alive "$dir/master.pid"; then
            echo "a cluster already runs from $dir (scripts/cluster.sh stop --dir $dir)" >&2
            exit 1
        fi
        # A master asks for passwords (SCRAM) by default; with
        # SLUICE_SUPERUSER_PASSWORD set it keeps that, without it this
        # loopback-only cluster trusts local clients as the playground does.
        if [ -n "${SLUICE_SUPERUSER_PASSWORD:-}" ]; then auth=""; else auth="--auth trust --insecure"; fi
        if [ "$release" = 1 ]; then
            cargo build --release -p sluice --bin sluice
            binary="$CARGO_TARGET_DIR/release/sluice"
        else
            cargo build -p sluice --bin sluice
            binary="$CARGO_TARGET_DIR/debug/sluice"
        fi
        "$binary" master --id m1 --listen 127.0.0.1:7070 --pg-listen 127.0.0.1:5433 \
            --http-listen 127.0.0.1:8090 --data-dir "$dir/master" \
            --checkpoint-dir "$dir/checkpoints" $auth >"$dir/master.log" 2>&1 &
        echo $! >"$dir/master.pid"
        for i in $(seq 1 "$workers"); do
            "$binary" worker --id "w$i" --masters 127.0.0.1:7070 --listen "127.0.0.1:$((7170 + i))" \
                --slots "$slots" --data-dir "$dir/w$i" >"$dir/w$i.log" 2>&1 &
            echo $! >"$dir/w$i.pid"
        done
        # Ready when every worker is registered.
        for _ in $(seq 1 120); do
            registered=$(curl -sf http://127.0.0.1:8090/api/v1/cluster 2>/dev/null |
                python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))' 2>/dev/null || echo 0)
            if [ "$registered" = "$workers" ]; then
                echo "cluster running: psql -h 127.0.0.1 -p 5433 -U sluice; http://127.0.0.1:8090; logs in $dir"
                exit 0
            fi
            sleep 0.5
        done
        echo "the workers did not all register within 60 s; see $dir/*.log" >&2
        exit 1
        ;;
    status)
        for pid in "$dir"/*.pid; do
            [ -e "$pid" ] || { echo "no cluster in $dir"; exit 0; }
            name="$(basename "$pid" .pid)"
            if alive "$pid"; then echo "$name: running (pid $(cat "$pid"))"; else echo "$name: stopped"; fi
        done
        ;;
    stop)
        # The master first: workers then stop their tasks (no master, no
        # tasks) instead of moving them to each other as they drain.
        for pid in "$dir"/master.pid "$dir"/w*.pid; do
            [ -e "$pid" ] || continue
            if alive "$pid"; then
                kill -TERM "$(cat "$pid")"
                for _ in $(seq 1 60); do alive "$pid" || break; sleep 0.5; done
                alive "$pid" && kill -KILL "$(cat "$pid")"
            fi
            rm -f "$pid"
        done
        echo "cluster stopped"
        ;;
    *)
        echo "usage: scripts/cluster.sh start|status|stop [--workers N] [--slots S] [--release] [--dir DIR]" >&2
        exit 2
        ;;
esac
