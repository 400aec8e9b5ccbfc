#!/bin/sh
# Run nccl-tests' sendrecv_perf through railnet under mpirun, one process
# per rank, each rank on its own NCCL_HOSTID so NCCL treats the ranks as
# separate hosts and every byte crosses the net plugin.
#
#   scripts/run-nccl-tests.sh [--np N] [--mode railnet|socket|compare] [--plugin PATH]
#                             /path/to/sendrecv_perf [sendrecv_perf args]
#
#   railnet  (default) NCCL_NET_PLUGIN=<plugin>, NCCL_NET=railnet; fails unless
#            NCCL's log says "via NET/railnet"
#   socket   NCCL_NET_PLUGIN=none, NCCL_NET=Socket (NCCL's internal TCP)
#   compare  both, then the bus bandwidth per size side by side
#
# Default sendrecv_perf args: -b 8 -e 1G -f 2 -g 1.  Environment: RN_BUILD
# (default build), MPIRUN (default mpirun), MPIRUN_ARGS (extra args), and
# NCCL_*/RAILNET_* pass through (RAILNET_SOCKET_IFNAME, NCCL_SOCKET_IFNAME
# default to lo for a single host).
set -u
np=2
mode=railnet
plugin=
while [ $# -gt 0 ]; do
  case $1 in
  --np) np=$2; shift 2 ;;
  --mode) mode=$2; shift 2 ;;
  --plugin) plugin=$2; shift 2 ;;
  -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
  --) shift; break ;;
  *) break ;;
  esac
done
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "run-nccl-tests.sh: give the path of nccl-tests' sendrecv_perf (got '${1:-}')" >&2
  exit 2
fi
perf=$1
shift
[ $# -eq 0 ] && set -- -b 8 -e 1G -f 2 -g 1

root=$(cd "$(dirname "$0")/.." && pwd)
build=${RN_BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
[ -n "$plugin" ] || plugin=$build/libnccl-net-railnet.so
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
mpirun=${MPIRUN:-mpirun}
if ! command -v "$mpirun" >/dev/null 2>&1; then
  echo "run-nccl-tests.sh: $mpirun not found (set MPIRUN)" >&2
  exit 2
fi
: "${RAILNET_SOCKET_IFNAME:=lo}"
: "${NCCL_SOCKET_IFNAME:=lo}"
export RAILNET_SOCKET_IFNAME NCCL_SOCKET_IFNAME

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rn-nccl-tests.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
# per-rank host id: Open MPI, then PMI/Slurm spellings
cat >"$tmp/rank.sh" <<'WRAP'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}}
export NCCL_HOSTID=railnet-nccl-tests-rank$r
exec "$@"
WRAP
chmod +x "$tmp/rank.sh"

# run MODE LOG: one sendrecv_perf run; returns its exit status
run() {
  m=$1
  log=$2
  shift 2
  if [ "$m" = railnet ]; then
    [ -f "$plugin" ] || { echo "run-nccl-tests.sh: $plugin not built" >&2; return 2; }
    netplugin=$plugin
    net=${NCCL_NET:-railnet}
  else
    netplugin=none
    net=Socket
  fi
  echo "== $m: NCCL_NET_PLUGIN=$netplugin NCCL_NET=$net $mpirun -np $np $perf $*" >&2
  # --bind-to none: Open MPI binds each of a few ranks to one core, which
  # NCCL's busy proxy thread and the transport's threads would then share.
  # shellcheck disable=SC2086
  NCCL_NET_PLUGIN=$netplugin NCCL_NET=$net NCCL_TESTS_DEVICE=${NCCL_TESTS_DEVICE:-0} \
    NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET} \
    "$mpirun" --allow-run-as-root -np "$np" --oversubscribe --bind-to none \
    -x NCCL_NET_PLUGIN -x NCCL_NET -x NCCL_TESTS_DEVICE -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS \
    -x NCCL_SOCKET_IFNAME -x RAILNET_SOCKET_IFNAME -x LD_LIBRARY_PATH \
    ${MPIRUN_ARGS:-} "$tmp/rank.sh" "$perf" "$@" >"$log" 2>&1
}

# busbw per size (out-of-place column) from a sendrecv_perf log
table() { awk '/^ *[0-9]+ +[0-9]+ +[a-z0-9]+ /{print $1, $8}' "$1"; }

status=0
case $mode in
railnet | socket)
  run "$mode" "$tmp/$mode.log" "$@"
  rc=$?
  grep -v ' NCCL INFO ' "$tmp/$mode.log"
  if [ $rc -ne 0 ]; then
    echo "run-nccl-tests.sh: sendrecv_perf exited $rc" >&2
    status=1
  fi
  if [ "$mode" = railnet ]; then
    if grep -q "via NET/railnet" "$tmp/$mode.log"; then
      echo "# railnet: NCCL's channels went via NET/railnet"
      grep "via NET/railnet" "$tmp/$mode.log" | head -4 | sed 's/^/#   /'
    else
      echo "run-nccl-tests.sh: no 'via NET/railnet' in NCCL's log: the plugin was not used" >&2
      grep -E "NET/Plugin|Using network|via NET" "$tmp/$mode.log" | head -10 >&2
      status=1
    fi
  fi
  ;;
compare)
  run railnet "$tmp/railnet.log" "$@" || status=1
  run socket "$tmp/socket.log" "$@" || status=1
  grep -q "via NET/railnet" "$tmp/railnet.log" || { echo "railnet run did not go via NET/railnet" >&2; status=1; }
  table "$tmp/railnet.log" >"$tmp/r.txt"
  table "$tmp/socket.log" >"$tmp/s.txt"
  printf '# %12s %16s %16s %8s\n' size "railnet busbw" "Socket busbw" ratio
  awk 'NR == FNR { s[$1] = $2; next }
       ($1 in s) { r = (s[$1] > 0) ? $2 / s[$1] : 0; printf "  %12s %16s %16s %7.2fx\n", $1, $2, s[$1], r }' \
    "$tmp/s.txt" "$tmp/r.txt"
  for m in railnet socket; do
    printf '# %s: %s\n' "$m" "$(grep 'Avg bus bandwidth' "$tmp/$m.log" | head -1 | sed 's/^# *//')"
  done
  ;;
*)
  echo "run-nccl-tests.sh: unknown mode $mode" >&2
  exit 2
  ;;
esac
exit $status
