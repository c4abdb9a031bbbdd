// Tests for kernels/: dtype tables, fp16/bf16 conversions and the CPU reduction kernels.
//
// Every (dtype, op) is checked against an independent scalar reference (integers in uint64
// arithmetic, floats in double) on inputs whose results are exactly representable, for every
// kernel table the CPU supports (generic, avx2), with counts 0, 1, 7, 1000 and 2^20 + 3,
// in-place (dst == a, dst == b) and out-of-place, and with pointers offset by one element.
// Rounding of fp16/bf16 is checked separately against hand-computed cases and against the
// CPU's own F16C conversion.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/reduce.h"
#include "kernels/reduce_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weft {
namespace {

constexpr weftDataType_t kAllTypes[] = {weftInt8,    weftUint8,   weftInt32,   weftUint32,
                                        weftInt64,   weftUint64,  weftFloat16, weftFloat32,
                                        weftFloat64, weftBfloat16};
constexpr weftRedOp_t kAllOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};

bool IsFloatType(weftDataType_t t) {
  return t == weftFloat16 || t == weftFloat32 || t == weftFloat64 || t == weftBfloat16;
}

// ---------------------------------------------------------------- dtype tables

TEST(DataTypeTest, SizesOfEveryType) {
  EXPECT_EQ(TypeSize(weftInt8), 1u);
  EXPECT_EQ(TypeSize(weftUint8), 1u);
  EXPECT_EQ(TypeSize(weftInt32), 4u);
  EXPECT_EQ(TypeSize(weftUint32), 4u);
  EXPECT_EQ(TypeSize(weftInt64), 8u);
  EXPECT_EQ(TypeSize(weftUint64), 8u);
  EXPECT_EQ(TypeSize(weftFloat16), 2u);
  EXPECT_EQ(TypeSize(weftFloat32), 4u);
  EXPECT_EQ(TypeSize(weftFloat64), 8u);
  EXPECT_EQ(TypeSize(weftBfloat16), 2u);
  EXPECT_EQ(TypeSize(weftFloat8e4m3), 0u);
  EXPECT_EQ(TypeSize(weftFloat8e5m2), 0u);
  EXPECT_EQ(TypeSize(weftNumTypes), 0u);
  EXPECT_EQ(TypeSize(static_cast<weftDataType_t>(-1)), 0u);
  EXPECT_EQ(TypeSize(static_cast<weftDataType_t>(1000)), 0u);
}

TEST(DataTypeTest, Validity) {
  for (weftDataType_t t : kAllTypes) EXPECT_TRUE(IsValidDataType(t)) << DataTypeName(t);
  EXPECT_FALSE(IsValidDataType(weftFloat8e4m3));
  EXPECT_FALSE(IsValidDataType(weftFloat8e5m2));
  EXPECT_FALSE(IsValidDataType(weftNumTypes));
  EXPECT_FALSE(IsValidDataType(static_cast<weftDataType_t>(-3)));
  for (weftRedOp_t op : kAllOps) EXPECT_TRUE(IsValidRedOp(op)) << RedOpName(op);
  EXPECT_FALSE(IsValidRedOp(weftNumOps));
  EXPECT_FALSE(IsValidRedOp(static_cast<weftRedOp_t>(-1)));
}

TEST(DataTypeTest, Names) {
  const char* expected[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                            "uint64",  "float16", "float32", "float64", "bfloat16"};
  for (int i = 0; i < 10; ++i) EXPECT_STREQ(DataTypeName(kAllTypes[i]), expected[i]);
  EXPECT_STREQ(DataTypeName(weftFloat8e4m3), "invalid");
  EXPECT_STREQ(DataTypeName(weftFloat8e5m2), "invalid");
  EXPECT_STREQ(DataTypeName(static_cast<weftDataType_t>(-1)), "invalid");
  EXPECT_STREQ(RedOpName(weftSum), "sum");
  EXPECT_STREQ(RedOpName(weftProd), "prod");
  EXPECT_STREQ(RedOpName(weftMax), "max");
  EXPECT_STREQ(RedOpName(weftMin), "min");
  EXPECT_STREQ(RedOpName(weftAvg), "avg");
  EXPECT_STREQ(RedOpName(weftNumOps), "invalid");
  EXPECT_STREQ(RedOpName(static_cast<weftRedOp_t>(-7)), "invalid");
}

// ---------------------------------------------------------------- fp16 / bf16 conversions

bool HalfIsNan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool Bfloat16IsNan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0; }

TEST(HalfTest, HandComputedRounding) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);  // largest finite
  // Ties to even: 1 + 2^-11 lies halfway between 1 (0x3C00, even) and 1 + 2^-10 (odd).
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);  // between 0x3C01 and 0x3C02: even
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3C01);  // above the tie
  EXPECT_EQ(FloatToHalf(2049.0f), 0x6800);  // 2048
  EXPECT_EQ(FloatToHalf(2051.0f), 0x6802);  // 2052
  // Overflow: 65520 is the tie between 65504 (odd) and 2^16, which is inf.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties with 0 (even).
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0x1p-25f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(1.5f * 0x1p-24f), 0x0002);  // tie between 1 and 2 -> 2
  EXPECT_EQ(FloatToHalf(2.5f * 0x1p-24f), 0x0002);  // tie between 2 and 3 -> 2
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);  // tie 0x3FF/0x400 -> smallest normal
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  // NaN stays NaN, including a signaling NaN whose payload lies only in the low bits.
  EXPECT_TRUE(HalfIsNan(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(HalfIsNan(FloatToHalf(FloatFromBits(0x7F800001u))));
  EXPECT_TRUE(HalfIsNan(FloatToHalf(FloatFromBits(0xFF800001u))));
  EXPECT_EQ(FloatToHalf(FloatFromBits(0xFF800001u)) & 0x8000, 0x8000);
}

TEST(HalfTest, HalfToFloatValues) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x0400), 0x1p-14f);
  EXPECT_EQ(FloatBits(HalfToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));
}

