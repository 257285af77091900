#!/usr/bin/env bash
# Network namespaces that make "another host" real on one machine (needs
# root and iproute2): one namespace per process, each with its own address
# on a private bridge, so a test can cut one process's link
# (`ip link set <link> down`) as a pulled cable would — no reset, packets
# just stop.
#   scripts/netns.sh up NAME HOST...    creates NAME-HOST namespaces and a
#                                       bridge NAME-br; prints "HOST ADDRESS LINK"
#                                       per host (LINK: the host's cable)
#   scripts/netns.sh down NAME HOST...  removes them (absent is fine)
# Addresses: 10.213.N.1, .2, … in host order, the bridge 10.213.N.254 (this
# namespace reaches them through it); N is derived from NAME.
set -euo pipefail

command="$1"
name="$2"
shift 2
net=$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 20 ))
bridge="${name}-br"

case "$command" in
    up)
        ip link add "$bridge" type bridge
        ip addr add "10.213.$net.254/24" dev "$bridge"
        ip link set "$bridge" up
        i=1
        for host in "$@"; do
            ns="${name}-${host}"
            link="${name}-${host}"
            ip netns add "$ns"
            # veth pair: the host end inside the namespace, the cable end
            # on the bridge.
            ip link add "${link}" type veth peer name "${link}-i"
            ip link set "${link}-i" netns "$ns"
            ip -n "$ns" addr add "10.213.$net.$i/24" dev "${link}-i"
            ip -n "$ns" link set "${link}-i" up
            ip -n "$ns" link set lo up
            ip link set "$link" master "$bridge"
            ip link set "$link" up
            echo "$host 10.213.$net.$i $link"
            i=$((i + 1))
        done
        ;;
    down)
        for host in "$@"; do
            ip netns del "${name}-${host}" 2>/dev/null || true
            ip link del "${name}-${host}" 2>/dev/null || true
        done
        ip link del "$bridge" 2>/dev/null || true
        ;;
    *)
        echo "usage: scripts/netns.sh up|down NAME HOST..." >&2
        exit 2
        ;;
esac
