#!/bin/sh
# Stand-ins for the GPU machine's tools, so tests/bench/gpu-check.sh can run
# scripts/gpu-check.sh from preflight to table on a host without a GPU.
# Called through links named after the tool it stands in for.  Each prints
# NCCL-style INFO lines for the transport in NCCL_NET (railnet, or Socket
# for anything else; GPU_STANDIN_WRONG=1 makes a railnet run report
# Socket channels; GPU_STANDIN_KVFAIL=1 makes railnet-kvbench fail) and
# results in the tool's own format, railnet faster.
name=$(basename "$0")
info() { printf 'standin:%d:%d [0] NCCL INFO %s\n' $$ $$ "$*"; }
nccl_lines() {
  info "NCCL version 2.28.9+cuda13.0"
  if [ "${NCCL_NET:-}" = railnet ]; then
    info "NET/Plugin: Loaded net plugin railnet (v11)"
    if [ "${GPU_STANDIN_WRONG:-0}" = 1 ]; then
      info "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"
    else
      info "Channel 00/0 : 0[0] -> 1[0] [send] via NET/railnet/0"
    fi
  else
    info "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"
  fi
}
fast() { [ "${NCCL_NET:-}" = railnet ]; }
case $name in
nvidia-smi)
  case "$*" in
  *query*) echo "NVIDIA H200, 00000000:00:06.0" ;;
  *) echo "GPU 0: NVIDIA H200 (UUID: GPU-standin)" ;;
  esac
  ;;
mpirun)
  while [ $# -gt 0 ]; do
    case $1 in
    -x | -np | --bind-to) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
  done
  exec "$@"
  ;;
torchrun)
  while [ $# -gt 0 ]; do
    case $1 in
    --nproc-per-node) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
  done
  exec "$@"
  ;;
python)
  case ${1:-} in
  -c) echo "2.11.0+standin cuda" ;;
  -m) ;;
  *)
    nccl_lines
    case $1 in
    *torch_sendrecv.py)
      fast && g=5.000 || g=1.250
      echo "RESULT torch_sendrecv bytes=256000000 iters=20 us_per_iter=1 gbps=$g verified=1 wrong=0"
      ;;
    *torch_kv.py)
      fast && p=100.00 || p=400.00
      for m in ungrouped grouped; do
        echo "RESULT torch_kv model=70b-tp8 tokens=12288 mode=$m layers=80 request_bytes=1 requests=3 p50_ms=$p min_ms=$p gbps=1 verified=1 wrong=0"
      done
      ;;
    esac
    ;;
  esac
  ;;
*_perf)
  nccl_lines
  fast && { b=5.00; t=40.0; } || { b=1.25; t=2000.0; }
  echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
  echo "           8             2     float     sum      -1  $t    0.00    0.00      0  $t    0.00    0.00      0"
  echo "    67108864      16777216     float     sum      -1  9999.0    $b    $b      0  9999.0    $b    $b      0"
  echo "# Out of bounds values : 0 OK"
  ;;
railnet-kvbench)
  # its goal rows, as the real one prints them (it needs RN_PLUGIN)
  [ -n "${RN_PLUGIN:-}" ] || { echo "railnet-kvbench: no RN_PLUGIN" >&2; exit 2; }
  if [ "${GPU_STANDIN_KVFAIL:-0}" = 1 ]; then
    echo "standin NET/railnet WARN a comm failed" >&2
    exit 1
  fi
  echo "# goals (railnet against the anchor measured in this run)"
  echo "#   W1 70B/TP8 12k-token request (grouped): transfer time 0.90x plain TCP (goal <= 1.1x): met"
  echo "#   W4 small-stream p99 with bulk / alone (shared proxy thread): 1.50x (goal <= 2x): met; plain TCP itself 1.40x"
  echo "# snd/rcv us/m: proxy-thread CPU time per plugin message"
  ;;
nccl-sendrecv)
  nccl_lines
  fast && { b=5.000; t=40.0; } || { b=1.250; t=2000.0; }
  echo "#         size        count   type   time(us)  algbw(GB/s)  busbw(GB/s)   #wrong"
  echo "             8            8   int8     $t        0.000        0.000        0"
  echo "      67108864     67108864   int8     9999.0        $b        $b        0"
  echo "# Out of bounds values : 0 OK"
  ;;
*)
  echo "gpu-standin: no stand-in for $name" >&2
  exit 127
  ;;
esac
