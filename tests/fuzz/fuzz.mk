# Fuzzing: the NCCL-XML, hwloc-XML and nvidia-smi readers and the
# filter/GPU-list syntaxes (owned by topo/), and the TCP wire and hello
# (owned by plugin/tcp/; fuzz_wire.c links the plugin's sources).
# tests/fuzz/fuzz_common.sh builds each libFuzzer target with clang itself
# and skips when clang lacks libFuzzer, so `make` never needs clang.
TEST_SCRIPTS += tests/fuzz/fuzz_ncclxml_short.sh tests/fuzz/fuzz_hwloc_short.sh \
                tests/fuzz/fuzz_smi_short.sh tests/fuzz/fuzz_filter_short.sh \
                tests/fuzz/fuzz_wire_short.sh
