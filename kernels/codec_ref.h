// The definition of every compression codec's semantics, as plain per-block scalar functions.
//
// This header *is* the specification: the vectorized CPU kernels (codec_avx2.cc) and any later
// CUDA kernels must produce bitwise the same encoded bytes and decoded floats as these
// functions for the same input (tests/codecs_test.cc checks the CPU variants against them).
// Everything uses float32 arithmetic in the default environment (round to nearest even, no
// FTZ/DAZ, no contraction into FMA), in the order written here.
//
// Codecs and their worst-case error per element (x = input, x' = decode(encode(x)), blk = the
// block of B values x belongs to, absmax = max |x| over blk, QMAX the codec's largest code):
//
//   bf16     plain cast, RNE.  |x - x'| <= 2^-8 |x| for |x| >= 2^-126; <= 2^-134 below.
//            |x| >= 0x1.FF8p127 (beyond bf16's largest finite, half-way up) becomes +-inf.
//   fp16     plain cast, RNE (no scale, like PyTorch's fp16 DDP hook). |x - x'| <= 2^-11 |x|
//            for 2^-14 <= |x| < 65520; <= 2^-25 below 2^-14; |x| >= 65520 becomes +-inf.
//   fp8e4m3  per block: scale = max(absmax / 448, FLT_MIN) stored as float32; code =
//            e4m3(x * (1/scale)) RNE, saturating at +-448 (OCP "FN" e4m3: no inf);
//            x' = value(code) * scale.
//            |x - x'| <= 2^-4 |x| (1 + 2^-12) + 2^-18 absmax + 2^-127.
//   fp8e5m2  the same with 57344 and e5m2 (2 mantissa bits).
//            |x - x'| <= 2^-3 |x| (1 + 2^-12) + 2^-30 absmax + 2^-127.
//   int8     per block: scale = max(absmax / 127, FLT_MIN); code = clamp(rne(x * (1/scale)),
//            -127, 127) (symmetric; -128 unused); x' = code * scale.
//            |x - x'| <= absmax / 254 * (1 + 2^-12) + 2^-127.  Stochastic rounding (flag):
//            code = clamp(floor(x * (1/scale) + u), -127, 127), u in [0,1) from a seeded
//            counter hash (unbiased up to 2^-24); |x - x'| < absmax / 127 * (1 + 2^-12) + 2^-126.
//            (The 2^-12 covers the float rounding of 1/scale, x * (1/scale) and code * scale;
//            2^-127 is half a step when the scale is clamped to FLT_MIN, where all is exact.)
//   int4     the same with QMAX = 7, two codes per byte (element 2j in the low nibble).
//            |x - x'| <= absmax / 14 * (1 + 2^-12) + 2^-127 (stochastic: absmax / 7 ...).
//   sign1    1 bit per element (set = sign bit of x set, so -0 decodes negative) and one scale
//            per block: m = mean |x| over the block, accumulated in double in the order of
//            MeanAbs below, rounded once to float. x' = +-m. |x - x'| <= absmax (the error is
//            large per element by nature; error feedback carries it into the next call).
//   topk     keep the k = max(1, round(ratio * count)) (in double, halves up) largest |x| (ties: lower index first;
//            NaN ranks above inf ranks above finite) exactly, as (uint32 index, float32 value)
//            pairs sorted by index; the rest decode to +0. |x - x'| = 0 for kept elements,
//            |x| <= the smallest kept |x| for dropped ones.
//
//   Hadamard (flag, block codecs fp8/int8/int4/sign1 only; B must be a power of two): before
//   quantizing, each block (the last one padded with zeros to B) is rotated, y = H (d . x) /
//   sqrt(B), with d_j = +-1 from a hash of (seed, j), the same for every block and every rank;
//   decoding applies the inverse. Outliers are spread over the block, so the typical error falls;
//   the worst case becomes |x - x'| <= sqrt(B) * ||blk||_2 * (e / QMAX' + 2^-18) where e/QMAX'
//   is the codec's relative step above (1/254 int8, 1/14 int4, 2^-4 fp8e4m3, 2^-3 fp8e5m2,
//   1 sign1). Limit: the transform sums up to B values in float32, so a block with
//   |x| * B beyond FLT_MAX can overflow inside it; such a block decodes to NaN (the
//   non-finite rule below), never to wrong finite values.
//
// Non-finite inputs: the casts map inf to inf and NaN to NaN element-wise. A block codec that
// finds NaN or +-inf in a block stores a NaN scale and zero codes, so *every* element of that
// block decodes to NaN: non-finite values are never turned into finite ones (a loss scaler
// still sees the overflow), at the price of the block's finite neighbours. top-k keeps NaN and
// inf exactly (they rank highest).
//
// Encoded layout (EncodedBytes in codec.h is a pure function of the spec and the count):
//   casts: count x uint16.
//   block codecs: float32 scale per block, all scales first, then each block's codes; every
//   block but the last holds B values (with Hadamard the last is padded to B as well).
//   topk: k x uint32 indices, then k x float32 values.
//
// Internal linkage on purpose (anonymous namespace): codec_avx2.cc compiles this header under a
// target pragma, and shared inline symbols would let the linker pick AVX2 copies for everyone.
//
// One source for every compiler (kernels/host_device.h): the CPU tables, the emulated GPU and
// nvcc's device code (kernels/codec.cu, through kernels/codec_kernels.h) compile these same
// functions. Hence no std:: math here: the few library calls go through the Std* wrappers
// below, which are the std:: functions on the host (so the CPU's bits are what they were) and
// CUDA's IEEE-exact equivalents in device code; NaN/inf constants are written as bit patterns.
// nvcc must not contract a multiply and an add into an FMA (codec.cu builds with --fmad=false).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/host_device.h"