TEST(HalfTest, RoundTripEveryHalf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (HalfIsNan(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(HalfIsNan(FloatToHalf(f))) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

// Directed reference for float -> fp16: the two neighbours and a comparison in double.
uint16_t ReferenceFloatToHalf(float f) {
  if (std::isnan(f)) return 0x7E00;
  const double x = f;
  if (std::fabs(x) >= 65520.0) return x < 0 ? 0xFC00 : 0x7C00;
  // Truncate toward zero to an fp16 value by scanning: magnitude grid is 2^(e-10) for
  // normals, 2^-24 for subnormals.
  const double ax = std::fabs(x);
  int exponent;
  std::frexp(ax, &exponent);  // ax = m * 2^exponent, m in [0.5, 1)
  const double ulp = ax < 0x1p-14 ? 0x1p-24 : std::ldexp(1.0, exponent - 11);
  const double low = std::floor(ax / ulp) * ulp;
  const double high = low + ulp;
  double chosen;
  if (ax - low < high - ax) {
    chosen = low;
  } else if (ax - low > high - ax) {
    chosen = high;
  } else {
    chosen = std::fmod(low / ulp, 2.0) == 0.0 ? low : high;  // tie: even mantissa
  }
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (chosen >= 65536.0) return sign | 0x7C00;
  // Encode `chosen` exactly via the (already verified) exact HalfToFloat inverse search.
  return static_cast<uint16_t>(sign | FloatToHalf(static_cast<float>(chosen)));
}

TEST(HalfTest, FloatToHalfMatchesDirectedReference) {
  // `chosen` is exactly representable, so FloatToHalf encodes it without rounding: this checks
  // the rounding decision independently of FloatToHalf's own arithmetic.
  std::mt19937 rng(1);
  for (int i = 0; i < 400000; ++i) {
    // Floats spread over the fp16 range and just beyond (exponents 2^-27 .. 2^17).
    const uint32_t exponent = 100u + rng() % 45u;
    const uint32_t bits = (rng() & 0x807FFFFFu) | (exponent << 23);
    const float f = FloatFromBits(bits);
    ASSERT_EQ(FloatToHalf(f), ReferenceFloatToHalf(f)) << std::hexfloat << f;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) uint16_t HardwareFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

TEST(HalfTest, FloatToHalfMatchesF16cOnEveryStrideOfFloats) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU lacks F16C: no hardware reference";
  // About 4.2 million float bit patterns spread over the whole range, NaNs included.
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 1021) {
    const float f = FloatFromBits(static_cast<uint32_t>(bits));
    ASSERT_EQ(FloatToHalf(f), HardwareFloatToHalf(f)) << std::hex << bits;
  }
#else
  GTEST_SKIP() << "not an x86-64 build: no F16C hardware reference";
#endif
}

TEST(Bfloat16Test, HandComputedRounding) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBfloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBfloat16(1.0f + 0x1p-8f), 0x3F80);      // tie -> even (0x3F80)
  EXPECT_EQ(FloatToBfloat16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie -> even (0x3F82)
  EXPECT_EQ(FloatToBfloat16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3F81);
  EXPECT_EQ(FloatToBfloat16(257.0f), 0x4380);  // 256
  EXPECT_EQ(FloatToBfloat16(259.0f), 0x4382);  // 260
  EXPECT_EQ(FloatToBfloat16(1.0f / 3.0f), 0x3EAB);
  // Overflow: the largest float rounds up to inf; just below the tie it stays finite.
  EXPECT_EQ(FloatToBfloat16(FloatFromBits(0x7F7FFFFFu)), 0x7F80);
  EXPECT_EQ(FloatToBfloat16(FloatFromBits(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(FloatToBfloat16(FloatFromBits(0xFF7FFFFFu)), 0xFF80);
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(Bfloat16IsNan(FloatToBfloat16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(Bfloat16IsNan(FloatToBfloat16(FloatFromBits(0x7F800001u))));  // payload low only
  EXPECT_EQ(Bfloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bfloat16ToFloat(0xFF80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(0x7FC0)));
}

TEST(Bfloat16Test, MatchesDirectedReference) {
  std::mt19937 rng(2);
  for (int i = 0; i < 1000000; ++i) {
    const float f = FloatFromBits(static_cast<uint32_t>(rng()));
    const uint16_t got = FloatToBfloat16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(Bfloat16IsNan(got));
      continue;
    }
    // Neighbours: truncation and the next bf16 away from zero; pick the nearer, ties even.
    const uint16_t low = static_cast<uint16_t>(FloatBits(f) >> 16);
    const uint16_t high = static_cast<uint16_t>(low + 1);
    const double magnitude = std::fabs(static_cast<double>(f));
    const double dl = magnitude - std::fabs(static_cast<double>(Bfloat16ToFloat(low)));
    // Past the largest finite bf16 the next value up is 2^128 (rounded as if the exponent
    // were unbounded, then it overflows to inf), as IEEE 754 defines overflow.
    const double high_magnitude = (high & 0x7FFF) == 0x7F80
                                      ? std::ldexp(1.0, 128)
                                      : std::fabs(static_cast<double>(Bfloat16ToFloat(high)));
    const double dh = high_magnitude - magnitude;
    uint16_t expected = dl < dh ? low : dh < dl ? high : ((low & 1) ? high : low);
    if ((low & 0x7FFF) == 0x7F80) expected = low;  // f is inf
    ASSERT_EQ(got, expected) << std::hex << FloatBits(f);
  }
}

// ---------------------------------------------------------------- reduce: reference

// Test values are kept as double (floats) or uint64 bit patterns (integers) and converted to
// storage bytes per dtype.
void StoreDouble(weftDataType_t t, void* p, double v) {
  switch (t) {
    case weftFloat16: {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case weftBfloat16: {
      const uint16_t h = FloatToBfloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case weftFloat32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case weftFloat64: std::memcpy(p, &v, 8); break;
    default: break;
  }
}

double LoadDouble(weftDataType_t t, const void* p) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case weftFloat16: std::memcpy(&h, p, 2); return HalfToFloat(h);
    case weftBfloat16: std::memcpy(&h, p, 2); return Bfloat16ToFloat(h);
    case weftFloat32: std::memcpy(&f, p, 4); return f;
    case weftFloat64: std::memcpy(&d, p, 8); return d;
    default: return 0;
  }
}

uint64_t LoadBits(weftDataType_t t, const void* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, TypeSize(t));  // little-endian: low bytes
  return v;
}

// Sign-extended value of an integer element.
int64_t LoadSigned(weftDataType_t t, const void* p) {
  switch (t) {
    case weftInt8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case weftInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case weftInt64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: return static_cast<int64_t>(LoadBits(t, p));
  }
}

bool IsSignedInt(weftDataType_t t) { return t == weftInt8 || t == weftInt32 || t == weftInt64; }

// Reference result of a (op) b for floats in double, exact for the inputs the tests choose.
double ReferenceFloat(double a, double b, weftRedOp_t op) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case weftSum:
    case weftAvg: return a + b;
    case weftProd: return a * b;
    case weftMax:
      if (a == 0 && b == 0) return (std::signbit(a) && std::signbit(b)) ? -0.0 : 0.0;
      return a > b ? a : b;
    case weftMin:
      if (a == 0 && b == 0) return (std::signbit(a) || std::signbit(b)) ? -0.0 : 0.0;
      return a < b ? a : b;
    default: return 0;
  }
}

// Reference for integers: wrap-around through uint64 arithmetic and truncation (a different
// formulation from the kernels' per-type unsigned arithmetic).
void ReferenceInt(weftDataType_t t, const void* a, const void* b, weftRedOp_t op, void* out) {
  const size_t size = TypeSize(t);
  uint64_t r = 0;
  if (op == weftSum || op == weftAvg) {
    r = LoadBits(t, a) + LoadBits(t, b);
  } else if (op == weftProd) {
    r = LoadBits(t, a) * LoadBits(t, b);
  } else {
    bool a_wins;
    if (IsSignedInt(t)) {
      a_wins = op == weftMax ? LoadSigned(t, a) > LoadSigned(t, b)
                             : LoadSigned(t, a) < LoadSigned(t, b);
    } else {
      a_wins = op == weftMax ? LoadBits(t, a) > LoadBits(t, b) : LoadBits(t, a) < LoadBits(t, b);
    }
    r = a_wins ? LoadBits(t, a) : LoadBits(t, b);
  }
  std::memcpy(out, &r, size);  // truncation = modulo 2^bits
}

// Fills one operand with values whose pairwise results are exact in every float type:
// integers in [-100, 100] (sums fit bf16's 8 significant bits) or [-11, 11] for prod, with
// signed zeros sprinkled in; integer types get arbitrary bit patterns (wrap-around included).
void FillOperand(weftDataType_t t, weftRedOp_t op, std::vector<uint8_t>& buf, size_t offset,
                 size_t count, std::mt19937_64& rng) {
  const size_t size = TypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = buf.data() + (offset + i) * size;
    if (IsFloatType(t)) {
      const int range = op == weftProd ? 11 : 100;
      double v = static_cast<double>(static_cast<int>(rng() % (2 * range + 1)) - range);
      if (rng() % 11 == 0) v = (rng() & 1) ? -0.0 : 0.0;
      StoreDouble(t, p, v);
    } else {
      const uint64_t v = rng();
      std::memcpy(p, &v, size);
    }
  }
}

std::string Hex(const uint8_t* p, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = size; i-- > 0;) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Equal bit patterns, or both NaN of a float type.
bool SameResult(weftDataType_t t, const uint8_t* got, const uint8_t* want) {
  const size_t size = TypeSize(t);
  if (std::memcmp(got, want, size) == 0) return true;
  return IsFloatType(t) && std::isnan(LoadDouble(t, got)) && std::isnan(LoadDouble(t, want));
}

void ReferenceElement(weftDataType_t t, weftRedOp_t op, const uint8_t* a, const uint8_t* b,
                      uint8_t* out) {
  if (IsFloatType(t)) {
    StoreDouble(t, out, ReferenceFloat(LoadDouble(t, a), LoadDouble(t, b), op));
  } else {
    ReferenceInt(t, a, b, op, out);
  }
}

// ---------------------------------------------------------------- reduce: parametrized

const kernels::KernelTable* TableByName(const std::string& isa) {
  if (isa == "generic") return &kernels::GenericKernelTable();
  if (isa == "avx2") return kernels::Avx2KernelTable();
  return nullptr;
}

enum class Aliasing { kOutOfPlace, kDstIsA, kDstIsB };

using ReduceParam = std::tuple<std::string, weftDataType_t, weftRedOp_t>;

class ReduceTest : public ::testing::TestWithParam<ReduceParam> {
 protected:
  void SetUp() override {
    table_ = TableByName(std::get<0>(GetParam()));
    if (table_ == nullptr) {
      GTEST_SKIP() << "kernel table '" << std::get<0>(GetParam())
                   << "' is not available on this CPU/build (needs AVX2 and F16C)";
    }
  }

  // Runs one case and compares every element with the reference.
  void RunCase(size_t count, Aliasing aliasing, size_t element_offset, uint64_t seed) {
    const weftDataType_t t = std::get<1>(GetParam());
    const weftRedOp_t op = std::get<2>(GetParam());
    const size_t size = TypeSize(t);
    SCOPED_TRACE("count=" + std::to_string(count) + " aliasing=" +
                 std::to_string(static_cast<int>(aliasing)) +
                 " offset=" + std::to_string(element_offset));
    std::mt19937_64 rng(seed);
    const size_t total = count + element_offset + 1;  // +1: guard element after the range
    std::vector<uint8_t> a(total * size), b(total * size), out(total * size, 0xA5);
    FillOperand(t, op, a, 0, total, rng);
    FillOperand(t, op, b, 0, total, rng);
    std::vector<uint8_t> expected(count * size);
    for (size_t i = 0; i < count; ++i) {
      ReferenceElement(t, op, &a[(element_offset + i) * size], &b[(element_offset + i) * size],
                       &expected[i * size]);
    }
    const std::vector<uint8_t> a_before = a, b_before = b, out_before = out;
    uint8_t* pa = a.data() + element_offset * size;
    uint8_t* pb = b.data() + element_offset * size;
    uint8_t* pd = out.data() + element_offset * size;
    if (aliasing == Aliasing::kDstIsA) pd = pa;
    if (aliasing == Aliasing::kDstIsB) pd = pb;
    table_->reduce[t][op](pd, pa, pb, count);

    size_t mismatches = 0;
    for (size_t i = 0; i < count && mismatches < 5; ++i) {
      if (!SameResult(t, pd + i * size, &expected[i * size])) {
        ++mismatches;
        ADD_FAILURE() << DataTypeName(t) << " " << RedOpName(op) << " element " << i << ": "
                      << Hex(&a_before[(element_offset + i) * size], size) << " (op) "
                      << Hex(&b_before[(element_offset + i) * size], size)
                      << " = " << Hex(pd + i * size, size) << ", expected "
                      << Hex(&expected[i * size], size);
      }
    }
    // Nothing outside dst[0, count) changed; the operands that are not dst are untouched.
    const std::vector<uint8_t>& dst_before =
        aliasing == Aliasing::kDstIsA   ? a_before
        : aliasing == Aliasing::kDstIsB ? b_before
                                        : out_before;
    const std::vector<uint8_t>& dst_buf =
        aliasing == Aliasing::kDstIsA ? a : aliasing == Aliasing::kDstIsB ? b : out;
    EXPECT_EQ(std::memcmp(dst_buf.data(), dst_before.data(), element_offset * size), 0);
    EXPECT_EQ(std::memcmp(dst_buf.data() + (element_offset + count) * size,
                          dst_before.data() + (element_offset + count) * size, size), 0)
        << "wrote past the end";
    if (aliasing != Aliasing::kDstIsA) {
      EXPECT_EQ(a, a_before);
    }
    if (aliasing != Aliasing::kDstIsB) {
      EXPECT_EQ(b, b_before);
    }
  }

  const kernels::KernelTable* table_ = nullptr;
};

TEST_P(ReduceTest, MatchesReferenceForCountsAliasingAndOffsets) {
  uint64_t seed = 7;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    for (Aliasing aliasing : {Aliasing::kOutOfPlace, Aliasing::kDstIsA, Aliasing::kDstIsB}) {
      for (size_t offset : {size_t{0}, size_t{1}}) RunCase(count, aliasing, offset, ++seed);
    }
  }
}

