// Compressed schedules (algorithms/compressed.h): the checker proves the compressed allreduce
// for p = 1..8 over codecs, counts and block sizes and rejects planted defects (decoding what
// was never encoded, a contribution reduced twice, re-quantizing a partial sum, the owner not
// decoding its own encoded slice); the executor runs it on thread ranks with exactly the bits
// of the composition over public collectives (FlatAllReduceToEncoded + DecodeGathered, the
// path the flat placement took before) for int8, fp8 and bf16, error feedback included; the
// simulator sends encoded bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/compressed.h"
#include "check/checker.h"
#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "kernels/codec.h"
#include "sim/engine.h"
#include "test_util.h"
#include "topo/presets.h"
#include "weft/weft_compress.h"

namespace weft {
namespace {

weftCompression Spec(weftCodec_t codec, uint32_t block = 128, uint32_t flags = 0) {
  weftCompression s;
  weftCompressionDefault(codec, &s);
  s.block = block;
  s.flags = flags;
  s.ratio = 0.25f;
  return s;
}

ScheduleRequest Request(int p, size_t count, const weftCompression& spec) {
  ScheduleRequest r;
  r.collective = Collective::kAllReduce;
  r.nranks = p;
  r.count = count;
  r.codec = spec;
  return r;
}

const AlgorithmInfo& Compressed() {
  const AlgorithmInfo* a = FindCompressedAlgorithm(Collective::kAllReduce);
  EXPECT_NE(a, nullptr);
  return *a;
}

Schedule Build(int p, size_t count, const weftCompression& spec) {
  StatusOr<Schedule> s = BuildSchedule(Compressed(), Request(p, count, spec));
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Schedule();
}

Status Check(const Schedule& s, const weftCompression& spec, bool avg = true) {
  CheckOptions o;
  o.avg = avg;
  return CheckSchedule(s, Request(s.nranks, s.count, spec), o);
}

TEST(CompressedScheduleProof, AllReduceForOneToEightRanks) {
  int proofs = 0;
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecBf16, weftCodecInt4,
                        weftCodecSign1, weftCodecTopK})
    for (uint32_t block : {128u, 16u})
      for (int p = 1; p <= 8; ++p)
        for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(p) + 1, size_t{37},
                             size_t{1000}}) {
          const ScheduleRequest r = Request(p, count, Spec(c, block));
          ASSERT_TRUE(Compressed().applicable(r));
          Status st = ProveAlgorithm(Compressed(), r);  // in-place and out-of-place, avg
          ASSERT_TRUE(st.ok()) << weftCodecName(c) << " block " << block << ": " << st.message();
          ++proofs;
        }
  RecordProperty("proofs", proofs);
}

TEST(CompressedScheduleProof, NeedsACodec) {
  ScheduleRequest r = Request(3, 10, Spec(weftCodecInt8));
  r.codec.codec = weftCodecNone;
  EXPECT_FALSE(Compressed().applicable(r));
  StatusOr<Schedule> s = BuildSchedule(Compressed(), r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("needs a codec"), std::string::npos) << s.status().message();
}

// The index of rank r's k-th step of op `op` (k = 0 the first), or -1.
int FindStep(const Schedule& s, int r, StepOp op, int k = 0) {
  const auto& steps = s.ranks[r].steps;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].op == op && k-- == 0) return static_cast<int>(i);
  return -1;
}

void ExpectRejected(const Schedule& s, const weftCompression& spec, const std::string& why) {
  Status st = Check(s, spec);
  ASSERT_FALSE(st.ok()) << "accepted a schedule that should fail with: " << why;
  EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
}

TEST(CompressedScheduleDefects, GoodScheduleIsAccepted) {
  const weftCompression spec = Spec(weftCodecInt8, 16);
  EXPECT_TRUE(Check(Build(3, 100, spec), spec).ok());
}

TEST(CompressedScheduleDefects, DecodeOfWhatWasNeverEncoded) {
  const weftCompression spec = Spec(weftCodecInt8, 16);
  // Rank 0 decodes the region of rank 1's reduced slice before it arrives.
  Schedule s = Build(3, 100, spec);
  const int last = FindStep(s, 0, StepOp::kDecode, 2);  // after the sum's: slice 1's
  ASSERT_GE(last, 0);
  const Step final_decode = s.ranks[0].steps[last];
  s.ranks[0].steps.insert(s.ranks[0].steps.begin(), final_decode);
  ExpectRejected(s, spec, "decodes what was never encoded");
  // Rank 0 decodes its float32 sum as if it were an encoding.
  s = Build(3, 100, spec);
  const int reencode = FindStep(s, 0, StepOp::kEncode, 3);  // after the 3 contributions
  ASSERT_GE(reencode, 0);
  const Region sum = s.ranks[0].steps[reencode].src;
  s.ranks[0].steps.insert(s.ranks[0].steps.begin() + reencode + 1,
                          DecodeStep(sum, Out(0, sum.count)));
  ExpectRejected(s, spec, "holds values, not an encoding");
  // Dropping an encode leaves its message unwritten.
  s = Build(3, 100, spec);
  s.ranks[1].steps.erase(s.ranks[1].steps.begin());  // the encode of slice 0
  ExpectRejected(s, spec, "is sent before anything wrote it");
}

