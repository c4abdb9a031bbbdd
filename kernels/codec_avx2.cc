// The AVX2 + F16C codec kernel table: codec_portable.h compiled with `target("avx2,f16c")`,
// plus hand-written loops for the block codecs (their decode-and-add included) (stochastic rounding included), the Hadamard
// rotation and the casts. Each loop handles whole groups of 8 (or 16) values with intrinsics and
// the remainder with the reference functions, and computes bit for bit what codec_ref.h
// defines (same float operations in the same order; no FMA: "fma" is deliberately not in the
// target, so nothing can be contracted). Selected at startup when the CPU has AVX2 and F16C;
// elsewhere this file compiles to a stub returning nullptr.
//
// Standard headers come before the target pragma (see reduce_avx2.cc for why).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/codec_table.h"
#include "kernels/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define WEFT_CODEC_AVX2 1
#include <immintrin.h>
#endif

#if WEFT_CODEC_AVX2
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#include "kernels/codec_portable.h"

namespace weft::codec {
namespace {

// ---- shared vector pieces ----

// The 8 unsigned lanes' maximum, in registers (a store and a scalar loop cost ~10% of a
// 128-value block).
inline uint32_t MaxLane(__m256i m) {
  __m128i q = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  q = _mm_max_epu32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(1, 0, 3, 2)));
  q = _mm_max_epu32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(q));
}

inline uint32_t VectorAbsMaxBits(const float* x, size_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i m = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    m = _mm256_max_epu32(m, _mm256_and_si256(v, magnitude));
  }
  const uint32_t lanes = MaxLane(m);
  const uint32_t tail = AbsMaxBits(x + i, n - i);
  return lanes > tail ? lanes : tail;
}

// Round to nearest even, clamp to +-qmax, as IntCode (deterministic). min/max match the
// reference's comparisons for the finite values that reach here.
__m256i VectorIntCodes(__m256 x, __m256 inv, __m256 qmax) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, inv), magic), magic);
  r = _mm256_min_ps(r, qmax);
  r = _mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), qmax));
  return _mm256_cvttps_epi32(r);
}

// Stochastic rounding as IntCode: floor(v + u), u = Dither(key, index) for the 8 indices
// first .. first + 7 (the hash vectorizes: 32-bit multiplies and shifts only).
__m256i VectorHash32(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7FEB352D));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846CA68Bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

__m256i VectorStochasticCodes(__m256 x, __m256 inv, __m256 qmax, uint32_t key, uint32_t first) {
  const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first + key)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 u = _mm256_mul_ps(
      _mm256_cvtepi32_ps(_mm256_srli_epi32(VectorHash32(index), 8)), _mm256_set1_ps(0x1p-24f));
  __m256 r = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, inv), u));
  r = _mm256_min_ps(r, qmax);
  r = _mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), qmax));
  return _mm256_cvttps_epi32(r);
}

// The codes of x[i .. i+7], deterministic or stochastic. The choice is a template parameter so
// that each encode loop inlines its own without a branch per vector: as one function taking
// the options, GCC left it a call per 8 values.
template <bool kStochastic>
__attribute__((always_inline)) inline __m256i Codes8(const float* x, size_t i, __m256 inv,
                                                     __m256 qmax, const BlockOptions& o) {
  const __m256 v = _mm256_loadu_ps(x + i);
  if (!kStochastic) return VectorIntCodes(v, inv, qmax);
  return VectorStochasticCodes(v, inv, qmax, o.key, o.first_index + static_cast<uint32_t>(i));
}

// 32 int32 lanes (each in [-128, 127] or [0, 255] for unsigned) -> 32 bytes in order.
__m256i PackToBytes(__m256i a, __m256i b, __m256i c, __m256i d, bool is_unsigned) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // int16, lanes interleaved by 128-bit halves
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i bytes = is_unsigned ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The 32 byte codes of values i .. i+31; codes8(j) gives the int32 codes of values j .. j+7.
// Four named results, not an array: GCC kept an array of __m256i on the stack, and its stores
// and reloads were the hottest instructions of the fp8 encode in a perf profile.
template <typename Codes8Fn>
void Store32Codes(uint8_t* p, size_t i, bool is_unsigned, Codes8Fn codes8) {
  const __m256i a = codes8(i), b = codes8(i + 8), c = codes8(i + 16), d = codes8(i + 24);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), PackToBytes(a, b, c, d, is_unsigned));
}

