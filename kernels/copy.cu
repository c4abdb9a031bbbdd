// The SM copy kernel (see copy_cuda.h): a grid-stride loop of 16-byte words when dst and src
// have the same offset modulo 16 (the bytes before dst's first aligned word and after its last
// go one by one), bytes otherwise. The grid is capped at kCopyMaxBlocks blocks, a quarter of an
// H100's SMs: a copy this kernel gets is small by construction (ipc_options.h sends large ones
// to the copy engine), and the caller's compute kernels keep the rest of the GPU.
#include "kernels/copy_cuda.h"

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda_grid.cuh"

namespace weft::kernels::cuda {
namespace {

constexpr size_t kCopyMaxBlocks = 32;

// Bytes [0, head) and [head + 16 * words, bytes) one by one; 16-byte words in between.
__global__ void CopyKernel(uint8_t* dst, const uint8_t* src, size_t bytes, size_t head,
                           size_t words) {
  for (size_t i = GridFirst(); i < head; i += GridStride()) dst[i] = src[i];
  const auto* from = reinterpret_cast<const uint4*>(src + head);
  auto* to = reinterpret_cast<uint4*>(dst + head);
  for (size_t w = GridFirst(); w < words; w += GridStride()) to[w] = from[w];
  for (size_t i = head + 16 * words + GridFirst(); i < bytes; i += GridStride()) dst[i] = src[i];
}

}  // namespace

weftResult_t Copy(void* dst, const void* src, size_t bytes, void* cudaStream) {
  if (bytes == 0) return weftSuccess;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  size_t head = bytes, words = 0;  // different offsets modulo 16: every byte on its own
  if ((d - s) % 16 == 0) {
    head = (16 - d % 16) % 16;
    if (head > bytes) head = bytes;
    words = (bytes - head) / 16;
  }
  size_t blocks = BlocksFor(words + 16);  // + the stray bytes: at most 15 on each side
  if (blocks > kCopyMaxBlocks) blocks = kCopyMaxBlocks;
  const auto stream = static_cast<cudaStream_t>(cudaStream);
  CopyKernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(
      static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes, head, words);
  return LaunchResult();
}

}  // namespace weft::kernels::cuda
