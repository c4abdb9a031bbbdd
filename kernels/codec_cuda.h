// CUDA codec kernels: the device-buffer counterpart of kernels/codec_backend.h's CPU hooks,
// compiled by nvcc from kernels/codec_kernels.h (the source the emulated GPU runs), bit for
// bit what the CPU writes (tests/device_codecs_test.cc with WEFTTEST_DEVICE=cuda).
//
// Calls are asynchronous on `cudaStream` (a cudaStream_t as void*, so that this header needs
// no CUDA headers). The plan comes from codec::MakeCodecPlan (a valid spec); pointers are
// device memory, float32 ones 4-byte aligned (the cuda plugin checks both). Results:
// weftSuccess, weftInvalidArgument for an invalid op, weftUnhandledCudaError when a launch or
// a stream-ordered allocation fails.
//
// Only built with WEFT_HAVE_CUDA, as reduce_cuda.h.
#pragma once

#include <cstddef>

#include "weft/weft.h"

namespace weft::codec {
struct CodecPlan;  // kernels/codec_kernels.h
}

namespace weft::kernels::cuda {

#ifdef WEFT_HAVE_CUDA
// dst (plan.encoded_bytes) = encode(src[0..plan.count)).
weftResult_t Encode(const codec::CodecPlan& plan, void* dst, const void* src, void* cudaStream);
// dst[0..plan.count) = decode(src).
weftResult_t Decode(const codec::CodecPlan& plan, void* dst, const void* src, void* cudaStream);
// dst[0..plan.count) = dst (op) decode(src); weftAvg reduces as sum.
weftResult_t DecodeReduce(const codec::CodecPlan& plan, void* dst, const void* src,
                          weftRedOp_t op, void* cudaStream);
#endif

}  // namespace weft::kernels::cuda
