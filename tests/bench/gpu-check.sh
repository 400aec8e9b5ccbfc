#!/bin/sh
# TAP: the parts of scripts/gpu-check.sh that need no GPU — dependency
# detection, the syntax of its scripts, the torch scripts compiling, and its
# log checks, parsers and ratio table run on short logs written here by hand
# in the formats NCCL's INFO log, nccl-tests, the torch scripts and
# railnet-kvbench print.
# The GPU run itself is skipped, with the reason, where there is no GPU.
here=$(cd "$(dirname "$0")/../.." && pwd)
gc=$here/scripts/gpu-check.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); echo "not ok $n - $*"; }
check() { # check DESCRIPTION EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then ok "$1"; else notok "$1 (expected '$2', got '$3')"; fi
}
echo "1..20"

# ---- canned logs (hand-written in the documented formats) ---------------------
cat >"$tmp/railnet.log" <<'EOF'
gpu0:100:100 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
gpu0:100:100 [0] NCCL INFO NET/Plugin: Loaded net plugin railnet (v11)
gpu0:100:100 [0] NCCL INFO NET/railnet/tcp : dev 0: lo transport=tcp rails=1
gpu0:100:100 [0] NCCL INFO Using network railnet
gpu0:100:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/railnet/0
gpu0:100:120 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/railnet/0
EOF
cat >"$tmp/socket.log" <<'EOF'
gpu0:200:200 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
gpu0:200:200 [0] NCCL INFO NET/Plugin: Plugin name set by env to none
gpu0:200:200 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
gpu0:200:200 [0] NCCL INFO Using network Socket
gpu0:200:220 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
EOF
# the plugin loaded but NCCL's channels used its own transport
cat >"$tmp/fallback.log" <<'EOF'
gpu0:300:300 [0] NCCL INFO NET/Plugin: Loaded net plugin railnet (v11)
gpu0:300:300 [0] NCCL INFO Using network Socket
gpu0:300:320 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
EOF
cat >"$tmp/perf.log" <<'EOF'
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: sendrecv_perf
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    41.50    0.00    0.00      0    40.10    0.00    0.00      0
     1048576        262144     float     sum      -1   350.20    2.99    2.99      0   349.00    3.00    3.00      0
   268435456      67108864     float     sum      -1  52000.0    5.16    5.16      0  51000.0    5.26    5.26      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 2.716
EOF
cat >"$tmp/sendrecv.log" <<'EOF'
# nccl-sendrecv: 2 ranks (processes, NCCL_HOSTID per rank), NCCL_NET_PLUGIN=/x/libnccl-net-railnet.so, NCCL_NET=railnet
#
#         size        count   type   time(us)  algbw(GB/s)  busbw(GB/s)   #wrong
             8            8   int8       38.2        0.000        0.000        0
     268435456    268435456   int8    60100.0        4.467        4.467        0
# Out of bounds values : 0 OK
EOF
cat >"$tmp/torch.log" <<'EOF'
[rank1]: some torch warning
RESULT torch_sendrecv bytes=256000000 iters=20 us_per_iter=50000.0 gbps=5.120 verified=1 wrong=0
RESULT torch_kv model=70b-tp8 tokens=12288 mode=ungrouped layers=80 request_bytes=503316480 requests=3 p50_ms=120.50 min_ms=118.00 gbps=4.177 verified=1 wrong=0
RESULT torch_kv model=70b-tp8 tokens=12288 mode=grouped layers=80 request_bytes=503316480 requests=3 p50_ms=99.25 min_ms=98.00 gbps=5.071 verified=1 wrong=0
EOF
# railnet-kvbench's closing lines (a real run's, W1 and W4)
cat >"$tmp/kvbench.log" <<'EOF'
#   plain TCP: p99 with bulk / alone 127.24x (own thread), 3.61x (shared); bulk 4.96 GB/s alone
#
# goals (railnet against the anchor measured in this run)
#   W1 70B/TP8 12k-token request (grouped): transfer time 0.83x plain TCP (goal <= 1.1x): met
#   W1 70B/TP8 12k-token request (ungrouped): transfer time 0.86x plain TCP (goal <= 1.1x): met
#   W4 small-stream p99 with bulk / alone (own proxy thread): 26.64x (goal <= 2x): NOT met; plain TCP itself 1.55x
#   W4 small-stream p99 with bulk / alone (shared proxy thread): 2.82x (goal <= 2x): NOT met; plain TCP itself 2.52x
# snd/rcv us/m: proxy-thread CPU time per plugin message, sender / receiver (busy polling included, as NCCL's proxy polls)
EOF
printf 'sendrecv_perf 256 MiB\tbusbw GB/s\t5.16\t1.29\trailnet ok, Socket ok\nsendrecv_perf 8 B\ttime us\t41.5\t2260\trailnet ok, Socket ok\ntorch KV grouped\tms/request\t99.25\t-\trailnet ok, Socket failed\n' >"$tmp/results.tsv"

