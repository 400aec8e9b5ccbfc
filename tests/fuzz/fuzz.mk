# Fuzzing (owned by topo/): the NCCL-XML, hwloc-XML and nvidia-smi readers
# and the filter/GPU-list syntaxes.  tests/fuzz/fuzz_common.sh builds each
# libFuzzer target with clang itself and skips when clang lacks libFuzzer,
# so `make` never needs clang.
TEST_SCRIPTS += tests/fuzz/fuzz_ncclxml_short.sh tests/fuzz/fuzz_hwloc_short.sh \
                tests/fuzz/fuzz_smi_short.sh tests/fuzz/fuzz_filter_short.sh