// Each decoder is a template on how it stores a block's values: kWrite writes them, kAdd adds
// them into out (decode_add_block: out[i] = out[i] + v, the float32 sum's order) in the same
// registers, kStream writes them with streaming stores (decode_stream_block: out 16-byte
// aligned, the caller fences). A decode is all stores: plain ones read each line first, so
// beyond the cache streaming cuts its traffic by half (sign1, 64 MiB: 3.4 ms -> 2.5). Built in
// a tile and then streamed out instead, the stores stall the decode's arithmetic (4.0 ms).
enum class Store { kWrite, kAdd, kStream };

template <Store kStore>
__attribute__((always_inline)) inline void Put8(float* out, __m256 v) {
  if (kStore == Store::kAdd) v = _mm256_add_ps(_mm256_loadu_ps(out), v);
  if (kStore == Store::kStream) {  // two halves: a 256-bit one would need 32-byte alignment
    _mm_stream_ps(out, _mm256_castps256_ps128(v));
    _mm_stream_ps(out + 4, _mm256_extractf128_ps(v, 1));
    return;
  }
  _mm256_storeu_ps(out, v);
}

// The values the vector loop leaves (the reference's per-value decoder), written or added.
// Inlined, not a (tail) call: GCC emits no vzeroupper before a tail call to a function that
// uses no ymm register, so the upper halves came back dirty into the SSE-compiled caller
// (codec_reduce.cc), whose every SSE instruction then paid the AVX-SSE transition (the fused
// fp8 and int4 ran 3x slower than decode-then-reduce, even in cache).
template <Store kStore, float (*kValueAt)(const uint8_t*, size_t, float)>
__attribute__((always_inline)) inline void DecodeTail(const uint8_t* p, size_t n, float scale,
                                                      float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float v = kValueAt(p, i, scale);
    out[i] = kStore == Store::kAdd ? out[i] + v : v;
  }
}

// ---- int8 ----

// Encodes the whole groups of 32 values; returns how many that was.
template <bool kStochastic>
size_t Int8Groups(const float* x, size_t n, __m256 inv, uint8_t* p, const BlockOptions& o) {
  const __m256 qmax = _mm256_set1_ps(kInt8Max);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    Store32Codes(p, i, false, [&](size_t j) { return Codes8<kStochastic>(x, j, inv, qmax, o); });
  return i;
}

float Avx2EncodeInt8(const float* x, size_t n, uint8_t* p, const BlockOptions& o) {
  const float scale = BlockScale(VectorAbsMaxBits(x, n), kInt8Max);
  if (std::isnan(scale)) {
    std::memset(p, 0, n);
    return scale;
  }
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  size_t i = o.stochastic ? Int8Groups<true>(x, n, inv, p, o) : Int8Groups<false>(x, n, inv, p, o);
  for (; i < n; ++i)
    p[i] = static_cast<uint8_t>(IntCode(x[i] * (1.0f / scale), kInt8Max, o.stochastic, o.key,
                                        o.first_index + static_cast<uint32_t>(i)));
  return scale;
}

template <Store kStore>
void Avx2DecodeInt8(const uint8_t* p, size_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i));
    Put8<kStore>(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), s));
  }
  DecodeTail<kStore, &Int8At>(p + i, n - i, scale, out + i);
}

// ---- int4: 16 codes -> 8 bytes, element 2j in the low nibble ----