TEST_P(ReduceTest, LargeCount) {
  const size_t count = (size_t{1} << 20) + 3;
  RunCase(count, Aliasing::kOutOfPlace, 1, 101);
  RunCase(count, Aliasing::kDstIsB, 0, 102);
}

std::string ReduceParamName(const ::testing::TestParamInfo<ReduceParam>& info) {
  return std::get<0>(info.param) + "_" + DataTypeName(std::get<1>(info.param)) + "_" +
         RedOpName(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceTest,
                         ::testing::Combine(::testing::Values("generic", "avx2"),
                                            ::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         ReduceParamName);

// ---------------------------------------------------------------- reduce: special values

// Repeats (a, b) across 1000 elements so the vector body, not just the scalar tail, sees them.
class SpecialValuesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = TableByName(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << "kernel table '" << GetParam() << "' not available";
  }

 public:
  // Returns the result bits of a (op) b, checking that all 1003 lanes agree.
  template <typename S>
  S Apply(weftDataType_t t, weftRedOp_t op, S a, S b) {
    const size_t n = 1003;
    std::vector<S> x(n, a), y(n, b), d(n);
    table_->reduce[t][op](d.data(), x.data(), y.data(), n);
    for (size_t i = 1; i < n; ++i) {
      // NaN payloads may differ between the vector body and the scalar tail (x86 returns the
      // first operand's NaN, and the compiler may commute); NaN-ness may not.
      EXPECT_TRUE(SameResult(t, reinterpret_cast<const uint8_t*>(&d[i]),
                             reinterpret_cast<const uint8_t*>(&d[0])))
          << "lane " << i << " differs";
    }
    return d[0];
  }

  const kernels::KernelTable* table_ = nullptr;
};

TEST_P(SpecialValuesTest, Float16RoundingOverflowAndNan) {
  auto h = [](float f) { return FloatToHalf(f); };
  // Each pairwise reduce rounds once to nearest even.
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, h(2048), h(1)), h(2048));  // 2049: tie -> even
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, h(2048), h(3)), h(2052));  // 2051: tie -> even
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, h(1), h(0x1p-11f)), 0x3C00);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftProd, h(1 + 0x1p-10f), h(1 + 0x1p-10f)), 0x3C02);
  // Overflow to inf.
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, 0x7BFF, 0x7BFF), 0x7C00);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftProd, h(-300), h(300)), 0xFC00);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, 0x7BFF, h(8)), 0x7BFF);  // 65512: below the tie
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, 0x7BFF, h(16)), 0x7C00);  // 65520: tie -> inf
  // Subnormal results are kept exactly.
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftSum, 0x0001, 0x0001), 0x0002);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftProd, 0x0001, h(0.5f)), 0x0000);  // tie -> 0
  // Signed zeros and NaN in max/min.
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftMax, 0x8000, 0x0000), 0x0000);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftMax, 0x0000, 0x8000), 0x0000);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftMin, 0x0000, 0x8000), 0x8000);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftMin, 0x8000, 0x0000), 0x8000);
  for (weftRedOp_t op : kAllOps) {
    EXPECT_TRUE(HalfIsNan(Apply<uint16_t>(weftFloat16, op, 0x7E00, h(1)))) << RedOpName(op);
    EXPECT_TRUE(HalfIsNan(Apply<uint16_t>(weftFloat16, op, h(1), 0x7E00))) << RedOpName(op);
    EXPECT_TRUE(HalfIsNan(Apply<uint16_t>(weftFloat16, op, 0x7E00, 0xFE01))) << RedOpName(op);
  }
  EXPECT_TRUE(HalfIsNan(Apply<uint16_t>(weftFloat16, weftSum, 0x7C00, 0xFC00)));  // inf - inf
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftMax, 0x7C00, h(1)), 0x7C00);
  EXPECT_EQ(Apply<uint16_t>(weftFloat16, weftMin, 0xFC00, h(1)), 0xFC00);
}

