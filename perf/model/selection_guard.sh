#!/bin/bash
# perf/model/selection_guard.sh — a selector change against measurement: two builds (OLD_BIN,
# NEW_BIN: their bin/ folders) alternate, ROUNDS rounds, one allreduce sweep per run, on one of
# the RESULTS setups; then a table per size: each build's algorithm, its times per round and
# the ratio of the medians (perf/model/guard_summary.py).
#
#   selection_guard.sh OLD_BIN NEW_BIN SETUP MIN MAX ROUNDS OUT_DIR [ITERS]
#     SETUP: shm2 | shm4 | tcp2 | netns2x2 | netns2x4 (netns: root, 2 Gbit/s tbf, the
#     netns:2xR@2 preset through WEFT_TOPO_FILE as the RESULTS netns sweeps use)
#
# Rows whose decision did not change show the run-to-run noise of the machine; a difference
# means something only where it holds in every round.
set -eu
[ $# -ge 7 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
OLD="$1" NEW="$2" SETUP="$3" MIN="$4" MAX="$5" ROUNDS="$6" OUT="$7" ITERS="${8:-20}"
HERE="$(cd "$(dirname "$0")" && pwd)"
NETNS="$HERE/../netns/run.sh"
mkdir -p "$OUT"
for ((i = 1; i <= ROUNDS; i++)); do
  for b in old new; do
    BIN="$OLD"; [ "$b" = new ] && BIN="$NEW"
    PERF=("$BIN/weft-perf" -C allreduce -b "$MIN" -e "$MAX" -f 2 -n "$ITERS" -w 2 -c 1 --time-budget 0.3
          --json "$OUT/$SETUP-$b-$i.json" --label "$b")
    case "$SETUP" in
      shm2) "$BIN/weftrun" -n 2 "${PERF[@]}" ;;
      shm4) "$BIN/weftrun" -n 4 "${PERF[@]}" ;;
      tcp2) WEFT_SHM_DISABLE=1 "$BIN/weftrun" -n 2 "${PERF[@]}" ;;
      netns2x2) WEFT_TOPO_FILE=preset:netns:2x2@2 bash "$NETNS" --hosts 2 --ranks-per-host 2 --rate 2gbit --timeout 300 -- "${PERF[@]}" ;;
      netns2x4) WEFT_TOPO_FILE=preset:netns:2x4@2 bash "$NETNS" --hosts 2 --ranks-per-host 4 --rate 2gbit --timeout 300 -- "${PERF[@]}" ;;
      *) echo "selection_guard.sh: unknown SETUP '$SETUP'" >&2; exit 2 ;;
    esac > "$OUT/$SETUP-$b-$i.txt" 2>&1
    echo "$SETUP $b $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/log"
  done
done
python3 "$HERE/guard_summary.py" "$OUT" "$SETUP"
