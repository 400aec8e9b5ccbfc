#!/bin/sh
# TAP: railnet-kvbench runs every workload (W1-W4) in miniature, both
# sides forked and as two separately started processes, with every byte of
# every message verified.  It checks that the program works and the data
# arrives; the figures it prints never decide a result.
build=${RN_BUILD:-build}
bin=$build/railnet-kvbench
export RN_BUILD="$build"
: "${RAILNET_SOCKET_IFNAME:=lo}"
export RAILNET_SOCKET_IFNAME

# make test builds it: its absence is a broken build, never a skip
if [ ! -x "$bin" ]; then
  echo "1..1"
  echo "not ok 1 - $bin not built (run make first)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvbench-smoke.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "1..9"

# 1: the model's NCCL rules and the plain-TCP anchor on their own
if "$bin" --self-test >"$tmp/self.txt" 2>&1; then
  echo "ok 1 - --self-test: NCCL's op split, depth, gates and the TCP anchor"
else
  echo "not ok 1 - --self-test"
  sed 's/^/# /' "$tmp/self.txt" >&2
fi

# 2-4: every workload, forked on loopback, verified, with a JSON document
timeout $((240 * ${RN_TIMEOUT_SCALE:-1})) "$bin" --smoke --verify --json "$tmp/kv.json" >"$tmp/out.txt" 2>"$tmp/err.txt"
rc=$?
if [ $rc -eq 0 ] && grep -q "every byte arrived intact" "$tmp/out.txt"; then
  echo "ok 2 - --smoke: W1-W4 through railnet and plain TCP, every byte verified"
else
  echo "not ok 2 - --smoke: W1-W4 through railnet and plain TCP, every byte verified (exit $rc)"
  sed 's/^/# /' "$tmp/out.txt" "$tmp/err.txt" | tail -40 >&2
fi
missing=
for t in "# W1 " "# W2 " "# W3 " "# W4 " "# goals"; do
  grep -q "^$t" "$tmp/out.txt" || missing="$missing '$t'"
done
if [ -z "$missing" ]; then
  echo "ok 3 - one table per workload and a goals block"
else
  echo "not ok 3 - one table per workload and a goals block (missing:$missing)"
fi
rows=$(grep -c '"workload": "W' "$tmp/kv.json" 2>/dev/null)
bad=$(grep -c '"ok": false' "$tmp/kv.json" 2>/dev/null)
if [ "${rows:-0}" -ge 12 ] && [ "${bad:-1}" -eq 0 ] && grep -q '"w4"' "$tmp/kv.json" &&
  { ! command -v python3 >/dev/null 2>&1 || python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/kv.json"; }; then
  echo "ok 4 - --json: $rows rows and W4, all ok, well-formed"
else
  echo "not ok 4 - --json: rows ${rows:-0}, failed ${bad:-?}"
fi

# 5: grouped receives were used (4 -> 1 over shared comms, maxRecvs > 1)
if grep -A2 '"label": "4->1' "$tmp/kv.json" | grep '"railnet"' | grep -q '"grouped_irecvs": [1-9]'; then
  echo "ok 5 - 4 -> 1 fan-in posts grouped receives (irecv n > 1, one tag per sender)"
else
  echo "not ok 5 - 4 -> 1 fan-in posts grouped receives"
fi

# 6: the two sides started separately, joined by --listen / --connect
"$bin" --smoke --workloads w1,w4 --models 70b --listen 127.0.0.1:0 >"$tmp/l.out" 2>"$tmp/l.err" &
lpid=$!
port=
i=0
while [ $i -lt 100 ] && [ -z "$port" ]; do
  port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$tmp/l.err")
  [ -n "$port" ] || sleep 0.1
  i=$((i + 1))
done
if [ -n "$port" ]; then
  timeout $((120 * ${RN_TIMEOUT_SCALE:-1})) "$bin" --smoke --workloads w1,w4 --models 70b --connect "127.0.0.1:$port" \
    >"$tmp/c.out" 2>"$tmp/c.err"
  crc=$?
else
  crc=99
fi
wait $lpid
lrc=$?
if [ "$crc" -eq 0 ] && [ "$lrc" -eq 0 ] && grep -q "every byte arrived intact" "$tmp/l.out"; then
  echo "ok 6 - --listen / --connect: receiver and sender as separate processes (port $port)"
else
  echo "not ok 6 - --listen / --connect (listener exit $lrc, connector exit $crc)"
  sed 's/^/# /' "$tmp/l.out" "$tmp/l.err" "$tmp/c.out" "$tmp/c.err" | tail -40 >&2
fi

# 7: the oldest ABI NCCL still binds (no optional-completion marker, int sizes)
if timeout $((120 * ${RN_TIMEOUT_SCALE:-1})) "$bin" --smoke --workloads w1,w2 --models 70b --modes grouped --api v8 \
  >"$tmp/v8.out" 2>&1 && grep -q "every byte arrived intact" "$tmp/v8.out"; then
  echo "ok 7 - --api v8: W1 and W2 verified"
else
  echo "not ok 7 - --api v8: W1 and W2 verified"
  tail -20 "$tmp/v8.out" | sed 's/^/# /' >&2
fi

# 8: --plot without gnuplot fails the plot step only (exit 3), tables printed
to=$(command -v timeout)
PATH=/nonexistent "$to" 120 "$bin" --smoke --workloads w2 --no-anchor --plot "$tmp/p.png" \
  >"$tmp/np.out" 2>"$tmp/np.err"
prc=$?
if [ $prc -eq 3 ] && grep -q "gnuplot" "$tmp/np.err" && grep -q "^# W2 " "$tmp/np.out"; then
  echo "ok 8 - --plot without gnuplot: says so, exits 3, the tables are still printed"
else
  echo "not ok 8 - --plot without gnuplot (exit $prc)"
  sed 's/^/# /' "$tmp/np.err" | tail -10 >&2
fi

# 9: --plot with gnuplot draws the picture
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "ok 9 # SKIP gnuplot not installed (Debian: gnuplot-nox)"
elif timeout $((120 * ${RN_TIMEOUT_SCALE:-1})) "$bin" --smoke --workloads w1,w2,w4 --models 70b --plot "$tmp/kv.png" \
  >"$tmp/pl.out" 2>"$tmp/pl.err" && [ -s "$tmp/kv.png" ]; then
  echo "ok 9 - --plot: $(wc -c <"$tmp/kv.png") byte PNG with the anchors"
else
  echo "not ok 9 - --plot with gnuplot"
  sed 's/^/# /' "$tmp/pl.err" | tail -10 >&2
fi