# ---- 1-3: scripts parse, Python compiles, dependencies are reported ----------------
if sh -n "$gc" && sh -n "$here/scripts/gpu/rank-env.sh"; then ok "gpu-check.sh and rank-env.sh parse (sh -n)"; else notok "scripts parse"; fi
if ! command -v python3 >/dev/null 2>&1; then
  n=$((n + 1))
  echo "ok $n # SKIP python3 missing: torch scripts not compiled"
elif PYTHONPYCACHEPREFIX=$tmp/pyc python3 -m py_compile "$here"/scripts/gpu/*.py 2>"$tmp/pyc.err"; then
  ok "scripts/gpu/*.py compile (python3 -m py_compile)"
else
  notok "scripts/gpu/*.py compile"
  sed 's/^/# /' "$tmp/pyc.err"
fi
if "$gc" --self-test >"$tmp/self.out" 2>&1 && grep -q "^#   GPU " "$tmp/self.out" &&
  grep -q "^#   NCCL library" "$tmp/self.out" && grep -q "^#   torchrun" "$tmp/self.out"; then
  ok "--self-test: dependency report (GPU, NCCL, MPI, torch, torchrun) and syntax checks"
else
  notok "--self-test"
  sed 's/^/# /' "$tmp/self.out"
fi

# ---- 4-8: transport checks --------------------------------------------------------
"$gc" --check-transport railnet "$tmp/railnet.log" >/dev/null
check "railnet log with 'Loaded net plugin railnet' and 'via NET/railnet' passes" 0 $?
"$gc" --check-transport railnet "$tmp/socket.log" >/dev/null
check "a Socket log fails the railnet check" 1 $?
"$gc" --check-transport railnet "$tmp/fallback.log" >"$tmp/fb.out"
rc=$?
if [ $rc -eq 1 ] && grep -q "via NET/railnet" "$tmp/fb.out"; then
  ok "plugin loaded but channels via NET/Socket fails the railnet check, naming the missing line"
else
  notok "fallback log (exit $rc: $(cat "$tmp/fb.out"))"
fi
"$gc" --check-transport socket "$tmp/socket.log" >/dev/null
check "Socket log passes the Socket check" 0 $?
"$gc" --check-transport socket "$tmp/railnet.log" >/dev/null
check "a railnet log fails the Socket check (railnet must be absent)" 1 $?

# ---- 9-15: parsers ----------------------------------------------------------------
check "nccl-tests: out-of-place busbw, time and #wrong at the largest size" "5.16 52000.0 0" \
  "$("$gc" --parse nccl-tests "$tmp/perf.log" max)"
check "nccl-tests: the smallest size" "0.00 41.50 0" "$("$gc" --parse nccl-tests "$tmp/perf.log" min)"
check "nccl-tests: a given size" "2.99 350.20 0" "$("$gc" --parse nccl-tests "$tmp/perf.log" 1048576)"
check "nccl-sendrecv: busbw, time and #wrong at the largest size" "4.467 60100.0 0" \
  "$("$gc" --parse nccl-sendrecv "$tmp/sendrecv.log" max)"
check "torch send/recv: GB/s, us per iteration, verified" "5.120 50000.0 1" \
  "$("$gc" --parse torch-sendrecv "$tmp/torch.log")"
check "torch KV: p50 ms, GB/s, verified of the grouped mode" "99.25 5.071 1" \
  "$("$gc" --parse torch-kv "$tmp/torch.log" grouped)"

kv=$("$gc" --parse kvbench "$tmp/kvbench.log")
if [ "$(printf '%s\n' "$kv" | grep -c '^W[14] ')" -eq 4 ] &&
  printf '%s\n' "$kv" | grep -q '^W4 .*(shared proxy thread): 2.82x (goal <= 2x): NOT met' &&
  ! "$gc" --parse kvbench "$tmp/torch.log" >/dev/null; then
  ok "kvbench: its four goal rows, and none from a log without them (exit 1)"
else
  notok "kvbench goal rows"
  printf '%s\n' "$kv" | sed 's/^/# /'
fi

# ---- 16: the ratio table ------------------------------------------------------------
"$gc" --table "$tmp/results.tsv" >"$tmp/table.out"
if grep "sendrecv_perf 256 MiB" "$tmp/table.out" | grep -q " 4.00x " &&
  grep "sendrecv_perf 8 B" "$tmp/table.out" | grep -q " 0.02x " &&
  grep "torch KV grouped" "$tmp/table.out" | grep -q " - .*Socket failed"; then
  ok "ratio table: railnet/Socket per row, '-' where the Socket run failed"
else
  notok "ratio table"
  sed 's/^/# /' "$tmp/table.out"
fi

# ---- 17-19: the whole script, preflight to table, with stand-in tools -------------
si=$tmp/standin
mkdir -p "$si/bin" "$si/build/tests" "$si/nt/src" "$si/nt/build"
for t in nvidia-smi mpirun torchrun python; do ln -s "$here/tests/bench/gpu-standin.sh" "$si/bin/$t"; done
for t in sendrecv_perf alltoall_perf all_reduce_perf; do
  ln -s "$here/tests/bench/gpu-standin.sh" "$si/nt/build/$t"
done
ln -s "$here/tests/bench/gpu-standin.sh" "$si/build/tests/nccl-sendrecv"
ln -s "$here/tests/bench/gpu-standin.sh" "$si/build/railnet-kvbench"
: >"$si/plugin.so"
# OUT emptied: the stand-in runs must not write into a real run's $OUT/gpu-check
standin() {
  OUT='' PATH=$si/bin:$PATH MPIRUN=$si/bin/mpirun TORCHRUN=$si/bin/torchrun PYTHON=$si/bin/python \
    RN_BUILD=$si/build "$gc" --plugin "$si/plugin.so" --nccl-tests "$si/nt" --quick "$@"
}
standin >"$tmp/si.out" 2>&1
rc=$?
rows=$(grep -c "railnet ok, Socket ok" "$tmp/si.out")
if [ $rc -eq 0 ] && [ "$rows" -eq 11 ] && grep "all_reduce_perf 64 MiB" "$tmp/si.out" | grep -q " 4.00x " &&
  grep "torch KV 70B/TP8 12k tok grouped" "$tmp/si.out" | grep -q " 0.25x " &&
  grep -q "^  W4 small-stream p99 with bulk / alone (shared proxy thread): 1.50x" "$tmp/si.out" &&
  [ "$(grep -c '^  W[14] ' "$tmp/si.out")" -eq 2 ] &&
  grep -q "every railnet run passed on railnet" "$tmp/si.out"; then
  ok "stand-in run: 6 checks twice each, 11 table rows with railnet/Socket ratios, the kvbench goal rows, exit 0"
else
  notok "stand-in run (exit $rc, $rows rows ok)"
  sed 's/^/# /' "$tmp/si.out" | tail -30
fi
GPU_STANDIN_WRONG=1 standin >"$tmp/siw.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "railnet run: wrong transport" "$tmp/siw.out"; then
  ok "stand-in run where railnet's channels report Socket: wrong transport, exit 1"
else
  notok "stand-in run with the wrong transport (exit $rc)"
  sed 's/^/# /' "$tmp/siw.out" | tail -20
fi

GPU_STANDIN_KVFAIL=1 standin --only kvbench >"$tmp/sik.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "kvbench failed (exit 1" "$tmp/sik.out" && grep -q "WARN a comm failed" "$tmp/sik.out"; then
  ok "stand-in run where railnet-kvbench fails: its log's tail, exit 1"
else
  notok "stand-in run with a failing kvbench (exit $rc)"
  sed 's/^/# /' "$tmp/sik.out" | tail -20
fi

# ---- 20: the GPU run itself ---------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  n=$((n + 1))
  echo "ok $n # SKIP no GPU (nvidia-smi missing or sees none): scripts/gpu-check.sh runs by hand on a GPU machine"
elif ldd "${RN_BUILD:-build}/libnccl-net-railnet.so" 2>/dev/null | grep -q libasan; then
  n=$((n + 1))
  echo "ok $n # SKIP sanitizer build: NCCL cannot dlopen an ASan plugin"
else
  # a GPU is here: the shortest real run (nccl-sendrecv through the script)
  if OUT='' timeout $((300 * ${RN_TIMEOUT_SCALE:-1})) "$gc" --only nccl-sendrecv --quick >"$tmp/gpu.out" 2>&1; then
    ok "scripts/gpu-check.sh --only nccl-sendrecv on this GPU"
  else
    notok "scripts/gpu-check.sh --only nccl-sendrecv on this GPU"
    tail -20 "$tmp/gpu.out" | sed 's/^/# /'
  fi
fi
