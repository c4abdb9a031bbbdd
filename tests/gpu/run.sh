#!/usr/bin/env bash
# The GPU suite in one call, for the lent GPU machine (the `device` tool runs it in the repo
# root; logs and a JSON of figures go under $OUT, default ./gpu-out):
#   1. the binaries: BUNDLE=<folder> made here by tests/gpu/bundle.sh (the lent machine has no
#      GoogleTest/hwloc/UCX and no registry, so this is the normal way), else a build with
#      WEFT_CUDA=ON into build-gpu/ (a machine with those packages)
#   2. the GPU kernel tests, failing when a GPU is present but unusable
#   3. the device suites (the emulated GPU's kernel and collective tests) on CUDA
#   4. compute-sanitizer memcheck on the kernel tests and a 2-process device allreduce
#   5. the NCCL shim's nccl.h program on 1-4 ranks
#   6. benchmarks: nccl-perf (NCCL itself, 1 GPU) and weft-perf --device on 1, 2, 4 ranks
#      sharing the GPU, plus weft-perf on host buffers (benchmarks never fail the run)
# Exit status: non-zero when any test step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
status=0
step() { echo "== $*" | tee -a "$OUT/summary.txt"; }
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

step "device"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed"
head -12 "$OUT/nvidia-smi.txt" >> "$OUT/summary.txt"

if [ -n "${BUNDLE:-}" ]; then
  step "binaries from the bundle $BUNDLE"
  BIN=$BUNDLE/bin
  WEFT_LIBS=$(realpath "$BUNDLE"):$(realpath "$BUNDLE/lib")
else
  step "build (WEFT_CUDA=ON)"
  BUILD=${BUILD:-build-gpu}
  if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_CUDA=ON &&
         cmake --build "$BUILD" -j "$(nproc)"; } > "$OUT/build.log" 2>&1; then
    tail -50 "$OUT/build.log"; note "build failed"; exit 1
  fi
  BIN=$BUILD/bin
  WEFT_LIBS=$(realpath "$BUILD")
fi
export LD_LIBRARY_PATH=$WEFT_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SHIM_DIR=$(dirname "$BIN")/nccl-shim
# NVIDIA's own NCCL and CUDA runtime for nccl-perf (the image ships them in Python wheels).
NV_LIBS=$(for f in libnccl.so.2 libcudart.so.13 libcudart.so.12; do
            find / -xdev -name "$f" -not -path "*/nccl-shim/*" 2>/dev/null | head -1
          done | xargs -r -n1 dirname | sort -u | paste -sd:)
note "NVIDIA libraries for nccl-perf: ${NV_LIBS:-none found}"
run() {  # run LOG CMD...: one test step; its last lines go to the summary
  local log=$1; shift
  timeout 300 "$@" > "$OUT/$log" 2>&1 || { status=1; note "FAILED: $*"; }
  tail -3 "$OUT/$log" >> "$OUT/summary.txt"
}

step "GPU kernel tests"
run gpu_kernels_test.log "$BIN/gpu_kernels_test"

step "device suites on CUDA (WEFTTEST_DEVICE=cuda)"
# device_runtime_test models the emulated GPU itself (device counts, its fault model); the
# kernel and collective suites run unchanged on any runtime.
for t in device_kernels_test device_collectives_test; do
  WEFTTEST_DEVICE=cuda run "$t.cuda.log" "$BIN/$t"
done

step "compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
  run memcheck_kernels.log compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$BIN/gpu_kernels_test"
  WEFTTEST_DEVICE=cuda run memcheck_device_2rank.log compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$BIN/device_collectives_test" --gtest_filter='*TwoProcesses*'
else
  note "compute-sanitizer not found"
fi

step "NCCL shim (nccl.h program)"
for n in 1 2 4; do
  LD_LIBRARY_PATH=$SHIM_DIR:$LD_LIBRARY_PATH run "nccl_shim_$n.log" "$BIN/weftrun" -n "$n" \
    "$BIN/nccl_api_test"
done

step "benchmarks"
if [ -x "$BIN/nccl-perf" ] && [ -n "$NV_LIBS" ]; then
  LD_LIBRARY_PATH=$NV_LIBS:$LD_LIBRARY_PATH timeout 200 "$BIN/nccl-perf" -C allreduce -b 8 \
    -e 256M -f 4 --json "$OUT/nccl_allreduce_1gpu.json" > "$OUT/nccl_perf.log" 2>&1 ||
    note "nccl-perf failed (see nccl_perf.log)"
  tail -16 "$OUT/nccl_perf.log" >> "$OUT/summary.txt"
fi
for n in 1 2 4; do
  WEFT_DEVICE=cuda timeout 200 "$BIN/weftrun" -n "$n" "$BIN/weft-perf" --device -C allreduce \
    -b 8 -e 256M -f 4 --time-budget 1 --json "$OUT/weft_device_allreduce_$n.json" \
    > "$OUT/weft_device_perf_$n.log" 2>&1 || note "weft-perf --device -n $n failed"
  tail -16 "$OUT/weft_device_perf_$n.log" >> "$OUT/summary.txt"
done
timeout 200 "$BIN/weftrun" -n 2 "$BIN/weft-perf" -C allreduce -b 8 -e 256M -f 4 \
  --time-budget 1 --json "$OUT/weft_host_allreduce_2.json" > "$OUT/weft_host_perf_2.log" 2>&1 || true
tail -16 "$OUT/weft_host_perf_2.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $status