// Encodes the whole groups of 16 values (n even); returns how many that was.
template <bool kStochastic>
size_t Int4Groups(const float* x, size_t n, __m256 inv, uint8_t* p, const BlockOptions& o) {
  const __m256 qmax = _mm256_set1_ps(kInt4Max);
  const __m128i low_nibble = _mm_set1_epi16(0x000F), high_nibble = _mm_set1_epi16(0x00F0);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Codes8<kStochastic>(x, i, inv, qmax, o);
    const __m256i b = Codes8<kStochastic>(x, i + 8, inv, qmax, o);
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);  // 16 x int16
    // Two int16 codes per 32 bits -> bytes: pack to int8 pairs, then fold each pair.
    const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words),
                                          _mm256_extracti128_si256(words, 1));  // 16 x int8
    const __m128i folded = _mm_or_si128(_mm_and_si128(bytes, low_nibble),
                                        _mm_and_si128(_mm_srli_epi16(bytes, 4), high_nibble));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p + i / 2), _mm_packus_epi16(folded, folded));
  }
  return i;
}

float Avx2EncodeInt4(const float* x, size_t n, uint8_t* p, const BlockOptions& o) {
  if (n % 2 != 0) return PortableEncodeInt4(x, n, p, o);
  const float scale = BlockScale(VectorAbsMaxBits(x, n), kInt4Max);
  if (std::isnan(scale)) {
    std::memset(p, 0, (n + 1) / 2);
    return scale;
  }
  const float inv_scalar = 1.0f / scale;
  const __m256 inv = _mm256_set1_ps(inv_scalar);
  size_t i = o.stochastic ? Int4Groups<true>(x, n, inv, p, o) : Int4Groups<false>(x, n, inv, p, o);
  for (; i < n; i += 2) {
    const uint32_t index = o.first_index + static_cast<uint32_t>(i);
    const int q0 = IntCode(x[i] * inv_scalar, kInt4Max, o.stochastic, o.key, index);
    const int q1 = IntCode(x[i + 1] * inv_scalar, kInt4Max, o.stochastic, o.key, index + 1);
    p[i / 2] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
  }
  return scale;
}

template <Store kStore>
void Avx2DecodeInt4(const uint8_t* p, size_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i / 2));
    const __m128i lo = _mm_and_si128(packed, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
    // Interleave to element order, then sign-extend the nibbles: (v ^ 8) - 8.
    const __m128i codes = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
    Put8<kStore>(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)), s));
    Put8<kStore>(out + i + 8, _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8))), s));
  }
  // i is even: the rest starts on a byte.
  DecodeTail<kStore, &DecodeInt4Value>(p + i / 2, n - i, scale, out + i);
}

// ---- fp8: the reference's two rounding paths, both computed, then blended ----

template <int kMantBits, int kBias, int kMinNormalExp>
__m256i VectorFp8Codes(__m256 v, __m256 max_value) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256i sign = _mm256_srli_epi32(_mm256_castps_si256(_mm256_and_ps(v, sign_mask)), 24);
  const __m256 a = _mm256_min_ps(_mm256_andnot_ps(sign_mask, v), max_value);
  // Subnormal path: round to multiples of the smallest step by a magic add. The sum stays in
  // magic's binade, whose ulp is that step, so the sum's bits minus magic's bits are the
  // reference's ((a + magic) - magic) * 2^(kMantBits - kMinNormalExp), exactly.
  const __m256 magic = _mm256_set1_ps(Pow2(23 + kMinNormalExp - kMantBits));
  const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(a, magic)),
                                       _mm256_castps_si256(magic));
  // Normal path: integer round-to-nearest-even of the float's mantissa. The re-bias is folded
  // into the rounding constant: for a normal a the bits exceed (127 - kBias) << 23, so
  // subtracting that multiple of 2^kDrop before the shift is the reference's subtraction after.
  constexpr int kDrop = 23 - kMantBits;
  const __m256i bits = _mm256_castps_si256(a);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, kDrop), _mm256_set1_epi32(1));
  constexpr uint32_t kRoundAndRebias = (1u << (kDrop - 1)) - 1u - (uint32_t{127 - kBias} << 23);
  const __m256i round_and_rebias = _mm256_set1_epi32(static_cast<int>(kRoundAndRebias));
  const __m256i normal =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(round_and_rebias, lsb)), kDrop);
  const __m256 is_sub = _mm256_cmp_ps(a, _mm256_set1_ps(Pow2(kMinNormalExp)), _CMP_LT_OQ);
  const __m256i code = _mm256_castps_si256(_mm256_blendv_ps(
      _mm256_castsi256_ps(normal), _mm256_castsi256_ps(sub), is_sub));
  return _mm256_or_si256(code, sign);
}

