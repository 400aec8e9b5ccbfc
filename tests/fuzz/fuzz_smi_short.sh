#!/bin/sh
# Bounded libFuzzer run over the smi reader plus its regression inputs
# (see tests/fuzz/fuzz_common.sh).
exec sh tests/fuzz/fuzz_common.sh smi
