#!/bin/sh
# The GPU check: proves railnet under real NCCL on a machine with one GPU,
# next to NCCL's own Socket transport in the same run, in under 8 minutes.
# Two ranks share GPU 0, each with an NCCL host id of its own, so NCCL
# takes them for two hosts and every byte goes through the net plugin.
#
#   scripts/gpu-check.sh [--nccl-tests DIR] [--plugin PATH] [--only LIST] [--quick]
#                        [--socket-tuned] [--keep DIR] [--budget SECONDS]
#
#   1. preflight: GPU, CUDA runtime, NCCL (header, library), compiler, MPI,
#      python3 with torch, torchrun; a check whose tools are missing is
#      skipped with the reason
#   2. build railnet (make), and tests/nccl/sendrecv.c against the NCCL found
#   3. nccl-tests sendrecv_perf, alltoall_perf, all_reduce_perf built from
#      the nccl-tests tree given with --nccl-tests (for sm_90 only)
#   4. each check twice, railnet then NCCL Socket, each under a timeout:
#      nccl-sendrecv (tests/nccl), sendrecv_perf, alltoall_perf,
#      all_reduce_perf -c 1 (under mpirun), a torch send/recv of 256 MB and
#      a KV-shaped torch transfer (one tensor per layer, ungrouped and
#      grouped) under torchrun
#   5. every railnet log must say "NET/Plugin: Loaded net plugin railnet"
#      and "via NET/railnet"; every Socket log "via NET/Socket" and no
#      railnet
#   6. railnet-kvbench's W1 and W4 goal rows on this host's CPUs (no GPU:
#      railnet against plain TCP over loopback, traffic classes on)
#   7. one table of railnet / Socket ratios, then the kvbench goal rows
#
# Exit status: 0 when every railnet run that ran passed on the right
# transport; 1 when one failed or used the wrong transport; 2 on bad usage;
# 3 when nothing could run (no GPU, nothing built).
#
# Helpers (used by tests/bench/gpu-check.sh, no GPU needed):
#   --self-test                    dependency report, syntax of the scripts,
#                                  python3 -m py_compile of scripts/gpu/*.py
#   --deps                         the dependency report alone
#   --check-transport railnet|socket LOG
#   --parse nccl-tests|nccl-sendrecv LOG [SIZE|max|min]   prints "busbw time wrong"
#   --parse torch-sendrecv LOG     prints "gbps us_per_iter verified"
#   --parse torch-kv LOG MODE      prints "p50_ms gbps verified"
#   --parse kvbench LOG            prints railnet-kvbench's goal rows
#   --table FILE                   the ratio table from a results file
#                                  (check, metric, railnet, socket, transports; tab-separated)
#
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME, MPI_HOME,
# MPIRUN, TORCHRUN, PYTHON (default python3), RN_BUILD (default build);
# NCCL_*/RAILNET_* pass through.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

say() { printf '%s\n' "$*"; }
warn() { printf 'gpu-check: %s\n' "$*" >&2; }

# ---- log checks and parsing (pure: a log file in, a verdict or numbers out) ----

# check_transport railnet|socket LOG: 0 when the log shows that transport only
check_transport() {
  want=$1
  log=$2
  [ -r "$log" ] || { say "no log $log"; return 1; }
  if [ "$want" = railnet ]; then
    grep -q "NET/Plugin: Loaded net plugin railnet" "$log" ||
      { say "no 'NET/Plugin: Loaded net plugin railnet' (the plugin did not load)"; return 1; }
    grep -q "via NET/railnet" "$log" ||
      { say "no 'via NET/railnet' (NCCL's channels did not use railnet)"; return 1; }
    if grep -q "via NET/Socket\|via NET/IB" "$log"; then
      say "some channels went via NCCL's own transport"
      return 1
    fi
    return 0
  fi
  grep -q "via NET/Socket" "$log" || { say "no 'via NET/Socket'"; return 1; }
  if grep -q "Loaded net plugin railnet\|via NET/railnet" "$log"; then
    say "railnet appears in the Socket run"
    return 1
  fi
  return 0
}

