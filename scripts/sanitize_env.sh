# The environment the sanitizer runs of the test suite need; sourced, not executed:
#
#   source scripts/sanitize_env.sh asan|tsan
#   ctest --test-dir build-asan -R 'Faults\.' --output-on-failure
#   "${SANITIZE_RUN[@]}" ctest --test-dir build-tsan ...     # tsan: without ASLR (see below)
#
# scripts/sanitize.sh sources it before running the suite; sourcing it by hand re-runs a few
# tests exactly as the script does. Sets the sanitizer options, the suppression files for
# third-party libraries (scripts/sanitizers/*.supp), WEFTTEST_SLOWDOWN and SANITIZE_RUN (the
# command prefix to run under). Every process the tests start (workers, weftrun, python)
# inherits these.
_sanitize_kind=${1:-}
case "$_sanitize_kind" in
  asan|tsan) ;;
  *) echo "usage: source scripts/sanitize_env.sh asan|tsan" >&2; return 2 ;;
esac
_sanitize_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/sanitizers

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=4}
if [ -e "$_sanitize_dir/lsan.supp" ]; then
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$_sanitize_dir/lsan.supp"
fi
if [ -e "$_sanitize_dir/tsan.supp" ]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$_sanitize_dir/tsan.supp"
fi

# Tests that bound a duration (a timeout must fire within X, a dead peer must be named within
# Y) scale their bound by this factor (tests/test_util.h, SlowdownFactor): sanitized code runs
# 2-5x (ASan) and 5-15x (TSan) slower. The normal suite leaves it unset (factor 1). Not
# WEFT_*: weft warns on stderr about every WEFT_* variable it does not know.
if [ "$_sanitize_kind" = asan ]; then
  export WEFTTEST_SLOWDOWN=${WEFTTEST_SLOWDOWN:-3}
else
  export WEFTTEST_SLOWDOWN=${WEFTTEST_SLOWDOWN:-8}
fi

# hwloc's pci plugin (libpciaccess) allocates during discovery and is dlclose'd before exit, so
# LeakSanitizer reports 1016 bytes in 9 allocations from an "<unknown module>" in every process
# that discovers the topology (third-party; nothing of weft's). Preloading libpciaccess keeps it
# mapped, so what it still holds is reachable and not reported.
if [ "$_sanitize_kind" = asan ]; then
  for _sanitize_lib in /usr/lib/*/libpciaccess.so.0 /usr/lib64/libpciaccess.so.0; do
    if [ -e "$_sanitize_lib" ]; then
      case ":${LD_PRELOAD:-}:" in
        *":$_sanitize_lib:"*) ;;
        *) export LD_PRELOAD="$_sanitize_lib${LD_PRELOAD:+:$LD_PRELOAD}" ;;
      esac
      case "$ASAN_OPTIONS" in
        *verify_asan_link_order*) ;;
        *) export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" ;;
      esac
      break
    fi
  done
fi

# UCX's libucm (libweft links UCX) hooks mmap/madvise; glibc madvises a thread's stack as the
# thread exits, after TSan has torn down the thread's state, and libucm's hook then takes a
# pthread rwlock that TSan intercepts: every test that ends a thread dies with SIGSEGV in
# __tsan::MutexPreReadLock (third-party; no weft frame). Without the hooks UCX works as before.
if [ "$_sanitize_kind" = tsan ]; then
  export UCX_MEM_MMAP_HOOK_MODE=${UCX_MEM_MMAP_HOOK_MODE:-none}
fi

# TSan maps its shadow at fixed addresses; with the kernel's full ASLR entropy some mappings
# collide ("unexpected memory mapping"): run without address randomization.
SANITIZE_RUN=()
if [ "$_sanitize_kind" = tsan ] && command -v setarch >/dev/null; then
  SANITIZE_RUN=(setarch "$(uname -m)" -R)
fi
unset _sanitize_kind _sanitize_dir _sanitize_lib