TEST(CompressedScheduleDefects, ContributionReducedTwice) {
  const weftCompression spec = Spec(weftCodecFp8E4M3);
  Schedule s = Build(3, 100, spec);
  const int dr = FindStep(s, 0, StepOp::kDecodeReduce);
  ASSERT_GE(dr, 0);
  s.ranks[0].steps.insert(s.ranks[0].steps.begin() + dr, s.ranks[0].steps[dr]);
  ExpectRejected(s, spec, "double counting");
}

TEST(CompressedScheduleDefects, ReQuantizingAPartialSum) {
  const weftCompression spec = Spec(weftCodecInt8);
  // The owner encodes its running sum after the first contribution only (as a chain that
  // re-quantizes at every hop would).
  Schedule s = Build(3, 100, spec);
  const int first = FindStep(s, 0, StepOp::kDecode);  // sum = decode(contribution of rank 0)
  const int reencode = FindStep(s, 0, StepOp::kEncode, 3);
  ASSERT_GE(first, 0);
  ASSERT_GE(reencode, 0);
  const Step early = s.ranks[0].steps[reencode];
  s.ranks[0].steps.insert(s.ranks[0].steps.begin() + first + 1, early);
  ExpectRejected(s, spec, "re-quantizes a partial sum");
  // Quantizing the decoded result once more (another lossy hop) is refused too.
  s = Build(2, 100, spec);
  const Step last = s.ranks[1].steps.back();  // decode into the output
  ASSERT_EQ(last.op, StepOp::kDecode);
  s.ranks[1].steps.push_back(EncodeStep(last.dst, last.src, 7));
  ExpectRejected(s, spec, "quantizes the reduced result a second time");
}

TEST(CompressedScheduleDefects, OwnerThatDoesNotDecodeItsOwnSlice) {
  const weftCompression spec = Spec(weftCodecInt8);
  for (int p : {2, 3}) {
    // Rank 0 copies its float32 sum into its output instead of decoding the bytes it sent:
    // the contributions are right, but rank 0's bits would differ from the others'.
    Schedule s = Build(p, 100, spec);
    const int reencode = FindStep(s, 0, StepOp::kEncode, p);
    ASSERT_GE(reencode, 0);
    const Region sum = s.ranks[0].steps[reencode].src;
    auto& steps = s.ranks[0].steps;
    for (Step& st : steps)
      if (st.op == StepOp::kDecode && st.dst.buffer == Buffer::kOutput && st.dst.offset == 0)
        st = CopyStep(sum, st.dst);
    ExpectRejected(s, spec, "would not hold bitwise-identical results");
  }
}

// ---- the executor: the same bits as the composition over public collectives ----

// Rank r's contribution: varied signs and sizes, with an outlier now and then.
std::vector<float> Contribution(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    double t = static_cast<double>(i) * 0.37 + rank * 1.91;
    v[i] = static_cast<float>(std::sin(t) * (1.0 + i % 5) + ((i + 7 * rank) % 97 == 0 ? 30 : 0));
  }
  return v;
}

