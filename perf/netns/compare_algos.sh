#!/bin/bash
# perf/netns/compare_algos.sh — one allreduce size on 2 namespace hosts x R ranks at 2 Gbit/s,
# each candidate forced through a one-rule WEFT_TUNING_FILE ("ALGORITHM CHUNK CHANNELS"), plus
# the selector's own choice with WEFT_CALIBRATE=1 and Gloo, interleaved ROUNDS times (so load
# drifts hit every mode). What the per-phase profile of issue 17 compares. Needs root.
#
#   compare_algos.sh BIN_DIR R ROUNDS SIZE "ALGO CHUNK CH" ["ALGO CHUNK CH" ...]
# e.g. compare_algos.sh build/bin 2 3 64M "hierarchical_leader 512K 1" "hierarchical_direct 0 1"
# Prints per mode and round rank 0's out-of-place and in-place times (us) and the algorithm.
# Forced candidates run with WEFT_TOPO_FILE=preset:netns:2xR@2 (the topology is irrelevant
# once the tuning rule decides; it skips the calibration's probes).
set -u
[ $# -ge 5 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="$2" ROUNDS="$3" SIZE="$4"
shift 4
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 300 --)
P=(-C allreduce -b "$SIZE" -e "$SIZE" -n 5 -w 2 -c 1)
TUNE="$(mktemp)"
trap 'rm -f "$TUNE"' EXIT
row() { grep -E '^\[0\] +[0-9]+ ' | tail -1 | awk '{print $7" us (oop)", $11" us (ip)", $(NF-1)}'; }
for k in $(seq "$ROUNDS"); do
  echo "== round $k $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for spec in "$@"; do
    echo "allreduce 0-inf $spec" > "$TUNE"
    printf '%-32s ' "$spec:"
    WEFT_TUNING_FILE="$TUNE" WEFT_TOPO_FILE="preset:netns:2x$R@2" "${NS[@]}" "$B/weft-perf" "${P[@]}" 2>&1 | row
  done
  printf '%-32s ' "calibrate=1 (selector):"; WEFT_CALIBRATE=1 "${NS[@]}" "$B/weft-perf" "${P[@]}" 2>&1 | row
  if [ -x "$B/gloo-perf" ]; then printf '%-32s ' "gloo:"; "${NS[@]}" "$B/gloo-perf" "${P[@]}" 2>&1 | row; fi
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
