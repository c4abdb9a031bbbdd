// CUDA codec kernels (see codec_cuda.h): kernels/codec_kernels.h's bodies, the same source the
// emulated GPU runs, so the bits are the CPU's by construction. Bitwise equality first, speed
// second; each kernel says how it divides the work:
//   casts, and decoding without Hadamard   one thread per value (grid-stride, coalesced);
//   block codecs' encode                   one thread per codec block: the thread runs
//                                          codec_ref.h's block encoder over its B values
//                                          (serial within a block; uncoalesced reads);
//   Hadamard (encode and decode)           one thread per codec block too, its rotated block in
//                                          global scratch from cudaMallocAsync (B floats per
//                                          thread in flight, at most kRotationScratchBytes, plus
//                                          the B signs), freed in stream order after the kernel;
//   top-k encode                           ONE block of 1024 threads: four histogram passes over
//                                          the input (8 key bits each, shared-memory atomics),
//                                          then one index-ordered compaction pass with block
//                                          prefix sums. Cost: five reads of the input by one SM,
//                                          about 5 x count x 4 bytes at one SM's bandwidth
//                                          (tens of GB/s): ~1 ms per million values. Fine for
//                                          correctness and the tests; a multi-block select is
//                                          the speed-up when top-k on device matters;
//   top-k decode                           zeros (cudaMemsetAsync), then one thread per kept
//                                          pair scatters it; decode-reduce does that into a
//                                          temporary and reduces every value into dst (dst
//                                          (op) +0 where nothing was kept, as the CPU does).
// Built with --fmad=false -ftz=false -prec-div=true -prec-sqrt=true (cmake/device_plugins.cmake):
// no multiply-add contraction, subnormals kept, IEEE division and square root, as on the CPU.
#include "kernels/codec_cuda.h"

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/codec_kernels.h"
#include "kernels/cuda_grid.cuh"

