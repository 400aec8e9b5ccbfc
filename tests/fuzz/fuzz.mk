# Fuzzing the NCCL-XML reader (owned by topo/).  The script builds the
# libFuzzer target with clang itself and skips when clang lacks libFuzzer,
# so `make` never needs clang.
TEST_SCRIPTS += tests/fuzz/fuzz_ncclxml_short.sh
