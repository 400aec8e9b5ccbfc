#!/bin/sh
# The conformance suite again with per-comm helper threads moving the TCP
# data streams (the default on hosts with 8 or more CPUs), so both data
# paths are tested on every host.  RN_TEST_WRAP (make valgrind) runs it
# under memcheck.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=lo RAILNET_SOCKET_NTHREADS=2 \
  exec $RN_TEST_WRAP "$build/tests/conformance-test" --api v8,v11
