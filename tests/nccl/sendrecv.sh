#!/bin/sh
# TAP: the real-NCCL program compiled (wherever NCCL's header is installed)
# and, on a machine with a GPU, NCCL moved verified data through railnet
# ("via NET/railnet" in NCCL's log) between two ranks on separate
# NCCL_HOSTIDs.
build=${RN_BUILD:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
bin=$build/tests/nccl-sendrecv
plugin=${RN_PLUGIN:-$build/libnccl-net-railnet.so}

if [ ! -f "$cuda/include/nccl.h" ]; then
  echo "1..0 # SKIP no $cuda/include/nccl.h: the NCCL program is not built here"
  exit 0
fi
echo "1..3"
if [ -x "$bin" ]; then
  echo "ok 1 - nccl-sendrecv compiled against $cuda"
else
  echo "not ok 1 - nccl-sendrecv compiled against $cuda ($bin missing)"
fi

skip=
if ! command -v nvidia-smi >/dev/null 2>&1 || [ ! -e /dev/nvidia0 ]; then
  skip="no GPU (nvidia-smi or /dev/nvidia0 missing)"
elif [ ! -x "$bin" ]; then
  skip="nothing to run"
elif ldd "$plugin" 2>/dev/null | grep -q libasan; then
  skip="sanitizer build: an ASan plugin cannot be dlopened into NCCL's process"
fi
if [ -n "$skip" ]; then
  echo "ok 2 # SKIP $skip"
  echo "ok 3 # SKIP $skip"
  exit 0
fi

log=$(mktemp "${TMPDIR:-/tmp}/nccl-sendrecv.XXXXXX")
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
NCCL_NET_PLUGIN=$plugin NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
  timeout $((600 * ${RN_TIMEOUT_SCALE:-1})) "$bin" -n 2 -b 8 -e 64M -f 4 >"$log" 2>&1
rc=$?
grep -v ' NCCL INFO ' "$log" | sed 's/^/# /'
if [ $rc -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$log"; then
  echo "ok 2 - 2 ranks, ncclSend/ncclRecv 8 B..64 MiB, every byte verified"
else
  echo "not ok 2 - 2 ranks, ncclSend/ncclRecv 8 B..64 MiB, every byte verified (exit $rc)"
  tail -40 "$log" | sed 's/^/# /'
fi
if grep -q "via NET/railnet" "$log"; then
  echo "ok 3 - NCCL's channels went via NET/railnet"
else
  echo "not ok 3 - NCCL's channels went via NET/railnet (no such line in the log)"
  grep -E "NET/|Using network|via " "$log" | head -20 | sed 's/^/# /'
fi
rm -f "$log"
