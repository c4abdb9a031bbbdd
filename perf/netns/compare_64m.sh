#!/bin/bash
# perf/netns/compare_64m.sh — 64 MiB allreduce on 2 namespace hosts x R ranks at 2 Gbit/s:
# discovery alone, WEFT_CALIBRATE=1, the preset that is told the rate, and Gloo, one after the
# other, ROUNDS times (interleaved, so load drifts hit every mode). Needs root.
#
#   compare_64m.sh BIN_DIR [R=2] [ROUNDS=2]
# Prints per mode rank 0's out-of-place time (us), busbw (GB/s) and the algorithm.
set -u
[ $# -ge 1 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="${2:-2}" ROUNDS="${3:-2}"
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 300 --)
P=(-C allreduce -b 64M -e 64M -n 5 -w 2 -c 1)
row() { grep -E '^\[0\] +67108864' | awk '{print $7" us", $9" GB/s", $(NF-1)}'; }
for k in $(seq "$ROUNDS"); do
  echo "== round $k $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo -n "discovery:    "; "${NS[@]}" "$B/weft-perf" "${P[@]}" 2>&1 | row
  echo -n "calibrate=1:  "; WEFT_CALIBRATE=1 "${NS[@]}" "$B/weft-perf" "${P[@]}" 2>&1 | row
  echo -n "preset:       "; WEFT_TOPO_FILE="preset:netns:2x$R@2" "${NS[@]}" "$B/weft-perf" "${P[@]}" 2>&1 | row
  if [ -x "$B/gloo-perf" ]; then echo -n "gloo:         "; "${NS[@]}" "$B/gloo-perf" "${P[@]}" 2>&1 | row; fi
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
