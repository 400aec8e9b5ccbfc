#!/bin/sh
# railnet-topo: exit 0 and a stable JSON document on a good file; exit 2
# with a message naming the file (and line) on a missing or malformed one.
B=${RN_BUILD:-build}
CLI=$B/railnet-topo
F=tests/topo/fixtures
if [ ! -x "$CLI" ]; then echo "1..0 # SKIP $CLI not built"; exit 0; fi
T=$(mktemp -d) || { echo "1..0 # SKIP no temp dir"; exit 0; }
trap 'rm -rf "$T"' EXIT
n=0; fail=0
ok() { n=$((n+1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }

"$CLI" --topo "$F/dgx-h100-like.xml" >"$T/out" 2>&1; ok $? "table output exits 0"
grep -q "GPU 0000:1b:00.0 -> mlx5_0: PIX via switch 0000:17:00.0, GDR yes (PIX <= PXB)" "$T/out"
ok $? "table shows each decision with its reason"
grep -q "^GPU0  	PIX" "$T/out"; ok $? "table starts with the nvidia-smi style GPU x NIC matrix"

"$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/json" 2>&1; ok $? "--json exits 0"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$T/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = d["gpus"][0]
assert g["busid"] == "0000:1b:00.0" and g["numa"] == 0, g
assert g["nics"][0] == {**g["nics"][0], "name": "mlx5_0", "busid": "0000:18:00.0", "path": "PIX", "gdr": True}
assert {"name": "mlx5_0", "nics": ["mlx5_0"], "speed_mbps": 400000, "gdr": True} in d["vdevices"]
assert sorted(d["unused_nics"]) == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
PY
  ok $? "--json document has gpus/nics/vdevices/unused_nics as specified"
else
  echo "ok $((n=n+1)) - # SKIP python3 absent"
fi

"$CLI" --topo "$F/dgx-h100-like.xml" --gpus 1 --nics '^mlx5_3' --gdr-level PHB --json >"$T/j2" 2>&1
ok $? "--gpus, --nics and --gdr-level are accepted"
grep -q '"busid":"0000:43:00.0","numa":0,"cpu":0,"gdr":true,"nics":\[{"name":"mlx5_1"' "$T/j2"
ok $? "--nics removes the GPU's own NIC; it falls back to its CPU's free NIC"

CUDA_VISIBLE_DEVICES=2 "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j3" 2>&1
[ "$(grep -o '"index":' "$T/j3" | wc -l)" = 1 ] && grep -q '"busid":"0000:52:00.0"' "$T/j3"
ok $? "CUDA_VISIBLE_DEVICES selects the GPUs when --gpus is absent"

"$CLI" --topo "$T/missing.xml" >"$T/e1" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "$T/missing.xml" "$T/e1"; ok $? "missing file: exit 2, message names it"

printf '<system>\n<cpu>\n<pci busid="0000:01:00.0">\n</system>\n' >"$T/bad.xml"
"$CLI" --topo "$T/bad.xml" >"$T/e2" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "$T/bad.xml:4:" "$T/e2"; ok $? "malformed XML: exit 2, message names file and line"

"$CLI" --topo "$F/dgx-h100-like.xml" --gpus 42 >"$T/e3" 2>&1; ok $([ $? = 2 ]; echo $?) "bad --gpus: exit 2"
"$CLI" --gdr-level FOO >"$T/e4" 2>&1; ok $([ $? = 2 ]; echo $?) "bad --gdr-level: exit 2"

"$CLI" --topo "$F/no-nics.xml" >"$T/o5" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "no NICs in the model" "$T/o5"; ok $? "a file with no NICs is not an error; the plan says so"

"$CLI" >"$T/live" 2>&1; ok $? "no arguments: plans this machine"

echo "1..$n"
exit $fail
