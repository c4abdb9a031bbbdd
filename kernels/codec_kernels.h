// The codec kernels' bodies, one source for the device runtimes (issue 35 item 4): the emulated
// GPU runs them on its stream thread (src/device/emulated/emulated_codecs.cc) and nvcc
// compiles them into the cuda plugin's kernels (kernels/codec.cu). They frame codec_ref.h's
// per-block functions exactly as the CPU entry points do (kernels/codec.cc's EncodeBlocks /
// DecodeBlockRange, codec_topk.cc's selection rule), so device results equal CpuEncode /
// CpuDecode / CpuDecodeReduce bit for bit (tests/device_codecs_test.cc).
//
// Units of work, each independent of the others (a thread's or a loop iteration's):
//   casts          one value (EncodeCastAt; DecodeValueAt decodes one value of any codec but
//                  top-k when the spec does not rotate);
//   block codecs   one codec block (EncodeBlockAt; DecodeRotatedBlockAt with Hadamard, whose
//                  inverse needs the whole block): B values of scratch per unit when rotating;
//   top-k          a radix select over |x|'s bits, 8 bits a pass from the top (TopKDigit /
//                  TopKPickDigit), then one index-ordered compaction (TopKKeeps / StoreKept);
//                  decoding scatters the kept pairs (ScatterKeptAt) over zeros.
// Decode-reduce applies a Sink to every decoded value: StoreSink (decode) or ReduceSink<Op>
// (dst = dst (op) value, kernels/element_ops.h's element operation, as the CPU's reduce).
//
// Internal linkage for the bodies, as codec_ref.h's; CodecPlan, a plain struct passed by value
// to CUDA kernels, is shared by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#if !defined(__CUDACC__)
#include "common/status.h"
#endif
#include "kernels/codec_layout.h"
#include "kernels/codec_ref.h"
#include "kernels/element_ops.h"
#include "kernels/host_device.h"
#include "weft/weft_compress.h"

