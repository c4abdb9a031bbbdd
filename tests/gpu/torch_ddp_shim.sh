#!/usr/bin/env bash
# Unmodified PyTorch DDP (backend "nccl") on weft's NCCL shim, 2 ranks on one GPU, against 1
# rank on the doubled batch (tests/gpu/torch_ddp_shim.py says what is compared and how).
#   tests/gpu/torch_ddp_shim.sh SHIM_DIR WEFT_LIB_DIR [LOGDIR]
# SHIM_DIR holds libnccl.so.2 (build/nccl-shim, or .gpu-bundle/nccl-shim from bundle.sh);
# WEFT_LIB_DIR holds libweft.so.0 and libweft-device-cuda.so (build, or .gpu-bundle, whose lib/
# folder of host libraries is added too).
# PYTHON (default python3) must have torch with CUDA. First checks that every NCCL function
# this torch imports is exported by the shim (a missing one is a fatal symbol lookup error
# under LD_PRELOAD), then runs the comparison (under 90 s). Exit status 0 only on PASS.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 SHIM_DIR WEFT_LIB_DIR [LOGDIR]" >&2
  exit 2
fi
shim_dir=$1 weft_lib=$2 logdir=${3:-}
PYTHON=${PYTHON:-python3}
shim=$shim_dir/libnccl.so.2
[ -f "$shim" ] || { echo "FAIL: no $shim" >&2; exit 2; }
[ -f "$weft_lib/libweft.so.0" ] || { echo "FAIL: no $weft_lib/libweft.so.0" >&2; exit 2; }
torch_lib=$(timeout 60 "$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))' 2>/dev/null)
echo "== torch's NCCL imports against the shim's exports"
bash "$here/../../bindings/nccl/tests/torch_symbols_test.sh" "$torch_lib" "$shim"
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "(no libtorch_cuda.so from $PYTHON: the import check did not run)"
elif [ "$rc" -ne 0 ]; then
  echo "FAIL: the shim lacks functions this torch imports"
  exit 1
fi
echo "== DDP on the shim, 2 ranks on one GPU, vs 1 rank on the doubled batch"
timeout 88 "$PYTHON" "$here/torch_ddp_shim.py" --shim "$shim" --weft-lib "$weft_lib" \
  ${logdir:+--logdir "$logdir"}
