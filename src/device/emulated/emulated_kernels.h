// The emulated GPU's kernels: kernels/element_ops.h's bodies (the source reduce.cu compiles
// for CUDA) and kernels/codec_kernels.h's (codec.cu's) run over the whole range on the stream's
// thread, on the device threads' alias of device memory. Arguments were checked when the
// launch was queued.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/weft.h"

namespace weft::codec {
struct CodecPlan;  // kernels/codec_kernels.h
}

namespace weft::device::emulated {

// dst = a (op) b; false for an invalid dtype or op.
bool RunReduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
               weftRedOp_t op);
// avg's division (divisor >= 2); false for an invalid dtype.
bool RunFinalizeAvg(void* dst, size_t count, weftDataType_t dtype, int divisor);
// Floating casts (both types floating, already checked).
void RunCast(void* dst, weftDataType_t dst_type, const void* src, weftDataType_t src_type,
             size_t count);

// The codecs (emulated_codecs.cc): src/dst hold plan.count float32 values or the encoding.
void RunEncode(const codec::CodecPlan& plan, const float* src, uint8_t* dst);
void RunDecode(const codec::CodecPlan& plan, const uint8_t* src, float* dst);
// dst = dst (op) decode(src); false for an invalid op.
bool RunDecodeReduce(const codec::CodecPlan& plan, const uint8_t* src, float* dst, weftRedOp_t op);

}  // namespace weft::device::emulated
