#!/bin/sh
# The conformance suite again with per-comm helper threads moving the TCP
# data streams (the default on hosts with 8 or more CPUs), so both data
# paths are tested on every host.  RAILNET_MR_CACHE=0, a verbs knob, must
# leave TCP's regIsGlobal at 1 (the properties case checks it).
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=lo RAILNET_SOCKET_NTHREADS=2 RAILNET_MR_CACHE=0 \
  exec "$build/tests/conformance-test" --api v8,v11
