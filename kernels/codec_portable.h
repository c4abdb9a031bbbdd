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

// Value i of a block's codes, one signature for every block codec (the reference's decoders).
inline float Int8At(const uint8_t* p, size_t i, float scale) {
  return DecodeInt8Value(static_cast<int8_t>(p[i]), scale);
}
template <bool kE4m3>
inline float Fp8At(const uint8_t* p, size_t i, float scale) {
  return DecodeFp8Value<kE4m3>(p[i], scale);
}
// DecodeSignValue's value as a sign flip of scale's bits (what its negation is). Written as
// `-scale`, GCC folds `acc + (-scale)` into `acc - scale`: the same number, but where both are
// NaN the result is then acc's NaN, not the one kernels::Reduce's compiled `acc + v` returns
// (IEEE leaves that choice to operand order; codec_reduce_test checks the bits).
inline float SignAt(const uint8_t* p, size_t i, float scale) {
  return FloatFromBits(FloatBits(scale) ^ (static_cast<uint32_t>((p[i / 8] >> (i % 8)) & 1u) << 31));
}

// acc[i] = acc[i] + (value i): the decode-and-add of a block (and the tails of the vector ones).
template <float (*kValueAt)(const uint8_t*, size_t, float)>
void PortableDecodeAdd(const uint8_t* p, size_t n, float scale, float* acc) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + kValueAt(p, i, scale);
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
  k.decode_add_block[weftCodecInt8] = &PortableDecodeAdd<&Int8At>;
  k.decode_add_block[weftCodecInt4] = &PortableDecodeAdd<&DecodeInt4Value>;
  k.decode_add_block[weftCodecFp8E4M3] = &PortableDecodeAdd<&Fp8At<true>>;
  k.decode_add_block[weftCodecFp8E5M2] = &PortableDecodeAdd<&Fp8At<false>>;
  k.decode_add_block[weftCodecSign1] = &PortableDecodeAdd<&SignAt>;
  k.rotate_forward = &RotateForward;
  k.rotate_inverse = &RotateInverse;
  return k;
}

}  // namespace
}  // namespace weft::codec
