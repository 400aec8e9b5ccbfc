#!/bin/sh
# The conformance suite again with per-comm helper threads moving the TCP
# data streams (the default on hosts with 8 or more CPUs), so both data
# paths are tested on every host.  RAILNET_MR_CACHE=0, a verbs knob, must
# leave TCP's regIsGlobal at 1 (the properties case checks it).
# RN_TEST_WRAP (make valgrind) runs it under memcheck, through v11 only:
# the helper threads' code is the same under every ABI version, and
# memcheck multiplies the time by 20-50.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
apis=v8,v11
[ -n "${RN_TEST_WRAP:-}" ] && apis=v11
RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=lo RAILNET_SOCKET_NTHREADS=2 RAILNET_MR_CACHE=0 \
  exec $RN_TEST_WRAP "$build/tests/conformance-test" --api $apis
