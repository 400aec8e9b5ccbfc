# Shared helpers of the plugin-level test programs (tests/common/).
# Listed by path in each program's rule: tests/*/*.mk are included in
# sorted order, so a variable set here is not yet set in tests/bench/.
RN_TEST_COMMON_SRCS := tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c