TEST_P(SpecialValuesTest, Bfloat16RoundingOverflowAndNan) {
  auto h = [](float f) { return FloatToBfloat16(f); };
  EXPECT_EQ(Apply<uint16_t>(weftBfloat16, weftSum, h(256), h(1)), h(256));  // 257: tie -> even
  EXPECT_EQ(Apply<uint16_t>(weftBfloat16, weftSum, h(256), h(3)), h(260));  // 259: tie -> even
  EXPECT_EQ(Apply<uint16_t>(weftBfloat16, weftSum, 0x7F7F, 0x7F7F), 0x7F80);  // overflow
  EXPECT_EQ(Apply<uint16_t>(weftBfloat16, weftMax, 0x8000, 0x0000), 0x0000);
  EXPECT_EQ(Apply<uint16_t>(weftBfloat16, weftMin, 0x0000, 0x8000), 0x8000);
  for (weftRedOp_t op : kAllOps) {
    EXPECT_TRUE(Bfloat16IsNan(Apply<uint16_t>(weftBfloat16, op, 0x7FC0, h(1)))) << RedOpName(op);
    EXPECT_TRUE(Bfloat16IsNan(Apply<uint16_t>(weftBfloat16, op, h(1), 0xFFC1))) << RedOpName(op);
  }
}

