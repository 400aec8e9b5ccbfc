#!/bin/sh
# TAP: comms come up when ephemeral ports are scarce
# (tests/scale/port_range.c).  In a network namespace of this test's own,
# with net.ipv4.ip_local_port_range cut to 40000-40069, one veth netdev
# rnv0 with an address from 198.18.0.0/15 (its peer rnp0 stays in the
# namespace and carries nothing); everything is removed on exit.  Skips
# (before any test) only without root, ip, network namespaces or veth.
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
PROG=$B/tests/scale/port-range
NS=rnports$$

skip() {
  echo "1..0 # SKIP $*"
  exit 0
}
fail() {
  echo "1..1"
  echo "not ok 1 - $*"
  exit 1
}
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need it"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
[ -x "$PROG" ] || fail "$PROG not built (run make test)"
cleanup() { ip netns del "$NS" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
err=$(ip netns add "$NS" 2>&1) || skip "no network namespace support: $err"
err=$(ip -n "$NS" link add rnv0 type veth peer name rnp0 2>&1) ||
  skip "cannot add a veth pair in a network namespace (or enter one): $err"
{ ip -n "$NS" link set lo up && ip -n "$NS" addr add 198.18.121.1/32 dev rnv0 &&
  ip -n "$NS" link set rnp0 up && ip -n "$NS" link set rnv0 up; } || fail "veth rnv0 in $NS"
echo "40000 40069" | ip netns exec "$NS" sh -c 'cat > /proc/sys/net/ipv4/ip_local_port_range' ||
  fail "cannot set the port range in $NS"
# not exec: the trap removes the namespace afterwards
ip netns exec "$NS" env RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=rnv0 RN_BUILD="$B" \
  $RN_TEST_WRAP "$PROG"
