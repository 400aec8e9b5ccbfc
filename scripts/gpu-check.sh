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
# OUT (when set and no --keep: the logs, results.tsv and summary.txt go to
# $OUT/gpu-check); NCCL_*/RAILNET_* pass through.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

# say: stdout, and summary.txt once the check has a log folder
say() {
  printf '%s\n' "$*"
  [ -z "${sumf:-}" ] || printf '%s\n' "$*" >>"$sumf"
}
warn() { printf 'gpu-check: %s\n' "$*" >&2; }

# ---- log checks and parsing (pure: a log file in, a verdict or numbers out) ----

# check_transport railnet|socket LOG: 0 when the log shows that transport only
check_transport() {
  want=$1
  log=$2
  [ -r "$log" ] || { echo "no log $log"; return 1; }
  if [ "$want" = railnet ]; then
    grep -q "NET/Plugin: Loaded net plugin railnet" "$log" ||
      { echo "no 'NET/Plugin: Loaded net plugin railnet' (the plugin did not load)"; return 1; }
    grep -q "via NET/railnet" "$log" ||
      { echo "no 'via NET/railnet' (NCCL's channels did not use railnet)"; return 1; }
    if grep -q "via NET/Socket\|via NET/IB" "$log"; then
      echo "some channels went via NCCL's own transport"
      return 1
    fi
    return 0
  fi
  grep -q "via NET/Socket" "$log" || { echo "no 'via NET/Socket'"; return 1; }
  if grep -q "Loaded net plugin railnet\|via NET/railnet" "$log"; then
    echo "railnet appears in the Socket run"
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
  if [ -z "$nccl_lib" ]; then
    # anywhere the dynamic linker knows (/etc/ld.so.conf.d)
    for l in ldconfig /sbin/ldconfig; do
      f=$($l -p 2>/dev/null | awk '$1 ~ /^libnccl\.so(\.2)?$/ { print $NF; exit }')
      [ -n "$f" ] && [ -e "$f" ] && { nccl_lib=$f; break; }
    done
  fi
  if { [ -z "$nccl_inc" ] || [ -z "$nccl_lib" ]; } && have "$PYTHON"; then
    # NCCL as a Python wheel (nvidia-nccl-*), as torch ships it: header and
    # library both from it, so that they match
    d=$(timeout 60 "$PYTHON" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if getattr(nvidia.nccl, "__file__", None) else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    if [ -n "$d" ] && [ -f "$d/include/nccl.h" ]; then
      for f in "$d/lib/libnccl.so" "$d/lib/libnccl.so.2"; do
        [ -e "$f" ] && { nccl_inc=$d/include; nccl_lib=$f; break; }
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
  gpu_mode=
  if have nvidia-smi && [ -e /dev/nvidia0 ] || { have nvidia-smi && timeout 30 nvidia-smi -L >/dev/null 2>&1; }; then
    gpu=$(timeout 30 nvidia-smi --query-gpu=name,pci.bus_id --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$gpu" ] || gpu=$(timeout 30 nvidia-smi -L 2>/dev/null | head -1)
    # two processes share GPU 0: an exclusive compute mode forbids that
    gpu_mode=$(timeout 30 nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)
  fi
  find_nccl
  find_cudart
  find_mpi
  cc=${CC:-cc}
  have "$cc" || cc=
  torch=
  have "$PYTHON" && torch=$(timeout 120 "$PYTHON" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>/dev/null)
  torchrun=${TORCHRUN:-}
  [ -n "$torchrun" ] || { have torchrun && torchrun=torchrun; }
  nvcc=
  [ -x "$CUDA_HOME/bin/nvcc" ] && nvcc=$CUDA_HOME/bin/nvcc
  [ -n "$nvcc" ] || { have nvcc && nvcc=$(command -v nvcc); }
  # the Makefile asks pkg-config for hwloc and expat; without pkg-config
  # (package pkgconf) but with their headers, the libraries are named on
  # make's command line instead
  hwloc=
  mkvars=
  if have pkg-config && pkg-config --exists hwloc expat 2>/dev/null; then
    hwloc=yes
  elif [ -f /usr/include/hwloc.h ] && [ -f /usr/include/expat.h ]; then
    hwloc="headers (no pkg-config): -lhwloc -lexpat"
    mkvars="HWLOC_LIBS=-lhwloc EXPAT_LIBS=-lexpat"
  fi
}

deps_report() {
  row() { say "$(printf '#   %-26s %-52s %s' "$1" "${2:-(missing)}" "$3")"; }
  say "# dependencies (found / what needs it)"
  row "GPU" "$gpu" "everything below"
  row "C compiler" "$cc" "railnet, nccl-sendrecv"
  row "make" "$(command -v make 2>/dev/null)" "railnet, nccl-tests"
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
  -h | --help) sed -n '2,/^set -u/{/^set -u/!p;}' "$0"; exit 0 ;;
  *) warn "unknown option $1"; exit 2 ;;
  esac
done
start=$(date +%s)
deadline=$((start + budget))
left() { echo $((deadline - $(date +%s))); }

# scratch: removed at the end; the logs go to --keep DIR, else to
# $OUT/gpu-check (written as the runs go, so a check cut short still leaves
# them), else to scratch
scratch=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
trap 'rm -rf "$scratch"; trap - EXIT; exit 130' INT
trap 'rm -rf "$scratch"; trap - EXIT; exit 143' TERM
if [ -z "$keep" ] && [ -n "${OUT:-}" ]; then
  keep=$OUT/gpu-check
fi
if [ -n "$keep" ]; then
  mkdir -p "$keep" || exit 2
  work=$(cd "$keep" && pwd)
else
  work=$scratch
fi
results=$work/results.tsv
: >"$results"
sumf=$work/summary.txt
: >"$sumf"
ncpu=$(nproc 2>/dev/null || echo 4)

detect
say "# railnet GPU check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $ncpu CPUs"
deps_report
if [ -z "$gpu" ]; then
  say "# no GPU (nvidia-smi or /dev/nvidia0 missing): nothing to prove here"
  exit 3
fi
case $gpu_mode in
*[Ee]xclusive* | *[Pp]rohibited*)
  say "# WARNING: GPU compute mode '$gpu_mode': the two ranks cannot share GPU 0; expect every run to fail"
  ;;
