// Compression codecs (kernels/codec*.h): every codec's stated worst-case error on adversarial
// inputs, NaN/inf handling, exact encoded sizes, every CPU kernel table bitwise equal to the
// reference definitions in codec_ref.h, fp8 conversions exhaustively, top-k selection,
// stochastic rounding's bias, Hadamard rotation, and spec validation.
#include <gtest/gtest.h>

#include "test_util.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/codec.h"
#include "kernels/codec_ref.h"
#include "kernels/codec_table.h"
#include "kernels/half.h"
#include "kernels/reduce.h"
#include "weft/weft_compress.h"

namespace weft::codec {
namespace {

weftCompression Spec(weftCodec_t codec, uint32_t block = 128, uint32_t flags = 0,
                     float ratio = 0.01f) {
  return weft_test::CodecSpec(codec, block, flags, ratio, 1234);
}

// Encodes into a buffer with guard bytes after EncodedBytes, checks the guard, decodes.
std::vector<float> RoundTrip(const weftCompression& spec, const std::vector<float>& x,
                             uint64_t stream = 0) {
  const size_t bytes = EncodedBytes(spec, x.size());
  std::vector<uint8_t> encoded(bytes + 64, 0xA5);
  Encode(spec, x.data(), x.size(), encoded.data(), stream);
  for (size_t i = bytes; i < encoded.size(); ++i)
    EXPECT_EQ(encoded[i], 0xA5) << CodecName(spec.codec) << " wrote past EncodedBytes";
  std::vector<float> out(x.size(), -12345.0f);
  Decode(spec, encoded.data(), x.size(), out.data());
  return out;
}

// Adversarial inputs, each a multiple of blocks plus a partial block.
std::vector<std::pair<std::string, std::vector<float>>> AdversarialInputs() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 128 * 5 + 37;
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  inputs.push_back({"zeros", std::vector<float>(n, 0.0f)});
  std::vector<float> negzero(n, -0.0f);
  inputs.push_back({"negative zeros", negzero});
  std::vector<float> denormals(n);
  for (size_t i = 0; i < n; ++i) denormals[i] = FloatFromBits(static_cast<uint32_t>(1 + i * 977) & 0x7FFFFFu) * (i % 2 ? -1.f : 1.f);
  inputs.push_back({"denormals", denormals});
  std::vector<float> gaussian(n);
  for (auto& v : gaussian) v = normal(rng);
  inputs.push_back({"gaussian", gaussian});
  std::vector<float> outlier = gaussian;
  for (size_t b = 0; b < n; b += 128) outlier[b + (b / 128 * 31) % std::min<size_t>(128, n - b)] = 1e6f;
  inputs.push_back({"one huge outlier per block", outlier});
  std::vector<float> wide(n);
  for (size_t i = 0; i < n; ++i) wide[i] = std::ldexp(normal(rng), static_cast<int>(i % 200) - 100);
  inputs.push_back({"magnitudes 2^-100..2^100", wide});
  std::vector<float> huge(n);
  for (size_t i = 0; i < n; ++i) huge[i] = (i % 3 ? 3.0e38f : -1.0e38f) * (0.5f + 0.001f * (i % 97));
  inputs.push_back({"near float max", huge});
  std::vector<float> ties(n);
  for (size_t i = 0; i < n; ++i) ties[i] = static_cast<float>(static_cast<int>(i % 255) - 127) + 0.5f;
  inputs.push_back({"halves (rounding ties)", ties});
  return inputs;
}

// The header's bound for element i (codec_ref.h), in double.
double Bound(const weftCompression& spec, const std::vector<float>& x, size_t i) {
  const size_t b0 = i / spec.block * spec.block, b1 = std::min(x.size(), b0 + spec.block);
  double absmax = 0, norm2 = 0;
  for (size_t j = b0; j < b1; ++j) {
    absmax = std::max(absmax, std::fabs(static_cast<double>(x[j])));
    norm2 += static_cast<double>(x[j]) * x[j];
  }
  const double ax = std::fabs(static_cast<double>(x[i])), slack = 1 + std::ldexp(1.0, -12);
  const bool stochastic = spec.flags & WEFT_COMPRESS_STOCHASTIC;
  double step = 0;  // relative step for the Hadamard bound
  switch (spec.codec) {
    case weftCodecBf16:
      return ax >= std::ldexp(1.0, -126) ? std::ldexp(ax, -8) : std::ldexp(1.0, -134);
    case weftCodecFp16:
      return ax >= std::ldexp(1.0, -14) ? std::ldexp(ax, -11) : std::ldexp(1.0, -25);
    case weftCodecFp8E4M3:
      step = std::ldexp(1.0, -4);
      if (!(spec.flags & WEFT_COMPRESS_HADAMARD))
        return std::ldexp(ax, -4) * slack + std::ldexp(absmax, -18) + std::ldexp(1.0, -127);
      break;
    case weftCodecFp8E5M2:
      step = std::ldexp(1.0, -3);
      if (!(spec.flags & WEFT_COMPRESS_HADAMARD))
        return std::ldexp(ax, -3) * slack + std::ldexp(absmax, -30) + std::ldexp(1.0, -127);
      break;
    case weftCodecInt8:
      step = stochastic ? 1.0 / 127 : 1.0 / 254;
      if (!(spec.flags & WEFT_COMPRESS_HADAMARD)) return absmax * step * slack + std::ldexp(1.0, -126);
      break;
    case weftCodecInt4:
      step = stochastic ? 1.0 / 7 : 1.0 / 14;
      if (!(spec.flags & WEFT_COMPRESS_HADAMARD)) return absmax * step * slack + std::ldexp(1.0, -126);
      break;
    case weftCodecSign1:
      step = 1.0;
      if (!(spec.flags & WEFT_COMPRESS_HADAMARD)) return absmax * (1 + std::ldexp(1.0, -20));
      break;
    default: return 0;
  }
  return std::sqrt(static_cast<double>(spec.block)) * std::sqrt(norm2) * (step + std::ldexp(1.0, -18)) +
         std::ldexp(1.0, -120);
}

bool Finite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

void ExpectWithinBound(const weftCompression& spec) {
  for (const auto& [name, x] : AdversarialInputs()) {
    const std::vector<float> y = RoundTrip(spec, x, 3);
    bool overflow_expected = false;
    for (size_t i = 0; i < x.size(); ++i) {
      // fp16 cannot hold values near float max: documented overflow to inf.
      if (spec.codec == weftCodecFp16 && std::fabs(x[i]) >= 65520.0f) {
        EXPECT_TRUE(std::isinf(y[i]) && std::signbit(y[i]) == std::signbit(x[i])) << name << " i=" << i;
        overflow_expected = true;
        continue;
      }
      // Documented limit of the rotation: a block whose values could sum past FLT_MAX
      // overflows inside the transform and decodes to NaN (never to wrong finite values).
      if ((spec.flags & WEFT_COMPRESS_HADAMARD) && std::isnan(y[i])) {
        const size_t b0 = i / spec.block * spec.block;
        float absmax = 0;
        for (size_t j = b0; j < std::min(x.size(), b0 + spec.block); ++j) absmax = std::max(absmax, std::fabs(x[j]));
        EXPECT_GT(static_cast<double>(absmax) * spec.block, std::ldexp(1.0, 127)) << name << " i=" << i;
        continue;
      }
      ASSERT_TRUE(std::isfinite(y[i])) << CodecName(spec.codec) << " " << name << " i=" << i;
      const double err = std::fabs(static_cast<double>(x[i]) - y[i]);
      ASSERT_LE(err, Bound(spec, x, i))
          << CodecName(spec.codec) << " flags=" << spec.flags << " on " << name << " i=" << i
          << " x=" << x[i] << " decoded=" << y[i];
    }
    (void)overflow_expected;
  }
}

TEST(CodecBounds, CastsAndBlockCodecs) {
  for (weftCodec_t c : {weftCodecBf16, weftCodecFp16, weftCodecFp8E4M3, weftCodecFp8E5M2,
                        weftCodecInt8, weftCodecInt4, weftCodecSign1})
    ExpectWithinBound(Spec(c));
}

TEST(CodecBounds, OtherBlockSizes) {
  for (uint32_t block : {1u, 7u, 64u, 1000u})
    for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecInt8, weftCodecInt4, weftCodecSign1})
      ExpectWithinBound(Spec(c, block));
}

