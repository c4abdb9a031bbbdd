// The fused decode-reduce of the CPU backend (kernels/codec_backend.cc) and the range decode it
// is built on (kernels/codec.h DecodeRange): every codec, aligned ranges decode to the same
// bits as the whole decode, and the fused decode-reduce leaves the same bits as decoding
// everything first and then adding (sum) or taking the max, over counts that end inside a
// block and inside a chunk.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_backend.h"
#include "kernels/codec_topk.h"
#include "kernels/reduce.h"
#include "weft/weft_compress.h"

namespace weft {
namespace {

weftCompression Spec(const char* text) {
  weftCompression s;
  EXPECT_EQ(weftCompressionParse(text, &s), weftSuccess) << text;
  return s;
}

std::vector<float> Values(size_t count, int seed) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(std::sin(0.37 * i + seed) * (1.0 + i % 7)) +
           (i % 1009 == 3 ? 500.0f : 0.0f);  // an outlier now and then
  return v;
}

const char* const kCodecs[] = {"int8", "fp8", "fp8e5m2", "int4", "sign1", "bf16", "fp16",
                               "int4:hadamard", "int8:block=48", "topk:0.05"};
const size_t kCounts[] = {1, 47, 128, 1000, 4096 + 129, 3 * 4096 + 1};

TEST(CodecDecodeRange, AlignedRangesDecodeToTheSameBits) {
  for (const char* text : kCodecs) {
    const weftCompression spec = Spec(text);
    const size_t align = codec::DecodeRangeAlignment(spec);
    if (align == 0) {
      EXPECT_EQ(spec.codec, weftCodecTopK) << text << ": only top-k decodes only whole";
      continue;
    }
    for (size_t count : kCounts) {
      const std::vector<float> x = Values(count, 1);
      std::vector<uint8_t> enc(codec::EncodedBytes(spec, count));
      codec::Encode(spec, x.data(), count, enc.data(), 7);
      std::vector<float> whole(count), part(count, -1.0f);
      codec::Decode(spec, enc.data(), count, whole.data());
      // Ranges of 1, 2 and 3 alignment units, the last one ending at count.
      size_t first = 0, units = 1;
      while (first < count) {
        const size_t n = std::min(count - first, units * align);
        codec::DecodeRange(spec, enc.data(), count, first, n, part.data() + first);
        first += n;
        units = units % 3 + 1;
      }
      EXPECT_EQ(std::memcmp(whole.data(), part.data(), count * sizeof(float)), 0)
          << text << " count " << count;
    }
  }
}

// CpuDecodeReduce of `enc` (count = acc's size) into acc leaves the bits of decoding it first
// and reducing the decoded values into acc.
void ExpectBitsOfDecodingFirst(const weftCompression& spec, const std::vector<uint8_t>& enc,
                               const std::vector<float>& acc, weftRedOp_t op, const std::string& what) {
  const size_t count = acc.size();
  std::vector<float> decoded(count), want = acc, got = acc;
  codec::Decode(spec, enc.data(), count, decoded.data());
  kernels::Reduce(want.data(), want.data(), decoded.data(), count, weftFloat32, op);
  const Status st = CpuDecodeReduce(MemRef::Host(got.data(), count * sizeof(float)),
                                    MemRef::Host(enc.data(), enc.size()), count, spec, op);
  ASSERT_TRUE(st.ok()) << what << ": " << st.message();
  EXPECT_EQ(std::memcmp(want.data(), got.data(), count * sizeof(float)), 0) << what << " op " << op;
}

TEST(CpuDecodeReduce, SameBitsAsDecodingFirst) {
  for (const char* text : kCodecs)
    for (weftRedOp_t op : {weftSum, weftMax})
      for (size_t count : kCounts) {
        const weftCompression spec = Spec(text);
        const std::vector<float> x = Values(count, 2), acc = Values(count, 3);
        std::vector<uint8_t> enc(codec::EncodedBytes(spec, count));
        codec::Encode(spec, x.data(), count, enc.data(), 0);
        ExpectBitsOfDecodingFirst(spec, enc, acc, op, std::string(text) + " count " + std::to_string(count));
      }
}

// Top-k's sum adds its kept values in one pass over acc (codec::DecodeAddTopK): the bits of
// decoding into zeros first and adding, where acc holds -0.0 (+0.0 after the add), NaNs
// (signalling ones come back quiet) and infinities; an encoding whose indices repeat, fall
// or run past count is declined and decoded first (the last write wins).
TEST(CpuDecodeReduce, TopKAddsInOnePassWithTheBitsOfDecodingFirst) {
  const weftCompression spec = Spec("topk:0.05");
  const size_t count = 3 * 4096 + 1, k = codec::TopKCount(spec.ratio, count);
  const std::vector<float> x = Values(count, 4);
  std::vector<float> acc = Values(count, 5);
  uint32_t snan_bits = 0x7FA00001u;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  for (size_t i = 0; i < count; i += 97) acc[i] = -0.0f;
  acc[5] = snan;
  acc[6] = NAN;
  acc[7] = -INFINITY;
  std::vector<uint8_t> valid(codec::EncodedBytes(spec, count));
  codec::Encode(spec, x.data(), count, valid.data(), 0);
  auto with_index = [&](size_t j, uint32_t index) {
    std::vector<uint8_t> e = valid;
    std::memcpy(e.data() + 4 * j, &index, 4);
    return e;
  };
  uint32_t first_kept;
  std::memcpy(&first_kept, valid.data(), 4);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> encodings = {
      {"valid", valid},
      {"a repeated index", with_index(1, first_kept)},
      {"a falling index", with_index(k - 1, 0)},
      {"an index past count", with_index(k / 2, static_cast<uint32_t>(count))}};
  for (const auto& [name, enc] : encodings) {
    std::vector<float> scratch = acc;
    EXPECT_EQ(codec::DecodeAddTopK(enc.data(), count, k, scratch.data()), name == "valid") << name;
    for (weftRedOp_t op : {weftSum, weftAvg}) ExpectBitsOfDecodingFirst(spec, enc, acc, op, name);
  }
  uint32_t after;
  std::vector<float> sum = acc;
  ASSERT_TRUE(codec::DecodeAddTopK(valid.data(), count, k, sum.data()));
  std::memcpy(&after, &sum[97], 4);
  EXPECT_NE(after, 0x80000000u) << "-0.0 + 0.0 is +0.0";
}

TEST(CpuDecodeReduce, ATruncatedEncodingIsRefused) {
  const weftCompression spec = Spec("int8");
  const size_t count = 300;
  std::vector<uint8_t> enc(codec::EncodedBytes(spec, count));
  std::vector<float> dst(count, 0.0f);
  const Status st = CpuDecodeReduce(MemRef::Host(dst.data(), count * sizeof(float)),
                                    MemRef::Host(enc.data(), enc.size() - 1), count, spec, weftSum);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace weft
