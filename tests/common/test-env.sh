# shellcheck shell=sh
# The environment of every test run, sourced by tests/common/with-test-env.sh
# (make test, make valgrind) and by scripts/softroce/ib-suite.sh inside the
# Soft-RoCE VM, so both see the same settings.  RN_BUILD names the build
# under test; RN_VALGRIND=1 says the programs run under memcheck.
#
# RN_TIMEOUT_SCALE: the one factor every time bound in the tests is
# multiplied by: 1 plain, 2 for a gcov build (make coverage), 3 under
# ASan+UBSan, 10 under valgrind or ThreadSanitizer (an explicit value
# wins).  A bound only
# turns a hang into a failure; it never judges speed.
#
# Leak checking (ASan's LeakSanitizer, valgrind's memcheck) keeps
# libpciaccess resident.  With hwloc's PCI plugin installed
# (libhwloc-plugins, which libhwloc15 recommends), hwloc dlcloses the plugin
# after discovery; that unmaps libpciaccess while its pci.ids cache (about
# 600 kB, kept for the life of the process) is referenced only from that
# library's globals, so both checkers report it as leaked, from frames in
# an unmapped library that no suppression can name.  Preloaded, the library
# stays mapped and its cache reachable, as in any process that does not
# unload it; nothing of ours is hidden.  tests/lsan.supp names the library
# as well, for a release that drops its last pointer to the cache.
rn_env_build=${RN_BUILD:-build}
rn_env_root=$(pwd)
rn_env_leakcheck=0
if [ "${RN_VALGRIND:-0}" = 1 ]; then
  RN_TIMEOUT_SCALE=${RN_TIMEOUT_SCALE:-10}
  rn_env_leakcheck=1
elif ldd "$rn_env_build/libnccl-net-railnet.so" 2>/dev/null | grep -q libasan; then
  RN_TIMEOUT_SCALE=${RN_TIMEOUT_SCALE:-3}
  LSAN_OPTIONS="suppressions=$rn_env_root/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  # our programs link the ASan runtime first; the preload below comes before it
  ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export LSAN_OPTIONS ASAN_OPTIONS
  rn_env_leakcheck=1
elif ldd "$rn_env_build/libnccl-net-railnet.so" 2>/dev/null | grep -q libtsan; then
  RN_TIMEOUT_SCALE=${RN_TIMEOUT_SCALE:-10}
elif [ -n "$(find "$rn_env_build" -name '*.gcno' -print 2>/dev/null | head -1)" ]; then
  RN_TIMEOUT_SCALE=${RN_TIMEOUT_SCALE:-2}
fi
if [ $rn_env_leakcheck = 1 ]; then
  rn_env_lib=$(/sbin/ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libpciaccess\.so\.0 .*=> //p' | head -1)
  if [ -n "$rn_env_lib" ]; then
    LD_PRELOAD="$rn_env_lib${LD_PRELOAD:+ $LD_PRELOAD}"
    export LD_PRELOAD
  fi
fi
RN_TIMEOUT_SCALE=${RN_TIMEOUT_SCALE:-1}
export RN_TIMEOUT_SCALE
unset rn_env_build rn_env_root rn_env_leakcheck rn_env_lib
