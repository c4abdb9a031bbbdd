#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs from a build made HERE (WEFT_CUDA=ON or AUTO with nvcc)
# into one folder the `device` tool can carry: the lent GPU machine has CUDA, CMake and
# PyTorch but no GoogleTest, hwloc or UCX and no registry to fetch them from, so the suite
# cannot be built there. Binaries are stripped (the carried tree has a 64 MiB limit); the
# host libraries they link (hwloc, UCX, udev, numa) travel beside them.
#   tests/gpu/bundle.sh [BUILD_DIR=build] [DEST=.gpu-bundle]
# then: device run, carry [".gpu-bundle"], command "BUNDLE=.gpu-bundle tests/gpu/run.sh".
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
DEST=${2:-.gpu-bundle}
[ -f "$BUILD/libweft-device-cuda.so" ] ||
  { echo "bundle.sh: $BUILD has no libweft-device-cuda.so (configure with WEFT_CUDA=ON)" >&2; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/nccl-shim"
bins="weftrun weft-perf nccl-perf weft_test_worker device_kernels_test device_codecs_test
      device_ipc_copy_test device_collectives_test
      device_runtime_test device_compressed_test gpu_kernels_test nccl_api_test
      nccl_device_test"
for b in $bins; do
  [ -x "$BUILD/bin/$b" ] && strip -o "$DEST/bin/$b" "$BUILD/bin/$b"
done
for l in libweft.so.0 libweft-device-cuda.so libweft-device-emulated.so; do
  strip -o "$DEST/$l" "$BUILD/$l"
done
strip -o "$DEST/nccl-shim/libnccl.so.2" "$BUILD/nccl-shim/libnccl.so.2"
# The GPU's floor for the ipc hand-offs (tests/gpu/latency.sh): plain CUDA, cudart static.
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O2 -std=c++17 -o "$DEST/bin/flag_pingpong" tests/gpu/flag_pingpong.cu
# The copy model's calibration (transports/ipc/ipc_options.h): weft's SM copy kernel against
# the copy engine, device to device.
"$NVCC" -O2 -std=c++17 -DWEFT_HAVE_CUDA=1 -I include -I . -o "$DEST/bin/copy_paths" \
  tests/gpu/copy_paths.cu kernels/copy.cu
# The non-system libraries the binaries link, resolved as the loader does here.
ldd "$DEST/bin/weft-perf" "$DEST/libweft.so.0" | awk '/=> \// {print $3}' | sort -u |
  grep -E 'libhwloc|libuc[pstm]|libudev|libnuma' | while read -r so; do
    cp -L "$so" "$DEST/lib/"
  done
# Never committed: the carried folder is rebuilt from a build each time.
EXCLUDE=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
grep -qx "/$DEST/" "$EXCLUDE" 2>/dev/null || echo "/$DEST/" >> "$EXCLUDE"
du -sh "$DEST"
