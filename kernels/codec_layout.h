// The codecs' spec rules and encoded sizes (the layout codec_ref.h defines), as inline host
// functions: libweft's codec entry points (kernels/codec.h) and the device-runtime plugins
// (src/device/*, which link none of libweft's objects) check a spec and size a launch with
// these same definitions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "weft/weft_compress.h"

namespace weft::codec {

inline bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Whether the codec has a per-block scale (fp8, int8, int4, sign1).
inline bool IsBlockCodec(weftCodec_t codec) {
  return codec == weftCodecFp8E4M3 || codec == weftCodecFp8E5M2 || codec == weftCodecInt8 ||
         codec == weftCodecInt4 || codec == weftCodecSign1;
}

inline bool Rotates(const weftCompression& spec) {
  return (spec.flags & WEFT_COMPRESS_HADAMARD) != 0;
}

// Bytes of one block's codes for n values.
inline size_t PayloadBytes(weftCodec_t codec, size_t n) {
  switch (codec) {
    case weftCodecInt4: return (n + 1) / 2;
    case weftCodecSign1: return (n + 7) / 8;
    default: return n;  // fp8, int8
  }
}

inline size_t BlockCount(size_t count, size_t block) { return (count + block - 1) / block; }

inline const char* CodecName(weftCodec_t codec) {
  switch (codec) {
    case weftCodecBf16: return "bf16";
    case weftCodecFp16: return "fp16";
    case weftCodecFp8E4M3: return "fp8e4m3";
    case weftCodecFp8E5M2: return "fp8e5m2";
    case weftCodecInt8: return "int8";
    case weftCodecInt4: return "int4";
    case weftCodecTopK: return "topk";
    case weftCodecSign1: return "sign1";
    default: return "unknown";
  }
}

// "" when spec is usable, else a message naming the bad field and its value.
inline std::string ValidateSpec(const weftCompression& spec) {
  // The spec comes from C or Python callers whose codec field may hold any integer; loading a
  // C++ enum outside its enumerators' range is undefined (UBSan: "not a valid value for type
  // weftCodec_t"), so the field is read as raw bits until it is known to be a codec.
  int id;  // a C enum is an int-sized field; signed, so a stored -1 is reported as -1
  static_assert(sizeof id == sizeof spec.codec, "weftCodec_t is read as an int");
  std::memcpy(&id, &spec.codec, sizeof id);
  if (id <= weftCodecNone || id >= weftNumCodecs)
    return "spec->codec=" + std::to_string(id) + " is not a weftCodec_t (1.." +
           std::to_string(weftNumCodecs - 1) + ")";
  if (spec.block == 0 || spec.block > WEFT_COMPRESS_MAX_BLOCK)
    return "spec->block=" + std::to_string(spec.block) + " is outside [1, " +
           std::to_string(WEFT_COMPRESS_MAX_BLOCK) + "]";
  if (spec.codec == weftCodecTopK && !(spec.ratio > 0.0f && spec.ratio <= 1.0f))
    return "spec->ratio=" + std::to_string(spec.ratio) + " is outside (0, 1] (top-k)";
  if ((spec.flags & ~(WEFT_COMPRESS_STOCHASTIC | WEFT_COMPRESS_HADAMARD | WEFT_COMPRESS_FLAT)) != 0)
    return "spec->flags=" + std::to_string(spec.flags) + " has unknown bits";
  if ((spec.flags & WEFT_COMPRESS_STOCHASTIC) && spec.codec != weftCodecInt8 &&
      spec.codec != weftCodecInt4)
    return std::string("spec->flags: stochastic rounding applies to int8/int4, not ") +
           CodecName(spec.codec);
  if (Rotates(spec) && !IsBlockCodec(spec.codec))
    return std::string("spec->flags: Hadamard rotation applies to block codecs, not ") +
           CodecName(spec.codec);
  if (Rotates(spec) && !IsPowerOfTwo(spec.block))
    return "spec->block=" + std::to_string(spec.block) +
           " must be a power of two with WEFT_COMPRESS_HADAMARD";
  return "";
}

// Kept elements of top-k: max(1, round(ratio * count)), at most count (0 for count 0).
inline size_t TopKCount(float ratio, size_t count) {
  if (count == 0) return 0;
  // Rounded, not truncated: 0.01f is slightly below 1/100, and 1% of 1000 must keep 10.
  const size_t k = static_cast<size_t>(
      std::llround(static_cast<double>(ratio) * static_cast<double>(count)));
  return std::min(count, std::max<size_t>(1, k));
}

// Exact size of the encoding of count values: a pure function of (spec, count).
inline size_t EncodedBytes(const weftCompression& spec, size_t count) {
  if (count == 0) return 0;
  if (spec.codec == weftCodecBf16 || spec.codec == weftCodecFp16) return 2 * count;
  if (spec.codec == weftCodecTopK) return 8 * TopKCount(spec.ratio, count);
  const size_t block = spec.block, blocks = BlockCount(count, block);
  const size_t last = Rotates(spec) ? block : count - (blocks - 1) * block;
  return 4 * blocks + (blocks - 1) * PayloadBytes(spec.codec, block) +
         PayloadBytes(spec.codec, last);
}

}  // namespace weft::codec
