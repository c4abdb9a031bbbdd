#!/usr/bin/env bash
# layouts_bench.sh: tokens/s and the share of step time blocked in weft for each layout of 8
# ranks (benchmarks, not tests; figures in perf/RESULTS.md). The default config, 1 thread per
# rank, STEPS steps (the first one untimed), REPEATS rounds alternating the layouts, medians.
#   examples/moe_trainer/layouts_bench.sh BIN_DIR [STEPS] [REPEATS]
# 8 ranks on a 2-core machine are oversubscribed 4x: a rank blocked in weft sleeps (the
# trainer's waiting policy), so "blocked in weft" also holds time spent waiting for a peer
# that had no core. Compare layouts run side by side, not with other machines.
set -euo pipefail
bin=$1
steps=${2:-6}
repeats=${3:-1}
C=(--config default --steps "$steps" --warmup 2 --val-every 0 --log-every 1000 --threads 1)
LAYOUTS=("DP8=" "ZeRO-1 DP8=--zero1" "EP8=--ep 8" "EP2xDP4=--ep 2" "TP2xDP4=--tp 2"
         "TP2xDP4 SP=--tp 2 --sequence-parallel" "PP2xDP4=--pp 2" "TP2xPP2xDP2=--tp 2 --pp 2"
         "TP2xPP2xDP2 SP=--tp 2 --pp 2 --sequence-parallel")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$repeats"); do
  for entry in "${LAYOUTS[@]}"; do
    name=${entry%%=*}
    read -r -a args <<<"${entry#*=}"
    out=$("$bin/weftrun" -n 8 --timeout 600 "$bin/moe_train" "${C[@]}" "${args[@]}" 2>&1 |
          grep "done:" | sed 's/^\[0\] //' || true)
    tps=$(echo "$out" | sed -nE 's/.* ([0-9]+) tok\/s .*/\1/p')
    comm=$(echo "$out" | sed -nE 's/.*comm ([0-9.]+)% of step time.*/\1/p')
    echo "round $round  $name: ${tps:-FAILED} tok/s, blocked in weft ${comm:-?}% (load $(cut -d' ' -f1 /proc/loadavg))"
    echo "${name// /_} ${tps:-0} ${comm:-0}" >>"$work/results"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $repeats rounds:"
awk '{ t[$1] = t[$1] " " $2; c[$1] = c[$1] " " $3; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 } }
  function median(list,   a, m, i, j, x) {
    m = split(substr(list, 2), a, " ")
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { x = a[i]; a[i] = a[j]; a[j] = x }
    return a[int((m + 1) / 2)]
  }
  END { print "| layout | tokens/s | blocked in weft (% of step time) |"; print "|---|---|---|"
        for (i = 0; i < n; i++) { k = order[i]; name = k; gsub("_", " ", name)
          printf "| %s | %d | %.1f |\n", name, median(t[k]), median(c[k]) } }' "$work/results"
