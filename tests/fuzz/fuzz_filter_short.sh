#!/bin/sh
# Bounded libFuzzer run over the filter reader plus its regression inputs
# (see tests/fuzz/fuzz_common.sh).
exec sh tests/fuzz/fuzz_common.sh filter