# parse_table KIND LOG WHICH: "busbw time wrong" of the out-of-place column
# at size WHICH (bytes), or the largest (max) or smallest (min) size.
#   nccl-tests:    size count type redop root time algbw busbw #wrong time algbw busbw #wrong
#   nccl-sendrecv: size count type time algbw busbw #wrong
parse_table() {
  kind=$1
  log=$2
  which=${3:-max}
  case $kind in
  nccl-tests) cols='6 8 9 13' ;;
  nccl-sendrecv) cols='4 6 7 7' ;;
  *) return 2 ;;
  esac
  # shellcheck disable=SC2086
  set -- $cols
  awk -v w="$which" -v ct="$1" -v cb="$2" -v cw="$3" -v nf="$4" '
    $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= nf {
      s = $1 + 0
      if ((w == "max" && (n == 0 || s > best)) || (w == "min" && (n == 0 || s < best)) ||
          (w != "max" && w != "min" && s == w + 0)) {
        best = s; t = $ct; b = $cb; x = $cw; n = 1
      }
    }
    END { if (n) print b, t, x; else exit 1 }' "$log"
}

# value of key=... on the RESULT line of a torch script (matched anywhere in
# the line: torchrun may prefix worker output)
result_field() {
  line=$1
  key=$2
  printf '%s\n' "$line" | tr ' ' '\n' | sed -n "s/^$key=//p" | head -1
}

parse_torch() {
  kind=$1
  log=$2
  mode=${3:-}
  case $kind in
  torch-sendrecv)
    line=$(grep "RESULT torch_sendrecv " "$log" | tail -1)
    [ -n "$line" ] || return 1
    say "$(result_field "$line" gbps) $(result_field "$line" us_per_iter) $(result_field "$line" verified)"
    ;;
  torch-kv)
    line=$(grep "RESULT torch_kv " "$log" | grep " mode=$mode " | tail -1)
    [ -n "$line" ] || return 1
    say "$(result_field "$line" p50_ms) $(result_field "$line" gbps) $(result_field "$line" verified)"
    ;;
  *) return 2 ;;
  esac
}

# parse_kvbench LOG: the goal rows railnet-kvbench printed ("W1 ...: met")
parse_kvbench() {
  grep -E '^#   W[0-9] .*(met|NOT met)' "$1" | sed 's/^#   //' | grep . || return 1
}

# print_table FILE: rows "check<TAB>metric<TAB>railnet<TAB>socket<TAB>note";
# the ratio is railnet / Socket of the metric (GB/s: higher is better;
# us and ms: lower is better)
print_table() {
  awk -F '\t' '
    BEGIN {
      printf "# %-34s %-12s %10s %10s %15s  %s\n", "check", "metric", "railnet", "Socket", "railnet/Socket", "transports"
    }
    {
      r = ($3 == "" || $3 == "-") ? "-" : $3
      s = ($4 == "" || $4 == "-") ? "-" : $4
      q = (r != "-" && s != "-" && s + 0 > 0) ? sprintf("%.2fx", r / s) : "-"
      printf "  %-34s %-12s %10s %10s %15s  %s\n", $1, $2, r, s, q, $5
    }
    END { print "# GB/s: a ratio above 1 favours railnet; us and ms: below 1 favours railnet" }' "$1"
}

# ---- dependencies ---------------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }

find_nccl() {
  nccl_inc=
  nccl_lib=
  for d in ${NCCL_HOME:+"$NCCL_HOME/include"} "$CUDA_HOME/include" /usr/include /usr/local/include; do
    [ -f "$d/nccl.h" ] && { nccl_inc=$d; break; }
  done
  for d in ${NCCL_HOME:+"$NCCL_HOME/lib" "$NCCL_HOME/lib64"} "$CUDA_HOME/lib64" \
    /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
    for f in "$d/libnccl.so" "$d/libnccl.so.2"; do
      [ -e "$f" ] && { nccl_lib=$f; break 2; }
    done
  done
  if [ -z "$nccl_inc" ] && have "$PYTHON"; then
    # NCCL as a Python wheel (nvidia-nccl-*), as torch ships it
    d=$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    if [ -n "$d" ] && [ -f "$d/include/nccl.h" ]; then
      nccl_inc=$d/include
      for f in "$d/lib/libnccl.so" "$d/lib/libnccl.so.2"; do
        [ -e "$f" ] && { nccl_lib=$f; break; }
      done
    fi
  fi
}

