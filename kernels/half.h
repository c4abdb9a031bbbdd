// float <-> IEEE fp16 and float <-> bfloat16 conversions on uint16_t bit patterns.
//
// Scalar reference conversions shared by the CPU kernels (tails and non-F16C machines), the
// device kernels (CUDA and the emulated GPU compile these same functions), the tests and any
// other code that needs them. All are exact where the value is representable,
// round to nearest, ties to even, otherwise, and use integer arithmetic only, so the result does
// not depend on the caller's floating-point environment (rounding mode, FTZ/DAZ).
//
//   HalfToFloat:      exact (every fp16 value is a float). NaN keeps its payload.
//   FloatToHalf:      RNE; |x| >= 65520 -> +-inf; results below 2^-14 become fp16 subnormals;
//                     NaN -> quiet NaN keeping the top payload bits (what F16C's vcvtps2ph does).
//   Bfloat16ToFloat:  exact (bf16 is the top half of a float).
//   FloatToBfloat16:  RNE; large finite values round to +-inf; NaN -> quiet NaN (top bits kept).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace weft {

// The bits of a value as another type of the same size, exactly, for both compilers (memcpy
// is also nvcc's device-code idiom for it; kernels/host_device.h).
template <typename To, typename From>
WEFT_HOST_DEVICE inline To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs types of one size");
  To to;
  memcpy(&to, &from, sizeof to);
  return to;
}

WEFT_HOST_DEVICE inline uint32_t FloatBits(float f) { return BitCast<uint32_t>(f); }
WEFT_HOST_DEVICE inline float FloatFromBits(uint32_t u) { return BitCast<float>(u); }

WEFT_HOST_DEVICE inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return FloatFromBits(sign | 0x7F800000u | (mantissa << 13));  // inf/NaN
  if (exponent != 0) return FloatFromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24. Both factors and the product are exact normal floats
  // (or zero), so this is exact and independent of FTZ/DAZ.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

WEFT_HOST_DEVICE inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: set the quiet bit so a payload of zero stays NaN
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 = 0x477FF000 is halfway between the largest fp16 (65504, odd mantissa) and 65536:
  // ties go to the even neighbour, which is 2^16, i.e. overflow to inf. Covers inf itself.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {  // >= 2^-14: normal fp16
    // Add just under half an ulp, plus one if the kept lsb is odd (ties to even). A carry out
    // of the mantissa correctly bumps the exponent.
    magnitude += 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((magnitude - (112u << 23)) >> 13));
  }
  // Below 2^-25 (and 2^-25 itself, a tie with 0 whose even neighbour is 0) rounds to zero.
  if (magnitude <= 0x33000000u) return static_cast<uint16_t>(sign);
  // Subnormal fp16: the result is round(|f| / 2^-24). With the implicit bit, the 24-bit
  // significand m has value m * 2^(e - 150), i.e. m >> (126 - e) units of 2^-24.
  const uint32_t biased_exponent = magnitude >> 23;  // 102..112 here
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - biased_exponent;  // 14..24
  uint32_t result = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);  // result 0x400 is the smallest normal: correct
}

WEFT_HOST_DEVICE inline float Bfloat16ToFloat(uint16_t h) { return FloatFromBits(static_cast<uint32_t>(h) << 16); }

WEFT_HOST_DEVICE inline uint16_t FloatToBfloat16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN
  x += 0x7FFFu + ((x >> 16) & 1u);  // ties to even; overflow carries into inf, as it should
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace weft
