// The sweep driver's timed values (perf/perf_driver.h): what --values selects, the
// gradient-like inputs' shape, and their conversions to the half types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../perf/perf_driver.h"

namespace {

int Parse(std::vector<const char*> args, perf_options_t* o) {
  args.insert(args.begin(), "weft-perf");
  std::vector<char*> argv;
  for (const char* a : args) argv.push_back(const_cast<char*>(a));
  opterr = 0;
  return perf_parse_options(static_cast<int>(argv.size()), argv.data(), o);
}

TEST(PerfDriverValues, CompressionTimesGradientLikeValuesUnlessToldOtherwise) {
  perf_options_t o;
  ASSERT_EQ(Parse({}, &o), 0);
  EXPECT_EQ(perf_timed_values(&o), PERF_VALUES_EXACT);
  ASSERT_EQ(Parse({"--compress", "topk:0.01"}, &o), 0);
  EXPECT_EQ(perf_timed_values(&o), PERF_VALUES_NORMAL);
  ASSERT_EQ(Parse({"--compress", "int8", "--values", "exact"}, &o), 0);
  EXPECT_EQ(perf_timed_values(&o), PERF_VALUES_EXACT);
  ASSERT_EQ(Parse({"--values", "normal", "-d", "bf16"}, &o), 0);
  EXPECT_EQ(perf_timed_values(&o), PERF_VALUES_NORMAL);
  // An integer type has no gradient-like values: auto stays exact, asking for them is refused.
  ASSERT_EQ(Parse({"--compress", "int8", "-d", "int32"}, &o), 0);
  EXPECT_EQ(perf_timed_values(&o), PERF_VALUES_EXACT);
  EXPECT_EQ(Parse({"--values", "normal", "-d", "int32"}, &o), -1);
  EXPECT_EQ(Parse({"--values", "gaussian"}, &o), -1);
}

TEST(PerfDriverValues, NormalInputsAreNearGaussianPerRankWithRareOutliers) {
  constexpr size_t kN = 1 << 20;
  double sum = 0, sq = 0;
  size_t outliers = 0, same = 0;
  for (size_t j = 0; j < kN; ++j) {
    const float v = perf_normal_input(0, j);
    if (std::fabs(v) > 6) {
      ++outliers;
      continue;
    }
    sum += v, sq += static_cast<double>(v) * v;
    same += v == perf_normal_input(1, j);
  }
  const double n = static_cast<double>(kN - outliers), mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 1.0, 0.02);
  // One in 1000 is 100x (a few of those land inside 6 and are counted as ordinary values).
  EXPECT_GT(outliers, kN / 1000 * 8 / 10);
  EXPECT_LT(outliers, kN / 1000 * 12 / 10);
  EXPECT_LT(same, kN / 1000) << "ranks must carry different values";
  EXPECT_EQ(perf_normal_input(3, 12345), perf_normal_input(3, 12345));
}

float HalfToFloat(uint16_t h) { return static_cast<float>(perf_half_to_double(h)); }

TEST(PerfDriverValues, FloatToHalfRoundsToNearestEven) {
  EXPECT_EQ(perf_float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(perf_float_to_half(-2.5f), 0xc100);
  EXPECT_EQ(perf_float_to_half(0.0f), 0x0000);
  EXPECT_EQ(perf_float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(perf_float_to_half(1e6f), 0x7c00);
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: to even (1); 1 + 3 * 2^-11: up.
  EXPECT_EQ(perf_float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(perf_float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Half's smallest subnormal and a value beyond it.
  EXPECT_EQ(perf_float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(perf_float_to_half(-3 * std::ldexp(1.0f, -24)), 0x8003);
  for (size_t j = 0; j < 4096; ++j) {
    const float v = perf_normal_input(2, j);
    EXPECT_NEAR(HalfToFloat(perf_float_to_half(v)), v, std::fabs(v) / 1024 + 1e-7) << v;
  }
}

// The exact check's inputs go through the same conversions: every integer up to each type's
// exact maximum (perf_exact_max) is stored exactly.
TEST(PerfDriverValues, ExactInputsStoreExactlyInTheHalfTypes) {
  for (perf_dtype_t t : {PERF_HALF, PERF_BF16}) {
    std::vector<uint16_t> buf(1);
    for (int64_t v = 0; v <= perf_exact_max(t); ++v) {
      perf_store(t, buf.data(), 0, v);
      ASSERT_EQ(perf_load(t, buf.data(), 0), static_cast<double>(v)) << perf_type_names[t] << " " << v;
    }
  }
}

TEST(PerfDriverValues, FillWritesEachFloatingType) {
  constexpr size_t kN = 64;
  std::vector<double> d(kN);
  std::vector<float> f(kN);
  std::vector<uint16_t> bf(kN), h(kN);
  perf_fill_normal(PERF_DOUBLE, 1, d.data(), kN);
  perf_fill_normal(PERF_FLOAT, 1, f.data(), kN);
  perf_fill_normal(PERF_BF16, 1, bf.data(), kN);
  perf_fill_normal(PERF_HALF, 1, h.data(), kN);
  for (size_t j = 0; j < kN; ++j) {
    const float v = perf_normal_input(1, j);
    EXPECT_EQ(f[j], v);
    EXPECT_EQ(d[j], static_cast<double>(v));
    EXPECT_NEAR(perf_load(PERF_BF16, bf.data(), j), v, std::fabs(v) / 128);
    EXPECT_NEAR(perf_load(PERF_HALF, h.data(), j), v, std::fabs(v) / 1024 + 1e-7);
  }
}

}  // namespace
