#!/bin/sh
# A peer host that vanishes without closing (a pulled cable): the receiver
# and the sender of a TCP comm run in two network namespaces joined by a
# veth pair (198.18.77.0/30, inside namespaces this script creates and
# removes), the link is taken down in the middle of a transfer, and both
# sides must fail within RAILNET_SOCKET_TIMEOUT_MS (2 s here) plus slack.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
pfx=rnld$$
nsa=${pfx}a nsb=${pfx}b va=${pfx}x vb=${pfx}y
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "1..0 # SKIP creating network namespaces needs root and iproute2"
  exit 0
fi
cleanup() {
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  ip link del "$va" 2>/dev/null
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM
# Entering a namespace (ip -n) is part of the check: it fails where /
# is not a mount point (a plain chroot), which creating them does not show.
if ! { ip netns add "$nsa" && ip netns add "$nsb" && ip -n "$nsa" link set lo up &&
  ip link add "$va" type veth peer name "$vb" &&
  ip link set "$va" netns "$nsa" && ip link set "$vb" netns "$nsb"; } 2>/tmp/$pfx.err; then
  echo "1..0 # SKIP cannot create and enter network namespaces joined by a veth pair: $(head -1 /tmp/$pfx.err)"
  rm -f /tmp/$pfx.err
  exit 0
fi
if ! { ip -n "$nsa" addr add 198.18.77.1/30 dev "$va" &&
  ip -n "$nsb" addr add 198.18.77.2/30 dev "$vb" &&
  ip -n "$nsa" link set "$va" up && ip -n "$nsb" link set "$vb" up; } 2>/tmp/$pfx.err; then
  echo "1..1"
  echo "not ok 1 - addressing the veth pair in its namespaces failed: $(head -1 /tmp/$pfx.err)"
  rm -f /tmp/$pfx.err
  exit 1
fi
rm -f /tmp/$pfx.err
RAILNET_TRANSPORT=socket RAILNET_SOCKET_TIMEOUT_MS=2000 \
  RN_CONF_RECV_ENV="RN_NETNS=$nsa,RAILNET_SOCKET_IFNAME=$va" \
  RN_CONF_SEND_ENV="RN_NETNS=$nsb,RAILNET_SOCKET_IFNAME=$vb" \
  RN_LINKDOWN_CMD="ip -n $nsa link set $va down; ip -n $nsb link set $vb down" \
  "$build/tests/tcp/test_linkdown"
