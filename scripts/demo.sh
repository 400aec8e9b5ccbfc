#!/usr/bin/env bash
# Show railnet working on this host: build, describe the machine and the
# plan, list the devices the plugin gives NCCL, push verified data through
# it between two processes over loopback, and measure it next to plain TCP
# in the same run.  Any failure stops the demo with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build
# the plugin, the CLI and the two programs the demo runs
make -s -j2 all "$B/tests/conformance-test" "$B/tests/railnet-bench"
log=$(mktemp "${TMPDIR:-/tmp}/railnet-demo.XXXXXX")
trap 'rm -f "$log"' EXIT

echo "== railnet-topo: this machine, its GPU-NIC paths and the rail plan"
"$B/railnet-topo"
echo

echo "== the plugin's devices and decisions (NCCL-style log), then verified transfers"
echo "   between two processes over loopback (1 MiB and 64 MiB messages, every byte checked)"
export RAILNET_SOCKET_IFNAME="${RAILNET_SOCKET_IFNAME:-lo}"
if ! RN_BUILD=$B RN_CONF_VERBOSE=1 "$B/tests/conformance-test" --api v11 --only "MiB messages" \
  >"$log" 2>&1; then
  echo "demo: the transfers failed:" >&2
  grep -vE " NCCL (INFO|TRACE) " "$log" >&2 || true
  exit 1
fi
if ! grep -qE "NET/railnet : dev [0-9]+:" "$log"; then
  echo "demo: the plugin logged no device line; its log:" >&2
  cat "$log" >&2
  exit 1
fi
grep -E "NET/railnet : (transport|dev [0-9]+:)|NET/railnet/tcp : (connected|accepted)" "$log" |
  sed "s/^.*NCCL INFO //" | sort -u
grep -E "^ok [0-9]+ - " "$log"
echo

echo "== throughput and latency through the plugin API, next to plain TCP (and iperf3 when"
echo "   installed) measured in the same run; make bench for the full table"
RN_BUILD=$B "$B/tests/railnet-bench" --quick --max 67108864 2>&1 | grep -v "^#  *$"
