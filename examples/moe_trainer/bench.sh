#!/usr/bin/env bash
# bench.sh: the trainer's throughput figures (benchmarks, not tests), side by side and
# alternating, REPEATS rounds, medians at the end:
#   1 rank vs the PyTorch twin at the same thread count (1 and 2 threads; the twin also with
#   OMP_WAIT_POLICY=PASSIVE, its best setting on a loaded machine), DP=2 (2 ranks x 1 thread)
#   vs 1 rank x 1 thread, and the share of step time blocked on communication (the C++ lines).
#   examples/moe_trainer/bench.sh BIN_DIR [STEPS] [REPEATS]     (default config, softmax)
# Besides wall-clock tokens/s it records tokens per CPU-second of the timed steps (all threads
# of the process; rank 0's for DP): on a shared, oversubscribed machine wall-clock mostly
# measures the scheduler, CPU time the implementation. Needs the venv with torch (.venv at
# the repository root).
set -euo pipefail
bin=$1
steps=${2:-8}
repeats=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../../.venv/bin/python}
C=(--config default --steps "$steps" --warmup 2 --val-every 0 --log-every 1000)
twin_steps=$(( steps / 2 > 2 ? steps / 2 : 2 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
record() {  # label command...: runs it, keeps tokens/s and tokens per CPU-second
  local label=$1 out tps cpu_tps
  shift
  out=$("$@" 2>&1 | grep -E "done:|twin bench" | sed "s/^\[0\] //" || true)
  tps=$(echo "$out" | sed -nE 's/.*tokens\/s=([0-9]+).*/\1/p; s/.* ([0-9]+) tok\/s .*/\1/p' | head -1)
  cpu_tps=$(echo "$out" | sed -nE 's/.*tokens\/CPU-s=([0-9]+).*/\1/p; s/.* ([0-9]+) tok\/CPU-s.*/\1/p' | head -1)
  echo "$label: ${tps:-FAILED} tok/s, ${cpu_tps:-?} tok/CPU-s  [$out]"
  echo "$label ${tps:-0} ${cpu_tps:-0}" >>"$work/results"
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$repeats"); do
  echo "--- round $round (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for threads in 1 2; do
    record "cpp_t$threads" "$bin/moe_train" "${C[@]}" --threads "$threads"
    record "twin_t$threads" "$python" "$here/twin.py" --bench \
      --threads "$threads" --steps "$twin_steps" --warmup-steps 1
  done
  record "twin_t2_passive" env OMP_WAIT_POLICY=PASSIVE "$python" \
    "$here/twin.py" --bench --threads 2 --steps "$twin_steps" --warmup-steps 1
  record "cpp_dp2" "$bin/weftrun" -n 2 "$bin/moe_train" "${C[@]}" --threads 1
  record "cpp_dp2_no_overlap" "$bin/weftrun" -n 2 "$bin/moe_train" "${C[@]}" \
    --threads 1 --no-overlap
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $repeats rounds: tokens/s (wall), tokens per CPU-second"
awk '
  { w[$1] = w[$1] " " $2; c[$1] = c[$1] " " $3; n[$1]++ }
  function median(list, k,   a, m, i, j, t) {
    m = split(substr(list, 2), a, " ")
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((m + 1) / 2)]
  }
  END {
    for (k in w) { mw[k] = median(w[k]); mc[k] = median(c[k])
                   printf "  %-20s %7d tok/s (%s)   %7d tok/CPU-s (%s)\n", k, mw[k], substr(w[k], 2), mc[k], substr(c[k], 2) }
    printf "  C++ / twin, 1 thread:  %.2fx wall, %.2fx per CPU-s\n", mw["cpp_t1"] / mw["twin_t1"], mc["cpp_t1"] / mc["twin_t1"]
    printf "  C++ / twin, 2 threads: %.2fx wall, %.2fx per CPU-s; vs twin with OMP_WAIT_POLICY=PASSIVE: %.2fx wall, %.2fx per CPU-s\n",
           mw["cpp_t2"] / mw["twin_t2"], mc["cpp_t2"] / mc["twin_t2"], mw["cpp_t2"] / mw["twin_t2_passive"], mc["cpp_t2"] / mc["twin_t2_passive"]
    printf "  DP=2 / 1 rank (1 thread each): %.2fx wall; 2 threads / 1 thread in one rank: %.2fx wall\n", mw["cpp_dp2"] / mw["cpp_t1"], mw["cpp_t2"] / mw["cpp_t1"]
  }' "$work/results"
