#!/usr/bin/env bash
# The GPU suite in one call, for the lent GPU machine (the `device` tool runs it in the repo
# root; logs and a JSON of figures go under $OUT, default ./gpu-out):
#   1. the binaries: BUNDLE=<folder> made here by tests/gpu/bundle.sh (the lent machine has no
#      GoogleTest/hwloc/UCX and no registry, so this is the normal way), else a build with
#      WEFT_CUDA=ON into build-gpu/ (a machine with those packages)
#   2. the GPU kernel tests, failing when a GPU is present but unusable
#   3. the device suites (the emulated GPU's kernel, codec and collective tests) on CUDA
#   4. compute-sanitizer memcheck on the kernel tests and a 2-process device allreduce
#   5. the NCCL shim's nccl.h programs on 1-4 ranks: host buffers, and device buffers on CUDA
#   6. benchmarks: nccl-perf (NCCL itself, 1 GPU) and weft-perf --device on 1, 2, 4 ranks
#      sharing the GPU (ipc, and 2 ranks staged), plus weft-perf on host buffers, and
#      copy_paths (the copy engine against the SM copy kernel, per size) (benchmarks never
#      fail the run)
#   7. PyTorch: unmodified DDP on the NCCL shim (tests/gpu/torch_ddp_shim.sh); the weft backend
#      built here (tests/gpu/torch_build.sh) and run on CUDA tensors (torch_backend_cuda.py)
#   8. tests/gpu/latency.sh: the 8 B latency's breakdown (the GPU's hand-off floor, ipc vs
#      staged, with and without MPS) and 256 MiB on 2 and 4 ranks
# Exit status: non-zero when any test step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
# Logs go to LOGS and are packed into $OUT/logs.tgz after every step: the device tool brings
# back at most 8 files, and a run cut off at its limit still returns what it had packed.
LOGS=$(mktemp -d)
status=0
pack() { tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null; }  # the summary is in $OUT itself
step() { pack; echo "== $*" | tee -a "$OUT/summary.txt"; }
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

step "device"
nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed"
head -12 "$LOGS/nvidia-smi.txt" >> "$OUT/summary.txt"

if [ -n "${BUNDLE:-}" ]; then
  step "binaries from the bundle $BUNDLE"
  BIN=$BUNDLE/bin
  WEFT_LIBS=$(realpath "$BUNDLE"):$(realpath "$BUNDLE/lib")
else
  step "build (WEFT_CUDA=ON)"
  BUILD=${BUILD:-build-gpu}
  if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_CUDA=ON &&
         cmake --build "$BUILD" -j "$(nproc)"; } > "$LOGS/build.log" 2>&1; then
    tail -50 "$LOGS/build.log"; note "build failed"; pack; exit 1
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
run() {  # run LOG CMD...: one test step (at most RUN_S s); its last lines go to the summary
  local log=$1; shift
  local rc=0 waited=0
  "$@" > "$LOGS/$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "${RUN_S:-120}" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then  # stalled: say where every rank waits, then stop it
    note "still running after ${waited}s (backtraces in $log.bt): $*"
    { backtraces weft_test_worker; backtraces "$1"; } > "$LOGS/$log.bt" 2>&1
    pkill -KILL -P "$pid"; kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then status=1; note "FAILED (exit $rc): $*"; fi
  grep -E '^\[  FAILED|^\[  PASSED' "$LOGS/$log" | head -12 >> "$OUT/summary.txt"
  tail -3 "$LOGS/$log" >> "$OUT/summary.txt"
  pack
}
# Backtraces of every thread of the processes named NAME (cuda-gdb attaches; the image has
# no gdb), so a stalled run says where it waits.
backtraces() {
  command -v cuda-gdb >/dev/null || { echo "no cuda-gdb: no backtraces"; return; }
  for pid in $(pgrep -f "$1"); do
    echo "--- pid $pid"
    timeout 60 cuda-gdb -p "$pid" -batch -ex "thread apply all bt" 2>&1 | grep -E '^(#|Thread)'
  done
}
bench() {  # bench LOG CMD...: a benchmark (at most BENCH_S s); never fails the run
  local log=$1; shift
  "$@" > "$LOGS/$log" 2>&1 &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "${BENCH_S:-60}" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    note "benchmark still running after ${waited}s (backtraces in $log.bt): $*"
    backtraces "$BIN/weft-perf" > "$LOGS/$log.bt" 2>&1
    pkill -TERM -P "$pid"; kill "$pid" 2>/dev/null
  fi
  wait "$pid" || note "benchmark exited $?: $*"
  grep -v '^\[[0-9]*\] *#' "$LOGS/$log" | tail -14 >> "$OUT/summary.txt"
  pack
}

step "GPU kernel tests"
run gpu_kernels_test.log "$BIN/gpu_kernels_test"

