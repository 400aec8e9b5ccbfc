#!/bin/sh
# TAP: ncclNet v12 reports the rail planner's rail and plane ids, and
# makeVDevice takes 8 devices but not 9 (tests/core/test_v12_ids.c).  The
# TCP transport drives ten veth netdevs, rnv0 ... rnv9, in a network
# namespace of this test's own, named like the NICs of
# tests/core/v12-rails.xml, which RAILNET_TOPO_FILE hands to the planner
# (their peers, rnp0 ... rnp9, stay in the namespace and carry nothing).
# Addresses from 198.18.0.0/15, only inside that namespace; everything is
# removed on exit.  Skips (before any test) only without root, ip, network
# namespaces or veth.
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
PROG=$B/tests/core/test_v12_ids
NS=rnv12ids$$

skip() {
  echo "1..0 # SKIP $*"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need it"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
[ -x "$PROG" ] || { echo "1..1"; echo "not ok 1 - $PROG not built (run make test)"; exit 1; }
cleanup() { ip netns del "$NS" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
err=$(ip netns add "$NS" 2>&1) || skip "no network namespace support: $err"
err=$(ip -n "$NS" link add rnv0 type veth peer name rnp0 2>&1) ||
  skip "cannot add a veth pair in a network namespace (or enter one): $err"
ip -n "$NS" link set lo up || { echo "1..1"; echo "not ok 1 - lo up in $NS"; exit 1; }
i=0
while [ $i -lt 10 ]; do
  { [ $i -eq 0 ] || ip -n "$NS" link add rnv$i type veth peer name rnp$i; } &&
    ip -n "$NS" addr add 198.18.120.$((i + 1))/32 dev rnv$i &&
    ip -n "$NS" link set rnp$i up && ip -n "$NS" link set rnv$i up ||
    { echo "1..1"; echo "not ok 1 - veth rnv$i in $NS"; exit 1; }
  i=$((i + 1))
done
# not exec: the trap removes the namespace afterwards
ip netns exec "$NS" env RAILNET_TOPO_FILE=tests/core/v12-rails.xml RAILNET_TRANSPORT=socket \
  RAILNET_SOCKET_IFNAME=rnv RN_BUILD="$B" $RN_TEST_WRAP "$PROG"