template <typename F>
void CheckNativeFloatSpecials(SpecialValuesTest& test, weftDataType_t t) {
  const F nan = std::numeric_limits<F>::quiet_NaN();
  const F inf = std::numeric_limits<F>::infinity();
  for (weftRedOp_t op : kAllOps) {
    EXPECT_TRUE(std::isnan(test.Apply<F>(t, op, nan, F(1)))) << RedOpName(op);
    EXPECT_TRUE(std::isnan(test.Apply<F>(t, op, F(1), nan))) << RedOpName(op);
    EXPECT_TRUE(std::isnan(test.Apply<F>(t, op, -nan, nan))) << RedOpName(op);
  }
  EXPECT_TRUE(std::isnan(test.Apply<F>(t, weftSum, inf, -inf)));
  EXPECT_EQ(test.Apply<F>(t, weftMax, inf, F(1)), inf);
  EXPECT_EQ(test.Apply<F>(t, weftMin, -inf, F(1)), -inf);
  EXPECT_FALSE(std::signbit(test.Apply<F>(t, weftMax, F(-0.0), F(0.0))));
  EXPECT_FALSE(std::signbit(test.Apply<F>(t, weftMax, F(0.0), F(-0.0))));
  EXPECT_TRUE(std::signbit(test.Apply<F>(t, weftMax, F(-0.0), F(-0.0))));
  EXPECT_TRUE(std::signbit(test.Apply<F>(t, weftMin, F(0.0), F(-0.0))));
  EXPECT_TRUE(std::signbit(test.Apply<F>(t, weftMin, F(-0.0), F(0.0))));
  EXPECT_FALSE(std::signbit(test.Apply<F>(t, weftMin, F(0.0), F(0.0))));
  const F largest = std::numeric_limits<F>::max();
  EXPECT_EQ(test.Apply<F>(t, weftSum, largest, largest), inf);
  // A subnormal result is kept (default floating-point environment).
  const F tiny = std::numeric_limits<F>::denorm_min();
  EXPECT_EQ(test.Apply<F>(t, weftSum, tiny, tiny), tiny * 2);
}