namespace weft::codec {

// What one encode or decode launch needs of a valid spec, resolved on the host (MakeCodecPlan).
struct CodecPlan {
  weftCodec_t codec = weftCodecNone;
  size_t count = 0;          // float32 values
  size_t block = 0;          // B (block codecs)
  size_t blocks = 0;         // codec blocks: the last may be partial (padded to B when rotating)
  size_t stride = 0;         // payload bytes of a full block
  size_t kept = 0;           // top-k's k
  size_t encoded_bytes = 0;  // EncodedBytes(spec, count)
  bool stochastic = false;
  bool hadamard = false;
  uint32_t key = 0;           // StochasticKey(seed, stream)
  uint32_t rotation_key = 0;  // RotationKey(seed): the signs d
};

namespace {

#if !defined(__CUDACC__)
// *plan for (spec, count), or an InvalidArgument naming `what` (the kernel) and the bad field.
// Host code of the plugins only (nvcc's kernels receive the plan).
inline Status MakeCodecPlan(const char* what, const weftCompression& spec, size_t count,
                            uint64_t stream, CodecPlan* plan) {
  const std::string why = ValidateSpec(spec);
  if (!why.empty()) return InvalidArgument(std::string(what) + ": codec spec: " + why);
  if (count > SIZE_MAX / 8)  // 8: the most bytes a value takes, encoded or decoded (top-k)
    return InvalidArgument(std::string(what) + ": count=" + std::to_string(count) +
                           " is too large");
  if (spec.codec == weftCodecTopK && count > 0xFFFFFFFFull)
    return InvalidArgument(std::string(what) + ": count=" + std::to_string(count) +
                           " is too large for top-k (its indices are uint32)");
  CodecPlan p;
  p.codec = spec.codec;
  p.count = count;
  p.block = spec.block;
  p.blocks = BlockCount(count, spec.block);
  p.stride = IsBlockCodec(spec.codec) ? PayloadBytes(spec.codec, spec.block) : 0;
  p.kept = spec.codec == weftCodecTopK ? TopKCount(spec.ratio, count) : 0;
  p.encoded_bytes = EncodedBytes(spec, count);
  p.stochastic = (spec.flags & WEFT_COMPRESS_STOCHASTIC) != 0;
  p.hadamard = Rotates(spec);
  p.key = StochasticKey(spec.seed, stream);
  p.rotation_key = RotationKey(spec.seed);
  *plan = p;
  return OkStatus();
}
#endif

// ---- unaligned 16/32-bit fields of an encoding (memcpy: nvcc's idiom too) ----
WEFT_HOST_DEVICE inline uint32_t LoadWord(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
WEFT_HOST_DEVICE inline void StoreWord(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
WEFT_HOST_DEVICE inline uint16_t LoadHalfWord(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

// ---- encode ----

// Value i of a cast codec (bf16, fp16).
WEFT_HOST_DEVICE inline void EncodeCastAt(const CodecPlan& p, const float* src, uint8_t* dst,
                                          size_t i) {
  const uint16_t h = p.codec == weftCodecBf16 ? FloatToBfloat16(src[i]) : FloatToHalf(src[i]);
  memcpy(dst + 2 * i, &h, 2);
}

// Codec block b: its scale into the header, its codes into its payload. With Hadamard,
// `signs` holds RotationSigns(rotation_key, B) and `rotated` room for B values.
WEFT_HOST_DEVICE inline void EncodeBlockAt(const CodecPlan& p, const float* src, uint8_t* dst,
                                           size_t b, const float* signs, float* rotated) {
  const float* values = src + b * p.block;
  size_t n = p.count - b * p.block < p.block ? p.count - b * p.block : p.block;
  if (p.hadamard) {
    RotateForward(values, n, p.block, signs, rotated);
    values = rotated;
    n = p.block;
  }
  BlockContext c;
  c.stochastic = p.stochastic;
  c.key = p.key;
  c.first_index = static_cast<uint32_t>(b * p.block);
  uint8_t* payload = dst + 4 * p.blocks + b * p.stride;
  float scale;
  switch (p.codec) {
    case weftCodecInt8:
      scale = EncodeInt8Block(values, n, reinterpret_cast<int8_t*>(payload), c);
      break;
    case weftCodecInt4: scale = EncodeInt4Block(values, n, payload, c); break;
    case weftCodecFp8E4M3: scale = EncodeFp8Block<true>(values, n, payload); break;
    case weftCodecFp8E5M2: scale = EncodeFp8Block<false>(values, n, payload); break;
    default: scale = EncodeSignBlock(values, n, payload); break;  // sign1
  }
  StoreWord(dst + 4 * b, FloatBits(scale));
}

// ---- decode ----

// Value j of a block's payload (block codecs).
WEFT_HOST_DEVICE inline float DecodeBlockValue(weftCodec_t codec, const uint8_t* payload,
                                               size_t j, float scale) {
  switch (codec) {
    case weftCodecInt8: return DecodeInt8Value(static_cast<int8_t>(payload[j]), scale);
    case weftCodecInt4: return DecodeInt4Value(payload, j, scale);
    case weftCodecFp8E4M3: return DecodeFp8Value<true>(payload[j], scale);
    case weftCodecFp8E5M2: return DecodeFp8Value<false>(payload[j], scale);
    default: return DecodeSignValue(payload, j, scale);  // sign1
  }
}

// Value i of an encoding that does not rotate (casts and block codecs; not top-k).
WEFT_HOST_DEVICE inline float DecodeValueAt(const CodecPlan& p, const uint8_t* src, size_t i) {
  if (p.codec == weftCodecBf16) return DecodeBf16Value(LoadHalfWord(src + 2 * i));
  if (p.codec == weftCodecFp16) return DecodeFp16Value(LoadHalfWord(src + 2 * i));
  const size_t b = i / p.block;
  const float scale = FloatFromBits(LoadWord(src + 4 * b));
  return DecodeBlockValue(p.codec, src + 4 * p.blocks + b * p.stride, i - b * p.block, scale);
}

// Codec block b of a rotated encoding, all B values, into `rotated` (the caller keeps the
// first min(B, count - b * B)). `signs` as for EncodeBlockAt.
WEFT_HOST_DEVICE inline void DecodeRotatedBlockAt(const CodecPlan& p, const uint8_t* src,
                                                  size_t b, const float* signs, float* rotated) {
  const float scale = FloatFromBits(LoadWord(src + 4 * b));
  const uint8_t* payload = src + 4 * p.blocks + b * p.stride;
  for (size_t j = 0; j < p.block; ++j) rotated[j] = DecodeBlockValue(p.codec, payload, j, scale);
  RotateInverse(rotated, p.block, signs);
}

// Where a decoded value goes: dst itself, or reduced into dst as the CPU's decode-reduce does
// (kernels::Reduce(dst, dst, decoded): the element operation with dst first).
struct StoreSink {
  WEFT_HOST_DEVICE static void Apply(float* d, float v) { *d = v; }
};
template <template <typename> class Op>
struct ReduceSink {
  WEFT_HOST_DEVICE static void Apply(float* d, float v) {
    *d = kernels::ApplyElement<kernels::NativeTraits<float>, Op>(*d, v);
  }
};

// Calls f(Sink{}) with the sink of a decode-reduce with op (avg reduces as a sum: its division
// stays in the finalize); false for an invalid op.
template <typename F>
bool WithReduceSink(weftRedOp_t op, F&& f) {
  switch (op) {
    case weftSum:
    case weftAvg: f(ReduceSink<kernels::SumOp>{}); return true;
    case weftProd: f(ReduceSink<kernels::ProdOp>{}); return true;
    case weftMax: f(ReduceSink<kernels::MaxOp>{}); return true;
    case weftMin: f(ReduceSink<kernels::MinOp>{}); return true;
    default: return false;
  }
}

// ---- top-k (the rule of codec_topk.cc: the k largest keys |x| bits, ties lowest index first) ----
// The select runs 8 key bits a pass from the top (shift 24, 16, 8, 0); a pass counts, per
// digit, the keys that agree with the threshold chosen so far above `shift + 8`.

WEFT_HOST_DEVICE inline uint32_t TopKKey(float x) { return FloatBits(x) & 0x7FFFFFFFu; }
WEFT_HOST_DEVICE inline bool TopKInPass(uint32_t key, uint32_t prefix, int shift) {
  return shift >= 24 || (key >> (shift + 8)) == (prefix >> (shift + 8));
}
WEFT_HOST_DEVICE inline uint32_t TopKDigit(uint32_t key, int shift) {
  return (key >> shift) & 0xFFu;
}
constexpr int kTopKDigits = 256;
constexpr int kTopKFirstShift = 24;

// Walking down from the top digit: the digit where the running count reaches *need; *need
// becomes the rank wanted within that digit (so after the last pass: how many keys equal to
// the threshold are kept).
WEFT_HOST_DEVICE inline uint32_t TopKPickDigit(const uint32_t* histogram, uint32_t* need) {
  uint32_t running = 0;
  for (int d = kTopKDigits - 1; d > 0; --d) {
    if (running + histogram[d] >= *need) {
      *need -= running;
      return static_cast<uint32_t>(d);
    }
    running += histogram[d];
  }
  *need -= running;
  return 0;
}

// Whether a key is kept: above the threshold, or equal to it with fewer than `ties` equal keys
// before it in index order (`ties_before`).
WEFT_HOST_DEVICE inline bool TopKKeeps(uint32_t key, uint32_t threshold, size_t ties_before,
                                       size_t ties) {
  return key > threshold || (key == threshold && ties_before < ties);
}

// Kept pair `out` of the encoding: index, then (at 4k) the value's bits.
WEFT_HOST_DEVICE inline void StoreKept(uint8_t* dst, size_t k, size_t out, uint32_t index,
                                       uint32_t bits) {
  StoreWord(dst + 4 * out, index);
  StoreWord(dst + 4 * k + 4 * out, bits);
}

// Kept pair j into values[0..count) (a corrupt index past count is ignored, as the CPU does).
WEFT_HOST_DEVICE inline void ScatterKeptAt(const CodecPlan& p, const uint8_t* src, size_t j,
                                           float* values) {
  const uint32_t index = LoadWord(src + 4 * j);
  if (index < p.count) values[index] = FloatFromBits(LoadWord(src + 4 * p.kept + 4 * j));
}

}  // namespace
}  // namespace weft::codec