namespace weft::codec {
namespace {

constexpr float kInt8Max = 127.0f;
constexpr float kInt4Max = 7.0f;
constexpr float kE4m3Max = 448.0f;
constexpr float kE5m2Max = 57344.0f;
constexpr uint32_t kNonFiniteBits = 0x7F800000u;  // |x| bits at or above: inf or NaN

// ---- the library calls, exact on both compilers ----
// floor, |x| and the double square root are exact (correctly rounded) on x86 and on CUDA alike;
// the NaN is the one <cmath>'s NAN gives on x86 (0x7FC00000), stored as a constant.
WEFT_HOST_DEVICE inline float StdFloor(float x) {
#if defined(__CUDA_ARCH__)
  return ::floorf(x);
#else
  return std::floor(x);
#endif
}
WEFT_HOST_DEVICE inline double StdSqrt(double x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}
WEFT_HOST_DEVICE inline float AbsOf(float x) { return FloatFromBits(FloatBits(x) & 0x7FFFFFFFu); }
WEFT_HOST_DEVICE inline bool IsNanValue(float x) { return x != x; }
WEFT_HOST_DEVICE inline float QuietNan() { return FloatFromBits(0x7FC00000u); }
WEFT_HOST_DEVICE inline float Infinity() { return FloatFromBits(0x7F800000u); }

// 2^e for normal exponents, folded to a constant by the compiler (std::ldexp is a libm call).
WEFT_HOST_DEVICE inline float Pow2(int e) {
  return FloatFromBits(static_cast<uint32_t>(127 + e) << 23);
}

// ---- seeded hashing (counter based, 32-bit so it vectorizes) ----

WEFT_HOST_DEVICE inline uint64_t Mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// "lowbias32" (a well-mixing 32-bit permutation)
WEFT_HOST_DEVICE inline uint32_t Hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// The key of the stochastic-rounding stream of one encode call and of the Hadamard signs.
WEFT_HOST_DEVICE inline uint32_t StochasticKey(uint64_t seed, uint64_t stream) {
  return static_cast<uint32_t>(Mix64(seed ^ Mix64(stream + 1)));
}
WEFT_HOST_DEVICE inline uint32_t RotationKey(uint64_t seed) {
  return static_cast<uint32_t>(Mix64(seed ^ 0x48414441ull));
}

// u in [0, 1): the dither of element `index` (position in the encode call, mod 2^32).
WEFT_HOST_DEVICE inline float Dither(uint32_t key, uint32_t index) {
  return static_cast<float>(Hash32(index + key) >> 8) * 0x1p-24f;
}

// ---- block statistics ----

// max over the block of the bits of |x|: for non-negative floats integer order is value order,
// and inf/NaN compare above every finite value, so one max finds both.
WEFT_HOST_DEVICE inline uint32_t AbsMaxBits(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = FloatBits(x[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

// scale = max(absmax / qmax, FLT_MIN): never subnormal, so 1/scale is finite and the
// quantization of denormal blocks is exact arithmetic. NaN for blocks holding inf or NaN.
WEFT_HOST_DEVICE inline float BlockScale(uint32_t absmax_bits, float qmax) {
  if (absmax_bits >= kNonFiniteBits) return QuietNan();
  const float scale = FloatFromBits(absmax_bits) / qmax;
  return scale > FLT_MIN ? scale : FLT_MIN;
}

// mean |x| for sign1: 8 double partial sums (element i into sum i mod 8, in index order),
// combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), divided by n in double, rounded once.
WEFT_HOST_DEVICE inline float MeanAbs(const float* x, size_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) s[i % 8] += static_cast<double>(AbsOf(x[i]));
  const double total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  return n == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(n));
}

// ---- rounding ----

// Round to nearest even for |v| < 2^22 without depending on the rounding-mode API: adding and
// subtracting 1.5 * 2^23 leaves v rounded to an integer (float addition rounds to nearest even).
WEFT_HOST_DEVICE inline float RoundHalfEven(float v) {
  const float magic = 12582912.0f;
  return (v + magic) - magic;
}

// Integer code of v (already multiplied by 1/scale), clamped to [-qmax, qmax].
WEFT_HOST_DEVICE inline int IntCode(float v, float qmax, bool stochastic, uint32_t key,
                                    uint32_t index) {
  float r = stochastic ? StdFloor(v + Dither(key, index)) : RoundHalfEven(v);
  r = r > qmax ? qmax : r;
  r = r < -qmax ? -qmax : r;
  return static_cast<int>(r);
}

// ---- fp8 conversions (OCP 8-bit floats) ----
// e4m3 ("FN"): bias 7, 3 mantissa bits, max 448, no inf, NaN = 0x7F/0xFF.
// e5m2: bias 15, 2 mantissa bits, max 57344, inf = 0x7C, NaN = 0x7D..0x7F.

// |v| <= max after saturation; v must be finite (non-finite blocks never reach here).
template <int kMantBits, int kBias, int kMinNormalExp>
WEFT_HOST_DEVICE inline uint8_t FloatToFp8(float v, float max_value) {
  const uint32_t sign = (FloatBits(v) >> 24) & 0x80u;
  float a = AbsOf(v);
  a = a < max_value ? a : max_value;
  const float min_normal = Pow2(kMinNormalExp);
  uint32_t code;
  if (a < min_normal) {
    // Subnormal: multiples of 2^(kMinNormalExp - kMantBits). Adding 2^(23 + that exponent)
    // makes the float's ulp exactly one subnormal step, so the add rounds to nearest even.
    const float magic = Pow2(23 + kMinNormalExp - kMantBits);
    const float rounded = (a + magic) - magic;
    code = static_cast<uint32_t>(rounded * Pow2(kMantBits - kMinNormalExp));
  } else {
    uint32_t bits = FloatBits(a);
    const int drop = 23 - kMantBits;
    bits += ((1u << (drop - 1)) - 1u) + ((bits >> drop) & 1u);  // ties to even
    code = (bits >> drop) - (static_cast<uint32_t>(127 - kBias) << kMantBits);
  }
  return static_cast<uint8_t>(sign | code);
}

template <int kMantBits, int kBias>
WEFT_HOST_DEVICE inline float Fp8ToFloat(uint8_t c) {
  const uint32_t exponent = (c & 0x7Fu) >> kMantBits;
  const uint32_t mantissa = c & ((1u << kMantBits) - 1u);
  float a;
  if (exponent == 0) {
    a = static_cast<float>(mantissa) * Pow2(1 - kBias - kMantBits);
  } else {
    a = FloatFromBits(((exponent + 127u - kBias) << 23) | (mantissa << (23 - kMantBits)));
  }
  return (c & 0x80u) ? -a : a;
}

WEFT_HOST_DEVICE inline uint8_t FloatToE4m3(float v) { return FloatToFp8<3, 7, -6>(v, kE4m3Max); }
WEFT_HOST_DEVICE inline uint8_t FloatToE5m2(float v) { return FloatToFp8<2, 15, -14>(v, kE5m2Max); }
// Codes the encoder never produces (e4m3 NaN, e5m2 inf/NaN) decode to their IEEE meaning.
WEFT_HOST_DEVICE inline float E4m3ToFloat(uint8_t c) {
  return (c & 0x7Fu) == 0x7Fu ? QuietNan() : Fp8ToFloat<3, 7>(c);
}
WEFT_HOST_DEVICE inline float E5m2ToFloat(uint8_t c) {
  if ((c & 0x7Fu) == 0x7Cu) return (c & 0x80u) ? -Infinity() : Infinity();
  return (c & 0x7Fu) > 0x7Cu ? QuietNan() : Fp8ToFloat<2, 15>(c);
}

// ---- the casts' decoding of one value (encoding is half.h's FloatToBfloat16 / FloatToHalf) ----

WEFT_HOST_DEVICE inline float DecodeBf16Value(uint16_t h) { return Bfloat16ToFloat(h); }
// NaN comes out quiet (as F16C's vcvtph2ps does): the codec decodes every pattern, and the
// encoder only ever writes quiet NaNs anyway.
WEFT_HOST_DEVICE inline float DecodeFp16Value(uint16_t h) {
  const float f = HalfToFloat(h);
  return f != f ? FloatFromBits(FloatBits(f) | 0x400000u) : f;
}

// ---- per-block encode/decode (n <= B values; payload = this block's codes) ----

struct BlockContext {
  bool stochastic = false;
  uint32_t key = 0;         // StochasticKey
  uint32_t first_index = 0;  // index of the block's first element in the encode call
};

WEFT_HOST_DEVICE inline float EncodeInt8Block(const float* x, size_t n, int8_t* codes,
                                              const BlockContext& c) {
  const float scale = BlockScale(AbsMaxBits(x, n), kInt8Max);
  if (IsNanValue(scale)) {
    memset(codes, 0, n);
    return scale;
  }
  const float inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i)
    codes[i] = static_cast<int8_t>(
        IntCode(x[i] * inv, kInt8Max, c.stochastic, c.key, c.first_index + static_cast<uint32_t>(i)));
  return scale;
}

// Every decoder is element-wise: value i of a block depends on its code and the block's scale
// only (the device kernels decode one element per thread with these).
WEFT_HOST_DEVICE inline float DecodeInt8Value(int8_t code, float scale) {
  return static_cast<float>(code) * scale;
}
WEFT_HOST_DEVICE inline void DecodeInt8Block(const int8_t* codes, size_t n, float scale,
                                             float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DecodeInt8Value(codes[i], scale);
}

WEFT_HOST_DEVICE inline float EncodeInt4Block(const float* x, size_t n, uint8_t* packed,
                                              const BlockContext& c) {
  const float scale = BlockScale(AbsMaxBits(x, n), kInt4Max);
  memset(packed, 0, (n + 1) / 2);
  if (IsNanValue(scale)) return scale;
  const float inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i) {
    const int q = IntCode(x[i] * inv, kInt4Max, c.stochastic, c.key,
                          c.first_index + static_cast<uint32_t>(i));
    packed[i / 2] |= static_cast<uint8_t>((q & 0xF) << (4 * (i % 2)));
  }
  return scale;
}

// Value i of a block's packed codes.
WEFT_HOST_DEVICE inline float DecodeInt4Value(const uint8_t* packed, size_t i, float scale) {
  const int nibble = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
  const int q = nibble >= 8 ? nibble - 16 : nibble;  // sign-extend
  return static_cast<float>(q) * scale;
}
WEFT_HOST_DEVICE inline void DecodeInt4Block(const uint8_t* packed, size_t n, float scale,
                                             float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DecodeInt4Value(packed, i, scale);
}

template <bool kE4m3>
WEFT_HOST_DEVICE inline float EncodeFp8Block(const float* x, size_t n, uint8_t* codes) {
  const float qmax = kE4m3 ? kE4m3Max : kE5m2Max;
  const float scale = BlockScale(AbsMaxBits(x, n), qmax);
  if (IsNanValue(scale)) {
    memset(codes, 0, n);
    return scale;
  }
  const float inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i)
    codes[i] = kE4m3 ? FloatToE4m3(x[i] * inv) : FloatToE5m2(x[i] * inv);
  return scale;
}

