#!/usr/bin/env bash
# Runs the whole test suite under a sanitizer, in its own build directory.
#
#   scripts/sanitize.sh asan|tsan [--no-build] [ctest arguments...]
#     asan   -fsanitize=address,undefined -fno-sanitize-recover=all   (build-asan)
#     tsan   -fsanitize=thread                                         (build-tsan)
#   --no-build  runs the tests of the existing build directory as they are.
#   ctest arguments select a part of the suite: -L <label> (every GoogleTest executable is a
#   label of its own, e.g. -L fault_matrix_test; also multiprocess, python, netns), -LE, -R.
#   BUILD_DIR  overrides the build directory; JOBS the build parallelism (default nproc);
#   TEST_JOBS  ctest parallelism (default 2); TEST_TIMEOUT ctest's limit per test in seconds
#   (default 1800: the normal 300 s is too short for the longest proofs under a sanitizer);
#   CMAKE_ARGS extra configure flags; BUILD_TARGETS (space-separated) builds only those targets
#   instead of the whole tree (then run only the tests they provide, with -L/-R).
#   To re-run single tests by hand with the same environment:
#     source scripts/sanitize_env.sh asan && ctest --test-dir build-asan -R <regex>
#
# Nightly, not CI: on the 2-core CI machine the sanitizer build of the whole tree plus a suite
# that runs 2-10x slower does not fit next to the normal suite in the 30-minute budget (see
# the figures in fuzz/README.md). Run it nightly (or before a release) on a clean checkout:
#   ./scripts/sanitize.sh asan && ./scripts/sanitize.sh tsan
# A finding aborts the test that hit it; ctest prints its output, whose sanitizer report
# names the file:line. Leaks are reported (detect_leaks=1) at each process's exit.
# Prints the build and suite seconds. Exit status = ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
case "$kind" in
  asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" ;;
  tsan) flags="-fsanitize=thread -fno-omit-frame-pointer" ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [--no-build] [ctest arguments...]" >&2; exit 2 ;;
esac
shift
build=1
if [ "${1:-}" = --no-build ]; then build=0; shift; fi
BUILD_DIR=${BUILD_DIR:-build-$kind}
JOBS=${JOBS:-$(nproc)}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# -O1: sanitizer reports keep usable stacks; CUDA is left out (sanitizers do not see device
# code). The install test builds an outside consumer without the sanitizer runtime: it is
# excluded below, it checks packaging, not memory or thread safety; so are the fuzz tests
# (label fuzz: scripts/fuzz.sh already builds them with ASan+UBSan, with clang), and the
# PyTorch backend's tests (label python): its extension in .venv links the normal build's
# libweft, so under this script it would test unsanitized code.
build_start=$(date +%s)
if [ "$build" = 1 ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_CUDA=OFF \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DWEFT_TEST_TIMEOUT="${TEST_TIMEOUT:-1800}" \
    "${launcher[@]}" ${CMAKE_ARGS:-} >/dev/null
  if [ -n "${BUILD_TARGETS:-}" ]; then
    # shellcheck disable=SC2086  # a list of target names
    cmake --build "$BUILD_DIR" -j "$JOBS" --target ${BUILD_TARGETS}
  else
    cmake --build "$BUILD_DIR" -j "$JOBS"
  fi
fi
echo "sanitize.sh $kind: build $(( $(date +%s) - build_start )) s"

# shellcheck source=scripts/sanitize_env.sh
source scripts/sanitize_env.sh "$kind"
suite_start=$(date +%s)
rc=0
"${SANITIZE_RUN[@]}" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${TEST_JOBS:-2}" --timeout 1200 \
  -E '^install_pkgconfig_and_cmake_package$' -LE 'fuzz|python' "$@" || rc=$?
echo "sanitize.sh $kind: suite $(( $(date +%s) - suite_start )) s, ctest exit $rc"
exit "$rc"