find_cudart() {
  cudart=
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64; do
    for f in "$d/libcudart.so" "$d/libcudart.so.13" "$d/libcudart.so.12"; do
      [ -e "$f" ] && { cudart=$f; return; }
    done
  done
}

find_mpi() {
  mpirun=${MPIRUN:-}
  [ -n "$mpirun" ] || { have mpirun && mpirun=mpirun; }
  mpi_home=${MPI_HOME:-}
  if [ -z "$mpi_home" ] && have mpicc; then
    inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
    [ -n "$inc" ] && [ -f "$inc/mpi.h" ] && mpi_home=$(dirname "$inc")
  fi
  if [ -z "$mpi_home" ]; then
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/local /opt/openmpi /usr/lib64/openmpi; do
      [ -f "$d/include/mpi.h" ] && { mpi_home=$d; break; }
    done
  fi
}

detect() {
  gpu=
  if have nvidia-smi && [ -e /dev/nvidia0 ] || { have nvidia-smi && nvidia-smi -L >/dev/null 2>&1; }; then
    gpu=$(nvidia-smi --query-gpu=name,pci.bus_id --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$gpu" ] || gpu=$(nvidia-smi -L 2>/dev/null | head -1)
  fi
  find_nccl
  find_cudart
  find_mpi
  cc=${CC:-cc}
  have "$cc" || cc=
  torch=
  have "$PYTHON" && torch=$("$PYTHON" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>/dev/null)
  torchrun=${TORCHRUN:-}
  [ -n "$torchrun" ] || { have torchrun && torchrun=torchrun; }
  nvcc=
  [ -x "$CUDA_HOME/bin/nvcc" ] && nvcc=$CUDA_HOME/bin/nvcc
  [ -n "$nvcc" ] || { have nvcc && nvcc=$(command -v nvcc); }
  hwloc=
  have pkg-config && pkg-config --exists hwloc expat 2>/dev/null && hwloc=yes
}

deps_report() {
  row() { printf '#   %-26s %-52s %s\n' "$1" "${2:-(missing)}" "$3"; }
  say "# dependencies (found / what needs it)"
  row "GPU" "$gpu" "everything below"
  row "C compiler" "$cc" "railnet, nccl-sendrecv"
  row "hwloc+expat (pkg-config)" "$hwloc" "building railnet"
  row "CUDA runtime" "$cudart" "nccl-sendrecv"
  row "NCCL header" "$nccl_inc" "nccl-sendrecv, nccl-tests"
  row "NCCL library" "$nccl_lib" "nccl-sendrecv, nccl-tests"
  row "nvcc" "$nvcc" "building nccl-tests"
  row "MPI (home)" "${mpirun:+$mpirun }${mpi_home}" "nccl-tests"
  row "python3 + torch" "$torch" "torch checks"
  row "torchrun" "$torchrun" "torch checks"
  row "nccl-tests tree" "${nccl_tests:-}" "sendrecv_perf, alltoall_perf, all_reduce_perf"
}

# ---- helper entry points ------------------------------------------------------------
nccl_tests=
case ${1:-} in
--check-transport)
  [ $# -eq 3 ] || { warn "usage: --check-transport railnet|socket LOG"; exit 2; }
  why=$(check_transport "$2" "$3") && { say "ok: $2"; exit 0; }
  say "wrong transport: $why"
  exit 1
  ;;
--parse)
  [ $# -ge 3 ] || { warn "usage: --parse KIND LOG [SIZE|MODE]"; exit 2; }
  case $2 in
  nccl-tests | nccl-sendrecv) parse_table "$2" "$3" "${4:-max}" ;;
  torch-*) parse_torch "$2" "$3" "${4:-}" ;;
  kvbench) parse_kvbench "$3" ;;
  *) warn "unknown kind $2"; exit 2 ;;
  esac
  exit $?
  ;;
--table)
  [ $# -eq 2 ] || { warn "usage: --table FILE"; exit 2; }
  print_table "$2"
  exit 0
  ;;
--deps)
  detect
  deps_report
  exit 0
  ;;