step "device suites on CUDA (WEFTTEST_DEVICE=cuda)"
# device_runtime_test models the emulated GPU itself (device counts, its fault model); the
# kernel and collective suites run unchanged on any runtime.
for t in device_kernels_test device_codecs_test device_ipc_copy_test device_collectives_test \
         device_compressed_test; do
  WEFTTEST_DEVICE=cuda RUN_S=200 run "$t.cuda.log" "$BIN/$t"
done

step "compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
  run memcheck_kernels.log compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$BIN/gpu_kernels_test"
  # The codec kernels (kernels/codec.cu): every codec and flag at small counts (the few-MiB
  # cases run above without the sanitizer's slowdown).
  WEFTTEST_DEVICE=cuda run memcheck_codecs.log compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$BIN/device_codecs_test" --gtest_filter='-*SeveralMiB*'
  WEFTTEST_DEVICE=cuda run memcheck_device_2rank.log compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$BIN/device_collectives_test" --gtest_filter='*TwoProcesses*'
else
  note "compute-sanitizer not found"
fi

step "NCCL shim (nccl.h programs: host buffers, then device buffers on CUDA)"
for n in 1 2 4; do
  LD_LIBRARY_PATH=$SHIM_DIR:$LD_LIBRARY_PATH run "nccl_shim_$n.log" "$BIN/weftrun" -n "$n" \
    "$BIN/nccl_api_test"
done
# Device buffers and streams through the shim: every rank on the one GPU.
for n in 1 2 4; do
  LD_LIBRARY_PATH=$SHIM_DIR:$LD_LIBRARY_PATH WEFT_DEVICE=cuda run "nccl_shim_device_$n.log" \
    "$BIN/weftrun" -n "$n" "$BIN/nccl_device_test" shared
done

step "benchmarks"
PERF_ARGS="-C allreduce -b 8 -e 256M -f 4 -w 2 --time-budget 0.5"
if [ -x "$BIN/nccl-perf" ] && [ -n "$NV_LIBS" ]; then
  LD_LIBRARY_PATH=$NV_LIBS:$LD_LIBRARY_PATH bench nccl_perf_1gpu.log "$BIN/nccl-perf" $PERF_ARGS \
    --json "$LOGS/nccl_allreduce_1gpu.json"
fi
for n in 1 2 4; do
  WEFT_DEVICE=cuda bench "weft_device_perf_$n.log" "$BIN/weftrun" -n "$n" "$BIN/weft-perf" \
    --device $PERF_ARGS --json "$LOGS/weft_device_allreduce_$n.json"
done
# The same 2 ranks without the ipc transport (staged through pinned host memory): the ratio
# is what ipc buys on this GPU.
WEFT_DEVICE=cuda WEFT_IPC=0 bench weft_device_staged_perf_2.log "$BIN/weftrun" -n 2 \
  "$BIN/weft-perf" --device $PERF_ARGS --json "$LOGS/weft_device_staged_allreduce_2.json"
bench weft_host_perf_2.log "$BIN/weftrun" -n 2 "$BIN/weft-perf" $PERF_ARGS \
  --json "$LOGS/weft_host_allreduce_2.json"
# The ipc copy model's figures on this GPU (CopyModel in transports/ipc/ipc_options.h).
[ -x "$BIN/copy_paths" ] && bench copy_paths.log "$BIN/copy_paths"
step "PyTorch: DDP (backend nccl) on the NCCL shim, then the weft backend on CUDA tensors"
# Unmodified DDP under LD_PRELOAD of the shim, 2 ranks on the GPU vs 1 rank on the doubled batch.
PYTHON=${PYTHON:-python3} RUN_S=100 run torch_ddp_shim.log bash tests/gpu/torch_ddp_shim.sh "$SHIM_DIR" \
  "$(dirname "$BIN")" "$LOGS/ddp"
grep -E "PASS|FAIL|step" "$LOGS/torch_ddp_shim.log" | tail -12 >> "$OUT/summary.txt"
# The weft backend, built here against this machine's torch (about 40 s on 16 cores); its build
# script finds the environment a one-rank weft group runs in (the first try crashed inside
# torch's process: free(): invalid pointer) and writes it to env.sh.
if [ -n "${BUNDLE:-}" ] && RUN_S=200 run torch_build.log bash tests/gpu/torch_build.sh; then
  RUN_S=200 run torch_backend_cuda.log bash -c ". /tmp/weft-torch-cuda/env.sh && \
    ${PYTHON:-python3} tests/gpu/torch_backend_cuda.py --sizes 1 7 4099 4194304 --group-timeout 90 \
    --logdir $LOGS/torch"
  grep -E "ALL OK|FAIL" "$LOGS/torch_backend_cuda.log" | tail -12 >> "$OUT/summary.txt"
else
  tail -20 "$LOGS/torch_build.log" >> "$OUT/summary.txt"
fi

step "latency breakdown (tests/gpu/latency.sh; figures in latency.txt)"
bash tests/gpu/latency.sh > /dev/null 2>&1
grep -E '^(==|torch|mps|no-mps|mps) ' "$OUT/latency.txt" | head -60 >> "$OUT/summary.txt"
pack
cat "$OUT/summary.txt"
exit $status