TEST(CodecBounds, StochasticRounding) {
  ExpectWithinBound(Spec(weftCodecInt8, 128, WEFT_COMPRESS_STOCHASTIC));
  ExpectWithinBound(Spec(weftCodecInt4, 128, WEFT_COMPRESS_STOCHASTIC));
}

TEST(CodecBounds, HadamardRotation) {
  for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecFp8E5M2, weftCodecInt8, weftCodecInt4, weftCodecSign1})
    ExpectWithinBound(Spec(c, 128, WEFT_COMPRESS_HADAMARD));
  ExpectWithinBound(Spec(weftCodecInt4, 64, WEFT_COMPRESS_HADAMARD | WEFT_COMPRESS_STOCHASTIC));
}

// The point of the rotation: a block with one outlier loses far less of the rest.
TEST(CodecBounds, HadamardReducesErrorAroundOutliers) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(128 * 64);
  for (auto& v : x) v = normal(rng);
  for (size_t b = 0; b < x.size(); b += 128) x[b + 5] = 200.0f;
  auto rms = [&](const weftCompression& s) {
    const std::vector<float> y = RoundTrip(s, x);
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
    return std::sqrt(e / x.size());
  };
  // int8: the outlier sets a step of 200/127 for the whole block; rotated, the step is ~8x
  // smaller (the outlier's energy is spread over 128 values).
  const double plain = rms(Spec(weftCodecInt8)), rotated = rms(Spec(weftCodecInt8, 128, WEFT_COMPRESS_HADAMARD));
  EXPECT_LT(rotated, plain / 4) << "plain " << plain << " rotated " << rotated;
}

TEST(CodecBounds, TopK) {
  for (float ratio : {0.01f, 0.1f, 0.5f, 1.0f}) {
    const weftCompression spec = Spec(weftCodecTopK, 128, 0, ratio);
    for (const auto& [name, x] : AdversarialInputs()) {
      const std::vector<float> y = RoundTrip(spec, x);
      const size_t k = TopKCount(ratio, x.size());
      size_t kept = 0;
      float smallest_kept = INFINITY;
      for (size_t i = 0; i < x.size(); ++i) {
        if (y[i] != 0.0f || (std::signbit(y[i]) && x[i] == 0.0f)) {
          ASSERT_EQ(FloatBits(y[i]), FloatBits(x[i])) << name << " kept values are exact";
          ++kept;
          smallest_kept = std::min(smallest_kept, std::fabs(x[i]));
        }
      }
      EXPECT_LE(kept, k) << name;
      for (size_t i = 0; i < x.size(); ++i)
        if (y[i] == 0.0f && x[i] != 0.0f) EXPECT_LE(std::fabs(x[i]), smallest_kept) << name << " i=" << i;
    }
  }
}

TEST(CodecBounds, TopKTiesGoToLowerIndices) {
  const std::vector<float> x = {1, 5, -5, 5, 2, -5};
  const std::vector<float> y = RoundTrip(Spec(weftCodecTopK, 128, 0, 0.5f), x);  // k = 3
  EXPECT_EQ(y, (std::vector<float>{0, 5, -5, 5, 0, 0}));
}