namespace weft::kernels::cuda {
namespace {

using codec::CodecPlan;

constexpr int kTopKThreads = 1024;
// Room for the rotated blocks in flight: B floats per thread, never more than this in all.
constexpr size_t kRotationScratchBytes = size_t{64} << 20;

bool IsCast(const CodecPlan& p) { return p.codec == weftCodecBf16 || p.codec == weftCodecFp16; }

// ---- kernels ----

__global__ void EncodeCastKernel(CodecPlan p, const float* src, uint8_t* dst) {
  for (size_t i = GridFirst(); i < p.count; i += GridStride()) codec::EncodeCastAt(p, src, dst, i);
}

__global__ void SignsKernel(uint32_t key, size_t block, float* signs) {
  for (size_t j = GridFirst(); j < block; j += GridStride()) signs[j] = codec::RotationSign(key, j);
}

// One thread per codec block; `scratch`: B floats per thread (rotating codecs only).
__global__ void EncodeBlocksKernel(CodecPlan p, const float* src, uint8_t* dst, const float* signs,
                                   float* scratch) {
  float* rotated = scratch != nullptr ? scratch + GridFirst() * p.block : nullptr;
  for (size_t b = GridFirst(); b < p.blocks; b += GridStride())
    codec::EncodeBlockAt(p, src, dst, b, signs, rotated);
}

template <typename Sink>
__global__ void DecodeValuesKernel(CodecPlan p, const uint8_t* src, float* dst) {
  for (size_t i = GridFirst(); i < p.count; i += GridStride())
    Sink::Apply(dst + i, codec::DecodeValueAt(p, src, i));
}

template <typename Sink>
__global__ void DecodeRotatedKernel(CodecPlan p, const uint8_t* src, float* dst, const float* signs,
                                    float* scratch) {
  float* rotated = scratch + GridFirst() * p.block;
  for (size_t b = GridFirst(); b < p.blocks; b += GridStride()) {
    codec::DecodeRotatedBlockAt(p, src, b, signs, rotated);
    const size_t first = b * p.block;
    const size_t n = p.count - first < p.block ? p.count - first : p.block;
    for (size_t j = 0; j < n; ++j) Sink::Apply(dst + first + j, rotated[j]);
  }
}

__global__ void ScatterKeptKernel(CodecPlan p, const uint8_t* src, float* values) {
  for (size_t j = GridFirst(); j < p.kept; j += GridStride())
    codec::ScatterKeptAt(p, src, j, values);
}

template <typename Sink>
__global__ void ApplyValuesKernel(size_t count, const float* values, float* dst) {
  for (size_t i = GridFirst(); i < count; i += GridStride()) Sink::Apply(dst + i, values[i]);
}

// Exclusive prefix sum of v over the thread block (blockDim.x a multiple of 32); *total: the
// block's sum. Every thread of the block must call it.
__device__ uint32_t BlockExclusiveSum(uint32_t v, uint32_t* total) {
  __shared__ uint32_t warp_sums[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint32_t x = v;
  for (unsigned o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < warps ? warp_sums[lane] : 0;
    for (unsigned o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;  // inclusive sums of the warps
  }
  __syncthreads();
  const uint32_t before = (warp == 0 ? 0u : warp_sums[warp - 1]) + x - v;
  *total = warp_sums[warps - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return before;
}

// Top-k in one thread block (see the file comment): the threshold key and how many keys equal
// to it are kept, then the kept pairs in index order.
__global__ void __launch_bounds__(kTopKThreads) TopKKernel(CodecPlan p, const float* src,
                                                           uint8_t* dst) {
  __shared__ uint32_t histogram[codec::kTopKDigits];
  __shared__ uint32_t threshold, ties;
  if (threadIdx.x == 0) {
    threshold = 0;
    ties = static_cast<uint32_t>(p.kept);
  }
  for (int shift = codec::kTopKFirstShift; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < codec::kTopKDigits; d += blockDim.x) histogram[d] = 0;
    __syncthreads();
    const uint32_t prefix = threshold;
    for (size_t i = threadIdx.x; i < p.count; i += blockDim.x) {
      const uint32_t key = codec::TopKKey(src[i]);
      if (codec::TopKInPass(key, prefix, shift))
        atomicAdd(&histogram[codec::TopKDigit(key, shift)], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t need = ties;
      threshold = prefix | (codec::TopKPickDigit(histogram, &need) << shift);
      ties = need;
    }
    __syncthreads();
  }
  const uint32_t t = threshold, wanted_ties = ties;
  size_t ties_seen = 0, written = 0;  // equal in every thread: block-wide totals
  for (size_t base = 0; base < p.count && written < p.kept; base += blockDim.x) {
    const size_t i = base + threadIdx.x;
    const bool valid = i < p.count;
    const uint32_t key = valid ? codec::TopKKey(src[i]) : 0;
    uint32_t tie_total = 0, kept_total = 0;
    const uint32_t ties_before = BlockExclusiveSum(valid && key == t ? 1u : 0u, &tie_total);
    const bool keep = valid && codec::TopKKeeps(key, t, ties_seen + ties_before, wanted_ties);
    const uint32_t out = BlockExclusiveSum(keep ? 1u : 0u, &kept_total);
    if (keep)
      codec::StoreKept(dst, p.kept, written + out, static_cast<uint32_t>(i), FloatBits(src[i]));
    ties_seen += tie_total;
    written += kept_total;
  }
}

// ---- launchers ----

// The signs d and the per-thread room of a rotating codec, from the stream-ordered allocator.
struct Rotation {
  float* memory = nullptr;  // the B signs, then B floats per thread
  unsigned int grid = 0, threads = 0;
};

weftResult_t BeginRotation(const CodecPlan& p, cudaStream_t stream, Rotation* r) {
  size_t in_flight = kRotationScratchBytes / (p.block * sizeof(float));
  if (in_flight < 1) in_flight = 1;
  if (in_flight > p.blocks) in_flight = p.blocks;
  r->threads = static_cast<unsigned int>(in_flight < kThreads ? in_flight : kThreads);
  r->grid = static_cast<unsigned int>((in_flight + r->threads - 1) / r->threads);
  const size_t floats = p.block * (1 + static_cast<size_t>(r->grid) * r->threads);
  if (cudaMallocAsync(reinterpret_cast<void**>(&r->memory), floats * sizeof(float), stream) !=
      cudaSuccess)
    return weftUnhandledCudaError;
  SignsKernel<<<BlocksFor(p.block), kThreads, 0, stream>>>(p.rotation_key, p.block, r->memory);
  if (LaunchResult() == weftSuccess) return weftSuccess;
  (void)cudaFreeAsync(r->memory, stream);
  return weftUnhandledCudaError;
}

// After the rotating kernel was launched: its result, the scratch freed in stream order.
weftResult_t EndRotation(const Rotation& r, cudaStream_t stream) {
  const weftResult_t launched = LaunchResult();
  const bool freed = cudaFreeAsync(r.memory, stream) == cudaSuccess;
  return launched != weftSuccess ? launched : freed ? weftSuccess : weftUnhandledCudaError;
}

// Top-k's decode: the kept pairs over zeros, straight into dst (StoreSink) or into a temporary
// that every value of dst is then reduced with.
template <typename Sink>
weftResult_t DecodeTopK(const CodecPlan& p, const uint8_t* src, float* dst, cudaStream_t stream) {
  constexpr bool kStore = std::is_same_v<Sink, codec::StoreSink>;
  float* values = dst;
  if (!kStore && cudaMallocAsync(reinterpret_cast<void**>(&values), p.count * sizeof(float),
                                 stream) != cudaSuccess)
    return weftUnhandledCudaError;
  bool ok = cudaMemsetAsync(values, 0, p.count * sizeof(float), stream) == cudaSuccess;
  ScatterKeptKernel<<<BlocksFor(p.kept), kThreads, 0, stream>>>(p, src, values);
  ok = LaunchResult() == weftSuccess && ok;
  if (!kStore) {
    ApplyValuesKernel<Sink><<<BlocksFor(p.count), kThreads, 0, stream>>>(p.count, values, dst);
    ok = LaunchResult() == weftSuccess && ok;
    ok = cudaFreeAsync(values, stream) == cudaSuccess && ok;
  }
  return ok ? weftSuccess : weftUnhandledCudaError;
}

template <typename Sink>
weftResult_t DecodeInto(const CodecPlan& p, const uint8_t* src, float* dst, cudaStream_t stream) {
  if (p.count == 0) return weftSuccess;
  if (p.codec == weftCodecTopK) return DecodeTopK<Sink>(p, src, dst, stream);
  if (!p.hadamard) {
    DecodeValuesKernel<Sink><<<BlocksFor(p.count), kThreads, 0, stream>>>(p, src, dst);
    return LaunchResult();
  }
  Rotation r;
  if (BeginRotation(p, stream, &r) != weftSuccess) return weftUnhandledCudaError;
  DecodeRotatedKernel<Sink><<<r.grid, r.threads, 0, stream>>>(p, src, dst, r.memory,
                                                                r.memory + p.block);
  return EndRotation(r, stream);
}

}  // namespace

weftResult_t Encode(const CodecPlan& p, void* dst, const void* src, void* cudaStream) {
  const auto stream = static_cast<cudaStream_t>(cudaStream);
  const auto* x = static_cast<const float*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (p.count == 0) return weftSuccess;
  if (IsCast(p)) {
    EncodeCastKernel<<<BlocksFor(p.count), kThreads, 0, stream>>>(p, x, d);
    return LaunchResult();
  }
  if (p.codec == weftCodecTopK) {
    TopKKernel<<<1, kTopKThreads, 0, stream>>>(p, x, d);
    return LaunchResult();
  }
  if (!p.hadamard) {
    EncodeBlocksKernel<<<BlocksFor(p.blocks), kThreads, 0, stream>>>(p, x, d, nullptr, nullptr);
    return LaunchResult();
  }
  Rotation r;
  if (BeginRotation(p, stream, &r) != weftSuccess) return weftUnhandledCudaError;
  EncodeBlocksKernel<<<r.grid, r.threads, 0, stream>>>(p, x, d, r.memory, r.memory + p.block);
  return EndRotation(r, stream);
}

weftResult_t Decode(const CodecPlan& p, void* dst, const void* src, void* cudaStream) {
  return DecodeInto<codec::StoreSink>(p, static_cast<const uint8_t*>(src), static_cast<float*>(dst),
                                      static_cast<cudaStream_t>(cudaStream));
}

weftResult_t DecodeReduce(const CodecPlan& p, void* dst, const void* src, weftRedOp_t op,
                          void* cudaStream) {
  weftResult_t result = weftInvalidArgument;
  codec::WithReduceSink(op, [&](auto sink) {
    result = DecodeInto<decltype(sink)>(p, static_cast<const uint8_t*>(src),
                                        static_cast<float*>(dst),
                                        static_cast<cudaStream_t>(cudaStream));
  });
  return result;
}

}  // namespace weft::kernels::cuda
