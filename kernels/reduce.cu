// CUDA reduction kernels (see reduce_cuda.h; semantics in reduce.h).
//
// One dispatch table (dtype, op) -> launcher, instantiated from templates, as on the CPU.
// Each kernel is a grid-stride loop: when dst, a and b are all 16-byte aligned, threads move
// 16 bytes per operand per iteration (uint4 loads/stores), and the last count % (16 / size)
// elements run element by element; otherwise the whole range runs element by element.
// fp16/bf16 convert to float, compute, and round once to nearest even (cvt.rn), like the CPU.
// Device code keeps subnormals (nvcc's default -ftz=false).
#include "kernels/reduce_cuda.h"

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace weft::kernels::cuda {
namespace {

// ---- storage <-> compute ----
template <typename T>
struct NativeTraits {
  using Storage = T;
  using Compute = T;
  __device__ static T Load(T x) { return x; }
  __device__ static T Store(T x) { return x; }
};

struct HalfTraits {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float Load(uint16_t x) { return __half2float(__ushort_as_half(x)); }
  __device__ static uint16_t Store(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

struct Bfloat16Traits {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float Load(uint16_t x) {
    return __uint_as_float(static_cast<uint32_t>(x) << 16);
  }
  __device__ static uint16_t Store(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};

// ---- element operations: the same definitions as kernels/reduce_loops.h ----
__device__ inline float BitAnd(float a, float b) {
  return __int_as_float(__float_as_int(a) & __float_as_int(b));
}
__device__ inline float BitOr(float a, float b) {
  return __int_as_float(__float_as_int(a) | __float_as_int(b));
}
__device__ inline double BitAnd(double a, double b) {
  return __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b));
}
__device__ inline double BitOr(double a, double b) {
  return __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b));
}

template <typename T>
struct SumOp {
  __device__ static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;  // wraps modulo 2^bits without UB
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct ProdOp {
  __device__ static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// fmaxf/fminf return the non-NaN operand; weft propagates NaN and orders -0 < +0.
template <typename T>
struct MaxOp {
  __device__ static T Apply(T a, T b) {
    T r = a > b ? a : b;
    if constexpr (std::is_floating_point_v<T>) {
      if (a == b) r = BitAnd(a, b);
      if (a != a) r = a;
      if (b != b) r = b;
    }
    return r;
  }
};

template <typename T>
struct MinOp {
  __device__ static T Apply(T a, T b) {
    T r = a < b ? a : b;
    if constexpr (std::is_floating_point_v<T>) {
      if (a == b) r = BitOr(a, b);
      if (a != a) r = a;
      if (b != b) r = b;
    }
    return r;
  }
};

template <typename Traits, template <typename> class Op>
__device__ inline typename Traits::Storage ApplyElement(typename Traits::Storage x,
                                                        typename Traits::Storage y) {
  using C = typename Traits::Compute;
  return Traits::Store(Op<C>::Apply(Traits::Load(x), Traits::Load(y)));
}

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
  for (size_t i = vectors * kPerVector + first; i < count; i += stride) {
    dst[i] = ApplyElement<Traits, Op>(a[i], b[i]);
  }
}

template <typename Traits>
__global__ void FinalizeAvgKernel(typename Traits::Storage* dst, size_t count, int divisor) {
  using C = typename Traits::Compute;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    if constexpr (std::is_integral_v<C>) {
      // As on the CPU: 8-bit values divide as int (the divisor must not be narrowed).
      using Wide = std::conditional_t<(sizeof(C) < sizeof(int)), int, C>;
      dst[i] = static_cast<C>(static_cast<Wide>(dst[i]) / static_cast<Wide>(divisor));
    } else {
      dst[i] = Traits::Store(Traits::Load(dst[i]) / static_cast<C>(divisor));
    }
  }
}

// ---- launchers and the dispatch table ----
constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride loops cover the rest.
constexpr size_t kMaxBlocks = 4096;

unsigned int BlocksFor(size_t work) {
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned int>(blocks == 0 ? 1 : blocks);
}

weftResult_t LaunchResult() {
  // cudaGetLastError also clears a sticky launch error so later calls are not blamed for it.
  return cudaGetLastError() == cudaSuccess ? weftSuccess : weftUnhandledCudaError;
}

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

}  // namespace weft::kernels::cuda
