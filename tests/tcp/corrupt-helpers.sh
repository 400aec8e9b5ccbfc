#!/bin/sh
# The corruption harness again with per-comm helper threads (the default on
# hosts with 8 or more CPUs), where chunk headers are checked on the helper
# threads while the caller retires groups: an even spread of 700 trials.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
RAILNET_SOCKET_NTHREADS=2 exec "$build/tests/tcp/test_corrupt" --trials 700