// The exact top-k by definition (codec_ref.h): rank = (|x| bits, then lower index); the k
// largest, as ascending indices then their values.
std::vector<uint8_t> TopKByDefinition(const std::vector<float>& x, size_t k) {
  std::vector<uint64_t> ranks(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ranks[i] = (uint64_t{FloatBits(x[i]) & 0x7FFFFFFFu} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
  std::sort(ranks.begin(), ranks.end(), std::greater<uint64_t>());
  std::vector<uint32_t> kept(k);
  for (size_t j = 0; j < k; ++j) kept[j] = 0xFFFFFFFFu - static_cast<uint32_t>(ranks[j]);
  std::sort(kept.begin(), kept.end());
  std::vector<uint8_t> out(8 * k);
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(&out[4 * j], &kept[j], 4);
    std::memcpy(&out[4 * k + 4 * j], &x[kept[j]], 4);
  }
  return out;
}

// Where top-k's sampled selection reads its samples in n values (codec_topk.cc, kSamples:
// runs of 8 consecutive values at 2048 evenly spaced positions).
std::vector<bool> SampledBySelection(size_t n) {
  std::vector<bool> sampled(n, false);
  for (size_t r = 0; r < 2048; ++r)
    for (size_t q = 0; q < 8; ++q) sampled[r * n / 2048 + q] = true;
  return sampled;
}

// Inputs large enough for the sampled threshold (codec_topk.cc), including ones built to fool
// its evenly spaced samples in both directions; the encoding must be the definition's, bitwise.
TEST(CodecTopK, LargeInputsSelectExactlyTheDefinition) {
  const size_t n = (size_t{1} << 17) + 5;
  const std::vector<bool> sampled = SampledBySelection(n);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = normal(rng) * (i % 1000 == 7 ? 100.0f : 1.0f);
  inputs.push_back({"gaussian with outliers", x});
  inputs.push_back({"all equal", std::vector<float>(n, -2.5f)});
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  inputs.push_back({"ascending", x});
  for (size_t i = 0; i < n; ++i) x[i] = sampled[i] ? 1000.0f + i : normal(rng);
  inputs.push_back({"large exactly where sampled (too few candidates: the radix path)", x});
  for (size_t i = 0; i < n; ++i)
    x[i] = !sampled[i] && i > 0 && sampled[i - 1] ? 1000.0f + i : normal(rng) * 1e-3f;
  inputs.push_back({"large just after where sampled (the sample sees none)", x});
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 3) - (i % 2 ? 0.0f : 3.0f);
  inputs.push_back({"few distinct values (ties at the threshold)", x});
  for (size_t i = 0; i < n; ++i) x[i] = sampled[i] ? 1000.0f + i : static_cast<float>((i * 7) % 5);
  inputs.push_back({"ties at the threshold behind a fooled sample (radix path)", x});
  // The k-th kept among 1.2% of equal values above the threshold: one key, ranks by index.
  for (size_t i = 0; i < n; ++i) x[i] = (i * 2654435761u) % 1000 < 12 ? 7.0f : 0.5f * normal(rng);
  inputs.push_back({"an equal 1.2% above the rest", x});
  // Magnitudes over 120 octaves: the candidates' keys span most of the float range.
  for (size_t i = 0; i < n; ++i) x[i] = std::ldexp(normal(rng), static_cast<int>((i * 37) % 120) - 60);
  inputs.push_back({"magnitudes over 120 octaves", x});
  std::vector<float> nonfinite(n, 0.0f);
  for (size_t i = 0; i < n; i += 997) nonfinite[i] = i % 2 ? NAN : -INFINITY;
  inputs.push_back({"zeros with NaN and inf", nonfinite});
  for (float ratio : {0.001f, 0.01f, 0.05f, 0.3f}) {
    const weftCompression spec = Spec(weftCodecTopK, 128, 0, ratio);
    const size_t k = TopKCount(ratio, n);
    for (const auto& [name, in] : inputs) {
      std::vector<uint8_t> encoded(EncodedBytes(spec, n));
      Encode(spec, in.data(), n, encoded.data(), 0);
      EXPECT_TRUE(encoded == TopKByDefinition(in, k)) << name << ", ratio " << ratio;
    }
  }
}

// EncodeOfSum (a codec chain's reduce and top-k encode in one pass) writes exactly what Encode
// writes for the stored float32 sums, or reports that it does not apply and writes nothing.
TEST(CodecTopK, EncodeOfSumIsTheEncodeOfTheStoredSums) {
  const size_t n = (size_t{1} << 17) + 5;
  const std::vector<bool> sampled = SampledBySelection(n);
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    std::string name;
    std::vector<float> a, b;
    bool fused;  // whether the one-pass path must apply (else it may)
    bool declines = false;  // whether it must not (the sample misjudges: the test knows where it samples)
  };
  std::vector<Case> cases;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = normal(rng), b[i] = normal(rng) * (i % 911 == 3 ? 50.0f : 1.0f);
  cases.push_back({"gaussian sums with outliers", a, b, true});
  std::vector<float> few_a(n), few_b(n);
  for (size_t i = 0; i < n; ++i) few_a[i] = static_cast<float>(i % 3), few_b[i] = i % 2 ? 0.0f : -3.0f;
  cases.push_back({"sums of few distinct values (ties at the threshold)", few_a, few_b, true});
  for (size_t i = 0; i < n; ++i) b[i] = sampled[i] ? 1000.0f + i : normal(rng);
  cases.push_back({"large exactly where sampled (the sample misjudges)", a, b, false, true});
  std::vector<float> bad = a;
  for (size_t i = 0; i < n; i += 1231) bad[i] = i % 2 ? NAN : INFINITY;
  cases.push_back({"NaN and inf in one operand", bad, a, false});
  for (float ratio : {0.001f, 0.01f, 0.05f}) {
    const weftCompression spec = Spec(weftCodecTopK, 128, 0, ratio);
    for (const Case& c : cases) {
      std::vector<float> sum(n);
      for (size_t i = 0; i < n; ++i) sum[i] = c.a[i] + c.b[i];
      std::vector<uint8_t> want(EncodedBytes(spec, n)), got(want.size(), 0xAB);
      Encode(spec, sum.data(), n, want.data(), 0);
      const bool fused = EncodeOfSum(spec, c.a.data(), c.b.data(), n, got.data());
      if (c.fused) EXPECT_TRUE(fused) << c.name << ", ratio " << ratio;
      if (c.declines) EXPECT_FALSE(fused) << c.name << ", ratio " << ratio;
      if (fused) {
        EXPECT_TRUE(got == want) << c.name << ", ratio " << ratio;
      } else {
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t x) { return x == 0xAB; }))
            << c.name << ": wrote although it did not apply";
      }
    }
  }
  // Another codec, or an input below the sampled path's size: not applied, nothing written.
  std::vector<uint8_t> out(8 * 64, 0xAB);
  EXPECT_FALSE(EncodeOfSum(Spec(weftCodecInt8), a.data(), b.data(), n, out.data()));
  EXPECT_FALSE(EncodeOfSum(Spec(weftCodecTopK, 128, 0, 0.01f), a.data(), b.data(), 4096, out.data()));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t x) { return x == 0xAB; }));
}

// ---- NaN and inf ----

TEST(CodecNonFinite, BlockCodecsPoisonTheBlockOnly) {
  for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecFp8E5M2, weftCodecInt8, weftCodecInt4, weftCodecSign1}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x(300, 1.5f);
      x[130] = bad;  // block 1
      const std::vector<float> y = RoundTrip(Spec(c), x);
      for (size_t i = 0; i < x.size(); ++i) {
        if (i >= 128 && i < 256) {
          EXPECT_TRUE(std::isnan(y[i])) << CodecName(c) << " i=" << i;
        } else {
          EXPECT_TRUE(std::isfinite(y[i])) << CodecName(c) << " i=" << i;
        }
      }
    }
  }
}

