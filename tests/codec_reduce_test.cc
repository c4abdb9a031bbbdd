// The fused decode-and-add (kernels/codec_reduce.h, the tables' decode_add_block): for every
// block codec and every CPU kernel table, bit for bit what DecodeRange followed by
// kernels::Reduce (weftSum, float32) computes -- on every code (NaN and inf codes included),
// tiny, huge and non-finite scales, sums that overflow, odd tails and ranges that start and
// end mid-encoding -- and false, with acc untouched, wherever it does not apply.
#include <gtest/gtest.h>

#include "test_util.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_layout.h"
#include "kernels/codec_reduce.h"
#include "kernels/codec_table.h"
#include "kernels/reduce.h"
#include "weft/weft_compress.h"

namespace weft::codec {
namespace {

using weft_test::CodecSpec;

constexpr weftCodec_t kBlockCodecs[] = {weftCodecInt8, weftCodecInt4, weftCodecFp8E4M3,
                                        weftCodecFp8E5M2, weftCodecSign1};

std::vector<const CodecKernels*> Tables() {
  std::vector<const CodecKernels*> t = {&GenericCodecKernels()};
  if (Avx2CodecKernels() != nullptr) t.push_back(Avx2CodecKernels());
  return t;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// An encoding of count values with random codes (every bit pattern, NaN and inf codes among
// them) and scales drawn from normal, tiny, huge and non-finite ones.
std::vector<uint8_t> RandomEncoding(const weftCompression& spec, size_t count, std::mt19937& rng) {
  static const float kScales[] = {0.01f, 1.0f, 3.5e-3f, 1e-40f, FLT_MIN, 1e30f, FLT_MAX,
                                  0.0f, INFINITY, NAN, 7.25f, 1e-20f};
  std::vector<uint8_t> bytes(EncodedBytes(spec, count));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const size_t blocks = BlockCount(count, spec.block);
  for (size_t b = 0; b < blocks; ++b) {
    const float scale = kScales[rng() % (sizeof kScales / sizeof kScales[0])];
    std::memcpy(bytes.data() + 4 * b, &scale, 4);
  }
  return bytes;
}

// Running sums: ordinary values and the awkward ones (NaNs with payloads, infinities, values
// near FLT_MAX that overflow, signed zeros, subnormals).
std::vector<float> RandomAcc(size_t n, std::mt19937& rng) {
  const float special[] = {FromBits(0x7FC01234u), FromBits(0xFFC00001u), INFINITY, -INFINITY,
                           FLT_MAX, -FLT_MAX, -0.0f, 0.0f, 1e-41f, -FLT_MIN};
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> acc(n);
  for (size_t i = 0; i < n; ++i)
    acc[i] = rng() % 8 == 0 ? special[rng() % (sizeof special / sizeof special[0])] : normal(rng);
  return acc;
}

// What the caller's fallback computes: the range decoded (DecodeRange writes whole blocks, so
// the buffer has room for one more), then reduced into acc.
std::vector<float> Unfused(const weftCompression& spec, const uint8_t* src, size_t count,
                           size_t first, size_t n, std::vector<float> acc) {
  std::vector<float> decoded(n + spec.block);
  DecodeRange(spec, src, count, first, n, decoded.data());
  kernels::Reduce(acc.data(), acc.data(), decoded.data(), n, weftFloat32, weftSum);
  return acc;
}

void ExpectSameBits(const std::vector<float>& want, const std::vector<float>& got,
                    const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t w, g;
    std::memcpy(&w, &want[i], 4);
    std::memcpy(&g, &got[i], 4);
    ASSERT_EQ(w, g) << what << " value " << i << ": want " << want[i] << " got " << got[i];
  }
}

// Ranges [first, first + n) of count: the whole, from a block mid-encoding to the end, and
// ones that end mid-block.
std::vector<std::pair<size_t, size_t>> Ranges(size_t count, size_t block) {
  std::vector<std::pair<size_t, size_t>> r = {{0, count}, {0, 1}, {0, count - count / 3}};
  const size_t blocks = BlockCount(count, block);
  for (size_t b : {size_t{1}, blocks / 2, blocks - 1}) {
    const size_t first = b * block;
    if (b == 0 || first >= count) continue;
    r.push_back({first, count - first});
    r.push_back({first, std::min(count - first, block + (block + 1) / 2)});
  }
  return r;
}

TEST(CodecDecodeAdd, EveryTableBitwiseEqualToDecodeThenReduce) {
  std::mt19937 rng(7);
  for (const CodecKernels* table : Tables())
    for (weftCodec_t codec : kBlockCodecs)
      for (uint32_t block : {1u, 7u, 16u, 33u, 128u, 256u})
        for (size_t count : {size_t{1}, size_t{61}, size_t{1000}, size_t{4099}}) {
          const weftCompression spec = CodecSpec(codec, block, 0, 1.0f, 0);
          const std::vector<uint8_t> src = RandomEncoding(spec, count, rng);
          for (const auto& [first, n] : Ranges(count, block)) {
            const std::string what = std::string(table->isa) + " " + CodecName(codec) +
                                     " block " + std::to_string(block) + " count " +
                                     std::to_string(count) + " [" + std::to_string(first) +
                                     ", +" + std::to_string(n) + ")";
            const std::vector<float> acc = RandomAcc(n, rng);
            std::vector<float> got = acc;
            ASSERT_TRUE(DecodeAddRangeWith(*table, spec, src.data(), count, first, n, got.data()))
                << what;
            ExpectSameBits(Unfused(spec, src.data(), count, first, n, acc), got, what);
          }
        }
}

// Every code of every codec (all 256 bytes: fp8's NaN and inf codes, int4's and sign1's every
// pattern) on one block, through each table's decode_add_block directly.
TEST(CodecDecodeAdd, EveryCodeEveryTable) {
  std::vector<uint8_t> codes(256);
  for (size_t i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  std::mt19937 rng(11);
  for (const CodecKernels* table : Tables())
    for (weftCodec_t codec : kBlockCodecs)
      for (float scale : {1.0f, 0.37f, 1e-39f, 3e38f, -2.0f, INFINITY, NAN}) {
        const size_t n = codec == weftCodecInt4 ? 512 : codec == weftCodecSign1 ? 2048 : 256;
        std::vector<float> decoded(n), want = RandomAcc(n, rng), got = want;
        GenericCodecKernels().decode_block[codec](codes.data(), n, scale, decoded.data());
        kernels::Reduce(want.data(), want.data(), decoded.data(), n, weftFloat32, weftSum);
        ASSERT_NE(table->decode_add_block[codec], nullptr) << table->isa << " " << CodecName(codec);
        table->decode_add_block[codec](codes.data(), n, scale, got.data());
        ExpectSameBits(want, got, std::string(table->isa) + " " + CodecName(codec) + " scale " +
                                      std::to_string(scale));
      }
}

// Real encodings (Encode of values with outliers, a NaN and an inf in two blocks) through the
// active table's DecodeAddRange.
TEST(CodecDecodeAdd, ActiveTableOnRealEncodings) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t count = 3001;
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = normal(rng) * (i % 97 == 0 ? 1e4f : 1.0f);
  values[5] = NAN;
  values[700] = INFINITY;
  for (weftCodec_t codec : kBlockCodecs)
    for (uint32_t flags : {0u, unsigned{WEFT_COMPRESS_STOCHASTIC}}) {
      if (flags != 0 && codec != weftCodecInt8 && codec != weftCodecInt4) continue;
      const weftCompression spec = CodecSpec(codec, 128, flags, 1.0f, 99);
      std::vector<uint8_t> src(EncodedBytes(spec, count));
      Encode(spec, values.data(), count, src.data(), 1);
      const std::vector<float> acc = RandomAcc(count - 256, rng);
      std::vector<float> got = acc;
      ASSERT_TRUE(DecodeAddRange(spec, src.data(), count, 256, count - 256, got.data()));
      ExpectSameBits(Unfused(spec, src.data(), count, 256, count - 256, acc), got,
                     CodecName(codec));
    }
}

TEST(CodecDecodeAdd, DeclinesWhereItDoesNotApplyAndLeavesAccAlone) {
  const size_t count = 512;
  std::vector<uint8_t> src(8 * count, 0x3C);
  const std::vector<float> acc(count, 1.5f);
  std::vector<float> got = acc;
  auto declines = [&](const weftCompression& spec, size_t first, size_t n) {
    return !DecodeAddRange(spec, src.data(), count, first, n, got.data()) && got == acc;
  };
  EXPECT_TRUE(declines(CodecSpec(weftCodecBf16, 128, 0, 1.0f, 0), 0, count));
  EXPECT_TRUE(declines(CodecSpec(weftCodecFp16, 128, 0, 1.0f, 0), 0, count));
  EXPECT_TRUE(declines(CodecSpec(weftCodecTopK, 128, 0, 0.1f, 0), 0, count));
  EXPECT_TRUE(declines(CodecSpec(weftCodecInt8, 128, WEFT_COMPRESS_HADAMARD, 1.0f, 0), 0, count));
  const weftCompression int8 = CodecSpec(weftCodecInt8, 128, 0, 1.0f, 0);
  EXPECT_TRUE(declines(int8, 64, 128)) << "first not a multiple of the block";
  EXPECT_TRUE(declines(int8, 384, 129)) << "range past count";
  EXPECT_TRUE(declines(int8, 640, 0)) << "first past count";
  EXPECT_TRUE(DecodeAddRange(int8, src.data(), count, 128, 0, got.data()));
  EXPECT_EQ(got, acc) << "an empty range adds nothing";
}

}  // namespace
}  // namespace weft::codec
