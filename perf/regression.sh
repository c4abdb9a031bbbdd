#!/bin/bash
# perf/regression.sh — the "no regression" goal (issue 10) measured so that it can decide 5%:
# the tree's weft-perf against an older commit's, per table, alternating the two builds round by
# round (new, old, old, new, new, old, ...) so that both see the same drift of the machine's
# load, and comparing per size the median over the rounds. One sweep per build and table
# (perf/results.sh --baseline) moved a table by up to 2x between runs of the same builds; the
# median of R interleaved rounds does not.
#
#   perf/regression.sh [--baseline COMMIT] [--build DIR] [--work DIR] [--rounds R]
#                      [--only REGEX] [--no-netns] [--budget SEC] [--new-env VAR=VALUE]...
#
# --baseline COMMIT: the old build (default ceded60, the commit before this wave), built once in
#   WORK/baseline-build as perf/results.sh builds it. --build DIR: the tree's Release build
#   (default /tmp/weft-results-build, built if missing). --rounds R: rounds per table (default
#   5). --only REGEX: tables whose name matches (e.g. 'allreduce-4|broadcast'). --budget SEC:
#   weft-perf --time-budget per size (default 0.1). --new-env VAR=VALUE: set for the tree's
#   runs only (e.g. WEFT_YIELD_US=1000 to try a setting against the baseline); repeatable.
# Tables: local-{allreduce,allgather,reducescatter,alltoall,broadcast}-{2,4}, tcp-allreduce-2 and,
# as root, netns-allreduce-2x{2,4} (2 Gbit/s links, the topology file that results.sh uses).
# Output: WORK/regression/regression.md (per table: per-size medians, ratio new/old, the spread
# of the per-round ratios, the geometric mean), also printed. Runtime ~15 min with netns.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=/tmp/weft-results-build
WORK=/tmp/weft-results
BASELINE=ceded60
ROUNDS=5
ONLY=.
NETNS=1
BUDGET=0.1
NEW_ENV=()
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) BASELINE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --no-netns) NETNS=0; shift ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --new-env) NEW_ENV+=("$2"); shift 2 ;;
    *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "regression.sh: --rounds must be a positive integer, got '$ROUNDS'" >&2; exit 2 ;; esac
OUT="$WORK/regression"
mkdir -p "$OUT" && rm -f "$OUT"/*.json "$OUT"/*.err
START=$(date +%s)
log() { echo "[regression $(( $(date +%s) - START ))s] $*" >&2; }

# ---- the two builds (the same build steps as perf/results.sh) ----
# shellcheck source=perf/build_pair.sh
source "$REPO/perf/build_pair.sh"
build_tree "$REPO" "$BUILD" "$OUT/build.log" weftrun weft-perf || exit 1
build_baseline "$REPO" "$BASELINE" "$WORK" "$OUT/build.log" || exit 1
NEW_BIN="$BUILD/bin" OLD_BIN="$BASELINE_BIN"

ITERS="-n 200 -w 3 -c 0 --time-budget $BUDGET"
TABLES=()
for n in 2 4; do
  for c in allreduce allgather reducescatter alltoall broadcast; do TABLES+=("local-$c-$n"); done
done
TABLES+=(tcp-allreduce-2)
[ "$NETNS" = 1 ] && [ "$(id -u)" = 0 ] && TABLES+=(netns-allreduce-2x2 netns-allreduce-2x4)

# sweep TABLE BIN_DIR JSON [VAR=VALUE...]: one weft-perf sweep of TABLE's sizes with the
# binaries in BIN_DIR, with the given environment.
sweep() {
  local table="$1" bin="$2" json="$3" coll n sizes
  shift 3
  local -a env=(env "$@")
  coll=$(echo "$table" | cut -d- -f2)
  n=$(echo "$table" | cut -d- -f3)
  if [ "$coll" = allreduce ]; then sizes="-b 8 -e 64M -f 2"; else sizes="-b 1K -e 16M -f 8"; fi
  local args="-C $coll $sizes $ITERS --json $json"
  # shellcheck disable=SC2086
  case "$table" in
    local-*) "${env[@]}" timeout -k 5 240 "$bin/weftrun" -n "$n" --no-prefix "$bin/weft-perf" $args ;;
    tcp-*) "${env[@]}" WEFT_SHM_DISABLE=1 timeout -k 5 240 "$bin/weftrun" -n "$n" --no-prefix "$bin/weft-perf" $args ;;
    netns-*)
      local r=${n#2x}
      "${env[@]}" WEFT_TOPO_FILE="preset:netns:2x$r@2" bash "$REPO/perf/netns/run.sh" --hosts 2 \
        --ranks-per-host "$r" --rate 2gbit --timeout 240 -- "$bin/weft-perf" $args ;;
  esac >/dev/null 2>>"$OUT/$table.err"
}

for table in "${TABLES[@]}"; do
  [[ "$table" =~ $ONLY ]] || continue
  log "$table: $ROUNDS rounds"
  for ((r = 1; r <= ROUNDS; r++)); do
    # ABBA order: the build that ran second in one round runs first in the next.
    if (( r % 2 )); then order="new old"; else order="old new"; fi
    for b in $order; do
      if [ "$b" = new ]; then bin=$NEW_BIN envs=("${NEW_ENV[@]}"); else bin=$OLD_BIN envs=(); fi
      sweep "$table" "$bin" "$OUT/$table-$b-$r.json" "${envs[@]}" || log "$table $b round $r failed (see $OUT/$table.err)"
    done
  done
done

log "writing $OUT/regression.md"
python3 "$REPO/perf/regression_table.py" "$OUT" "$BASELINE" "$(git -C "$REPO" rev-parse --short HEAD)" \
  "$ROUNDS" "${NEW_ENV[*]}" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/regression.md"
