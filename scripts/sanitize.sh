#!/usr/bin/env bash
# Runs the whole test suite under a sanitizer, in its own build directory.
#
#   scripts/sanitize.sh asan|tsan [ctest arguments...]
#     asan   -fsanitize=address,undefined -fno-sanitize-recover=all   (build-asan)
#     tsan   -fsanitize=thread                                         (build-tsan)
#   BUILD_DIR  overrides the build directory; JOBS the build parallelism (default nproc);
#   TEST_JOBS  ctest parallelism (default 2); CMAKE_ARGS extra configure flags.
#
# Nightly, not CI: on the 2-core CI machine the sanitizer build of the whole tree plus a suite
# that runs 2-10x slower does not fit next to the normal suite in the 30-minute budget (see
# the figures in fuzz/README.md). Run it nightly (or before a release) on a clean checkout:
#   ./scripts/sanitize.sh asan && ./scripts/sanitize.sh tsan
# A finding aborts the test that hit it; ctest prints its output, whose sanitizer report
# names the file:line. Leaks are reported (detect_leaks=1) at each process's exit.
# Exit status = ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
case "$kind" in
  asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" ;;
  tsan) flags="-fsanitize=thread -fno-omit-frame-pointer" ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [ctest arguments...]" >&2; exit 2 ;;
esac
shift
BUILD_DIR=${BUILD_DIR:-build-$kind}
JOBS=${JOBS:-$(nproc)}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# -O1: sanitizer reports keep usable stacks; CUDA is left out (sanitizers do not see device
# code). The install test builds an outside consumer without the sanitizer runtime: it is
# excluded below, it checks packaging, not memory or thread safety; so are the fuzz tests
# (label fuzz: scripts/fuzz.sh already builds them with ASan+UBSan, with clang).
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_CUDA=OFF \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
  "${launcher[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

# Every process the tests start (workers, weftrun, python) inherits these.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=4}
# hwloc's pci plugin (libpciaccess) allocates during discovery and is dlclose'd before exit, so
# LeakSanitizer reports 1016 bytes in 9 allocations from an "<unknown module>" in every process
# that discovers the topology (third-party; nothing of weft's). Preloading libpciaccess keeps it
# mapped, so what it still holds is reachable and not reported.
if [ "$kind" = asan ]; then
  for lib in /usr/lib/*/libpciaccess.so.0 /usr/lib64/libpciaccess.so.0; do
    if [ -e "$lib" ]; then
      export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
      export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
      break
    fi
  done
fi
# TSan maps its shadow at fixed addresses; with the kernel's full ASLR entropy some mappings
# collide ("unexpected memory mapping"): run without address randomization.
run=()
if [ "$kind" = tsan ] && command -v setarch >/dev/null; then run=(setarch "$(uname -m)" -R); fi
"${run[@]}" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${TEST_JOBS:-2}" --timeout 1200 \
  -E '^install_pkgconfig_and_cmake_package$' -LE fuzz "$@"
