#!/bin/sh
# Bounded libFuzzer run over the hwloc reader plus its regression inputs
# (see tests/fuzz/fuzz_common.sh).
exec sh tests/fuzz/fuzz_common.sh hwloc
