// The CPU backend's codec hooks (see codec_backend.h).
#include "kernels/codec_backend.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_reduce.h"
#include "kernels/codec_topk.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace weft {
namespace {

Status CheckSpec(const weftCompression& spec) {
  std::string why = codec::ValidateSpec(spec);
  if (!why.empty()) return InvalidArgument("cpu kernel backend: codec spec: " + why);
  return OkStatus();
}

// `m` must be host memory of at least `bytes` (exactly `bytes` when `exact`).
Status CheckHost(const MemRef& m, size_t bytes, const char* what, bool exact) {
  if (m.kind == MemKind::kCudaDevice)
    return InvalidArgument(std::string("cpu kernel backend: ") + what + " is " +
                           MemKindName(m.kind) + " memory, which the CPU cannot access");
  if (bytes > 0 && m.ptr == nullptr)
    return InvalidArgument(std::string("cpu kernel backend: ") + what + " is null");
  if (m.bytes < bytes || (exact && m.bytes != bytes))
    return InvalidArgument(std::string("cpu kernel backend: ") + what + " holds " +
                           std::to_string(m.bytes) + " bytes, the codec " +
                           (exact ? "encodes to exactly " : "needs ") + std::to_string(bytes) +
                           " (a mismatched codec spec or a truncated message)");
  return OkStatus();
}

// The codecs read and write float32 or bf16 values (codec::EncodeValues / DecodeValues).
Status CheckValueType(weftDataType_t values, const char* what) {
  if (values == weftFloat32 || values == weftBfloat16) return OkStatus();
  return InvalidArgument(std::string("cpu kernel backend: ") + what + " values of datatype " +
                         DataTypeName(values) + " (" + std::to_string(static_cast<int>(values)) +
                         "): the codecs take weftFloat32 or weftBfloat16 values");
}

// Decoded values of a decode-reduce, reused by the thread (grows only).
thread_local std::vector<float> t_decoded;

// Values a fused decode-reduce decodes at a time: 16 KiB of float32 stays in the L1/L2 cache
// between the decode that writes it and the reduction that reads it.
constexpr size_t kDecodeReduceChunk = 4096;

std::atomic<uint64_t> g_streamed_decodes{0};

}  // namespace

uint64_t CpuStreamedDecodes() { return g_streamed_decodes.load(std::memory_order_relaxed); }

Status CheckDecodeSrc(const MemRef& src, size_t count, const weftCompression& spec) {
  WEFT_RETURN_IF_ERROR(CheckSpec(spec));
  return CheckHost(src, codec::EncodedBytes(spec, count), "decode src", true);
}

Status CpuEncode(const MemRef& dst, const MemRef& src, size_t count, const weftCompression& spec,
                 uint64_t stream, size_t* encoded_bytes, weftDataType_t values) {
  WEFT_RETURN_IF_ERROR(CheckSpec(spec));
  WEFT_RETURN_IF_ERROR(CheckValueType(values, "encode"));
  const size_t bytes = codec::EncodedBytes(spec, count);
  WEFT_RETURN_IF_ERROR(CheckHost(src, count * TypeSize(values), "encode src", false));
  WEFT_RETURN_IF_ERROR(CheckHost(dst, bytes, "encode dst", false));
  if (count > 0)
    codec::EncodeValues(spec, values, src.ptr, count, static_cast<uint8_t*>(dst.ptr), stream);
  *encoded_bytes = bytes;
  return OkStatus();
}

Status CpuDecode(const MemRef& dst, const MemRef& src, size_t count, const weftCompression& spec,
                 weftDataType_t values) {
  WEFT_RETURN_IF_ERROR(CheckValueType(values, "decode"));
  WEFT_RETURN_IF_ERROR(CheckDecodeSrc(src, count, spec));
  WEFT_RETURN_IF_ERROR(CheckHost(dst, count * TypeSize(values), "decode dst", false));
  if (count == 0) return OkStatus();
  const auto* encoded = static_cast<const uint8_t*>(src.ptr);
  if (dst.streaming) {  // a final write of a large output (exec/executor.cc DstRef)
    g_streamed_decodes.fetch_add(1, std::memory_order_relaxed);
    codec::DecodeValuesStreamed(spec, encoded, count, values, dst.ptr);
  } else {
    codec::DecodeValues(spec, encoded, count, values, dst.ptr);
  }
  return OkStatus();
}

Status CpuDecodeReduce(const MemRef& dst, const MemRef& src, size_t count,
                       const weftCompression& spec, weftRedOp_t op) {
  if (!IsValidRedOp(op))
    return InvalidArgument("cpu kernel backend: op " + std::to_string(static_cast<int>(op)) +
                           " is not a valid weftRedOp_t");
  const size_t align = codec::DecodeRangeAlignment(spec);
  WEFT_RETURN_IF_ERROR(CheckDecodeSrc(src, count, spec));
  WEFT_RETURN_IF_ERROR(CheckHost(dst, count * sizeof(float), "decode_reduce dst", false));
  const auto* encoded = static_cast<const uint8_t*>(src.ptr);
  float* out = static_cast<float*>(dst.ptr);
  if (align == 0) {  // top-k decodes only whole: its kept values added in one pass (sum, avg),
                     // else decoded into a buffer of count, then reduced
    if ((op == weftSum || op == weftAvg) &&
        codec::DecodeAddTopK(encoded, count, codec::TopKCount(spec.ratio, count), out))
      return OkStatus();
    if (count == 0) return OkStatus();
    if (t_decoded.size() < count) t_decoded.resize(count);
    codec::Decode(spec, encoded, count, t_decoded.data());
    kernels::Reduce(out, out, t_decoded.data(), count, weftFloat32, op);
    return OkStatus();
  }
  // Fused: a cache-sized chunk decoded and reduced into dst at a time (per block in registers
  // for sum/avg where the codec has the kernel: codec::DecodeReduceRange); the same bits as
  // decoding everything first (the reduction is element-wise), one pass over dst instead of
  // a decoded copy of count written and read back.
  const size_t chunk = std::max(align, kDecodeReduceChunk / align * align);
  if (t_decoded.size() < chunk) t_decoded.resize(chunk);
  for (size_t first = 0; first < count; first += chunk) {
    const size_t n = std::min(chunk, count - first);
    codec::DecodeReduceRange(spec, encoded, count, first, n, op, out + first, t_decoded.data());
  }
  return OkStatus();
}

}  // namespace weft
