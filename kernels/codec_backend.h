// The CPU kernel backend's compression hooks (KernelBackend::Encode / Decode / DecodeReduce in
// kernels/kernel_backend.h): argument checks naming the operand and sizes, then the codecs of
// kernels/codec.h on float32 or bf16 values (decode_reduce: float32). Every call completes
// before it returns.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/memref.h"
#include "common/status.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft {

// dst = encode(src[0..count)); *encoded_bytes = codec::EncodedBytes(spec, count). `values` is
// src's type, weftFloat32 or weftBfloat16 (codec::EncodeValues); another is refused by name.
Status CpuEncode(const MemRef& dst, const MemRef& src, size_t count, const weftCompression& spec,
                 uint64_t stream, size_t* encoded_bytes, weftDataType_t values = weftFloat32);
// dst[0..count) = decode(src); src.bytes must be the exact encoded size of count values.
// `values` is dst's type, as CpuEncode's.
// The spec is valid and src is host memory holding exactly the encoding of count values (the
// decodes' check; the executor's codec chains, which call the codecs directly, make it too).
Status CheckDecodeSrc(const MemRef& src, size_t count, const weftCompression& spec);
// dst.streaming (a final write of a large output) decodes with streaming stores
// (codec::DecodeValuesStreamed: the same bits).
Status CpuDecode(const MemRef& dst, const MemRef& src, size_t count, const weftCompression& spec,
                 weftDataType_t values = weftFloat32);
// Decodes this process ran with dst.streaming (tests check the path was taken).
uint64_t CpuStreamedDecodes();
// dst[0..count) = dst (op) decode(src), reduced in float32 by kernels/reduce.h (op sum or avg:
// a sum; avg's division stays in Finalize).
Status CpuDecodeReduce(const MemRef& dst, const MemRef& src, size_t count,
                       const weftCompression& spec, weftRedOp_t op);

}  // namespace weft
