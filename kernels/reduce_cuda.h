// CUDA reduction kernels: the device-buffer counterpart of kernels/reduce.h.
//
// Same semantics as the CPU kernels, element for element (reduce.h documents them; the GPU
// test compares both bitwise, NaN payloads aside). Calls are asynchronous on `cudaStream`
// (a cudaStream_t passed as void* so that this header needs no CUDA headers; nullptr = the
// legacy default stream). Results: weftSuccess, weftInvalidArgument for an invalid dtype/op,
// weftUnhandledCudaError when the launch fails.
//
// Only built when CMake finds nvcc, into the cuda device plugin (libweft-device-cuda.so) and the
// GPU kernel test, which define WEFT_HAVE_CUDA; without it the declarations are absent, so
// code that needs them must be guarded the same way. kCudaKernelsBuilt lets
// unguarded code ask.
#pragma once

#include <cstddef>

#include "weft/weft.h"

namespace weft::kernels::cuda {

#ifdef WEFT_HAVE_CUDA
inline constexpr bool kCudaKernelsBuilt = true;

// dst[i] = a[i] (op) b[i], i < count; dst may alias a or b exactly. weftAvg reduces as sum.
weftResult_t Reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
                    weftRedOp_t op, void* cudaStream);

// For weftAvg: dst[i] /= divisor (once, at the end). No-op for other ops and divisor <= 1.
weftResult_t Finalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op, int divisor,
                      void* cudaStream);

// dst (dst_type) = src (src_type), floating types only (kernels/element_ops.h's CastBody).
weftResult_t Cast(void* dst, weftDataType_t dst_type, const void* src, weftDataType_t src_type,
                  size_t count, void* cudaStream);
#else
inline constexpr bool kCudaKernelsBuilt = false;
#endif

}  // namespace weft::kernels::cuda