// Two calls with error feedback each way: the schedule (weftAllReduceCompressed, flat) and the
// composition (FlatAllReduceToEncoded + DecodeGathered); outputs and residuals must match
// bit for bit, and every rank's output must be the same.
std::string CompareWithComposition(int p, size_t count, weftRedOp_t op,
                                   const weftCompression& spec) {
  std::vector<std::vector<float>> out(p);
  std::mutex mu;
  std::string failure = weft_test::RunRanks(p, [&](weftComm_t comm, int rank) -> std::string {
    const std::vector<float> x = Contribution(rank, count);
    std::vector<float> res_a(count, 0.0f), res_b(count, 0.0f), a(count), b(count);
    for (int call = 0; call < 2; ++call) {
      if (weftAllReduceCompressed(x.data(), a.data(), count, weftFloat32, op, &spec, res_a.data(),
                                  comm, nullptr) != weftSuccess)
        return std::string("schedule: ") + compress::LastCompressionError();
      const uint8_t* gathered = nullptr;
      size_t stride = 0;
      Status st = compress::FlatAllReduceToEncoded(x.data(), count, weftFloat32, op, spec,
                                                   res_b.data(), comm, &gathered, &stride);
      if (!st.ok()) return "composition: " + st.message();
      compress::DecodeGathered(spec, gathered, stride, count, p, b.data());
      if (std::memcmp(a.data(), b.data(), count * 4) != 0) return "outputs differ, call " + std::to_string(call);
      if (std::memcmp(res_a.data(), res_b.data(), count * 4) != 0)
        return "residuals differ, call " + std::to_string(call);
    }
    std::lock_guard<std::mutex> l(mu);
    out[rank] = a;
    return "";
  });
  if (!failure.empty()) return failure;
  for (int q = 1; q < p; ++q)
    if (std::memcmp(out[0].data(), out[q].data(), count * 4) != 0)
      return "rank " + std::to_string(q) + " differs from rank 0";
  return "";
}

TEST(CompressedScheduleExecutor, SameBitsAsTheCompositionOverPublicCollectives) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecBf16})
    for (int p : {2, 3, 4})
      for (size_t count : {size_t{5}, size_t{1000}, size_t{4099}})
        for (weftRedOp_t op : {weftSum, weftAvg}) {
          const std::string f = CompareWithComposition(p, count, op, Spec(c));
          EXPECT_EQ(f, "") << weftCodecName(c) << " p=" << p << " count=" << count
                           << (op == weftAvg ? " avg" : " sum");
        }
  // Stochastic rounding draws the same streams; top-k carries indices.
  EXPECT_EQ(CompareWithComposition(3, 777, weftSum, Spec(weftCodecInt4, 128, WEFT_COMPRESS_STOCHASTIC)), "");
  EXPECT_EQ(CompareWithComposition(3, 777, weftSum, Spec(weftCodecTopK)), "");
}

// One rank: its contribution is the result, quantized once (the composition quantized it
// twice, once as a contribution and once as the "reduced" slice).
TEST(CompressedScheduleExecutor, OneRankQuantizesOnce) {
  const weftCompression spec = Spec(weftCodecInt8);
  const size_t count = 300;
  std::string failure = weft_test::RunRanks(1, [&](weftComm_t comm, int) -> std::string {
    const std::vector<float> x = Contribution(0, count);
    std::vector<float> out(count), residual(count, 0.0f), want(count);
    std::vector<uint8_t> enc(codec::EncodedBytes(spec, count));
    codec::Encode(spec, x.data(), count, enc.data(), 0);
    codec::Decode(spec, enc.data(), count, want.data());
    if (weftAllReduceCompressed(x.data(), out.data(), count, weftFloat32, weftSum, &spec,
                                residual.data(), comm, nullptr) != weftSuccess)
      return compress::LastCompressionError();
    for (size_t i = 0; i < count; ++i) {
      if (out[i] != want[i]) return "element " + std::to_string(i) + " is not decode(encode(x))";
      if (out[i] + residual[i] != x[i] && std::fabs(out[i] + residual[i] - x[i]) > 1e-6f * std::fabs(x[i]))
        return "residual does not hold what was dropped at " + std::to_string(i);
    }
    return "";
  });
  EXPECT_EQ(failure, "");
}

// ---- the simulator: encoded bytes on the wire, codec time on the core ----

TEST(CompressedScheduleSim, SendsEncodedBytesAndCostsTheCodec) {
  const int p = 4;
  const size_t count = 1 << 16;
  const weftCompression spec = Spec(weftCodecInt8);
  const Schedule s = Build(p, count, spec);
  auto fabric = MakePreset("host:" + std::to_string(p), 0);
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  SimOptions fast, slow;
  fast.encode_gbps = fast.decode_gbps = 8;
  slow.encode_gbps = slow.decode_gbps = 0.5;
  StatusOr<SimResult> a = SimulateSchedule(s, **fabric, 4, fast);
  StatusOr<SimResult> b = SimulateSchedule(s, **fabric, 4, slow);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  // Every rank sends p-1 encoded contributions and p-1 copies of its encoded reduced slice.
  double want = 0;
  for (int r = 0; r < p; ++r)
    want += 2.0 * (p - 1) * EncodedElements(spec, count / p) * 4;
  EXPECT_EQ(a->bytes_moved, want);
  EXPECT_LT(a->bytes_moved, 0.3 * 2.0 * (p - 1) * count * 4);  // vs float32 of the same pattern
  EXPECT_GT(b->time_us, a->time_us);
}

}  // namespace
}  // namespace weft
