#!/bin/bash
# perf/latency_vs_openmpi.sh — weft next to Open MPI in one run, for the small-message and
# contention goals of issue 17: the same weft-perf / mpi-perf-openmpi sweep back to back,
# alternating (weft, Open MPI, weft, Open MPI, ...) so that both see the same machine load,
# optionally with competing `nice -n 10` busy loops. Prints each run's table and the load
# average before and after.
#
#   perf/latency_vs_openmpi.sh [--build DIR] [--ranks N] [--busy K] [--repeat R] [--bind]
#                              [-- weft-perf args]
#
# --bind: each weft rank runs under `taskset -c <local rank mod cores>`, as mpirun binds its
# ranks to cores by default (without it, the weft ranks float: on a loaded machine the
# scheduler may put both on one core).
# Defaults: --build build, --ranks 2, --busy 0, --repeat 2, then
#   -C allreduce -b 8 -e 1K -f 2 -n 2000 -w 200 -c 0
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$REPO/build"
RANKS=2
BUSY=0
REPEAT=2
BIND=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --busy) BUSY="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --bind) BIND=1; shift ;;
    --) shift; break ;;
    *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(-C allreduce -b 8 -e 1K -f 2 -n 2000 -w 200 -c 0)
BIN="$BUILD/bin"
for t in weftrun weft-perf mpi-perf-openmpi; do
  [ -x "$BIN/$t" ] || { echo "missing $BIN/$t (cmake --build $BUILD --target $t)" >&2; exit 1; }
done
BUSY_PIDS=()
cleanup() { for p in "${BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT
for ((i = 0; i < BUSY; i++)); do
  nice -n 10 bash -c 'while :; do :; done' &
  BUSY_PIDS+=($!)
done
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); busy loops at nice 10: $BUSY"
for ((k = 1; k <= REPEAT; k++)); do
  if [ "$BIND" = 1 ]; then
    CORES=$(nproc)
    echo "# run $k: weft (bound): $BIN/weftrun -n $RANKS --no-prefix sh -c 'exec taskset -c \$((WEFT_LOCAL_RANK % $CORES)) $BIN/weft-perf ${ARGS[*]}'"
    timeout 120 "$BIN/weftrun" -n "$RANKS" --no-prefix sh -c \
      "exec taskset -c \$((WEFT_LOCAL_RANK % $CORES)) $BIN/weft-perf ${ARGS[*]}" | grep -v '^#'
  else
    echo "# run $k: weft: $BIN/weftrun -n $RANKS --no-prefix $BIN/weft-perf ${ARGS[*]}"
    timeout 120 "$BIN/weftrun" -n "$RANKS" --no-prefix "$BIN/weft-perf" "${ARGS[@]}" | grep -v '^#'
  fi
  echo "# run $k: openmpi: mpirun.openmpi --allow-run-as-root --oversubscribe -np $RANKS $BIN/mpi-perf-openmpi ${ARGS[*]}"
  timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$RANKS" "$BIN/mpi-perf-openmpi" \
    "${ARGS[@]}" 2>/dev/null | grep -v '^#'
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
