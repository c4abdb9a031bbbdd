# shellcheck shell=bash
# perf/build_pair.sh — sourced by perf/results.sh and perf/regression.sh: builds the tree's
# Release binaries and an older commit's, the same way for both scripts.

# build_tree REPO BUILD LOG TARGET...: configures BUILD (Release) if needed and builds the
# targets; reports each target it could not build and fails if any failed.
build_tree() {
  local repo="$1" build="$2" log="$3" ok=0 t
  shift 3
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 ||
      { echo "cmake configure of $build failed: $log" >&2; return 1; }
  fi
  for t in "$@"; do
    cmake --build "$build" -j2 --target "$t" >>"$log" 2>&1 ||
      { echo "could not build $t in $build (see $log)" >&2; ok=1; }
  done
  return $ok
}

# build_baseline REPO COMMIT WORK LOG: weftrun and weft-perf of COMMIT, from a `git archive` in
# WORK/baseline-src built in WORK/baseline-build (both kept between runs while COMMIT is the
# same). Sets BASELINE_SHA and BASELINE_BIN.
build_baseline() {
  local repo="$1" commit="$2" work="$3" log="$4"
  local src="$work/baseline-src" build="$work/baseline-build"
  BASELINE_SHA=$(git -C "$repo" rev-parse --short "$commit") ||
    { echo "unknown commit $commit" >&2; return 2; }
  if [ "$(cat "$src/.baseline" 2>/dev/null)" != "$BASELINE_SHA" ]; then
    rm -rf "$src" "$build" && mkdir -p "$src"
    git -C "$repo" archive "$BASELINE_SHA" | tar -x -C "$src" && echo "$BASELINE_SHA" >"$src/.baseline"
  fi
  if [ "$(cat "$src/.baseline" 2>/dev/null)" != "$BASELINE_SHA" ] ||
     ! build_tree "$src" "$build" "$log" weftrun weft-perf; then
    echo "could not build baseline $commit (see $log)" >&2
    return 1
  fi
  # shellcheck disable=SC2034  # read by the scripts that source this file
  BASELINE_BIN="$build/bin"
}