template <bool kE4m3>
WEFT_HOST_DEVICE inline float DecodeFp8Value(uint8_t code, float scale) {
  return (kE4m3 ? E4m3ToFloat(code) : E5m2ToFloat(code)) * scale;
}
template <bool kE4m3>
WEFT_HOST_DEVICE inline void DecodeFp8Block(const uint8_t* codes, size_t n, float scale,
                                            float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DecodeFp8Value<kE4m3>(codes[i], scale);
}

WEFT_HOST_DEVICE inline float EncodeSignBlock(const float* x, size_t n, uint8_t* bits) {
  memset(bits, 0, (n + 7) / 8);
  if (AbsMaxBits(x, n) >= kNonFiniteBits) return QuietNan();
  for (size_t i = 0; i < n; ++i) bits[i / 8] |= static_cast<uint8_t>((FloatBits(x[i]) >> 31) << (i % 8));
  return MeanAbs(x, n);
}

WEFT_HOST_DEVICE inline float DecodeSignValue(const uint8_t* bits, size_t i, float scale) {
  return ((bits[i / 8] >> (i % 8)) & 1u) ? -scale : scale;
}
WEFT_HOST_DEVICE inline void DecodeSignBlock(const uint8_t* bits, size_t n, float scale,
                                             float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DecodeSignValue(bits, i, scale);
}

