#!/bin/sh
# railnet-topo: exit 0 and a stable JSON document on a good file; exit 2
# with a message naming the file (and line) on a missing or malformed one;
# the same variables as the plugin (RAILNET_* with their NCCL fallbacks,
# CUDA_VISIBLE_DEVICES as CUDA reads it, RAILNET_DEBUG).
B=${RN_BUILD:-build}
CLI=$B/railnet-topo
F=tests/topo/fixtures
# make test builds it: its absence is a broken build, never a skip
if [ ! -x "$CLI" ]; then echo "1..1"; echo "not ok 1 - $CLI not built (run make first)"; exit 1; fi
if ! command -v python3 >/dev/null 2>&1; then echo "1..0 # SKIP python3 absent (JSON checks)"; exit 0; fi
T=$(mktemp -d) || { echo "1..0 # SKIP no temp dir"; exit 0; }
trap 'rm -rf "$T"' EXIT
# Start from a clean environment for the variables under test.
unset RAILNET_NICS NCCL_IB_HCA RAILNET_TOPO_FILE NCCL_TOPO_FILE RAILNET_GDR_LEVEL \
  NCCL_NET_GDR_LEVEL NCCL_NET_GDR_C2C NCCL_PXN_DISABLE RAILNET_STANDBY CUDA_VISIBLE_DEVICES \
  RAILNET_DEBUG