--self-test)
  detect
  deps_report
  rc=0
  for f in "$0" "$here/gpu/rank-env.sh"; do
    sh -n "$f" || { warn "syntax error in $f"; rc=1; }
  done
  if have "$PYTHON"; then
    for f in "$here"/gpu/*.py; do
      PYTHONPYCACHEPREFIX=${TMPDIR:-/tmp}/gpu-check-pyc "$PYTHON" -m py_compile "$f" 2>&1 ||
        { warn "$f does not compile"; rc=1; }
    done
  else
    say "# python3 missing: the torch scripts were not compiled"
  fi
  [ $rc -eq 0 ] && say "# self-test: scripts parse, Python compiles"
  exit $rc
  ;;
esac

# ---- the check --------------------------------------------------------------------
plugin=
only=
quick=0
socket_tuned=0
keep=
budget=450
while [ $# -gt 0 ]; do
  case $1 in
  --nccl-tests) nccl_tests=$2; shift 2 ;;
  --plugin) plugin=$2; shift 2 ;;
  --only) only=$2; shift 2 ;;
  --quick) quick=1; shift ;;
  --socket-tuned) socket_tuned=1; shift ;;
  --keep) keep=$2; shift 2 ;;
  --budget) budget=$2; shift 2 ;;
  -h | --help) sed -n '2,40p' "$0"; exit 0 ;;
  *) warn "unknown option $1"; exit 2 ;;
  esac
done
start=$(date +%s)
deadline=$((start + budget))
left() { echo $((deadline - $(date +%s))); }

if [ -n "$keep" ]; then
  mkdir -p "$keep" || exit 2
  work=$(cd "$keep" && pwd)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
  trap 'rm -rf "$work"' EXIT INT TERM
fi
results=$work/results.tsv
: >"$results"

detect
say "# railnet GPU check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc 2>/dev/null) CPUs"
deps_report
if [ -z "$gpu" ]; then
  say "# no GPU (nvidia-smi or /dev/nvidia0 missing): nothing to prove here"
  exit 3
fi

wanted() { [ -z "$only" ] || printf ',%s,' "$only" | grep -q ",$1,"; }

# ---- build --------------------------------------------------------------------
build=${RN_BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
if [ -z "$plugin" ]; then
  say "# building railnet (make -j$(nproc))"
  if ! (cd "$root" && timeout 300 make -j"$(nproc)" BUILD="$build" >"$work/make.log" 2>&1); then
    tail -20 "$work/make.log"
    [ -z "$hwloc" ] && say "# hint: hwloc and expat development files (pkg-config hwloc expat) are missing"
    say "gpu-check: railnet did not build; nothing proven"
    exit 1
  fi
  plugin=$build/libnccl-net-railnet.so
fi
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
[ -f "$plugin" ] || { warn "no plugin at $plugin"; exit 2; }

sendrecv_bin=$build/tests/nccl-sendrecv
if wanted nccl-sendrecv && [ ! -x "$sendrecv_bin" ] && [ -n "$nccl_inc" ] && [ -n "$nccl_lib" ] &&
  [ -n "$cudart" ] && [ -n "$cc" ]; then
  mkdir -p "$build/tests"
  "$cc" -std=c11 -D_GNU_SOURCE -O2 -isystem "$nccl_inc" -isystem "$CUDA_HOME/include" \
    -o "$sendrecv_bin" "$root/tests/nccl/sendrecv.c" "$nccl_lib" "$cudart" \
    -Wl,-rpath,"$(dirname "$nccl_lib")" -Wl,-rpath,"$(dirname "$cudart")" >"$work/sendrecv-build.log" 2>&1 ||
    { say "# nccl-sendrecv did not build:"; tail -5 "$work/sendrecv-build.log"; }
fi

perf_dir=
if [ -n "$nccl_tests" ] && { wanted sendrecv_perf || wanted alltoall_perf || wanted all_reduce_perf; }; then
  nt=$(cd "$nccl_tests" 2>/dev/null && pwd)
  if [ -z "$nt" ] || [ ! -d "$nt/src" ]; then
    say "# --nccl-tests $nccl_tests: not an nccl-tests tree (no src/)"
  elif [ -x "$nt/build/sendrecv_perf" ] && [ -x "$nt/build/alltoall_perf" ] && [ -x "$nt/build/all_reduce_perf" ]; then
    perf_dir=$nt/build
  elif [ -z "$nvcc" ] || [ -z "$mpi_home" ] || [ -z "$nccl_inc" ]; then
    say "# nccl-tests not built: needs nvcc, MPI headers and nccl.h"
  else
    # a private NCCL_HOME: nccl-tests wants include/ and lib/libnccl.so side
    # by side, which a wheel's NCCL (lib/libnccl.so.2 only) does not have
    nccl_home=$work/nccl
    mkdir -p "$nccl_home/lib"
    ln -sfn "$nccl_inc" "$nccl_home/include"
    ln -sf "$nccl_lib" "$nccl_home/lib/libnccl.so"
    say "# building nccl-tests (MPI=1, sm_90) in $nt/build"
    if (cd "$nt/src" && timeout "$(( $(left) > 300 ? 240 : $(left) / 2 ))" make -j"$(nproc)" MPI=1 \
      MPI_HOME="$mpi_home" NCCL_HOME="$nccl_home" CUDA_HOME="$CUDA_HOME" \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt/build" \
      "$nt/build/sendrecv_perf" "$nt/build/alltoall_perf" "$nt/build/all_reduce_perf") \
      >"$work/nccl-tests-build.log" 2>&1; then
      perf_dir=$nt/build
    else
      say "# nccl-tests did not build (log: nccl-tests-build.log):"
      tail -5 "$work/nccl-tests-build.log"
    fi
  fi
fi

# ---- running --------------------------------------------------------------------
: "${RAILNET_SOCKET_IFNAME:=lo}"
: "${NCCL_SOCKET_IFNAME:=lo}"
export RAILNET_SOCKET_IFNAME NCCL_SOCKET_IFNAME
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_TESTS_DEVICE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the NCCL found above, also for the programs built against it
[ -n "$nccl_lib" ] && LD_LIBRARY_PATH=$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
if [ $socket_tuned -eq 1 ]; then
  # read by NCCL's Socket transport only; railnet ignores them
  export NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4
fi
maxsize=268435456
[ $quick -eq 1 ] && maxsize=67108864
failed=0
ran=0
ncclver=

# set the environment of one transport: railnet or socket
use_transport() {
  if [ "$1" = railnet ]; then
    NCCL_NET_PLUGIN=$plugin
    NCCL_NET=railnet
  else
    NCCL_NET_PLUGIN=none
    NCCL_NET=Socket
  fi
  export NCCL_NET_PLUGIN NCCL_NET
}

# run NAME TRANSPORT SECONDS CMD...: the command's log is $work/NAME-TRANSPORT.log
run() {
  name=$1
  tr=$2
  secs=$3
  shift 3
  log=$work/$name-$tr.log
  l=$(left)
  if [ "$l" -lt 20 ]; then
    say "# $name ($tr): skipped, the time budget is spent"
    return 2
  fi
  [ "$secs" -gt $((l - 10)) ] && secs=$((l - 10))
  use_transport "$tr"
  t0=$(date +%s)
  timeout "$secs" "$@" >"$log" 2>&1
  rc=$?
  say "# $name ($tr): exit $rc after $(($(date +%s) - t0)) s"
  [ -n "$ncclver" ] || ncclver=$(sed -n 's/.*NCCL version \([^ ]*\).*/\1/p' "$log" | head -1)
  if [ $rc -ne 0 ]; then
    say "#   $tr run failed (exit $rc$([ $rc -eq 124 ] && echo ': timeout'); log $log):"
    grep -v " NCCL INFO " "$log" | tail -8 | sed 's/^/#     /'
  fi
  if [ "$tr" = railnet ]; then
    ran=$((ran + 1))
    [ $rc -ne 0 ] && failed=1
  fi
  # a failed Socket run is a missing anchor; a Socket run that finished on
  # another transport, or any railnet run off railnet, invalidates the check
  if [ "$tr" = railnet ] || [ $rc -eq 0 ]; then
    why=$(check_transport "$tr" "$log")
    if [ -n "$why" ]; then
      say "#   $tr run: wrong transport: $why"
      failed=1
      return 1
    fi
  fi
  return $rc
}

