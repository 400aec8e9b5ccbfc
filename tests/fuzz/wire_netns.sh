#!/bin/sh
# Runs a command in a network namespace of its own (unshare -n: it goes
# away with the command) holding loopback and a veth pair, fwr0 with
# 198.18.0.1/24 (RFC 2544 benchmarking space) and its peer fwr1, both up,
# with FUZZ_WIRE_RAILS=lo,fwr0 in the environment: tests/fuzz/fuzz_wire.c
# fuses the two into a device of two rails.  Every byte stays in the
# namespace.  Usage: wire_netns.sh COMMAND [ARGS...]
# Exits 77, saying why on stderr, when the namespace cannot be made (not
# root, no unshare or ip, no veth).
[ "$(id -u)" -eq 0 ] || { echo "wire_netns: not root: a network namespace needs it" >&2; exit 77; }
command -v unshare >/dev/null 2>&1 || { echo "wire_netns: no unshare (util-linux)" >&2; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "wire_netns: no ip (iproute2)" >&2; exit 77; }
# shellcheck disable=SC2016
exec unshare -n sh -c '
  err=$( { ip link set lo up &&
    ip link add fwr0 type veth peer name fwr1 &&
    ip addr add 198.18.0.1/24 dev fwr0 &&
    ip link set fwr1 up && ip link set fwr0 up; } 2>&1) ||
    { echo "wire_netns: cannot set up the namespace: $err" >&2; exit 77; }
  FUZZ_WIRE_RAILS=lo,fwr0 exec "$@"' wire_netns "$@"