template <bool kE4m3>
float Avx2EncodeFp8(const float* x, size_t n, uint8_t* p, const BlockOptions& o) {
  const float qmax_scalar = kE4m3 ? kE4m3Max : kE5m2Max;
  const float scale = BlockScale(VectorAbsMaxBits(x, n), qmax_scalar);
  if (std::isnan(scale)) {
    std::memset(p, 0, n);
    return scale;
  }
  const float inv_scalar = 1.0f / scale;
  const __m256 inv = _mm256_set1_ps(inv_scalar), qmax = _mm256_set1_ps(qmax_scalar);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    Store32Codes(p, i, true, [&](size_t j) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), inv);
      return kE4m3 ? VectorFp8Codes<3, 7, -6>(v, qmax) : VectorFp8Codes<2, 15, -14>(v, qmax);
    });
  for (; i < n; ++i) p[i] = kE4m3 ? FloatToE4m3(x[i] * inv_scalar) : FloatToE5m2(x[i] * inv_scalar);
  return scale;
}

// ---- fp8 decode: each value rebuilt from its code's bits (no table, no gather) ----
//
// A code's magnitude m = c & 0x7F is an exponent and a mantissa laid out like a float's, only
// narrower. Normal codes: m shifted so its mantissa meets a float's, plus (127 - bias) in the
// exponent field, is the value's float bits (integer arithmetic, exact). Subnormal codes
// (exponent field 0, so m is the mantissa): m * 2^(1 - bias - mantissa bits), the reference's
// own conversion and multiply (m < 8: exact, the result a normal float). So no float subnormal
// enters any operation before `* scale`, and the values do not depend on MXCSR's DAZ. (Shifting m
// into a float's exponent/mantissa and multiplying by 2^(127 - bias) would be two instructions
// fewer, but the subnormal codes would then be float subnormals, which DAZ reads as zero.) weft
// never sets DAZ or FTZ; the final `* scale` is the reference's, so under FTZ both would flush
// the same subnormal products. NaN codes (e4m3 S.1111.111, e5m2 S.11111.01-11) decode to the
// reference's positive quiet NaN, e5m2 S.11111.00 to +-inf, both blended in from a compare.
template <bool kE4m3>
__m256 VectorFp8Values(__m256i c) {  // c: 8 codes sign-extended to int32
  constexpr int kMantBits = kE4m3 ? 3 : 2, kBias = kE4m3 ? 7 : 15;
  const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(m, 23 - kMantBits),
                                          _mm256_set1_epi32((127 - kBias) << 23));
  const __m256 subnormal =
      _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(Pow2(1 - kBias - kMantBits)));
  const __m256i is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(1 << kMantBits), m);
  __m256 a = _mm256_blendv_ps(_mm256_castsi256_ps(normal), subnormal,
                              _mm256_castsi256_ps(is_subnormal));
  if (!kE4m3) {
    const __m256i is_inf = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7C));
    a = _mm256_blendv_ps(a, _mm256_set1_ps(Infinity()), _mm256_castsi256_ps(is_inf));
  }
  // The sign-extended code's bit 31 is the code's sign: ORed in, as the reference's negation.
  a = _mm256_or_ps(a, _mm256_castsi256_ps(_mm256_and_si256(c, _mm256_set1_epi32(INT32_MIN))));
  const __m256i is_nan = kE4m3 ? _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7F))
                               : _mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7C));
  return _mm256_blendv_ps(a, _mm256_set1_ps(QuietNan()), _mm256_castsi256_ps(is_nan));
}