TEST(CodecNonFinite, CastsAndTopKKeepThem) {
  const std::vector<float> x = {NAN, INFINITY, -INFINITY, 1.0f, -2.0f, 0.0f};
  for (weftCodec_t c : {weftCodecBf16, weftCodecFp16}) {
    const std::vector<float> y = RoundTrip(Spec(c), x);
    EXPECT_TRUE(std::isnan(y[0])) << CodecName(c);
    EXPECT_EQ(y[1], INFINITY);
    EXPECT_EQ(y[2], -INFINITY);
    EXPECT_EQ(y[3], 1.0f);
  }
  const std::vector<float> y = RoundTrip(Spec(weftCodecTopK, 128, 0, 0.5f), x);  // k = 3
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], INFINITY);
  EXPECT_EQ(y[2], -INFINITY);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(CodecNonFinite, DroppedIsZeroWhereDecodedIsNotFinite) {
  std::vector<float> x(256, 0.3f);
  x[3] = NAN;
  const weftCompression spec = Spec(weftCodecInt8);
  std::vector<uint8_t> enc(EncodedBytes(spec, x.size()));
  Encode(spec, x.data(), x.size(), enc.data(), 0);
  std::vector<float> y(x.size()), dropped(x.size());
  DecodeWithDropped(spec, enc.data(), x.size(), x.data(), y.data(), dropped.data());
  EXPECT_EQ(dropped[3], 0.0f);
  EXPECT_EQ(dropped[100], 0.0f);
  EXPECT_EQ(dropped[200], x[200] - y[200]);
  EXPECT_TRUE(std::isfinite(y[200]));
}

// The one-pass feedback kernel against DecodeWithDropped and the loop it replaces, bit for
// bit: every codec, a count over several decode runs with a partial block, non-finite values.
TEST(CodecFeedback, DroppedIntoResidualEqualsDecodeWithDropped) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const size_t n = 4096 * 3 + 128 * 2 + 37;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  x[5] = NAN;
  x[9000] = INFINITY;
  const std::vector<weftCompression> specs = {
      Spec(weftCodecBf16), Spec(weftCodecFp16), Spec(weftCodecFp8E4M3), Spec(weftCodecFp8E5M2),
      Spec(weftCodecInt8), Spec(weftCodecInt4), Spec(weftCodecSign1),
      Spec(weftCodecInt8, 256, WEFT_COMPRESS_HADAMARD), Spec(weftCodecInt4, 1000),
      Spec(weftCodecTopK, 128, 0, 0.01f), Spec(weftCodecTopK, 128, 0, 1.0f)};
  for (const weftCompression& spec : specs) {
    std::vector<uint8_t> enc(EncodedBytes(spec, n));
    Encode(spec, x.data(), n, enc.data(), 3);
    std::vector<float> decoded(n), expected(n), stored(n, -1.0f);
    DecodeWithDropped(spec, enc.data(), n, x.data(), decoded.data(), expected.data());
    DroppedIntoResidual(spec, enc.data(), n, x.data(), Feedback::kStore, 1.0f, stored.data());
    std::vector<float> added(n, 0.25f), expected_added(n, 0.25f);
    for (size_t i = 0; i < n; ++i) expected_added[i] += 4.0f * expected[i];
    DroppedIntoResidual(spec, enc.data(), n, x.data(), Feedback::kAdd, 4.0f, added.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(FloatBits(stored[i]), FloatBits(expected[i])) << CodecName(spec.codec) << " i=" << i;
      ASSERT_EQ(FloatBits(added[i]), FloatBits(expected_added[i])) << CodecName(spec.codec) << " i=" << i;
    }
  }
}

// ---- sizes ----

// EncodeValues / DecodeValues on bf16 values against the float32 path on the widened values
// (and its output narrowed by the bf16 cast), bit for bit: every codec, stochastic rounding
// and rotation, block sizes that do and do not divide the tile, odd counts with partial last
// blocks and tiles, NaN (signalling and quiet), infinities, subnormals and zeros. float32
// values go through Encode / Decode unchanged.
std::vector<uint16_t> Bf16Inputs(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<uint16_t> x(count);
  for (uint16_t& v : x) v = FloatToBfloat16(normal(rng));
  const uint16_t specials[] = {0x7F81, 0xFFC0, 0x7F80, 0xFF80, 0x0001, 0x8000, 0x0000, 0x7F7F};
  for (size_t i = 0; i < count && i < 8; ++i) x[(i * 997 + 5) % count] = specials[i];
  return x;
}

void ExpectBf16PathEqualsFloat32Path(const weftCompression& spec, size_t count) {
  const std::string what = std::string(CodecName(spec.codec)) + " block=" +
                           std::to_string(spec.block) + " flags=" + std::to_string(spec.flags) +
                           " count=" + std::to_string(count);
  ASSERT_EQ(ValidateSpec(spec), "") << what;
  const std::vector<uint16_t> x = Bf16Inputs(count, static_cast<uint32_t>(count) + spec.codec);
  std::vector<float> widened(count);
  for (size_t i = 0; i < count; ++i) widened[i] = Bfloat16ToFloat(x[i]);
  const size_t bytes = EncodedBytes(spec, count);
  std::vector<uint8_t> want(bytes + 16, 0xA5), got(bytes + 16, 0xA5);
  Encode(spec, widened.data(), count, want.data(), 77);
  EncodeValues(spec, weftBfloat16, x.data(), count, got.data(), 77);
  ASSERT_EQ(want, got) << what << ": encodings differ (or bytes past EncodedBytes written)";
  std::vector<float> decoded(count);
  Decode(spec, want.data(), count, decoded.data());
  std::vector<uint16_t> narrowed(count + 8, 0x1234), out(count + 8, 0x1234);
  for (size_t i = 0; i < count; ++i) narrowed[i] = FloatToBfloat16(decoded[i]);
  DecodeValues(spec, want.data(), count, weftBfloat16, out.data());
  ASSERT_EQ(narrowed, out) << what << ": decoded bf16 differs (or values past count written)";
  std::vector<uint8_t> as_float(bytes + 16, 0xA5);
  EncodeValues(spec, weftFloat32, widened.data(), count, as_float.data(), 77);
  ASSERT_EQ(want, as_float) << what << ": float32 values through EncodeValues";
}