// ---- randomized Hadamard rotation of one block (B a power of two) ----

WEFT_HOST_DEVICE inline float HadamardNorm(size_t b) {
  return static_cast<float>(1.0 / StdSqrt(static_cast<double>(b)));
}

WEFT_HOST_DEVICE inline float RotationSign(uint32_t key, size_t j) {
  return (Hash32(static_cast<uint32_t>(j) ^ key) & 1u) ? -1.0f : 1.0f;
}

// d_j for j < b (the same for every block of an encode call).
WEFT_HOST_DEVICE inline void RotationSigns(uint32_t key, size_t b, float* signs) {
  for (size_t j = 0; j < b; ++j) signs[j] = RotationSign(key, j);
}

// In-place fast Walsh-Hadamard transform, butterflies in this exact order (unnormalized).
WEFT_HOST_DEVICE inline void Fwht(float* y, size_t b) {
  for (size_t h = 1; h < b; h *= 2)
    for (size_t i = 0; i < b; i += 2 * h)
      for (size_t j = i; j < i + h; ++j) {
        const float a = y[j], c = y[j + h];
        y[j] = a + c;
        y[j + h] = a - c;
      }
}

// y = H (d . x) / sqrt(b); x has n <= b values, the rest are taken as zero. signs = d.
// (Multiplying by +-1.0, not flipping sign bits, so NaN payloads behave as in a multiply.)
WEFT_HOST_DEVICE inline void RotateForward(const float* x, size_t n, size_t b, const float* signs,
                                           float* y) {
  for (size_t j = 0; j < b; ++j) y[j] = j < n ? x[j] * signs[j] : 0.0f;
  Fwht(y, b);
  const float norm = HadamardNorm(b);
  for (size_t j = 0; j < b; ++j) y[j] *= norm;
}

// x = d . (H y) / sqrt(b), in place on y (b values).
WEFT_HOST_DEVICE inline void RotateInverse(float* y, size_t b, const float* signs) {
  Fwht(y, b);
  const float norm = HadamardNorm(b);
  for (size_t j = 0; j < b; ++j) y[j] = (y[j] * norm) * signs[j];
}

}  // namespace
}  // namespace weft::codec