esac

wanted() { [ -z "$only" ] || printf ',%s,' "$only" | grep -q ",$1,"; }

# ---- build --------------------------------------------------------------------
build=${RN_BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
# make: only what the check runs (the plugin, then railnet-kvbench), not
# `all` (whose test programs and nccl.mk's NCCL program can fail to build
# here for reasons of their own); once more without -Werror when a newer
# compiler warns
make_rn() { # make_rn SECONDS TARGET
  # shellcheck disable=SC2086
  (cd "$root" && timeout -k 5 "$1" make -j"$ncpu" BUILD="$build" $mkvars "$2") >>"$work/make.log" 2>&1 && return 0
  say "# make $2 failed (log: make.log); once more without -Werror"
  # shellcheck disable=SC2086
  (cd "$root" && timeout -k 5 "$1" make -j"$ncpu" BUILD="$build" $mkvars WARN="-Wall -Wextra" "$2") >>"$work/make.log" 2>&1
}
if [ -z "$plugin" ]; then
  say "# building railnet (make -j$ncpu${mkvars:+ $mkvars})"
  : >"$work/make.log"
  if ! make_rn 120 "$build/libnccl-net-railnet.so"; then
    tail -20 "$work/make.log"
    [ -z "$hwloc" ] && say "# hint: hwloc and expat development files (libhwloc-dev, libexpat1-dev) are missing"
    say "gpu-check: railnet did not build; nothing proven"
    exit 1
  fi
  if wanted kvbench && ! make_rn 60 "$build/railnet-kvbench"; then
    say "# railnet-kvbench did not build:"
    tail -5 "$work/make.log"
  fi
  plugin=$build/libnccl-net-railnet.so
fi
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
[ -f "$plugin" ] || { warn "no plugin at $plugin"; exit 2; }
# the plugin must load as NCCL loads it (dlopen, every symbol resolved)
if have "$PYTHON"; then
  why=$(timeout 60 "$PYTHON" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$plugin" 2>&1) ||
    say "# WARNING: $plugin does not dlopen: $(printf '%s' "$why" | tail -1)"
fi

sendrecv_bin=$build/tests/nccl-sendrecv
# a copy built elsewhere (a build folder carried from another machine) is
# rebuilt when the libraries it names are not here
if [ -x "$sendrecv_bin" ] && ldd "$sendrecv_bin" 2>/dev/null | grep -q "not found"; then
  rm -f "$sendrecv_bin"
fi
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
  elif [ -z "$nvcc" ] || [ -z "$mpi_home" ] || [ -z "$nccl_inc" ] || [ -z "$nccl_lib" ]; then
    say "# nccl-tests not built: needs nvcc, MPI headers, nccl.h and libnccl"
  else
    # a private NCCL_HOME: nccl-tests wants include/ and lib/libnccl.so side
    # by side, which a wheel's NCCL (lib/libnccl.so.2 only) does not have
    nccl_home=$scratch/nccl
    mkdir -p "$nccl_home/lib"
    ln -sfn "$nccl_inc" "$nccl_home/include"
    ln -sf "$nccl_lib" "$nccl_home/lib/libnccl.so"
    say "# building nccl-tests (MPI=1, sm_90) in $nt/build"
    # NVCC: nvcc where it is (not only $CUDA_HOME/bin, nccl-tests' default)
    if (cd "$nt/src" && timeout -k 5 "$(( $(left) > 300 ? 240 : $(left) / 2 ))" make -j"$ncpu" MPI=1 \
      MPI_HOME="$mpi_home" NCCL_HOME="$nccl_home" CUDA_HOME="$CUDA_HOME" NVCC="$nvcc" \
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
# the two ranks share one GPU: on a GPU that reports an NVLink fabric
# cluster (MNNVL), NCCL would join them over NVLink (P2P) despite the two
# host ids, and nothing would cross a net transport
: "${NCCL_MNNVL_ENABLE:=0}"
export NCCL_MNNVL_ENABLE
# The plugin by name, found through LD_LIBRARY_PATH as
# libnccl-net-railnet.so: every NCCL from 2.20 loads it so (an absolute
# path in NCCL_NET_PLUGIN needs 2.21 or later, which torch's own NCCL may
# not be).  The NCCL found above goes first for the programs built
# against it (nccl-sendrecv, nccl-tests); torch keeps its own NCCL.
orig_ld=${LD_LIBRARY_PATH:-}
plugin_dir=$(dirname "$plugin")
case $plugin in
*/libnccl-net-railnet.so) plugin_env=railnet ;;
*) plugin_env=$plugin ;;
esac
ld_torch=$plugin_dir${orig_ld:+:$orig_ld}
ld_native=$plugin_dir${nccl_lib:+:$(dirname "$nccl_lib")}${orig_ld:+:$orig_ld}
LD_LIBRARY_PATH=$ld_native
export LD_LIBRARY_PATH
# line-buffered stdout in every process of a run: NCCL writes its INFO
# lines to stdout with stdio, and nccl-sendrecv's ranks end in _exit(),
# which drops what a block buffer still holds (and block-sized writes of
# two ranks cut each other's lines)
linebuf=
have stdbuf && linebuf="stdbuf -oL"
if [ $socket_tuned -eq 1 ]; then
  # read by NCCL's Socket transport only; railnet ignores them
  export NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4
fi
# sizes 8 B .. maxsize by factor 2: with factor 4 from 8 B (2^3) the
# largest size run is 2^27, never the 2^28 (256 MiB) of the table's row
maxsize=268435456
[ $quick -eq 1 ] && maxsize=67108864
failed=0
ran=0
ncclver=

# set the environment of one transport: railnet or socket
use_transport() {
  if [ "$1" = railnet ]; then
    NCCL_NET_PLUGIN=$plugin_env
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
  skipped=0
  if [ "$l" -lt 20 ]; then
    say "# $name ($tr): skipped, the time budget is spent"
    skipped=1
    return 2
  fi
  [ "$secs" -gt $((l - 10)) ] && secs=$((l - 10))
  use_transport "$tr"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 10 "$secs" $linebuf "$@" >"$log" 2>&1
  rc=$?
  say "# $name ($tr): exit $rc after $(($(date +%s) - t0)) s"
  # every NCCL version seen (torch may bring its own)
  v=$(sed -n 's/.*NCCL version \([^ ]*\).*/\1/p' "$log" | head -1)
  case " $ncclver " in *" $v "*) ;; *) ncclver="${ncclver:+$ncclver }$v" ;; esac
  if [ $rc -ne 0 ]; then
    say "#   $tr run failed (exit $rc$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo ': timeout'); log $log):"
    grep -v " NCCL INFO " "$log" | tail -8 | sed 's/^/#     /' | tee -a "$sumf"
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
  for tr in railnet socket; do
    label=railnet fail=FAILED
    [ $tr = socket ] && label=Socket fail=failed
    if run "$name" $tr "$secs" "$@"; then
      v=ok
    elif [ "$skipped" -eq 1 ]; then
      v="skipped (time budget)"
    else
      v=$fail
    fi
    note="${note:+$note, }$label $v"
  done
}

row() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${3:--}" "${4:--}" "$5" >>"$results"; }
field() { printf '%s\n' "$1" | awk -v i="$2" '{print $i}'; }
human() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d B", b }'; }

if wanted nccl-sendrecv; then
  if [ -x "$sendrecv_bin" ]; then
    both nccl-sendrecv 90 "$sendrecv_bin" -n 2 -b 8 -e "$maxsize" -f 2
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
  # --bind-to none: Open MPI binds each of 2 ranks to one core by default,
  # where NCCL's busy proxy thread and the transport's threads would share
  # that core with the rank itself
  both "${t}_perf" 100 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    -x NCCL_NET_PLUGIN -x NCCL_NET -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_TESTS_DEVICE \
    -x NCCL_SOCKET_IFNAME -x RAILNET_SOCKET_IFNAME -x LD_LIBRARY_PATH \
    ${NCCL_SOCKET_NTHREADS:+-x NCCL_SOCKET_NTHREADS -x NCCL_NSOCKS_PERTHREAD} \
    "$here/gpu/rank-env.sh" "$perf_dir/${t}_perf" -b 8 -e "$maxsize" -f 2 -g 1 -c 1 -w 3 -n 10
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
# torch: its own NCCL (ld_torch); torchrun's static rendezvous on
# 127.0.0.1 and a free port (--standalone publishes socket.getfqdn() as
# MASTER_ADDR, which a host without a resolvable name cannot dial, and
# waits on it for minutes)
if [ -n "$torch_ok" ] && { wanted torch-sendrecv || wanted torch-kv; }; then
  LD_LIBRARY_PATH=$ld_torch
  export LD_LIBRARY_PATH