# both NAME SECONDS CMD...: railnet then Socket; sets note
both() {
  name=$1
  secs=$2
  shift 2
  note=
  run "$name" railnet "$secs" "$@" && note="railnet ok" || note="railnet FAILED"
  run "$name" socket "$secs" "$@" && note="$note, Socket ok" || note="$note, Socket failed"
}

row() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${3:--}" "${4:--}" "$5" >>"$results"; }
field() { printf '%s\n' "$1" | awk -v i="$2" '{print $i}'; }
human() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d B", b }'; }

if wanted nccl-sendrecv; then
  if [ -x "$sendrecv_bin" ]; then
    both nccl-sendrecv 120 "$sendrecv_bin" -n 2 -b 8 -e "$maxsize" -f 4
    r=$(parse_table nccl-sendrecv "$work/nccl-sendrecv-railnet.log" max)
    s=$(parse_table nccl-sendrecv "$work/nccl-sendrecv-socket.log" max)
    row "nccl-sendrecv $(human $maxsize)" "busbw GB/s" "$(field "$r" 1)" "$(field "$s" 1)" "$note"
    r=$(parse_table nccl-sendrecv "$work/nccl-sendrecv-railnet.log" min)
    s=$(parse_table nccl-sendrecv "$work/nccl-sendrecv-socket.log" min)
    row "nccl-sendrecv 8 B" "time us" "$(field "$r" 2)" "$(field "$s" 2)" "$note"
  else
    say "# nccl-sendrecv: skipped (not built: needs nccl.h, libnccl, libcudart and a C compiler)"
  fi
