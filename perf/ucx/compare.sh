#!/bin/bash
# perf/ucx/compare.sh — issue 16's goals, measured side by side in one run (ROUNDS interleaved
# rounds, so load drifts hit every mode):
#   one host, 2 ranks, allreduce 8 B .. 64 MiB: weft over shm, weft over UCX (UCX_TLS=sm,
#   WEFT_SHM_DISABLE=1 so UCX serves the same-host peer), Open MPI over UCX (pml ucx, UCX_TLS=sm);
#   2 namespace hosts x 2 ranks at 2 Gbit/s, 64 MiB allreduce: weft over tcp vs weft over ucx
#   (UCX_TLS=tcp,sm) — needs root (perf/netns/run.sh skips otherwise).
#
#   compare.sh BIN_DIR [ROUNDS=2]
# Prints rank 0's out-of-place time (us) per size and mode.
set -u
[ $# -ge 1 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" ROUNDS="${2:-2}"
HERE="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
P=(-C allreduce -b 16 -e 64M -f 4 -n 10 -w 3 -c 1)
col() { sed 's/^\[0\] *//' | grep -E '^ *[0-9]+ ' | awk '{printf "%s:%s ", $1, $6} END {print ""}'; }
for k in $(seq "$ROUNDS"); do
  echo "== round $k $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo -n "weft-shm:      "; timeout 300 "$B/weftrun" -n 2 "$B/weft-perf" "${P[@]}" 2>&1 | col
  echo -n "weft-ucx-sm:   "; WEFT_TRANSPORT=ucx WEFT_SHM_DISABLE=1 UCX_TLS=sm \
    timeout 300 "$B/weftrun" -n 2 "$B/weft-perf" "${P[@]}" 2>&1 | col
  if command -v mpirun > /dev/null && [ -x "$B/mpi-perf-openmpi" ]; then
    echo -n "ompi-ucx-sm:   "; timeout 300 mpirun -np 2 --mca pml ucx --mca pml_ucx_tls any \
      --mca pml_ucx_devices any -x UCX_TLS=sm "$B/mpi-perf-openmpi" "${P[@]}" 2>&1 | col
  fi
  NS=(bash "$HERE/../netns/run.sh" --hosts 2 --ranks-per-host 2 --rate 2gbit --timeout 300 --)
  Q=(-C allreduce -b 64M -e 64M -n 3 -w 1 -c 1)
  echo -n "netns-tcp:     "; WEFT_TRANSPORT=tcp "${NS[@]}" "$B/weft-perf" "${Q[@]}" 2>&1 | col
  echo -n "netns-ucx:     "; WEFT_TRANSPORT=ucx UCX_TLS=tcp,sm "${NS[@]}" "$B/weft-perf" "${Q[@]}" 2>&1 | col
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
