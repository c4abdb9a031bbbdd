#!/bin/bash
# perf/slow_mode.sh — issue 17's "slow mode" against the VM's core placement: one line per
# round with the cache-line exchange between the two cores (perf/placement), the memory bound
# (membound), weft's 2-rank 64 MiB allreduce unregistered and registered (-R), and Open MPI's,
# back to back, so a run can be matched with the placement it ran in.
#
#   perf/slow_mode.sh [--build DIR] [ROUNDS (12)] [SLEEP_S (5)]
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
B="$REPO/build/bin"
if [ "${1:-}" = "--build" ]; then B="$2/bin"; shift 2; fi
ARGS="-C allreduce -b 64M -e 64M -n 10 -w 2 -c 0"
for i in $(seq "${1:-12}"); do
  ex=$("$B/placement" | awk '{print $2}')
  mb=$("$B/membound" 67108864 2 10 | grep -o "bound_us [0-9.]*" | awk '{print $2}')
  w=$("$B/weftrun" -n 2 --no-prefix "$B/weft-perf" $ARGS | grep -v "^#" | awk '{print $6"/"$10}')
  r=$("$B/weftrun" -n 2 --no-prefix "$B/weft-perf" -R $ARGS | grep -v "^#" | awk '{print $6"/"$10}')
  o=$(mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 "$B/mpi-perf-openmpi" $ARGS | grep -v "^#" | awk '{print $6"/"$10}')
  echo "$(date +%T) exchange_ns=$ex membound_us=$mb weft=$w weft_R=$r openmpi=$o"
  sleep "${2:-5}"
done