fi

for t in sendrecv alltoall all_reduce; do
  wanted "${t}_perf" || continue
  if [ -z "$perf_dir" ]; then
    say "# ${t}_perf: skipped (${nccl_tests:+nccl-tests not built}${nccl_tests:-no --nccl-tests DIR given})"
    continue
  fi
  if [ -z "$mpirun" ]; then
    say "# ${t}_perf: skipped (no mpirun)"
    continue
  fi
  both "${t}_perf" 150 "$mpirun" --allow-run-as-root --oversubscribe -np 2 \
    -x NCCL_NET_PLUGIN -x NCCL_NET -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_TESTS_DEVICE \
    -x NCCL_SOCKET_IFNAME -x RAILNET_SOCKET_IFNAME -x LD_LIBRARY_PATH \
    ${NCCL_SOCKET_NTHREADS:+-x NCCL_SOCKET_NTHREADS -x NCCL_NSOCKS_PERTHREAD} \
    "$here/gpu/rank-env.sh" "$perf_dir/${t}_perf" -b 8 -e "$maxsize" -f 4 -g 1 -c 1 -w 3 -n 10
  r=$(parse_table nccl-tests "$work/${t}_perf-railnet.log" max)
  s=$(parse_table nccl-tests "$work/${t}_perf-socket.log" max)
  n=$note
  [ -n "$r" ] && [ "$(field "$r" 3)" != 0 ] && { n="$n, railnet #wrong $(field "$r" 3)"; failed=1; }
  row "${t}_perf $(human $maxsize)" "busbw GB/s" "$(field "$r" 1)" "$(field "$s" 1)" "$n"
  r=$(parse_table nccl-tests "$work/${t}_perf-railnet.log" min)
  s=$(parse_table nccl-tests "$work/${t}_perf-socket.log" min)
  row "${t}_perf 8 B" "time us" "$(field "$r" 2)" "$(field "$s" 2)" "$note"
done

torch_ok=
if [ -n "$torch" ] && [ -n "$torchrun" ]; then
  case $torch in *no-cuda*) ;; *) torch_ok=1 ;; esac
fi
if wanted torch-sendrecv || wanted torch-kv; then
  [ -n "$torch_ok" ] || say "# torch checks: skipped (python3 with CUDA-enabled torch and torchrun needed; found '${torch:-}')"