TEST(CodecValues, Bf16EqualsTheFloat32PathBitwise) {
  const weftCodec_t codecs[] = {weftCodecBf16,  weftCodecFp16, weftCodecFp8E4M3, weftCodecFp8E5M2,
                                weftCodecInt8,  weftCodecInt4, weftCodecSign1,   weftCodecTopK};
  for (weftCodec_t c : codecs)
    for (size_t count : {size_t{0}, size_t{1}, size_t{127}, size_t{129}, size_t{4097}, size_t{10007}}) {
      ExpectBf16PathEqualsFloat32Path(Spec(c), count);
      if (!IsBlockCodec(c)) continue;
      if (c == weftCodecInt8 || c == weftCodecInt4)
        ExpectBf16PathEqualsFloat32Path(Spec(c, 128, WEFT_COMPRESS_STOCHASTIC), count);
      ExpectBf16PathEqualsFloat32Path(Spec(c, 64, WEFT_COMPRESS_HADAMARD), count);
      ExpectBf16PathEqualsFloat32Path(Spec(c, 1000), count);  // tiles of 4000 values
    }
}

TEST(CodecValues, TopKDecodeIntoBf16IgnoresCorruptIndices) {
  const weftCompression spec = Spec(weftCodecTopK, 128, 0, 0.5f);
  const size_t count = 4, k = TopKCount(spec.ratio, count);
  ASSERT_EQ(k, 2u);
  std::vector<uint8_t> enc(EncodedBytes(spec, count));
  const uint32_t index[2] = {1, 99};  // 99: past count
  const float value[2] = {3.0f, 5.0f};
  std::memcpy(enc.data(), index, 8);
  std::memcpy(enc.data() + 8, value, 8);
  std::vector<uint16_t> out(count, 0xFFFF);
  DecodeValues(spec, enc.data(), count, weftBfloat16, out.data());
  EXPECT_EQ(out, (std::vector<uint16_t>{0, FloatToBfloat16(3.0f), 0, 0}));
}

// DecodeValuesStreamed against Decode at dst + shift floats (shift 0: 16-byte aligned, the
// streaming kernels; else the plain fallback); nothing past count written.
void ExpectStreamedDecodeIsTheDecode(const weftCompression& spec, size_t count) {
  const std::string what = std::string(CodecName(spec.codec)) + " block=" +
                           std::to_string(spec.block) + " flags=" + std::to_string(spec.flags) +
                           " count=" + std::to_string(count);
  std::vector<float> x(count);
  std::mt19937 rng(static_cast<uint32_t>(count) + spec.codec);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> enc(EncodedBytes(spec, count) + 1);
  Encode(spec, x.data(), count, enc.data(), 5);
  std::vector<float> want(count);
  Decode(spec, enc.data(), count, want.data());
  for (size_t shift = 0; shift < 4; ++shift) {
    std::vector<float> buf(count + 8, 7.0f);
    const size_t lead = (4 - reinterpret_cast<uintptr_t>(buf.data()) % 16 / 4) % 4;
    float* out = buf.data() + lead + shift;
    DecodeValuesStreamed(spec, enc.data(), count, weftFloat32, out);
    ASSERT_EQ(0, std::memcmp(want.data(), out, count * sizeof(float))) << what << " shift=" << shift;
    for (float* p = out + count; p < buf.data() + buf.size(); ++p)
      ASSERT_EQ(*p, 7.0f) << what << " shift=" << shift << ": written past count";
  }
}

TEST(CodecValues, StreamedDecodeIsTheDecodeBitwise) {
  const weftCodec_t codecs[] = {weftCodecBf16,  weftCodecFp16, weftCodecFp8E4M3, weftCodecFp8E5M2,
                                weftCodecInt8,  weftCodecInt4, weftCodecSign1,   weftCodecTopK};
  for (weftCodec_t c : codecs)
    for (size_t count : {size_t{0}, size_t{100}, size_t{4095}, size_t{4096}, size_t{10007}, size_t{70001}}) {
      ExpectStreamedDecodeIsTheDecode(Spec(c), count);
      if (c == weftCodecTopK) ExpectStreamedDecodeIsTheDecode(Spec(c, 128, 0, 0.01f), count);
      if (!IsBlockCodec(c)) continue;
      ExpectStreamedDecodeIsTheDecode(Spec(c, 64, WEFT_COMPRESS_HADAMARD), count);
      ExpectStreamedDecodeIsTheDecode(Spec(c, 1000), count);  // a tail of 8 past each 992
      ExpectStreamedDecodeIsTheDecode(Spec(c, 130), count);   // blocks not 16-byte aligned
      if (c == weftCodecInt8) ExpectStreamedDecodeIsTheDecode(Spec(c, 128, WEFT_COMPRESS_STOCHASTIC), count);
    }
}

TEST(CodecValues, StreamedTopKDecodeOfCorruptIndicesIsTheDecode) {
  const weftCompression spec = Spec(weftCodecTopK, 128, 0, 0.001f);
  const size_t count = 9000, k = TopKCount(spec.ratio, count);
  ASSERT_EQ(k, 9u);
  for (const std::vector<uint32_t>& index :
       {std::vector<uint32_t>{5, 9, 9, 100, 200, 300, 400, 500, 600},         // a repeat
        std::vector<uint32_t>{5000, 9, 50, 100, 200, 300, 400, 500, 600},      // falling
        std::vector<uint32_t>{5, 9, 50, 100, 200, 300, 400, 500, 99999}}) {    // past count
    std::vector<uint8_t> enc(EncodedBytes(spec, count));
    for (size_t j = 0; j < k; ++j) {
      const float v = 1.0f + static_cast<float>(j);
      std::memcpy(enc.data() + 4 * j, &index[j], 4);
      std::memcpy(enc.data() + 4 * k + 4 * j, &v, 4);
    }
    std::vector<float> want(count, 3.0f), got(count, 3.0f);
    Decode(spec, enc.data(), count, want.data());
    DecodeValuesStreamed(spec, enc.data(), count, weftFloat32, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), count * sizeof(float))) << index[0] << " " << index[8];
  }
}

TEST(CodecSizes, PureFunctionOfSpecAndCount) {
  EXPECT_EQ(EncodedBytes(Spec(weftCodecBf16), 1000), 2000u);
  EXPECT_EQ(EncodedBytes(Spec(weftCodecInt8), 1000), 8 * 4 + 1000u);
  EXPECT_EQ(EncodedBytes(Spec(weftCodecInt4), 1000), 8 * 4 + 7 * 64 + 52u);  // last block 104
  EXPECT_EQ(EncodedBytes(Spec(weftCodecInt4, 128, WEFT_COMPRESS_HADAMARD), 1000), 8 * 4 + 8 * 64u);
  EXPECT_EQ(EncodedBytes(Spec(weftCodecSign1), 1000), 8 * 4 + 7 * 16 + 13u);
  EXPECT_EQ(EncodedBytes(Spec(weftCodecFp8E4M3), 1), 5u);
  EXPECT_EQ(EncodedBytes(Spec(weftCodecTopK, 128, 0, 0.01f), 1000), 8 * 10u);
  EXPECT_EQ(EncodedBytes(Spec(weftCodecTopK, 128, 0, 0.01f), 10), 8u);  // at least one kept
  EXPECT_EQ(EncodedBytes(Spec(weftCodecTopK, 128, 0, 0.5f), 5), 8 * 3u);  // 2.5: halves round up
  EXPECT_EQ(EncodedBytes(Spec(weftCodecInt8), 0), 0u);
  size_t bytes = 0;
  const weftCompression s = Spec(weftCodecInt8);
  EXPECT_EQ(weftCompressedSize(&s, 1000, &bytes), weftSuccess);
  EXPECT_EQ(bytes, 1032u);
}

