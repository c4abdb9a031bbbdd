#!/usr/bin/env bash
# The GPU suite in one call, for the lent GPU machine (the `device` tool runs it in the repo
# root; logs and a JSON of figures go under $OUT, default ./gpu-out):
#   1. configure + build with WEFT_CUDA=ON (nvcc required) into build-gpu/
#   2. the GPU tests (ctest -L/R gpu), failing when a GPU is present but unusable
#   3. compute-sanitizer memcheck on the GPU kernel tests
#   4. the NCCL shim's nccl.h program on 1-4 ranks (host buffers; device buffers are refused
#      until weft's GPU path lands, and the program checks that refusal when a GPU exists)
#   5. benchmarks: nccl-perf (NCCL itself) allreduce 8 B..256 MiB on 1 GPU, and weft-perf
#      on host buffers beside it, as the baseline the GPU path must beat
# Exit status: non-zero when any test step failed (benchmarks never fail the run).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
status=0
step() { echo "== $*" | tee -a "$OUT/summary.txt"; }

step "device"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >> "$OUT/summary.txt"
nvcc --version > "$OUT/nvcc.txt" 2>&1 || { echo "no nvcc: cannot build the CUDA path" | tee -a "$OUT/summary.txt"; exit 1; }

step "build (WEFT_CUDA=ON)"
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_CUDA=ON &&
       cmake --build "$BUILD" -j "$(nproc)"; } > "$OUT/build.log" 2>&1; then
  tail -50 "$OUT/build.log"; echo "build failed" >> "$OUT/summary.txt"; exit 1
fi

step "gpu tests"
ctest --test-dir "$BUILD" -R 'gpu|Gpu|GPU|cuda|Cuda' --output-on-failure > "$OUT/gpu_tests.log" 2>&1 || status=1
tail -5 "$OUT/gpu_tests.log" >> "$OUT/summary.txt"

step "device suite on CUDA (the emulated GPU's suite, WEFTTEST_DEVICE=cuda)"
# device_runtime_test models the emulated GPU itself (device counts, its fault model); the
# kernel and collective suites run unchanged on any runtime.
for t in device_kernels_test device_collectives_test; do
  WEFTTEST_DEVICE=cuda "$BUILD/bin/$t" > "$OUT/$t.cuda.log" 2>&1 || status=1
  tail -3 "$OUT/$t.cuda.log" >> "$OUT/summary.txt"
done
WEFTTEST_DEVICE=cuda compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$BUILD/bin/device_collectives_test" --gtest_filter='*TwoProcessesOwnGpus' \
  > "$OUT/memcheck_device_2rank.log" 2>&1 || status=1

step "compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/bin/gpu_kernels_test" \
    > "$OUT/memcheck.log" 2>&1 || status=1
  tail -3 "$OUT/memcheck.log" >> "$OUT/summary.txt"
else
  echo "compute-sanitizer not found" >> "$OUT/summary.txt"
fi

step "NCCL shim (nccl.h program)"
for n in 1 2 4; do
  "$BUILD/bin/weftrun" -n "$n" "$BUILD/bin/nccl_api_test" > "$OUT/nccl_shim_$n.log" 2>&1 || status=1
  tail -1 "$OUT/nccl_shim_$n.log" >> "$OUT/summary.txt"
done

step "benchmarks"
if [ -x "$BUILD/bin/nccl-perf" ]; then
  "$BUILD/bin/nccl-perf" -C allreduce -b 8 -e 256M -f 4 --json "$OUT/nccl_allreduce_1gpu.json" \
    > "$OUT/nccl_perf.log" 2>&1 || echo "nccl-perf failed (see nccl_perf.log)" >> "$OUT/summary.txt"
fi
for n in 2 4; do
  "$BUILD/bin/weftrun" -n "$n" "$BUILD/bin/weft-perf" -C allreduce -b 8 -e 256M -f 4 \
    --json "$OUT/weft_host_allreduce_$n.json" > "$OUT/weft_perf_$n.log" 2>&1 || true
done
cat "$OUT/summary.txt"
exit $status
