// Internal: the codec kernel table built directly from the reference definitions
// (codec_ref.h), instantiated per instruction set like reduce_loops.h: codec_generic.cc
// includes it as is, codec_avx2.cc under a target pragma (and then replaces the hot entries
// with hand-written intrinsics). Internal linkage for the same reason as codec_ref.h.
#pragma once

#include "kernels/codec_ref.h"
#include "kernels/codec_table.h"

namespace weft::codec {
namespace {

inline BlockContext ToContext(const BlockOptions& o) {
  BlockContext c;
  c.stochastic = o.stochastic;
  c.key = o.key;
  c.first_index = o.first_index;
  return c;
}

inline float PortableEncodeInt8(const float* x, size_t n, uint8_t* p, const BlockOptions& o) {
  return EncodeInt8Block(x, n, reinterpret_cast<int8_t*>(p), ToContext(o));
}
inline void PortableDecodeInt8(const uint8_t* p, size_t n, float scale, float* out) {
  DecodeInt8Block(reinterpret_cast<const int8_t*>(p), n, scale, out);
}
inline float PortableEncodeInt4(const float* x, size_t n, uint8_t* p, const BlockOptions& o) {
  return EncodeInt4Block(x, n, p, ToContext(o));
}
template <bool kE4m3>
inline float PortableEncodeFp8(const float* x, size_t n, uint8_t* p, const BlockOptions&) {
  return EncodeFp8Block<kE4m3>(x, n, p);
}
inline float PortableEncodeSign(const float* x, size_t n, uint8_t* p, const BlockOptions&) {
  return EncodeSignBlock(x, n, p);
}

inline void PortableToBf16(const float* s, size_t n, uint16_t* d) {
  for (size_t i = 0; i < n; ++i) d[i] = FloatToBfloat16(s[i]);
}
inline void PortableFromBf16(const uint16_t* s, size_t n, float* d) {
  for (size_t i = 0; i < n; ++i) d[i] = DecodeBf16Value(s[i]);
}
inline void PortableToFp16(const float* s, size_t n, uint16_t* d) {
  for (size_t i = 0; i < n; ++i) d[i] = FloatToHalf(s[i]);
}
inline void PortableFromFp16(const uint16_t* s, size_t n, float* d) {
  for (size_t i = 0; i < n; ++i) d[i] = DecodeFp16Value(s[i]);
}

inline CodecKernels MakePortableCodecKernels(const char* isa) {
  CodecKernels k;
  k.isa = isa;
  k.to_cast[weftCodecBf16] = &PortableToBf16;
  k.from_cast[weftCodecBf16] = &PortableFromBf16;
  k.to_cast[weftCodecFp16] = &PortableToFp16;
  k.from_cast[weftCodecFp16] = &PortableFromFp16;
  k.encode_block[weftCodecInt8] = &PortableEncodeInt8;
  k.decode_block[weftCodecInt8] = &PortableDecodeInt8;
  k.encode_block[weftCodecInt4] = &PortableEncodeInt4;
  k.decode_block[weftCodecInt4] = &DecodeInt4Block;
  k.encode_block[weftCodecFp8E4M3] = &PortableEncodeFp8<true>;
  k.decode_block[weftCodecFp8E4M3] = &DecodeFp8Block<true>;
  k.encode_block[weftCodecFp8E5M2] = &PortableEncodeFp8<false>;
  k.decode_block[weftCodecFp8E5M2] = &DecodeFp8Block<false>;
  k.encode_block[weftCodecSign1] = &PortableEncodeSign;
  k.decode_block[weftCodecSign1] = &DecodeSignBlock;
  k.rotate_forward = &RotateForward;
  k.rotate_inverse = &RotateInverse;
  return k;
}

}  // namespace
}  // namespace weft::codec