TEST_P(SpecialValuesTest, Float32NanInfAndSignedZeros) {
  CheckNativeFloatSpecials<float>(*this, weftFloat32);
}
TEST_P(SpecialValuesTest, Float64NanInfAndSignedZeros) {
  CheckNativeFloatSpecials<double>(*this, weftFloat64);
}

TEST_P(SpecialValuesTest, IntegerWrapAround) {
  EXPECT_EQ(Apply<int32_t>(weftInt32, weftSum, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(Apply<int32_t>(weftInt32, weftProd, INT32_MIN, -1), INT32_MIN);
  EXPECT_EQ(Apply<int32_t>(weftInt32, weftProd, 65536, 65536), 0);
  EXPECT_EQ(Apply<int8_t>(weftInt8, weftProd, 100, 3), 44);  // 300 mod 256
  EXPECT_EQ(Apply<int8_t>(weftInt8, weftProd, -128, -1), -128);
  EXPECT_EQ(Apply<int8_t>(weftInt8, weftSum, 127, 1), -128);
  EXPECT_EQ(Apply<uint8_t>(weftUint8, weftSum, 200, 100), 44);
  EXPECT_EQ(Apply<uint8_t>(weftUint8, weftMax, 200, 100), 200);  // unsigned compare
  EXPECT_EQ(Apply<int8_t>(weftInt8, weftMax, -56, 100), 100);     // signed compare
  EXPECT_EQ(Apply<uint32_t>(weftUint32, weftSum, 0xFFFFFFFFu, 2u), 1u);
  EXPECT_EQ(Apply<int64_t>(weftInt64, weftSum, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(Apply<int64_t>(weftInt64, weftMin, INT64_MIN, 0), INT64_MIN);
  EXPECT_EQ(Apply<uint64_t>(weftUint64, weftProd, uint64_t{1} << 32, uint64_t{1} << 32), 0u);
  EXPECT_EQ(Apply<uint64_t>(weftUint64, weftMax, ~uint64_t{0}, 1), ~uint64_t{0});
}

INSTANTIATE_TEST_SUITE_P(Tables, SpecialValuesTest, ::testing::Values("generic", "avx2"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---------------------------------------------------------------- table cross-check

TEST(KernelTableTest, Avx2MatchesGenericBitwiseOnRandomBits) {
  const kernels::KernelTable* avx2 = kernels::Avx2KernelTable();
  if (avx2 == nullptr) GTEST_SKIP() << "no AVX2/F16C table on this CPU/build: nothing to compare";
  const kernels::KernelTable& generic = kernels::GenericKernelTable();
  std::mt19937_64 rng(3);
  const size_t n = 4099;
  for (weftDataType_t t : kAllTypes) {
    const size_t size = TypeSize(t);
    std::vector<uint8_t> a(n * size), b(n * size), d1(n * size), d2(n * size);
    for (auto& byte : a) byte = static_cast<uint8_t>(rng());
    for (auto& byte : b) byte = static_cast<uint8_t>(rng());
    for (weftRedOp_t op : kAllOps) {
      generic.reduce[t][op](d1.data(), a.data(), b.data(), n);
      avx2->reduce[t][op](d2.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameResult(t, &d2[i * size], &d1[i * size]))
            << DataTypeName(t) << " " << RedOpName(op) << " element " << i << ": "
            << Hex(&a[i * size], size) << ", " << Hex(&b[i * size], size) << " -> avx2 "
            << Hex(&d2[i * size], size) << " generic " << Hex(&d1[i * size], size);
      }
    }
    std::vector<uint8_t> f1 = a, f2 = a;
    generic.finalize_avg[t](f1.data(), n, 3);
    avx2->finalize_avg[t](f2.data(), n, 3);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameResult(t, &f2[i * size], &f1[i * size])) << DataTypeName(t) << " avg " << i;
    }
  }
}

// ---------------------------------------------------------------- dispatch API

TEST(ReduceApiTest, DispatchesThroughActiveTable) {
  EXPECT_TRUE(std::string(kernels::KernelIsaName()) == "avx2" ||
              std::string(kernels::KernelIsaName()) == "generic");
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, d(3);
  kernels::Reduce(d.data(), a.data(), b.data(), 3, weftFloat32, weftSum);
  EXPECT_EQ(d, (std::vector<float>{11, 22, 33}));
  kernels::Reduce(a.data(), a.data(), b.data(), 3, weftFloat32, weftAvg);  // avg reduces as sum
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(kernels::GetReduceFn(weftFloat32, weftMax),
            kernels::ActiveKernelTable().reduce[weftFloat32][weftMax]);
}

TEST(ReduceApiTest, InvalidTypeOrOpIsNoOp) {
  EXPECT_EQ(kernels::GetReduceFn(weftFloat8e4m3, weftSum), nullptr);
  EXPECT_EQ(kernels::GetReduceFn(weftNumTypes, weftSum), nullptr);
  EXPECT_EQ(kernels::GetReduceFn(weftFloat32, weftNumOps), nullptr);
  EXPECT_EQ(kernels::GetReduceFn(static_cast<weftDataType_t>(-1), weftSum), nullptr);
  uint8_t a[8] = {1, 1, 1, 1, 1, 1, 1, 1}, b[8] = {2, 2, 2, 2, 2, 2, 2, 2}, d[8] = {};
  kernels::Reduce(d, a, b, 8, weftFloat8e5m2, weftSum);
  kernels::Reduce(d, a, b, 8, weftUint8, static_cast<weftRedOp_t>(9));
  kernels::Finalize(d, 8, weftFloat8e5m2, weftAvg, 2);
  for (uint8_t v : d) EXPECT_EQ(v, 0);
}

// ---------------------------------------------------------------- Finalize (avg)

TEST(FinalizeTest, IntegersTruncateTowardZero) {
  std::vector<int32_t> s = {-7, 7, -1, 1, INT32_MIN, INT32_MAX, 0};
  kernels::Finalize(s.data(), s.size(), weftInt32, weftAvg, 2);
  EXPECT_EQ(s, (std::vector<int32_t>{-3, 3, 0, 0, INT32_MIN / 2, INT32_MAX / 2, 0}));
  std::vector<int8_t> s8 = {-128, 127, -5, 5};
  kernels::Finalize(s8.data(), s8.size(), weftInt8, weftAvg, 3);
  EXPECT_EQ(s8, (std::vector<int8_t>{-42, 42, -1, 1}));
  std::vector<int8_t> s8big = {-128, 127};
  kernels::Finalize(s8big.data(), s8big.size(), weftInt8, weftAvg, 200);  // divisor > 127
  EXPECT_EQ(s8big, (std::vector<int8_t>{0, 0}));
  std::vector<uint8_t> u8 = {255, 7};
  kernels::Finalize(u8.data(), u8.size(), weftUint8, weftAvg, 2);
  EXPECT_EQ(u8, (std::vector<uint8_t>{127, 3}));
  std::vector<uint32_t> u32 = {0xFFFFFFFFu, 10};
  kernels::Finalize(u32.data(), u32.size(), weftUint32, weftAvg, 8);
  EXPECT_EQ(u32, (std::vector<uint32_t>{0x1FFFFFFFu, 1}));
  std::vector<int64_t> s64 = {INT64_MIN, -9, 9};
  kernels::Finalize(s64.data(), s64.size(), weftInt64, weftAvg, 5);
  EXPECT_EQ(s64, (std::vector<int64_t>{INT64_MIN / 5, -1, 1}));
  std::vector<uint64_t> u64 = {~uint64_t{0}, 4};
  kernels::Finalize(u64.data(), u64.size(), weftUint64, weftAvg, 3);
  EXPECT_EQ(u64, (std::vector<uint64_t>{~uint64_t{0} / 3, 1}));
}

TEST(FinalizeTest, FloatsDivideAndRoundOnce) {
  std::vector<float> f = {1, 3, -9, 0};
  kernels::Finalize(f.data(), f.size(), weftFloat32, weftAvg, 3);
  EXPECT_EQ(f[0], 1.0f / 3.0f);
  EXPECT_EQ(f[1], 1.0f);
  EXPECT_EQ(f[2], -3.0f);
  EXPECT_EQ(f[3], 0.0f);
  std::vector<double> d = {1, 10};
  kernels::Finalize(d.data(), d.size(), weftFloat64, weftAvg, 3);
  EXPECT_EQ(d[0], 1.0 / 3.0);
  EXPECT_EQ(d[1], 10.0 / 3.0);
  // 1003 elements so vector bodies and tails both run.
  std::vector<uint16_t> h(1003, FloatToHalf(1.0f)), bf(1003, FloatToBfloat16(1.0f));
  kernels::Finalize(h.data(), h.size(), weftFloat16, weftAvg, 3);
  kernels::Finalize(bf.data(), bf.size(), weftBfloat16, weftAvg, 3);
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(h[i], 0x3555) << i;   // 1/3 in fp16, rounded to nearest
    ASSERT_EQ(bf[i], 0x3EAB) << i;  // 1/3 in bf16
  }
  std::vector<uint16_t> h2 = {FloatToHalf(3.0f), FloatToHalf(-6.0f), 0x7C00, 0x7E00};
  kernels::Finalize(h2.data(), h2.size(), weftFloat16, weftAvg, 2);
  EXPECT_EQ(h2[0], FloatToHalf(1.5f));
  EXPECT_EQ(h2[1], FloatToHalf(-3.0f));
  EXPECT_EQ(h2[2], 0x7C00);
  EXPECT_TRUE(HalfIsNan(h2[3]));
}

TEST(FinalizeTest, EveryTypeAgainstReferenceOnBothTables) {
  for (const char* isa : {"generic", "avx2"}) {
    const kernels::KernelTable* table = TableByName(isa);
    if (table == nullptr) continue;  // the avx2 table's absence is reported by ReduceTest
    for (weftDataType_t t : kAllTypes) {
      for (int divisor : {2, 3, 5, 8}) {
        const size_t size = TypeSize(t), n = 1000;
        std::mt19937_64 rng(static_cast<uint64_t>(divisor) * 131 + t);
        std::vector<uint8_t> buf(n * size);
        FillOperand(t, weftSum, buf, 0, n, rng);
        std::vector<uint8_t> expected(n * size);
        for (size_t i = 0; i < n; ++i) {
          const uint8_t* p = &buf[i * size];
          uint8_t* e = &expected[i * size];
          if (t == weftFloat16) {
            const float q = static_cast<float>(LoadDouble(t, p)) / static_cast<float>(divisor);
            const uint16_t v = FloatToHalf(q);
            std::memcpy(e, &v, 2);
          } else if (t == weftBfloat16) {
            const float q = static_cast<float>(LoadDouble(t, p)) / static_cast<float>(divisor);
            const uint16_t v = FloatToBfloat16(q);
            std::memcpy(e, &v, 2);
          } else if (t == weftFloat32) {
            // float division is correctly rounded; so is the double quotient rounded to float
            // (double has more than 2*24+2 bits), an independent formulation.
            StoreDouble(t, e, LoadDouble(t, p) / divisor);
          } else if (t == weftFloat64) {
            StoreDouble(t, e, LoadDouble(t, p) / divisor);
          } else if (IsSignedInt(t)) {
            const int64_t q = LoadSigned(t, p) / divisor;
            std::memcpy(e, &q, size);
          } else {
            const uint64_t q = LoadBits(t, p) / static_cast<uint64_t>(divisor);
            std::memcpy(e, &q, size);
          }
        }
        table->finalize_avg[t](buf.data(), n, divisor);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(SameResult(t, &buf[i * size], &expected[i * size]))
              << isa << " " << DataTypeName(t) << " / " << divisor << " element " << i << ": "
              << Hex(&buf[i * size], size) << " expected " << Hex(&expected[i * size], size);
        }
      }
    }
  }
}

TEST(FinalizeTest, NoOpForOtherOpsAndDivisorOne) {
  std::vector<float> f = {6, 9};
  for (weftRedOp_t op : {weftSum, weftProd, weftMax, weftMin}) {
    kernels::Finalize(f.data(), f.size(), weftFloat32, op, 3);
  }
  kernels::Finalize(f.data(), f.size(), weftFloat32, weftAvg, 1);
  kernels::Finalize(f.data(), f.size(), weftFloat32, weftAvg, 0);
  kernels::Finalize(f.data(), f.size(), weftFloat32, weftAvg, -2);
  kernels::Finalize(f.data(), 0, weftFloat32, weftAvg, 3);
  EXPECT_EQ(f, (std::vector<float>{6, 9}));
}

// ---------------------------------------------------------------- Copy

// copy(dst + offset, src + offset, bytes) copies exactly and touches no byte around dst.
void ExpectExactCopy(void (*copy)(void*, const void*, size_t), size_t bytes, size_t offset,
                     std::mt19937& rng) {
  std::vector<uint8_t> src(bytes + 8), dst(bytes + 8, 0xEE);
  for (auto& byte : src) byte = static_cast<uint8_t>(rng());
  copy(dst.data() + offset, src.data() + offset, bytes);
  ASSERT_EQ(std::memcmp(dst.data() + offset, src.data() + offset, bytes), 0) << bytes;
  for (size_t i = 0; i < offset; ++i) ASSERT_EQ(dst[i], 0xEE);
  for (size_t i = offset + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE) << bytes;
}

TEST(CopyTest, SizesAndUnalignedPointers) {
  std::mt19937 rng(4);
  // 16 MiB + 5 takes the non-temporal path (default WEFT_COPY_NT_THRESHOLD) with an unaligned
  // head and a tail.
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{4096 + 3},
                       (size_t{8} << 20) + 5, (size_t{16} << 20) + 5}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
      ExpectExactCopy(kernels::Copy, bytes, offset, rng);
    }
  }
}

