#!/usr/bin/env bash
# bench.sh: the trainer's throughput figures (benchmarks, not tests), side by side:
#   1 rank vs the PyTorch twin at the same thread count (1 and 2 threads), DP=2 vs 1 rank,
#   and the share of step time blocked on communication (overlap on and off).
#   examples/moe_trainer/bench.sh BIN_DIR [STEPS]     (default config, softmax router)
# Needs the venv with torch for the twin lines (.venv at the repository root).
set -euo pipefail
bin=$1
steps=${2:-12}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../../.venv/bin/python}
run() { echo "\$ $*"; "$@" 2>&1 | grep -E "done:|twin bench" | sed "s/^\[0\] //" || true; }
C=(--config default --steps "$steps" --warmup 2 --val-every 0 --log-every 1000)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for threads in 1 2; do
  run "$bin/moe_train" "${C[@]}" --threads "$threads"
  run "$python" "$here/twin.py" --bench --threads "$threads" --steps "$steps" --warmup-steps 1
done
run "$bin/weftrun" -n 2 "$bin/moe_train" "${C[@]}"
run "$bin/weftrun" -n 2 "$bin/moe_train" "${C[@]}" --no-overlap
run "$bin/weftrun" -n 2 "$bin/moe_train" "${C[@]}" --ep 2
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