n=0; fail=0
ok() { n=$((n+1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
# json FILE 'python expression over d' : true or false
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }

"$CLI" --topo "$F/dgx-h100-like.xml" >"$T/out" 2>&1; ok $? "table output exits 0"
grep -q "GPU 0000:1b:00.0 -> mlx5_0: PIX via switch 0000:17:00.0, GDR yes (PIX <= PXB)" "$T/out"
ok $? "table shows each decision with its reason"
grep -q "^GPU0	PIX	PHB" "$T/out"; ok $? "table starts with the nvidia-smi style GPU x NIC matrix, NCCL's names"
grep -q "^  NIC0: mlx5_0" "$T/out"; ok $? "table has a NIC legend"
grep -q "mlx5_1: storage NIC: farther than every GPU's own rails" "$T/out"
ok $? "unused NICs say why"

"$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/json" 2>&1; ok $? "--json exits 0"
json "$T/json" 'd["gpus"][0]["busid"] == "0000:1b:00.0" and d["gpus"][0]["numa"] == 0
  and d["gpus"][0]["nics"][0]["name"] == "mlx5_0" and d["gpus"][0]["nics"][0]["path"] == "PIX"
  and d["gpus"][0]["nics"][0]["gdr"] and d["gpus"][0]["paths"][0] == "PIX"'
ok $? "--json: each GPU with its NUMA node, its rails and its row of the matrix"
json "$T/json" '[v for v in d["vdevices"] if v["name"] == "mlx5_0" and v["nics"] == ["mlx5_0"]
  and v["speed_mbps"] == 400000 and v["rail"] == 0 and v["plane"] == 0
  and v["standby"]["nic"] == "mlx5_3" and v["nic_gdr"]]'
ok $? "--json: virtual devices carry rail, plane and standby"
json "$T/json" 'sorted(d["unused_nics"]) == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
  and all(u["reason"] for u in d["unused"])'
ok $? "--json: unused NICs with reasons"

# A PIX pair whose NIC has gdr=0: NCCL goes through the CPU, and so do the
# matrix, the plan line and the JSON; the PCI path is kept beside it.
"$CLI" --topo "$F/detour-no-gdr.xml" >"$T/od" 2>&1
grep -q "^GPU0	PHB	PXN" "$T/od" &&
  grep -q "GPU 0000:11:00.0 -> mlx5_0: PHB via CPU (NUMA 0) instead of PIX via switch 0000:10:00.0, GDR no (the NIC has gdr=0)" "$T/od"
ok $? "a pair without GPUDirect RDMA shows NCCL's PHB through the CPU, and its PCI path"
"$CLI" --topo "$F/detour-no-gdr.xml" --json >"$T/jd" 2>&1
json "$T/jd" 'd["gpus"][0]["paths"][0] == "PHB" and d["gpus"][0]["nics"][0]["name"] == "mlx5_0"
  and d["gpus"][0]["nics"][0]["path"] == "PHB" and d["gpus"][0]["nics"][0]["pci_path"] == "PIX"
  and not d["gpus"][0]["nics"][0]["gdr"]'
ok $? "--json: a rail's path is NCCL's, pci_path the PCI distance it was ranked by"

"$CLI" --topo "$F/dgx-h100-like.xml" --gpus 1 --nics '^mlx5_3' --gdr-level PHB --json >"$T/j2" 2>&1
ok $? "--gpus, --nics and --gdr-level are accepted"
json "$T/j2" 'len(d["gpus"]) == 1 and d["gpus"][0]["busid"] == "0000:43:00.0"
  and d["gpus"][0]["nics"][0]["name"] == "mlx5_0" and d["settings"]["gdr_level"] == "PHB"'
ok $? "--nics removes the GPU's own NIC; it takes the fastest free NIC of its CPU"

CUDA_VISIBLE_DEVICES=2 "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j3" 2>&1
json "$T/j3" '[g["busid"] for g in d["gpus"]] == ["0000:52:00.0"]'
ok $? "CUDA_VISIBLE_DEVICES selects the GPUs when --gpus is absent"
CUDA_VISIBLE_DEVICES= "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j4" 2>/dev/null
json "$T/j4" 'd["gpus"] == []'
ok $? "CUDA_VISIBLE_DEVICES empty: no GPU, as in CUDA"
CUDA_VISIBLE_DEVICES=3,9,1 "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j5" 2>"$T/e5"
json "$T/j5" '[g["index"] for g in d["gpus"]] == [3]' && grep -q '"9"' "$T/e5"
ok $? "CUDA_VISIBLE_DEVICES: an invalid entry ends the list, and says so"

RAILNET_NICS='^=mlx5_0' "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j6" 2>&1
json "$T/j6" '[u["reason"] for u in d["unused"] if u["name"] == "mlx5_0"] == ["filtered by RAILNET_NICS"]'
ok $? "RAILNET_NICS filters, and the unused NIC names the variable"
NCCL_IB_HCA='^=mlx5_0' "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j7" 2>&1
json "$T/j7" '[u["reason"] for u in d["unused"] if u["name"] == "mlx5_0"] == ["filtered by NCCL_IB_HCA"]'
ok $? "NCCL_IB_HCA is the fallback of RAILNET_NICS"

RAILNET_TOPO_FILE="$F/b200-like.xml" "$CLI" --json >"$T/j8" 2>&1
json "$T/j8" 'len(d["gpus"]) == 8 and d["gpus"][0]["busid"] == "0000:17:00.0"'
ok $? "RAILNET_TOPO_FILE is read when --topo is absent"
NCCL_TOPO_FILE="$F/b200-like.xml" "$CLI" --json >"$T/j9" 2>&1
json "$T/j9" 'len(d["gpus"]) == 8'
ok $? "NCCL_TOPO_FILE is the fallback of RAILNET_TOPO_FILE"
# With neither set, the file a GPU virtual machine's host publishes, as
# NCCL reads it (here under RAILNET_FSROOT, the root of every system read).
mkdir -p "$T/root/var/run/nvidia-topologyd"
cp "$F/b200-like.xml" "$T/root/var/run/nvidia-topologyd/virtualTopology.xml"
RAILNET_FSROOT="$T/root" "$CLI" --json >"$T/j9b" 2>&1
json "$T/j9b" 'len(d["gpus"]) == 8 and d["settings"]["topo_file_from"] == "nvidia-topologyd"'
ok $? "unset, /var/run/nvidia-topologyd/virtualTopology.xml is read, as NCCL does"
RAILNET_FSROOT="$T/root" NCCL_TOPO_FILE="$F/dgx-h100-like.xml" "$CLI" --json >"$T/j9c" 2>&1
json "$T/j9c" 'd["gpus"][0]["busid"] == "0000:1b:00.0"'
ok $? "NCCL_TOPO_FILE still wins over it"

NCCL_NET_GDR_LEVEL=PHB "$CLI" --topo "$F/hwloc-nps2.xml" --json >"$T/j10" 2>&1
json "$T/j10" 'd["settings"]["gdr_level"] == "PHB" and d["settings"]["gdr_level_from"] == "NCCL_NET_GDR_LEVEL"
  and d["gpus"][0]["nics"][0]["gdr"]'
ok $? "NCCL_NET_GDR_LEVEL (a name) decides GDR when RAILNET_GDR_LEVEL is unset"
NCCL_NET_GDR_LEVEL=3 RAILNET_GDR_LEVEL=pix "$CLI" --topo "$F/hwloc-nps2.xml" --json >"$T/j11" 2>&1
json "$T/j11" 'd["settings"]["gdr_level"] == "PIX" and d["settings"]["gdr_level_from"] == "RAILNET_GDR_LEVEL"'
ok $? "RAILNET_GDR_LEVEL takes names in any case and wins over NCCL_NET_GDR_LEVEL"
NCCL_NET_GDR_LEVEL=3 "$CLI" --topo "$F/hwloc-nps2.xml" --json >"$T/j12" 2>&1
json "$T/j12" 'd["settings"]["gdr_level"] == "PHB"'
ok $? "NCCL_NET_GDR_LEVEL=3 is NCCL's old number for PHB"
RAILNET_GDR_LEVEL=bogus "$CLI" --topo "$F/hwloc-nps2.xml" --json >"$T/j13" 2>"$T/e13"
grep -q "WARN.*RAILNET_GDR_LEVEL=bogus" "$T/e13" && json "$T/j13" 'd["settings"]["gdr_level"] == "PXB"'
ok $? "a bad RAILNET_GDR_LEVEL warns and falls back, as in the plugin"

RAILNET_STANDBY=0 "$CLI" --topo "$F/dgx-h100-like.xml" --json >"$T/j14" 2>&1
json "$T/j14" 'all(v["standby"]["nic"] is None and "RAILNET_STANDBY=0" in v["standby"]["reason"] for v in d["vdevices"])'
ok $? "RAILNET_STANDBY=0 drops the standby NICs, saying why"

RAILNET_DEBUG=1 "$CLI" --topo "$F/dgx-h100-like.xml" >/dev/null 2>"$T/e15"
grep -q "^railnet INFO NET/railnet : plan: GPU 0000:1b:00.0 -> mlx5_0: PIX" "$T/e15" &&
  grep -q "^railnet INFO NET/railnet : plan: device 0 mlx5_0" "$T/e15"
ok $? "RAILNET_DEBUG=1 prints the plugin's INFO lines"

"$CLI" --topo "$T/missing.xml" >"$T/e1" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "$T/missing.xml" "$T/e1"; ok $? "missing file: exit 2, message names it"

printf '<system>\n<cpu>\n<pci busid="0000:01:00.0">\n</system>\n' >"$T/bad.xml"
"$CLI" --topo "$T/bad.xml" >"$T/e2" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "$T/bad.xml:4:" "$T/e2"; ok $? "malformed XML: exit 2, message names file and line"
RAILNET_TOPO_FILE="$T/bad.xml" "$CLI" >"$T/e2b" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "$T/bad.xml:4:" "$T/e2b" && grep -q RAILNET_TOPO_FILE "$T/e2b"
ok $? "a malformed RAILNET_TOPO_FILE: exit 2 naming the file and the variable"
printf '<topology version="1.0"><object type="Machine" cpuset="0x1" nodeset="0x1"><object type="NUMANode" os_index="0"/></object></topology>\n' >"$T/badhw.xml"
"$CLI" --topo "$T/badhw.xml" >"$T/e2c" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "$T/badhw.xml:1: NUMANode without cpuset" "$T/e2c"
ok $? "hwloc XML that would crash libhwloc: exit 2 naming the problem"

"$CLI" --topo "$F/dgx-h100-like.xml" --gpus 42 >"$T/e3" 2>&1; ok $([ $? = 2 ]; echo $?) "bad --gpus: exit 2"
"$CLI" --gdr-level FOO >"$T/e4" 2>&1; ok $([ $? = 2 ]; echo $?) "bad --gdr-level: exit 2"
"$CLI" --topo "$F/dgx-h100-like.xml" --nics 'mlx5_0:x' >"$T/e4b" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "bad port" "$T/e4b"; ok $? "bad --nics: exit 2 naming the problem"
"$CLI" --topo "$F/two-hosts.xml" --host 5 >"$T/e4c" 2>&1; ok $([ $? = 2 ]; echo $?) "--host past the last host: exit 2"
"$CLI" --topo "$F/two-hosts.xml" >"$T/o4d" 2>&1
grep -q "^Host 1 (host_hash 0xbbbb):" "$T/o4d"; ok $? "a two-host file is shown host by host"

"$CLI" --topo "$F/no-nics.xml" >"$T/o5" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "no NICs in the model" "$T/o5"; ok $? "a file with no NICs is not an error; the plan says so"

"$CLI" >"$T/live" 2>&1; ok $? "no arguments: plans this machine"

echo "1..$n"
exit $fail
