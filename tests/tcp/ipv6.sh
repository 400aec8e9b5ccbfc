#!/bin/sh
# The conformance suite again with the TCP transport on IPv6 loopback.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
if ! grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null; then
  echo "1..0 # SKIP no IPv6 loopback address (::1) on this host"
  exit 0
fi
RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=lo RAILNET_SOCKET_FAMILY=AF_INET6 \
  exec $RN_TEST_WRAP "$build/tests/conformance-test" --api v8,v11