// CopyToShared (window publishes): plain or streamed by the rate of its timed plain copies,
// exact either way. Repeated publishes of 64 KiB and more go through both choices whenever the
// timing says "slow" (a loaded machine, or cores that share no cache); the bytes around the
// destination stay untouched.
TEST(CopyTest, CopyStreamingIsExact) {
  std::mt19937 rng(6);
  for (int round = 0; round < 8; ++round)
    for (size_t bytes : {size_t{0}, size_t{5}, size_t{63}, size_t{64} + 17, (size_t{16} << 10) + 3,
                         (size_t{1} << 20) + 9})
      ExpectExactCopy(kernels::CopyStreaming, bytes, static_cast<size_t>(round % 5), rng);
}

TEST(CopyTest, CopyToSharedIsExactWhateverItChooses) {
  std::mt19937 rng(5);
  for (int round = 0; round < 40; ++round) {
    for (size_t bytes : {size_t{0}, size_t{9}, (size_t{64} << 10) - 1, size_t{64} << 10,
                         (size_t{64} << 10) + 13, (size_t{1} << 20) + 7}) {
      const size_t offset = static_cast<size_t>(round % 3);
      ExpectExactCopy(kernels::CopyToShared, bytes, offset, rng);
    }
  }
}

}  // namespace
}  // namespace weft