// ---- every kernel table bitwise equal to the reference definitions ----

std::vector<const CodecKernels*> Tables() {
  std::vector<const CodecKernels*> t = {&GenericCodecKernels()};
  if (Avx2CodecKernels() != nullptr) t.push_back(Avx2CodecKernels());
  return t;
}

float RefEncode(weftCodec_t c, const float* x, size_t n, uint8_t* p, const BlockOptions& o) {
  BlockContext ctx;
  ctx.stochastic = o.stochastic;
  ctx.key = o.key;
  ctx.first_index = o.first_index;
  switch (c) {
    case weftCodecInt8: return EncodeInt8Block(x, n, reinterpret_cast<int8_t*>(p), ctx);
    case weftCodecInt4: return EncodeInt4Block(x, n, p, ctx);
    case weftCodecFp8E4M3: return EncodeFp8Block<true>(x, n, p);
    case weftCodecFp8E5M2: return EncodeFp8Block<false>(x, n, p);
    default: return EncodeSignBlock(x, n, p);
  }
}

TEST(CodecKernelTables, BitwiseEqualToReference) {
  std::printf("kernel tables: generic%s (active: %s)\n", Avx2CodecKernels() ? ", avx2" : " only",
              ActiveCodecIsa());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const CodecKernels* table : Tables()) {
    for (weftCodec_t c : {weftCodecInt8, weftCodecInt4, weftCodecFp8E4M3, weftCodecFp8E5M2, weftCodecSign1}) {
      for (size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 31u, 32u, 33u, 100u, 128u, 257u}) {
        for (const auto& [name, input] : AdversarialInputs()) {
          std::vector<float> x(input.begin(), input.begin() + n);
          for (bool stochastic : {false, true}) {
            if (stochastic && c != weftCodecInt8 && c != weftCodecInt4) continue;
            BlockOptions o;
            o.stochastic = stochastic;
            o.key = 99;
            o.first_index = 17;
            std::vector<uint8_t> want(n + 8, 0), got(n + 8, 0);
            const float ws = RefEncode(c, x.data(), n, want.data(), o);
            const float gs = table->encode_block[c](x.data(), n, got.data(), o);
            ASSERT_EQ(FloatBits(ws), FloatBits(gs)) << table->isa << " " << CodecName(c) << " n=" << n << " " << name;
            ASSERT_EQ(want, got) << table->isa << " " << CodecName(c) << " n=" << n << " " << name;
            std::vector<float> wd(n), gd(n);
            GenericCodecKernels().decode_block[c](want.data(), n, ws, wd.data());
            table->decode_block[c](got.data(), n, gs, gd.data());
            for (size_t i = 0; i < n; ++i)
              ASSERT_EQ(FloatBits(wd[i]), FloatBits(gd[i])) << table->isa << " " << CodecName(c) << " i=" << i;
            if (table->decode_stream_block[c] == nullptr) continue;
            std::vector<float> sd(n + 4, -1.0f);  // 16-byte aligned, as the kernel needs
            float* at = sd.data() + (4 - reinterpret_cast<uintptr_t>(sd.data()) % 16 / 4) % 4;
            table->decode_stream_block[c](got.data(), n, gs, at);
            weft::kernels::StreamingFence();
            for (size_t i = 0; i < n; ++i)
              ASSERT_EQ(FloatBits(wd[i]), FloatBits(at[i])) << table->isa << " streamed " << CodecName(c) << " i=" << i;
          }
        }
      }
    }
    // Casts: every bf16/fp16 pattern back and forth, plus the adversarial floats.
    for (weftCodec_t c : {weftCodecBf16, weftCodecFp16}) {
      std::vector<uint16_t> all(65536);
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
      std::vector<float> f(65536), g(65536);
      GenericCodecKernels().from_cast[c](all.data(), all.size(), f.data());
      table->from_cast[c](all.data(), all.size(), g.data());
      ASSERT_EQ(0, std::memcmp(f.data(), g.data(), f.size() * 4)) << table->isa << " " << CodecName(c);
      std::vector<float> floats;
      for (const auto& [name, x] : AdversarialInputs()) floats.insert(floats.end(), x.begin(), x.end());
      for (uint32_t i = 0; i < 200000; ++i) floats.push_back(FloatFromBits(Hash32(i)));
      std::vector<uint16_t> a(floats.size()), b(floats.size());
      GenericCodecKernels().to_cast[c](floats.data(), floats.size(), a.data());
      table->to_cast[c](floats.data(), floats.size(), b.data());
      ASSERT_EQ(a, b) << table->isa << " " << CodecName(c);
    }
  }
}

TEST(CodecKernelTables, RotationBitwiseEqualToReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const CodecKernels* table : Tables()) {
    for (size_t b : {1u, 2u, 4u, 8u, 16u, 64u, 128u, 1024u}) {
      std::vector<float> signs(b), x(b);
      RotationSigns(RotationKey(77), b, signs.data());
      for (auto& v : x) v = normal(rng) * (rng() % 50 == 0 ? 1e4f : 1.0f);
      for (size_t n : {b, b / 2 + 1, size_t{1}}) {
        std::vector<float> want(b), got(b);
        RotateForward(x.data(), n, b, signs.data(), want.data());
        table->rotate_forward(x.data(), n, b, signs.data(), got.data());
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), b * 4)) << table->isa << " b=" << b << " n=" << n;
        RotateInverse(want.data(), b, signs.data());
        table->rotate_inverse(got.data(), b, signs.data());
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), b * 4)) << table->isa << " inverse b=" << b;
        double l1 = 0;
        for (size_t j = 0; j < n; ++j) l1 += std::fabs(x[j]);
        for (size_t j = 0; j < n; ++j)  // and it is a rotation: back to x up to float rounding
          ASSERT_NEAR(want[j], x[j], 1e-6 * l1) << "b=" << b;
      }
    }
  }
}

