// The launch geometry and launch check the CUDA kernels share (reduce.cu, codec.cu): nvcc only.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "weft/weft.h"

namespace weft::kernels::cuda {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride loops cover the rest.
constexpr size_t kMaxBlocks = 4096;

inline unsigned int BlocksFor(size_t work) {
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned int>(blocks == 0 ? 1 : blocks);
}

inline weftResult_t LaunchResult() {
  // cudaGetLastError also clears a sticky launch error so later calls are not blamed for it.
  return cudaGetLastError() == cudaSuccess ? weftSuccess : weftUnhandledCudaError;
}

// A grid-stride loop's first index and stride.
__device__ inline size_t GridFirst() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline size_t GridStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

}  // namespace weft::kernels::cuda
