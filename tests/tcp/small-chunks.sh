#!/bin/sh
# Regression: a message of more chunks than a stream queue holds (64 MiB in
# 4 KiB chunks; with the defaults, 1 GiB messages) must still be sent, not
# refused forever.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=lo RAILNET_SOCKET_CHUNK=4096 RAILNET_SOCKET_NSTREAMS=2 \
  exec $RN_TEST_WRAP "$build/tests/conformance-test" --api v8 --only "MiB"