template <bool kE4m3, Store kStore>
void Avx2DecodeFp8(const uint8_t* p, size_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m256 low = VectorFp8Values<kE4m3>(_mm256_cvtepi8_epi32(codes));
    const __m256 high = VectorFp8Values<kE4m3>(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8)));
    Put8<kStore>(out + i, _mm256_mul_ps(low, s));
    Put8<kStore>(out + i + 8, _mm256_mul_ps(high, s));
  }
  for (; i + 8 <= n; i += 8) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i));
    Put8<kStore>(out + i, _mm256_mul_ps(VectorFp8Values<kE4m3>(_mm256_cvtepi8_epi32(codes)), s));
  }
  DecodeTail<kStore, &Fp8At<kE4m3>>(p + i, n - i, scale, out + i);
}

// ---- sign1 ----

// One pass over the block: each group of 8 gives its sign byte, the magnitudes' running
// maximum (a non-finite value poisons the block: zero payload, NaN scale) and the mean's
// per-lane double sums, in the order of the reference's MeanAbs (codec_ref.h). As three
// passes (the check, the signs, the mean) the block spent most of its time in the sums'
// dependency chain, which now hides the other two.
float Avx2EncodeSign(const float* x, size_t n, uint8_t* p, const BlockOptions&) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i top = _mm256_setzero_si256();
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();  // sums of lanes 0-3, 4-7
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    p[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(v));
    const __m256i bits = _mm256_and_si256(_mm256_castps_si256(v), magnitude);
    top = _mm256_max_epu32(top, bits);
    const __m256 a = _mm256_castsi256_ps(bits);
    low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
    high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
  }
  if (std::max(MaxLane(top), AbsMaxBits(x + i, n - i)) >= kNonFiniteBits) {
    std::memset(p, 0, (n + 7) / 8);
    return NAN;
  }
  if (i < n) p[i / 8] = 0;
  for (size_t j = i; j < n; ++j) p[j / 8] |= static_cast<uint8_t>((FloatBits(x[j]) >> 31) << (j % 8));
  double s[8];
  _mm256_storeu_pd(s, low);
  _mm256_storeu_pd(s + 4, high);
  for (size_t j = i; j < n; ++j) s[j % 8] += static_cast<double>(std::fabs(x[j]));
  const double total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  return n == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(n));
}

template <Store kStore>
void Avx2DecodeSign(const uint8_t* p, size_t n, float scale, float* out) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 positive = _mm256_set1_ps(scale), negative = _mm256_set1_ps(-scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i set = _mm256_and_si256(_mm256_set1_epi32(p[i / 8]), bit);
    const __m256 is_negative = _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, bit));
    Put8<kStore>(out + i, _mm256_blendv_ps(positive, negative, is_negative));
  }
  // i is a multiple of 8: the rest starts on a byte.
  DecodeTail<kStore, &SignAt>(p + i / 8, n - i, scale, out + i);
}

// ---- Hadamard rotation: the reference's butterflies, stages 1, 2, 4 inside a vector ----

// Each output of a stage is one addition or subtraction of the same two inputs as in Fwht
// (IEEE addition is commutative), so the result is bitwise the reference's.
void Avx2Fwht(float* y, size_t b) {
  for (size_t i = 0; i < b; i += 8) {
    __m256 v = _mm256_loadu_ps(y + i);
    __m256 s = _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1));
    v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0xAA);
    s = _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2));
    v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0xCC);
    s = _mm256_permute2f128_ps(v, v, 1);
    v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0xF0);
    _mm256_storeu_ps(y + i, v);
  }
  for (size_t h = 8; h < b; h *= 2)
    for (size_t i = 0; i < b; i += 2 * h)
      for (size_t j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(y + j), c = _mm256_loadu_ps(y + j + h);
        _mm256_storeu_ps(y + j, _mm256_add_ps(a, c));
        _mm256_storeu_ps(y + j + h, _mm256_sub_ps(a, c));
      }
}

void Avx2RotateForward(const float* x, size_t n, size_t b, const float* signs, float* y) {
  if (b % 8 != 0) return RotateForward(x, n, b, signs, y);
  size_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(signs + j)));
  for (; j < b; ++j) y[j] = j < n ? x[j] * signs[j] : 0.0f;
  Avx2Fwht(y, b);
  const __m256 norm = _mm256_set1_ps(HadamardNorm(b));
  for (j = 0; j < b; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), norm));
}