fi
free_port() {
  p=$(timeout 30 "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null)
  case $p in '' | *[!0-9]*) p=$((29400 + $(date +%s) % 500)) ;; esac
  echo "$p"
}
if [ -n "$torch_ok" ] && wanted torch-sendrecv; then
  both torch-sendrecv 120 "$torchrun" --nnodes=1 --nproc-per-node 2 --master-addr=127.0.0.1 \
    --master-port="$(free_port)" --no-python \
    "$here/gpu/rank-env.sh" "$PYTHON" "$here/gpu/torch_sendrecv.py" --iters "$([ $quick -eq 1 ] && echo 5 || echo 20)"
  r=$(parse_torch torch-sendrecv "$work/torch-sendrecv-railnet.log")
  s=$(parse_torch torch-sendrecv "$work/torch-sendrecv-socket.log")
  n=$note
  [ -n "$r" ] && [ "$(field "$r" 3)" != 1 ] && { n="$n, railnet data WRONG"; failed=1; }
  row "torch send/recv 256 MB" "GB/s" "$(field "$r" 1)" "$(field "$s" 1)" "$n"
fi
if [ -n "$torch_ok" ] && wanted torch-kv; then
  both torch-kv 150 "$torchrun" --nnodes=1 --nproc-per-node 2 --master-addr=127.0.0.1 \
    --master-port="$(free_port)" --no-python \
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
    set -- --workloads w1,w4 --models 70b --tokens 12288 --tc-small 184 --no-verify
    [ $quick -eq 1 ] && set -- "$@" --requests 2
    RN_PLUGIN=$plugin RAILNET_TRAFFIC_CLASS_NCCL=1 timeout -k 10 "$secs" "$kvb" "$@" >"$work/kvbench.log" 2>&1
    rc=$?
    say "# kvbench (railnet and plain TCP): exit $rc after $(($(date +%s) - t0)) s"
    ran=$((ran + 1))
    kvrows=$(parse_kvbench "$work/kvbench.log")
    if [ $rc -ne 0 ] || [ -z "$kvrows" ]; then
      say "#   kvbench failed (exit $rc$([ $rc -eq 124 ] && echo ': timeout'); log $work/kvbench.log):"
      tail -8 "$work/kvbench.log" | sed 's/^/#     /' | tee -a "$sumf"
      failed=1
    fi
  fi
fi

say "#"
say "# railnet / NCCL Socket, same run: $gpu; NCCL ${ncclver:-?}; 2 ranks on GPU 0 with a host id each;" \
  "Socket $([ $socket_tuned -eq 1 ] && echo 'tuned: 4 threads x 4 sockets' || echo 'NCCL defaults'); $(($(date +%s) - start)) s"
print_table "$results" | tee -a "$sumf"
if [ -n "$kvrows" ]; then
  say "# railnet-kvbench on this host's $ncpu CPUs, railnet / plain TCP in the same run (loopback, no GPU):"
  printf '%s\n' "$kvrows" | sed 's/^/  /' | tee -a "$sumf"
fi
[ -n "$keep" ] && say "# logs in $work"
if [ $ran -eq 0 ]; then
  say "gpu-check: no railnet run could be made (see the skips above)"
  exit 3
fi
if [ $failed -eq 0 ]; then
  say "# gpu-check: every railnet run passed on railnet"
else
  say "# gpu-check: FAILED (see above)"
fi
exit $failed