// The reference casts against independent conversions (the compiler's/hardware's).
TEST(CodecKernelTables, ReferenceCastsMatchHardwareRounding) {
  for (uint32_t i = 0; i < 100000; ++i) {
    const float f = FloatFromBits(Hash32(i * 7 + 1));
    if (std::isnan(f)) continue;
    const float bf = Bfloat16ToFloat(FloatToBfloat16(f));
    // bf16 RNE == rounding to 8 significant bits: compare with double arithmetic.
    if (std::isfinite(bf) && std::fabs(f) >= FLT_MIN) {
      int e;
      std::frexp(static_cast<double>(f), &e);
      const double ulp = std::ldexp(1.0, e - 8);
      EXPECT_LE(std::fabs(static_cast<double>(f) - bf), ulp / 2) << f;
    }
  }
}

// ---- fp8 conversions ----

TEST(Fp8, EveryFiniteCodeRoundTripsAndOrderIsMonotonic) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if ((c & 0x7F) != 0x7F) EXPECT_EQ(FloatToE4m3(E4m3ToFloat(code)), code) << c;
    if ((c & 0x7F) < 0x7C) EXPECT_EQ(FloatToE5m2(E5m2ToFloat(code)), code) << c;
  }
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E5m2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(E5m2ToFloat(0x01), std::ldexp(1.0f, -16));
  for (int c = 0; c + 1 < 0x7E; ++c) EXPECT_LT(E4m3ToFloat(c), E4m3ToFloat(c + 1));
  for (int c = 0; c + 1 < 0x7C; ++c) EXPECT_LT(E5m2ToFloat(c), E5m2ToFloat(c + 1));
}

TEST(Fp8, TiesRoundToEvenAndLargeValuesSaturate) {
  for (int c = 0; c + 1 < 0x7E; ++c) {
    const float lo = E4m3ToFloat(c), hi = E4m3ToFloat(c + 1);
    const float mid = lo + (hi - lo) / 2;  // exact in float
    EXPECT_EQ(FloatToE4m3(mid), (c % 2 == 0) ? c : c + 1) << "between codes " << c << " and " << c + 1;
  }
  EXPECT_EQ(FloatToE4m3(1e9f), 0x7E);
  EXPECT_EQ(FloatToE4m3(-1e9f), 0xFE);
  EXPECT_EQ(FloatToE5m2(1e9f), 0x7B);
}

// Every fp8 code through every table's decoder against the reference's value(code) * scale,
// bit for bit: the 256 codes at every lane position (offsets 0..15) and with tails of every
// length, for scales from subnormal to huge, signed zeros, infinities and NaNs.
float DecodeRef(weftCodec_t c, uint8_t code, float scale) {
  return c == weftCodecFp8E4M3 ? DecodeFp8Value<true>(code, scale)
                               : DecodeFp8Value<false>(code, scale);
}

bool IsFp8NanCode(weftCodec_t c, uint8_t code) {
  return c == weftCodecFp8E4M3 ? (code & 0x7F) == 0x7F : (code & 0x7F) > 0x7C;
}

TEST(Fp8, EveryCodeDecodesBitwiseAsTheReference) {
  const float scales[] = {1.0f, -1.0f, 0.0f, -0.0f, 3.7f, 1.0f / 448, FLT_MIN, FLT_MIN / 8,
                          FLT_TRUE_MIN, 1e-30f, 0x1p100f, FLT_MAX, -FLT_MAX, Infinity(),
                          -Infinity(), QuietNan(), FloatFromBits(0xFFC00000u),
                          FloatFromBits(0x7FC12345u)};
  std::vector<uint8_t> codes(2 * 256 + 16);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 97 + i / 256);
  const float guard = FloatFromBits(0x7FBADBADu);
  size_t checked = 0;
  for (const CodecKernels* table : Tables()) {
    for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecFp8E5M2}) {
      for (float scale : scales) {
        for (size_t offset = 0; offset < 16; ++offset) {
          const size_t all = codes.size() - offset;
          for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, size_t{15}, size_t{17},
                           size_t{24}, size_t{31}, size_t{33}, size_t{256}, all}) {
            const uint8_t* p = codes.data() + offset;
            std::vector<float> out(n + 1, guard);
            table->decode_block[c](p, n, scale, out.data());
            ASSERT_EQ(FloatBits(out[n]), FloatBits(guard)) << table->isa << " wrote past n=" << n;
            for (size_t i = 0; i < n; ++i, ++checked) {
              const float want = DecodeRef(c, p[i], scale);
              // NaN code times NaN scale: which NaN comes out is the compiler's operand order in
              // the reference, so only the canonical NaN scale (the one encoders write) is exact.
              if (IsFp8NanCode(c, p[i]) && std::isnan(scale) && FloatBits(scale) != 0x7FC00000u) {
                ASSERT_TRUE(std::isnan(out[i])) << table->isa;
                continue;
              }
              ASSERT_EQ(FloatBits(want), FloatBits(out[i]))
                  << table->isa << " " << CodecName(c) << " code=" << int{p[i]} << " scale bits="
                  << std::hex << FloatBits(scale) << std::dec << " n=" << n << " i=" << i;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 256u * 2 * 18);
}

// Every table's fp8 encoder against the reference on a sweep of float bit patterns (every
// 61st of the magnitudes up to the codec's max, both signs, subnormals included) and on every
// tie between adjacent codes and its neighbours one ulp away. Each block starts with +-max, so
// the scale is exactly 1 and the codes are the conversion of the values themselves.
TEST(Fp8, EncodeMatchesTheReferenceOnEveryFloatPatternSweep) {
  for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecFp8E5M2}) {
    const float max = c == weftCodecFp8E4M3 ? kE4m3Max : kE5m2Max;
    std::vector<float> values;
    for (uint32_t bits = 0; bits <= FloatBits(max); bits += 61)
      values.push_back(FloatFromBits(bits | ((bits / 61) % 2 ? 0x80000000u : 0u)));
    for (int code = 0; code + 1 < (c == weftCodecFp8E4M3 ? 0x7E : 0x7B); ++code) {
      const float lo = DecodeRef(c, static_cast<uint8_t>(code), 1.0f);
      const float mid = lo + (DecodeRef(c, static_cast<uint8_t>(code + 1), 1.0f) - lo) / 2;
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, max)})
        values.insert(values.end(), {v, -v});
    }
    const size_t block = 128;
    std::vector<float> x;
    for (size_t i = 0; i < values.size(); ++i) {
      if (x.size() % block == 0) x.push_back(x.size() % (2 * block) ? -max : max);
      x.push_back(values[i]);
    }
    for (const CodecKernels* table : Tables()) {
      std::vector<uint8_t> want(block), got(block);
      for (size_t b = 0; b < x.size(); b += block) {
        const size_t n = std::min(block, x.size() - b);
        const float ws = RefEncode(c, x.data() + b, n, want.data(), BlockOptions{});
        const float gs = table->encode_block[c](x.data() + b, n, got.data(), BlockOptions{});
        ASSERT_EQ(ws, 1.0f);
        ASSERT_EQ(FloatBits(ws), FloatBits(gs)) << table->isa;
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(int{want[i]}, int{got[i]}) << table->isa << " " << CodecName(c) << " x="
                                               << x[b + i] << " bits=" << std::hex
                                               << FloatBits(x[b + i]);
      }
    }
  }
}

