#!/usr/bin/env bash
# Where an 8 B device allreduce's time goes with several ranks on one GPU, and what MPS
# changes, for the lent GPU machine (run by tests/gpu/run.sh, or alone with the bundle):
#   BUNDLE=.gpu-bundle bash tests/gpu/latency.sh      (figures in $OUT/latency.txt)
# 1. the GPU's floor: flag_pingpong, the ipc transport's Signal/Wait primitives ping-ponged
#    between two streams of one process, then between two processes (two CUDA contexts);
# 2. weft-perf --device 8 B on 1, 2 and 4 ranks, ipc and staged;
# 3. the same with the MPS daemon, where the image has it (contexts then share the GPU at
#    once instead of taking turns), and 256 MiB on 2 and 4 ranks (ipc window 4 and 64 MiB,
#    staged).
# Never fails: these are measurements.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BIN=${BUNDLE:-build}/bin
[ -n "${BUNDLE:-}" ] && export LD_LIBRARY_PATH=$(realpath "$BUNDLE"):$(realpath "$BUNDLE/lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
R=$OUT/latency.txt
say() { echo "$*" | tee -a "$R"; }
perf() {  # perf LABEL RANKS ENV... -- ARGS...: one weft-perf --device line per size
  local label=$1 n=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env WEFT_DEVICE=cuda "${envs[@]}" timeout 60 "$BIN/weftrun" -n "$n" "$BIN/weft-perf" --device \
    -C allreduce -w 20 "$@" 2>&1 | grep -E '^\[0\] +[0-9]' | sed "s/^/$label n=$n /" | tee -a "$R"
}
sweep() {  # sweep TAG LARGE: the weft figures; LARGE=1 adds 256 MiB
  for n in 1 2 4; do
    perf "$1 ipc   " "$n" WEFT_IPC=1 -- -b 8 -e 8 -n 2000
    perf "$1 staged" "$n" WEFT_IPC=0 -- -b 8 -e 8 -n 2000
  done
  [ "$2" = 1 ] || return 0
  for n in 2 4; do
    perf "$1 ipc window 4M " "$n" WEFT_IPC=1 -- -b 256M -e 256M -w 3 -n 10
    perf "$1 ipc window 16M" "$n" WEFT_IPC=1 WEFT_IPC_WINDOW_BYTES=16M -- -b 256M -e 256M -w 3 -n 10
    perf "$1 ipc window 64M" "$n" WEFT_IPC=1 WEFT_IPC_WINDOW_BYTES=64M -- -b 256M -e 256M -w 3 -n 10
    perf "$1 staged        " "$n" WEFT_IPC=0 -- -b 256M -e 256M -w 2 -n 4
  done
}
floor() {  # floor TAG
  for m in streams procs; do
    say "$1 $(timeout 60 "$BIN/flag_pingpong" "$m" 2000 2>&1 | tail -1)"
  done
}

say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader 2>&1)"
say "torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1)"
say "mps: $(command -v nvidia-cuda-mps-control || echo none); nsys: $(command -v nsys || echo none)"
floor "no-mps"
# 256 MiB without MPS takes long (43 ms ipc, 93 ms staged on 2 ranks, 268 and 500 ms on 4, H100
# 2026-11-27): LARGE_NO_MPS=1 measures it again.
sweep "no-mps" "${LARGE_NO_MPS:-0}"
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
  if nvidia-cuda-mps-control -d; then
    sleep 1
    floor "mps"
    sweep "mps" 1
    echo quit | nvidia-cuda-mps-control
  else
    say "mps: the daemon did not start"
  fi
fi
exit 0
