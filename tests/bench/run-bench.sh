#!/bin/sh
# Run the plugin-level benchmark: railnet between two processes on this
# host next to iperf3 and plain TCP measured in the same run.
#   tests/bench/run-bench.sh [--quick] [--max BYTES] [--api v8|v11] [--no-ceiling]
# Environment: RN_BUILD (default build), RN_PLUGIN, RAILNET_* (transport
# knobs pass through; RAILNET_SOCKET_IFNAME defaults to lo).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${RN_BUILD:-build}
case $build in /*) ;; *) build=$here/$build ;; esac
bin=$build/tests/railnet-bench
export RN_BUILD="$build"
: "${RAILNET_SOCKET_IFNAME:=lo}"
export RAILNET_SOCKET_IFNAME
if [ ! -x "$bin" ]; then
  echo "run-bench.sh: $bin not built (run make)" >&2
  exit 1
fi
if ! command -v iperf3 >/dev/null 2>&1; then
  echo "# iperf3 not found: the iperf3 ceiling column will read 0" >&2
fi
exec "$bin" "$@"