#if defined(__x86_64__)
// codec_avx2.cc's documented assumption: the fp8 values are rebuilt without float subnormals, so
// with MXCSR's DAZ and FTZ set (weft never sets them) every code still decodes, at scale 1, to
// the bits it has in the default environment.
TEST(Fp8, DecodedValuesDoNotDependOnDenormalsAreZero) {
  std::vector<uint8_t> codes(256 + 7);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i);
  for (const CodecKernels* table : Tables()) {
    for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecFp8E5M2}) {
      std::vector<float> plain(codes.size()), flushed(codes.size());
      table->decode_block[c](codes.data(), codes.size(), 1.0f, plain.data());
      const unsigned saved = _mm_getcsr();
      _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
      table->decode_block[c](codes.data(), codes.size(), 1.0f, flushed.data());
      _mm_setcsr(saved);
      ASSERT_EQ(0, std::memcmp(plain.data(), flushed.data(), plain.size() * 4))
          << table->isa << " " << CodecName(c);
      EXPECT_EQ(plain[1], c == weftCodecFp8E4M3 ? 0x1p-9f : 0x1p-16f);  // a subnormal code
    }
  }
}
#endif

// ---- stochastic rounding ----

TEST(StochasticRounding, UnbiasedOnAverageAndSeeded) {
  const weftCompression spec = Spec(weftCodecInt8, 128, WEFT_COMPRESS_STOCHASTIC);
  std::vector<float> x(128, 0.3f);
  x[0] = 127.0f;  // scale 1: 0.3 sits between codes 0 and 1
  double mean = 0;
  const int trials = 400;
  for (int t = 0; t < trials; ++t) {
    const std::vector<float> y = RoundTrip(spec, x, static_cast<uint64_t>(t));
    for (size_t i = 1; i < x.size(); ++i) mean += y[i];
  }
  mean /= trials * 127.0;
  EXPECT_NEAR(mean, 0.3, 0.01);  // RNE would give exactly 0
  EXPECT_EQ(RoundTrip(spec, x, 5), RoundTrip(spec, x, 5));
  EXPECT_NE(RoundTrip(spec, x, 5), RoundTrip(spec, x, 6));
}

// ---- validation and parsing ----

TEST(CodecSpec, BadSpecsNameTheField) {
  weftCompression s = Spec(weftCodecInt8);
  const int bad_codec = 42;  // as a C caller may store it (a C++ cast to the enum is undefined)
  std::memcpy(&s.codec, &bad_codec, sizeof bad_codec);
  EXPECT_NE(ValidateSpec(s).find("spec->codec=42"), std::string::npos);
  s = Spec(weftCodecInt8, 0);
  EXPECT_NE(ValidateSpec(s).find("spec->block=0"), std::string::npos);
  for (float r : {0.0f, -0.5f, 1.5f, NAN}) {
    s = Spec(weftCodecTopK, 128, 0, r);
    EXPECT_NE(ValidateSpec(s).find("spec->ratio="), std::string::npos) << r;
  }
  s = Spec(weftCodecInt8, 100, WEFT_COMPRESS_HADAMARD);
  EXPECT_NE(ValidateSpec(s).find("spec->block=100"), std::string::npos);
  s = Spec(weftCodecBf16, 128, WEFT_COMPRESS_STOCHASTIC);
  EXPECT_NE(ValidateSpec(s).find("stochastic"), std::string::npos);
  s = Spec(weftCodecInt8, 128, 0x80);
  EXPECT_NE(ValidateSpec(s).find("spec->flags=128"), std::string::npos);
  EXPECT_EQ(ValidateSpec(Spec(weftCodecTopK, 128, 0, 1.0f)), "");
}

TEST(CodecSpec, Parse) {
  weftCompression s;
  ASSERT_EQ(weftCompressionParse("int4:block=64,hadamard,seed=9", &s), weftSuccess);
  EXPECT_EQ(s.codec, weftCodecInt4);
  EXPECT_EQ(s.block, 64u);
  EXPECT_EQ(s.flags, WEFT_COMPRESS_HADAMARD);
  EXPECT_EQ(s.seed, 9u);
  ASSERT_EQ(weftCompressionParse("topk:0.05", &s), weftSuccess);
  EXPECT_EQ(s.codec, weftCodecTopK);
  EXPECT_FLOAT_EQ(s.ratio, 0.05f);
  ASSERT_EQ(weftCompressionParse("fp8", &s), weftSuccess);
  EXPECT_EQ(s.codec, weftCodecFp8E4M3);
  ASSERT_EQ(weftCompressionParse("1bit", &s), weftSuccess);
  EXPECT_EQ(s.codec, weftCodecSign1);
  // "flat": the placement flag (every transfer compressed), accepted with any codec.
  ASSERT_EQ(weftCompressionParse("topk:0.01,flat", &s), weftSuccess);
  EXPECT_EQ(s.flags, WEFT_COMPRESS_FLAT);
  EXPECT_FLOAT_EQ(s.ratio, 0.01f);
  EXPECT_EQ(weftCompressionParse("int3", &s), weftInvalidArgument);
  EXPECT_EQ(weftCompressionParse("int8:block=0", &s), weftInvalidArgument);
  EXPECT_EQ(weftCompressionParse("int8:colour=red", &s), weftInvalidArgument);
  EXPECT_EQ(weftCompressionParse("topk:ratio=2", &s), weftInvalidArgument);
  EXPECT_EQ(weftCompressionParse(nullptr, &s), weftInvalidArgument);
}

}  // namespace
}  // namespace weft::codec