void Avx2RotateInverse(float* y, size_t b, const float* signs) {
  if (b % 8 != 0) return RotateInverse(y, b, signs);
  Avx2Fwht(y, b);
  const __m256 norm = _mm256_set1_ps(HadamardNorm(b));
  for (size_t j = 0; j < b; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(y + j), norm),
                                          _mm256_loadu_ps(signs + j)));
}

// ---- casts ----

void Avx2ToBf16(const float* s, size_t n, uint16_t* d) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int j = 0; j < 2; ++j) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8 * j));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
      const __m256i is_nan = _mm256_cmpgt_epi32(
          _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
      r[j] = _mm256_blendv_epi8(rounded, quiet, is_nan);
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
  }
  PortableToBf16(s + i, n - i, d + i);
}

void Avx2FromBf16(const uint16_t* s, size_t n, float* d) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_slli_epi32(wide, 16));
  }
  PortableFromBf16(s + i, n - i, d + i);
}

void Avx2ToFp16(const float* s, size_t n, uint16_t* d) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  PortableToFp16(s + i, n - i, d + i);
}

void Avx2FromFp16(const uint16_t* s, size_t n, float* d) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  PortableFromFp16(s + i, n - i, d + i);
}

template <DecodeBlockFn kWrite, DecodeAddBlockFn kAdd, DecodeBlockFn kStream>
void SetDecoders(weftCodec_t codec, CodecKernels* k) {
  k->decode_block[codec] = kWrite;
  k->decode_add_block[codec] = kAdd;
  k->decode_stream_block[codec] = kStream;
}

CodecKernels MakeAvx2CodecKernels() {
  CodecKernels k = MakePortableCodecKernels("avx2");
  k.to_cast[weftCodecBf16] = &Avx2ToBf16;
  k.from_cast[weftCodecBf16] = &Avx2FromBf16;
  k.to_cast[weftCodecFp16] = &Avx2ToFp16;
  k.from_cast[weftCodecFp16] = &Avx2FromFp16;
  k.encode_block[weftCodecInt8] = &Avx2EncodeInt8;
  k.encode_block[weftCodecInt4] = &Avx2EncodeInt4;
  k.encode_block[weftCodecFp8E4M3] = &Avx2EncodeFp8<true>;
  k.encode_block[weftCodecFp8E5M2] = &Avx2EncodeFp8<false>;
  k.encode_block[weftCodecSign1] = &Avx2EncodeSign;
  SetDecoders<&Avx2DecodeInt8<Store::kWrite>, &Avx2DecodeInt8<Store::kAdd>,
              &Avx2DecodeInt8<Store::kStream>>(weftCodecInt8, &k);
  SetDecoders<&Avx2DecodeInt4<Store::kWrite>, &Avx2DecodeInt4<Store::kAdd>,
              &Avx2DecodeInt4<Store::kStream>>(weftCodecInt4, &k);
  SetDecoders<&Avx2DecodeFp8<true, Store::kWrite>, &Avx2DecodeFp8<true, Store::kAdd>,
              &Avx2DecodeFp8<true, Store::kStream>>(weftCodecFp8E4M3, &k);
  SetDecoders<&Avx2DecodeFp8<false, Store::kWrite>, &Avx2DecodeFp8<false, Store::kAdd>,
              &Avx2DecodeFp8<false, Store::kStream>>(weftCodecFp8E5M2, &k);
  SetDecoders<&Avx2DecodeSign<Store::kWrite>, &Avx2DecodeSign<Store::kAdd>,
              &Avx2DecodeSign<Store::kStream>>(weftCodecSign1, &k);
  k.rotate_forward = &Avx2RotateForward;
  k.rotate_inverse = &Avx2RotateInverse;
  return k;
}

}  // namespace
}  // namespace weft::codec
#pragma GCC pop_options
#endif  // WEFT_CODEC_AVX2

namespace weft::codec {

const CodecKernels* Avx2CodecKernels() {
#if WEFT_CODEC_AVX2
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  if (!supported) return nullptr;
  static const CodecKernels kernels = MakeAvx2CodecKernels();
  return &kernels;
#else
  return nullptr;
#endif
}

}  // namespace weft::codec
