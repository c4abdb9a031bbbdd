#!/usr/bin/env bash
# recovery_time.sh: the trainer's recovery time, from the kill of a rank to the first step
# completed after it (the slowest survivor), for perf/RESULTS.md.
#
#   recovery_time.sh BIN_DIR RUNS [moe_train args...]      e.g. build/bin 5 --config tiny
#
# Each run: weftrun --elastic -n 4, rank 2 kills itself at the start of step 30 of 40
# (--kill-rank; it prints the time it dies), the survivors print when they finish the redone
# step (unix times, same host clock). Prints each run's seconds, then min / median / max.
set -euo pipefail
bin=$1
runs=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
times=()
for ((i = 0; i < runs; i++)); do
  "$bin/weftrun" --elastic -n 4 --timeout 600 "$bin/moe_train" --steps 40 --val-every 0 --quiet \
    --elastic --kill-rank 2 --kill-step 30 "$@" >"$out" 2>&1 || { grep -v "seq=" "$out"; exit 1; }
  t=$(awk '/--kill-rank: dying/ { for (i = 1; i <= NF; i++) if ($i == "time") k = $(i + 1) + 0 }
           /elastic: recovered in/ { for (i = 1; i <= NF; i++) if ($i == "time") { v = $(i + 1); sub(/\)/, "", v); if (v + 0 > d) d = v + 0 } }
           END { if (k == 0 || d == 0) exit 1; printf "%.3f", d - k }' "$out")
  echo "run $i: ${t} s"
  times+=("$t")
done
printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  printf "kill to first completed step, %d runs: min %.3f s, median %.3f s, max %.3f s\n",
         NR, v[1], v[int((NR + 1) / 2)], v[NR] }'
