#!/bin/bash
# perf/registered_vs_openmpi.sh — zero-copy with registered buffers (issue 17 item 2): weft-perf
# with unregistered buffers, weft-perf -R (weftMemAlloc + weftCommRegister) and Open MPI's
# mpi-perf, alternating in one run so all three see the same machine load, plus the memory
# bound (perf/membound) before and after. Prints each run's row and the load average.
#
#   perf/registered_vs_openmpi.sh [--build DIR] [--ranks N] [--repeat R] [-- weft-perf args]
#
# Defaults: --build build, --ranks 2, --repeat 5, then -C allreduce -b 64M -e 64M -n 20 -w 5
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$REPO/build"
RANKS=2
REPEAT=5
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --) shift; break ;;
    *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(-C allreduce -b 64M -e 64M -n 20 -w 5)
BIN="$BUILD/bin"
for t in weftrun weft-perf mpi-perf-openmpi membound; do
  [ -x "$BIN/$t" ] || { echo "missing $BIN/$t (cmake --build $BUILD --target $t)" >&2; exit 1; }
done
# The bound for the largest size: -e's bytes per rank.
BYTES=$(printf '%s\n' "${ARGS[@]}" | awk 'p{print; exit} $0=="-e"{p=1}')
BYTES=$(echo "$BYTES" | sed 's/[kK]$/*1024/; s/[mM]$/*1048576/; s/[gG]$/*1073741824/' | bc)
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# membound: $BIN/membound $BYTES $RANKS 10: $("$BIN/membound" "$BYTES" "$RANKS" 10)"
for ((k = 1; k <= REPEAT; k++)); do
  echo "# run $k: weft: $BIN/weftrun -n $RANKS --no-prefix $BIN/weft-perf ${ARGS[*]}"
  timeout 300 "$BIN/weftrun" -n "$RANKS" --no-prefix "$BIN/weft-perf" "${ARGS[@]}" | grep -v '^#'
  echo "# run $k: weft registered: $BIN/weftrun -n $RANKS --no-prefix $BIN/weft-perf -R ${ARGS[*]}"
  timeout 300 "$BIN/weftrun" -n "$RANKS" --no-prefix "$BIN/weft-perf" -R "${ARGS[@]}" | grep -v '^#'
  echo "# run $k: openmpi: mpirun.openmpi --allow-run-as-root --oversubscribe -np $RANKS $BIN/mpi-perf-openmpi ${ARGS[*]}"
  timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$RANKS" "$BIN/mpi-perf-openmpi" \
    "${ARGS[@]}" 2>/dev/null | grep -v '^#'
done
echo "# membound: $BIN/membound $BYTES $RANKS 10: $("$BIN/membound" "$BYTES" "$RANKS" 10)"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
