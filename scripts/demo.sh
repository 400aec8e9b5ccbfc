#!/bin/sh
# Show railnet working on this host: build, describe the machine and the
# plan, list the devices the plugin gives NCCL, and push verified data
# through the plugin between two processes over loopback.
set -eu
cd "$(dirname "$0")/.."
make -s
echo "== railnet-topo: this machine, its GPU-NIC paths and the rail plan"
build/railnet-topo
echo
echo "== the plugin's devices and decisions (NCCL-style log)"
export RAILNET_SOCKET_IFNAME="${RAILNET_SOCKET_IFNAME:-lo}"
RN_BUILD=build RN_CONF_VERBOSE=1 build/tests/conformance-test --api v11 --only "1 MiB" 2>&1 |
  grep -E "NET/railnet : (transport|dev [0-9]+:)|NET/railnet/tcp : (connected|accepted)|^(not )?ok" | sed "s/^.*NCCL INFO //" | sort -u
echo
echo "== throughput and latency through the plugin API (loopback, no ceiling run; make bench for the full table)"
RN_BUILD=build build/tests/railnet-bench --quick --no-ceiling --max 67108864 2>&1 | grep -v "^#  *$"
