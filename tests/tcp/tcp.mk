# TCP transport variants of the conformance suite.
TEST_SCRIPTS += tests/tcp/ipv6.sh tests/tcp/helpers.sh tests/tcp/small-flood.sh tests/tcp/small-chunks.sh
