#!/usr/bin/env bash
# Builds weft's libFuzzer targets (fuzz/, clang + ASan + UBSan) and runs each one, bounded.
#
#   scripts/fuzz.sh [--seconds S | --runs N] [--build-dir DIR] [--jobs J] [--corpus-dir DIR] [TARGET...]
#     --seconds S    run each target for S seconds (default 10)
#     --runs N       run each target for N inputs instead (e.g. 10000000 for the long campaign)
#     --build-dir    where the clang build goes (default build-fuzz)
#     --jobs J       build parallelism (default: nproc)
#     --corpus-dir   working corpora (default BUILD/corpus): seeded from fuzz/corpus/<target>,
#                    grown by each run; the committed seeds are never modified
#     --build-only   configure and build, run nothing;  --no-build: run what is built
#     TARGET         e.g. tcp_frame (default: every fuzz/targets/*_fuzz.cc)
#   FUZZ_ARGS        extra libFuzzer flags for every run (e.g. "-jobs=2 -workers=2")
#
# Each target first replays its committed reproducers (fuzz/crashes/<target>-*: past findings,
# now fixed), then fuzzes. Prints one line per target (inputs, seconds, inputs/s, crashes)
# and a summary. A crash or sanitizer report leaves the reproducer in
# BUILD/artifacts/<target>-crash-* and its log in BUILD/logs/<target>.log; replay it with:
# BUILD/bin/<target>_fuzz REPRODUCER.
# Exit: 0 clean, 1 a target crashed (or the build failed), 77 clang/libFuzzer missing (skip).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=10
RUNS=""
BUILD=build-fuzz
JOBS=$(nproc)
CORPUS_DIR=""
TARGETS=()
BUILD_ONLY=0
NO_BUILD=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --corpus-dir) CORPUS_DIR=$2; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --no-build) NO_BUILD=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
CORPUS_DIR=${CORPUS_DIR:-$BUILD/corpus}

CLANG=$(command -v clang++ || command -v clang++-14 || true)
CLANG_C=$(command -v clang || command -v clang-14 || true)
if [ -z "$CLANG" ] || [ -z "$CLANG_C" ] || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: SKIP: clang and libFuzzer (Debian: clang libclang-rt-14-dev) are not installed" >&2
  exit 77
fi

if [ "$NO_BUILD" = 0 ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    CC=$CLANG_C CXX=$CLANG cmake -S fuzz -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  fi
  build_start=$(date +%s)
  if ! cmake --build "$BUILD" -j "$JOBS" --target fuzzers > "$BUILD/build.log" 2>&1; then
    tail -40 "$BUILD/build.log" >&2
    echo "fuzz.sh: the fuzz build failed (log: $BUILD/build.log)" >&2
    exit 1
  fi
  echo "fuzz.sh: build $(( $(date +%s) - build_start )) s"
fi
[ "$BUILD_ONLY" = 1 ] && exit 0

if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in fuzz/targets/*_fuzz.cc; do TARGETS+=("$(basename "$f" _fuzz.cc)"); done
fi
mkdir -p "$BUILD/artifacts" "$BUILD/logs"
failed=()
printf '%-16s %12s %8s %10s %s\n' target inputs seconds inputs/s result
for t in "${TARGETS[@]}"; do
  bin="$BUILD/bin/${t}_fuzz"
  [ -x "$bin" ] || { echo "fuzz.sh: no target $t" >&2; failed+=("$t"); continue; }
  corpus="$CORPUS_DIR/$t"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$t" ] && cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  if [ -n "$RUNS" ]; then limit=(-runs="$RUNS"); else limit=(-max_total_time="$SECONDS_EACH"); fi
  log="$BUILD/logs/$t.log"
  # The committed reproducers of this target's past findings (fuzz/crashes/<target>-*) run
  # first: each must now pass, so a fixed finding that comes back fails at once.
  repro=()
  for f in fuzz/crashes/"$t"-*; do [ -f "$f" ] && repro+=("$f"); done
  if [ ${#repro[@]} -gt 0 ]; then
    if ! ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1} \
         UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
         "$bin" -timeout=25 -rss_limit_mb=2048 "${repro[@]}" > "$BUILD/logs/$t.replay.log" 2>&1; then
      printf '%-16s %12s %8s %10s %s\n' "$t" - - - "REPRODUCER FAILS (log $BUILD/logs/$t.replay.log)"
      failed+=("$t")
      continue
    fi
  fi
  start=$(date +%s.%N)
  rc=0
  # -timeout: one input taking 25 s is a hang; -rss_limit_mb: a parser allocating 2 GiB is a
  # finding too. halt_on_error/abort_on_error: the first sanitizer report ends the run.
  # allocator_may_return_null: a nothrow new of an impossible size returns NULL, as it does
  # without ASan, so code that checks for it (tcp OnHeader) is judged on that check; a
  # throwing new of such a size is still reported.
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$bin" "$corpus" "${limit[@]}" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/artifacts/$t-" ${FUZZ_ARGS:-} > "$log" 2>&1 || rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  inputs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  inputs=${inputs:-$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)}
  inputs=${inputs:-0}
  rate=$(echo "$inputs / $secs" | bc)
  if [ "$rc" -eq 0 ]; then result=clean; else
    result="CRASH (rc $rc; log $log; reproducer $(ls -t "$BUILD"/artifacts/"$t"-* 2>/dev/null | head -1))"
    failed+=("$t")
  fi
  printf '%-16s %12s %8.1f %10s %s\n' "$t" "$inputs" "$secs" "$rate" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  for t in "${failed[@]}"; do
    [ -f "$BUILD/logs/$t.log" ] && grep -m1 -A25 -E 'ERROR: |runtime error|fuzz invariant|deadly signal' "$BUILD/logs/$t.log" >&2 || true
  done
  exit 1
fi
echo "fuzz.sh: all ${#TARGETS[@]} targets clean"
