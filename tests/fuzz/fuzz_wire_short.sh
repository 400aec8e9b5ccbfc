#!/bin/sh
# Bounded libFuzzer run over the TCP wire and the rendezvous hello (the
# plugin's own code against a hostile connector, sender or receiver) plus
# its regression inputs (see tests/fuzz/fuzz_common.sh).
exec sh tests/fuzz/fuzz_common.sh wire