fi
if [ -n "$torch_ok" ] && wanted torch-sendrecv; then
  both torch-sendrecv 150 "$torchrun" --standalone --nproc-per-node 2 --no-python \
    "$here/gpu/rank-env.sh" "$PYTHON" "$here/gpu/torch_sendrecv.py" --iters "$([ $quick -eq 1 ] && echo 5 || echo 20)"
  r=$(parse_torch torch-sendrecv "$work/torch-sendrecv-railnet.log")
  s=$(parse_torch torch-sendrecv "$work/torch-sendrecv-socket.log")
  n=$note
  [ -n "$r" ] && [ "$(field "$r" 3)" != 1 ] && { n="$n, railnet data WRONG"; failed=1; }
  row "torch send/recv 256 MB" "GB/s" "$(field "$r" 1)" "$(field "$s" 1)" "$n"
fi
if [ -n "$torch_ok" ] && wanted torch-kv; then
  both torch-kv 180 "$torchrun" --standalone --nproc-per-node 2 --no-python \
    "$here/gpu/rank-env.sh" "$PYTHON" "$here/gpu/torch_kv.py" --model 70b-tp8 --tokens 12288 \
    --requests "$([ $quick -eq 1 ] && echo 2 || echo 3)"
  for mode in ungrouped grouped; do
    r=$(parse_torch torch-kv "$work/torch-kv-railnet.log" $mode)
    s=$(parse_torch torch-kv "$work/torch-kv-socket.log" $mode)
    n=$note
    [ -n "$r" ] && [ "$(field "$r" 3)" != 1 ] && { n="$n, railnet data WRONG"; failed=1; }
    row "torch KV 70B/TP8 12k tok $mode" "ms/request" "$(field "$r" 1)" "$(field "$s" 1)" "$n"
  done
fi

# railnet-kvbench: the KV goals that a 2-core host cannot decide (W4's
# small stream next to bulk wants CPUs for both), on this machine's CPUs;
# plugin level, so no GPU and no NCCL: railnet against plain TCP
kvrows=
if wanted kvbench; then
  kvb=$build/railnet-kvbench
  l=$(left)
  if [ ! -x "$kvb" ]; then
    say "# kvbench: skipped (no $kvb: make builds it)"
  elif [ "$l" -lt 60 ]; then
    say "# kvbench: skipped, the time budget is spent"
  else
    secs=$((l - 10 < 150 ? l - 10 : 150))
    t0=$(date +%s)
    RN_PLUGIN=$plugin RAILNET_TRAFFIC_CLASS_NCCL=1 timeout "$secs" "$kvb" --workloads w1,w4 \
      --models 70b --tokens 12288 --tc-small 184 --no-verify \
      $([ $quick -eq 1 ] && echo --requests 2) >"$work/kvbench.log" 2>&1
    rc=$?
    say "# kvbench (railnet and plain TCP): exit $rc after $(($(date +%s) - t0)) s"
    ran=$((ran + 1))
    kvrows=$(parse_kvbench "$work/kvbench.log")
    if [ $rc -ne 0 ] || [ -z "$kvrows" ]; then
      say "#   kvbench failed (exit $rc$([ $rc -eq 124 ] && echo ': timeout'); log $work/kvbench.log):"
      tail -8 "$work/kvbench.log" | sed 's/^/#     /'
      failed=1
    fi
  fi
fi

say "#"
say "# railnet / NCCL Socket, same run: $gpu; NCCL ${ncclver:-?}; 2 ranks on GPU 0 with a host id each;" \
  "Socket $([ $socket_tuned -eq 1 ] && echo 'tuned: 4 threads x 4 sockets' || echo 'NCCL defaults'); $(($(date +%s) - start)) s"
print_table "$results"
if [ -n "$kvrows" ]; then
  say "# railnet-kvbench on this host's $(nproc 2>/dev/null) CPUs, railnet / plain TCP in the same run (loopback, no GPU):"
  printf '%s\n' "$kvrows" | sed 's/^/  /'
fi
[ -n "$keep" ] && say "# logs in $work"
if [ $ran -eq 0 ]; then
  say "gpu-check: no railnet run could be made (see the skips above)"
  exit 3
fi
[ $failed -eq 0 ] && say "# gpu-check: every railnet run passed on railnet" || say "# gpu-check: FAILED (see above)"
exit $failed
