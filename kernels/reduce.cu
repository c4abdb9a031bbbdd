// CUDA reduction kernels (see reduce_cuda.h; semantics in reduce.h).
//
// One dispatch table (dtype, op) -> launcher, instantiated from templates, as on the CPU.
// Each kernel is a grid-stride loop: when dst, a and b are all 16-byte aligned, threads move
// 16 bytes per operand per iteration (uint4 loads/stores), and the last count % (16 / size)
// elements run element by element; otherwise the whole range runs element by element.
// fp16/bf16 convert to float, compute, and round once to nearest even with the CPU's own
// integer conversions (kernels/half.h), so NaN payloads match too.
// Device code keeps subnormals (nvcc's default -ftz=false).
#include "kernels/reduce_cuda.h"

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/cuda_grid.cuh"
#include "kernels/element_ops.h"

namespace weft::kernels::cuda {
namespace {

// The element operations, storage traits and kernel bodies are kernels/element_ops.h's: the
// same source the CPU backend and the emulated GPU compile (one definition, no copy here).

// ---- kernels ----
// `vectors` 16-byte groups are processed as uint4 (0 when the pointers are not all aligned),
// then elements [vectors * kPerVector, count) one by one.
template <typename Traits, template <typename> class Op>
__global__ void ReduceKernel(typename Traits::Storage* dst, const typename Traits::Storage* a,
                             const typename Traits::Storage* b, size_t count, size_t vectors) {
  using S = typename Traits::Storage;
  constexpr int kPerVector = 16 / sizeof(S);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint4* va = reinterpret_cast<const uint4*>(a);
  const uint4* vb = reinterpret_cast<const uint4*>(b);
  uint4* vd = reinterpret_cast<uint4*>(dst);
  for (size_t v = first; v < vectors; v += stride) {
    const uint4 x = va[v];
    const uint4 y = vb[v];
    S xs[kPerVector], ys[kPerVector], rs[kPerVector];
    memcpy(xs, &x, 16);
    memcpy(ys, &y, 16);
#pragma unroll
    for (int k = 0; k < kPerVector; ++k) rs[k] = ApplyElement<Traits, Op>(xs[k], ys[k]);
    uint4 r;
    memcpy(&r, rs, 16);
    vd[v] = r;
  }
  ReduceBody<Traits, Op>(dst, a, b, vectors * kPerVector + first, count, stride);
}

template <typename Traits>
__global__ void FinalizeAvgKernel(typename Traits::Storage* dst, size_t count, int divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  AvgBody<Traits>(dst, divisor, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x, count,
                  stride);
}

__global__ void CastKernel(void* dst, weftDataType_t dst_type, const void* src,
                           weftDataType_t src_type, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  CastBody(dst, dst_type, src, src_type, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
           count, stride);
}

// ---- launchers and the dispatch table (BlocksFor, LaunchResult: cuda_grid.cuh) ----
using ReduceLauncher = weftResult_t (*)(void*, const void*, const void*, size_t, cudaStream_t);
using FinalizeLauncher = weftResult_t (*)(void*, size_t, int, cudaStream_t);

template <typename Traits, template <typename> class Op>
weftResult_t LaunchReduce(void* dst, const void* a, const void* b, size_t count,
                          cudaStream_t stream) {
  using S = typename Traits::Storage;
  constexpr size_t kPerVector = 16 / sizeof(S);
  const bool aligned = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(a) |
                         reinterpret_cast<uintptr_t>(b)) & 15u) == 0;
  const size_t vectors = aligned ? count / kPerVector : 0;
  const size_t work = aligned ? vectors + (count - vectors * kPerVector) : count;
  ReduceKernel<Traits, Op><<<BlocksFor(work), kThreads, 0, stream>>>(
      static_cast<S*>(dst), static_cast<const S*>(a), static_cast<const S*>(b), count, vectors);
  return LaunchResult();
}

template <typename Traits>
weftResult_t LaunchFinalize(void* dst, size_t count, int divisor, cudaStream_t stream) {
  using S = typename Traits::Storage;
  FinalizeAvgKernel<Traits><<<BlocksFor(count), kThreads, 0, stream>>>(static_cast<S*>(dst),
                                                                      count, divisor);
  return LaunchResult();
}

struct CudaKernelTable {
  ReduceLauncher reduce[weftNumTypes][weftNumOps] = {};
  FinalizeLauncher finalize_avg[weftNumTypes] = {};
};

template <typename Traits>
void FillRow(CudaKernelTable& table, weftDataType_t dtype) {
  table.reduce[dtype][weftSum] = &LaunchReduce<Traits, SumOp>;
  table.reduce[dtype][weftProd] = &LaunchReduce<Traits, ProdOp>;
  table.reduce[dtype][weftMax] = &LaunchReduce<Traits, MaxOp>;
  table.reduce[dtype][weftMin] = &LaunchReduce<Traits, MinOp>;
  table.reduce[dtype][weftAvg] = &LaunchReduce<Traits, SumOp>;  // avg divides in Finalize
  table.finalize_avg[dtype] = &LaunchFinalize<Traits>;
}

CudaKernelTable MakeTable() {
  CudaKernelTable table;
  FillRow<NativeTraits<int8_t>>(table, weftInt8);
  FillRow<NativeTraits<uint8_t>>(table, weftUint8);
  FillRow<NativeTraits<int32_t>>(table, weftInt32);
  FillRow<NativeTraits<uint32_t>>(table, weftUint32);
  FillRow<NativeTraits<int64_t>>(table, weftInt64);
  FillRow<NativeTraits<uint64_t>>(table, weftUint64);
  FillRow<HalfTraits>(table, weftFloat16);
  FillRow<NativeTraits<float>>(table, weftFloat32);
  FillRow<NativeTraits<double>>(table, weftFloat64);
  FillRow<Bfloat16Traits>(table, weftBfloat16);
  return table;
}

const CudaKernelTable& Table() {
  static const CudaKernelTable table = MakeTable();
  return table;
}

bool ValidType(weftDataType_t dtype) {
  return static_cast<int>(dtype) >= 0 && static_cast<int>(dtype) < weftNumTypes &&
         Table().finalize_avg[dtype] != nullptr;  // reserved (fp8) rows are empty
}

bool ValidOp(weftRedOp_t op) {
  return static_cast<int>(op) >= 0 && static_cast<int>(op) < weftNumOps;
}

}  // namespace

weftResult_t Reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
                    weftRedOp_t op, void* cudaStream) {
  if (!ValidType(dtype) || !ValidOp(op)) return weftInvalidArgument;
  if (count == 0) return weftSuccess;
  return Table().reduce[dtype][op](dst, a, b, count, static_cast<cudaStream_t>(cudaStream));
}

weftResult_t Finalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op, int divisor,
                      void* cudaStream) {
  if (!ValidType(dtype) || !ValidOp(op)) return weftInvalidArgument;
  if (op != weftAvg || divisor <= 1 || count == 0) return weftSuccess;
  return Table().finalize_avg[dtype](dst, count, divisor, static_cast<cudaStream_t>(cudaStream));
}

weftResult_t Cast(void* dst, weftDataType_t dst_type, const void* src, weftDataType_t src_type,
                  size_t count, void* cudaStream) {
  if (!IsFloatingType(dst_type) || !IsFloatingType(src_type)) return weftInvalidArgument;
  if (count == 0) return weftSuccess;
  CastKernel<<<BlocksFor(count), kThreads, 0, static_cast<cudaStream_t>(cudaStream)>>>(
      dst, dst_type, src, src_type, count);
  return LaunchResult();
}

}  // namespace weft::kernels::cuda
