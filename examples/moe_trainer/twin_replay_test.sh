#!/usr/bin/env bash
# twin_replay_test.sh: a whole short run of moe_train against its PyTorch twin replaying it.
#
#   twin_replay_test.sh BIN_DIR PYTHON
#
# moe_train --config default --batch 4 --steps 8 --warmup 2 on one rank, and twin.py --replay
# with the same options: the twin rebuilds moe_train's initial weights from the seed (rng.h
# ported) and reads the same batches from the same fortunes (data.cc ported), so the two runs
# train the same model on the same data and their per-step losses compare line by line:
# relative difference <= 3e-4 at every step (measured: 1.8e-7; 2.7e-6 with batch 8 x 10 steps and
# 3.4e-5 with batch 16 x 10 steps; the
# runs drift apart slowly as float32 rounding differences flip near-tied routing choices).
# Needs torch: PYTHON (default: the repository's .venv, as scripts/setup_python.sh makes it;
# MOE_TWIN_PYTHON overrides) without torch skips the test (exit 77) and says why.
set -euo pipefail
bin=$1
python=${MOE_TWIN_PYTHON:-$2}
here=$(cd "$(dirname "$0")" && pwd)
data=${MOE_DATA:-/usr/share/games/fortunes}
if [ ! -x "$python" ] || ! "$python" -c "import torch, numpy" 2>/dev/null; then
  echo "skipped: no Python with torch and numpy at '$python' (run scripts/setup_python.sh," \
       "or set MOE_TWIN_PYTHON)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
RUN=(--config default --batch 4 --steps 8 --warmup 2)
"$bin/moe_train" "${RUN[@]}" --quiet --val-every 0 --data "$data" --loss-file "$work/cpp"
"$python" "$here/twin.py" --replay "${RUN[@]}" --threads 2 --data "$data" \
  --loss-file "$work/twin" >/dev/null
awk -v rtol=3e-4 '
  FNR == NR { if ($1 == "train") ref[$2] = $3; next }
  $1 == "train" {
    n++
    r = ($3 - ref[$2]) / ref[$2]; if (r < 0) r = -r
    if (r > max) max = r
    if (!($2 in ref) || r > rtol) { print "step " $2 ": moe_train " $3 " vs twin " ref[$2]; bad = 1 }
  }
  END {
    if (n != 8 || length(ref) != 8) { print "expected 8 steps from each, got " n " and " length(ref); bad = 1 }
    printf "moe_train vs twin --replay (default config, batch 4, 8 steps): max relative " \
           "difference %.3g (limit %s) %s\n", max, rtol, bad ? "FAIL" : "ok"
    exit bad
  }' "$work/twin" "$work/cpp"
