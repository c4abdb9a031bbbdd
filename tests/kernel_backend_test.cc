// The CPU KernelBackend (kernels/kernel_backend.h): results equal the kernels of
// kernels/reduce.h bit for bit, every call completes at once, and bad operands fail with a
// message naming the argument, writing nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "kernels/kernel_backend.h"
#include "kernels/reduce.h"
#include "weft/weft_compress.h"

namespace weft {
namespace {

TEST(CpuKernelBackend, ReduceMatchesTheKernelsAndCompletesAtOnce) {
  KernelBackend& k = CpuKernelBackend();
  EXPECT_STREQ(k.name(), "cpu");
  std::vector<float> a(1000), b(1000), want(1000), got(1000, -1.0f);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = 0.1f * static_cast<float>(i) - 3.3f;
    b[i] = 1.0f / (1.0f + static_cast<float>(i));
  }
  kernels::Reduce(want.data(), a.data(), b.data(), a.size(), weftFloat32, weftSum);
  KernelRequest req;
  Status st = k.Reduce(MemRef::Host(got.data(), got.size() * 4), MemRef::Host(a.data(), a.size() * 4),
                       MemRef::Host(b.data(), b.size() * 4), a.size(), weftFloat32, weftSum, &req);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(req.done);
  EXPECT_TRUE(k.Poll(&req));
  EXPECT_TRUE(req.status.ok());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
}

TEST(CpuKernelBackend, CopyFinalizeAndCast) {
  KernelBackend& k = CpuKernelBackend();
  std::vector<float> src = {1.5f, -2.25f, 3.0f, 1e-3f}, dst(4, 0.0f);
  KernelRequest req;
  ASSERT_TRUE(k.Copy(MemRef::Host(dst.data(), 16), MemRef::Host(src.data(), 16), &req).ok());
  EXPECT_EQ(dst, src);
  KernelRequest fin;
  ASSERT_TRUE(k.Finalize(MemRef::Host(dst.data(), 16), 4, weftFloat32, weftAvg, 2, &fin).ok());
  EXPECT_TRUE(fin.done);
  EXPECT_EQ(dst[0], 0.75f);
  EXPECT_EQ(dst[1], -1.125f);
  std::vector<uint16_t> bf(4);
  KernelRequest cast;
  ASSERT_TRUE(k.Cast(MemRef::Host(bf.data(), 8), weftBfloat16, MemRef::Host(src.data(), 16), weftFloat32, 4,
                     &cast).ok());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(bf[i], FloatToBfloat16(src[i])) << i;
  std::vector<float> back(4);
  KernelRequest cast2;
  ASSERT_TRUE(k.Cast(MemRef::Host(back.data(), 16), weftFloat32, MemRef::Host(bf.data(), 8), weftBfloat16, 4,
                     &cast2).ok());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(back[i], Bfloat16ToFloat(bf[i])) << i;
}

TEST(CpuKernelBackend, BadOperandsNameTheArgumentAndWriteNothing) {
  KernelBackend& k = CpuKernelBackend();
  std::vector<float> a(8, 1.0f), dst(8, 7.0f);
  KernelRequest req;
  // dst too short for the count.
  Status st = k.Reduce(MemRef::Host(dst.data(), 16), MemRef::Host(a.data(), 32), MemRef::Host(a.data(), 32), 8,
                       weftFloat32, weftSum, &req);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dst holds 16 bytes, the call needs 32"), std::string::npos) << st.message();
  EXPECT_FALSE(req.done);
  EXPECT_EQ(dst[0], 7.0f);
  // device memory is not the CPU's.
  MemRef dev = MemRef::Host(dst.data(), 32);
  dev.kind = MemKind::kCudaDevice;
  dev.device = 1;
  EXPECT_FALSE(k.Supports(MemKind::kCudaDevice));
  st = k.Copy(dev, MemRef::Host(a.data(), 32), &req);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dst is cuda-device memory (device 1)"), std::string::npos) << st.message();
  // invalid op, integer casts, and codec operands too short for the encoding.
  st = k.Reduce(MemRef::Host(dst.data(), 32), MemRef::Host(a.data(), 32), MemRef::Host(a.data(), 32), 8,
                weftFloat32, static_cast<weftRedOp_t>(99), &req);
  EXPECT_NE(st.message().find("op 99"), std::string::npos) << st.message();
  st = k.Cast(MemRef::Host(dst.data(), 32), weftInt32, MemRef::Host(a.data(), 32), weftFloat32, 8, &req);
  EXPECT_NE(st.message().find("only floating types"), std::string::npos) << st.message();
  size_t n = 0;
  weftCompression spec;
  ASSERT_EQ(weftCompressionDefault(weftCodecInt8, &spec), weftSuccess);
  st = k.Encode(MemRef::Host(dst.data(), 8), MemRef::Host(a.data(), 32), 8, weftFloat32, spec, 0,
                &n, &req);
  EXPECT_NE(st.message().find("encode dst holds 8 bytes, the codec needs 12"), std::string::npos)
      << st.message();
  st = k.Decode(MemRef::Host(dst.data(), 32), MemRef::Host(a.data(), 11), 8, weftFloat32, spec,
                &req);
  EXPECT_NE(st.message().find("decode src holds 11 bytes, the codec encodes to exactly 12"),
            std::string::npos) << st.message();
  // the codecs take float32 or bf16 values: float16 is refused by name; bf16 operands are
  // sized in 2-byte elements.
  st = k.Encode(MemRef::Host(dst.data(), 32), MemRef::Host(a.data(), 32), 8, weftFloat16, spec,
                0, &n, &req);
  EXPECT_NE(st.message().find("encode values of datatype float16"), std::string::npos)
      << st.message();
  st = k.Decode(MemRef::Host(dst.data(), 32), MemRef::Host(a.data(), 12), 8, weftFloat16, spec,
                &req);
  EXPECT_NE(st.message().find("decode values of datatype float16"), std::string::npos)
      << st.message();
  st = k.Encode(MemRef::Host(dst.data(), 32), MemRef::Host(a.data(), 15), 8, weftBfloat16, spec,
                0, &n, &req);
  EXPECT_NE(st.message().find("encode src holds 15 bytes, the codec needs 16"), std::string::npos)
      << st.message();
  EXPECT_EQ(dst[0], 7.0f);
}

// The codec hooks give the codec's bytes and values (kernels/codec.h), complete at issue, and
// decode_reduce adds the decoded values to dst in float32.
TEST(CpuKernelBackend, CodecHooksMatchTheCodec) {
  KernelBackend& k = CpuKernelBackend();
  weftCompression spec;
  ASSERT_EQ(weftCompressionDefault(weftCodecInt8, &spec), weftSuccess);
  spec.block = 4;
  std::vector<float> x = {1.0f, -2.5f, 3.25f, 0.125f, 100.0f, -7.0f, 0.0f, 9.5f, 0.75f};
  size_t bytes = 0;
  ASSERT_EQ(weftCompressedSize(&spec, x.size(), &bytes), weftSuccess);
  std::vector<uint8_t> want(bytes), got(bytes + 3, 0xAB);
  ASSERT_EQ(weftEncode(&spec, x.data(), x.size(), want.data(), 5), weftSuccess);
  KernelRequest req;
  size_t reported = 0;
  ASSERT_TRUE(k.Encode(MemRef::Host(got.data(), got.size()), MemRef::Host(x.data(), x.size() * 4),
                       x.size(), weftFloat32, spec, 5, &reported, &req).ok());
  EXPECT_TRUE(req.done);
  EXPECT_EQ(reported, bytes);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), bytes));
  std::vector<float> ref(x.size()), out(x.size()), acc(x.size(), 1.5f);
  ASSERT_EQ(weftDecode(&spec, want.data(), x.size(), ref.data()), weftSuccess);
  KernelRequest d, dr;
  ASSERT_TRUE(k.Decode(MemRef::Host(out.data(), out.size() * 4), MemRef::Host(got.data(), bytes),
                       x.size(), weftFloat32, spec, &d).ok());
  ASSERT_TRUE(k.DecodeReduce(MemRef::Host(acc.data(), acc.size() * 4),
                             MemRef::Host(got.data(), bytes), x.size(), spec, weftSum, &dr).ok());
  EXPECT_TRUE(d.done && dr.done);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], ref[i]) << i;
    EXPECT_EQ(acc[i], 1.5f + ref[i]) << i;
  }
  // bf16 values (x is exact in bf16): the same encoding, and the decoded values rounded to bf16.
  std::vector<uint16_t> x16(x.size()), out16(x.size());
  for (size_t i = 0; i < x.size(); ++i) x16[i] = FloatToBfloat16(x[i]);
  std::vector<uint8_t> got16(bytes);
  KernelRequest e16, d16;
  ASSERT_TRUE(k.Encode(MemRef::Host(got16.data(), bytes), MemRef::Host(x16.data(), x16.size() * 2),
                       x.size(), weftBfloat16, spec, 5, &reported, &e16).ok());
  EXPECT_EQ(got16, want);
  ASSERT_TRUE(k.Decode(MemRef::Host(out16.data(), out16.size() * 2), MemRef::Host(got.data(), bytes),
                       x.size(), weftBfloat16, spec, &d16).ok());
  EXPECT_TRUE(e16.done && d16.done);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out16[i], FloatToBfloat16(ref[i])) << i;
}

}  // namespace
}  // namespace weft
