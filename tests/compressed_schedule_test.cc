// Compressed schedules (algorithms/compressed.h): the checker proves the compressed allreduce
// for p = 1..8 over codecs, counts and block sizes and rejects planted defects (decoding what
// was never encoded, a contribution reduced twice, re-quantizing a partial sum, the owner not
// decoding its own encoded slice); the executor runs it on thread ranks with exactly the bits
// of the composition over public collectives (FlatAllReduceToEncoded + DecodeGathered, the
// path the flat placement took before) for int8, fp8 and bf16, error feedback included; the
// simulator sends encoded bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/compressed.h"
#include "check/checker.h"
#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "compress/compressed_schedule.h"
#include "compress/compression_pays.h"
#include "kernels/codec.h"
#include "sim/engine.h"
#include "exec_test_util.h"
#include "test_util.h"
#include "topo/presets.h"
#include "exec/executor.h"
#include "transports/inproc/inproc_transport.h"
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
  // A few larger rank counts (the checker's limit is 64): fewer elements than ranks too.
  for (int p : {17, 64})
    for (size_t count : {size_t{5}, size_t{300}}) {
      Status st = ProveAlgorithm(Compressed(), Request(p, count, Spec(weftCodecInt8, 32)));
      ASSERT_TRUE(st.ok()) << "p=" << p << ": " << st.message();
      ++proofs;
    }
  RecordProperty("proofs", proofs);
}

// Reduce-scatter and allgather, proved the same way (allgather: every rank decodes the same
// bytes, the sender too).
TEST(CompressedScheduleProof, ReduceScatterAndAllGatherForOneToEightRanks) {
  for (Collective coll : {Collective::kReduceScatter, Collective::kAllGather}) {
    const AlgorithmInfo* a = FindCompressedAlgorithm(coll);
    ASSERT_NE(a, nullptr);
    for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E5M2, weftCodecFp16, weftCodecTopK})
      for (int p = 1; p <= 8; ++p)
        for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{300}}) {
          ScheduleRequest r = Request(p, count, Spec(c, 32));
          r.collective = coll;
          ASSERT_TRUE(a->applicable(r));
          Status st = ProveAlgorithm(*a, r);
          ASSERT_TRUE(st.ok()) << CollectiveName(coll) << " " << weftCodecName(c) << ": " << st.message();
        }
  }
}

TEST(CompressedScheduleDefects, AllGatherSenderMustDecodeItsOwnBlock) {
  const weftCompression spec = Spec(weftCodecInt8);
  ScheduleRequest r = Request(3, 50, spec);
  r.collective = Collective::kAllGather;
  StatusOr<Schedule> s = BuildSchedule(*FindCompressedAlgorithm(Collective::kAllGather), r);
  ASSERT_TRUE(s.ok());
  // Rank 1 copies its own input into its block instead of decoding what it sent.
  for (Step& st : s->ranks[1].steps)
    if (st.op == StepOp::kDecode && st.dst.offset == 50) st = CopyStep(In(0, 50), st.dst);
  CheckOptions o;
  Status st = CheckSchedule(*s, r, o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("would not hold bitwise-identical results"), std::string::npos)
      << st.message();
}

// Pipelined pieces (request.chunk.chunk_elems; CompressedPieces): the flat allreduce,
// reduce-scatter and allgather with several pieces' messages in flight at once are still
// proved, for pieces that do not divide the count and pieces smaller than a rank's slice.
TEST(CompressedScheduleProof, PipelinedPiecesOfTheFlatSchedules) {
  for (Collective coll : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather}) {
    const AlgorithmInfo* a = FindCompressedAlgorithm(coll);
    ASSERT_NE(a, nullptr);
    for (weftCodec_t c : {weftCodecInt8, weftCodecTopK, weftCodecBf16})
      for (int p : {1, 2, 3, 5})
        for (size_t count : {size_t{1}, size_t{37}, size_t{300}})
          for (size_t chunk : {size_t{7}, size_t{64}, SIZE_MAX}) {
            ScheduleRequest r = Request(p, count, Spec(c, 16));
            r.collective = coll;
            r.chunk.chunk_elems = chunk;
            const Status st = ProveAlgorithm(*a, r);
            ASSERT_TRUE(st.ok()) << CollectiveName(coll) << " " << weftCodecName(c) << " p=" << p
                                 << " count=" << count << " chunk=" << chunk << ": " << st.message();
          }
  }
}

TEST(CompressedScheduleProof, PiecesFollowTheChunkOrTheAutoRule) {
  ScheduleRequest r = Request(4, 0, Spec(weftCodecInt8));
  const size_t mib = (size_t{1} << 20) / 4;  // float32 values per MiB
  EXPECT_EQ(CompressedPieces(r, 64 * mib), 4u);   // auto: up to 4 of >= 8 MiB
  EXPECT_EQ(CompressedPieces(r, 20 * mib), 2u);
  EXPECT_EQ(CompressedPieces(r, 1 * mib), 1u);
  r.chunk.chunk_elems = SIZE_MAX;                 // WEFT_COMPRESSION_CHUNK_BYTES=0
  EXPECT_EQ(CompressedPieces(r, 64 * mib), 1u);
  r.chunk.chunk_elems = 7;
  EXPECT_EQ(CompressedPieces(r, 100), 15u);
  EXPECT_EQ(CompressedPieces(r, 100000), kMaxCompressedPieces);
}

// The pieces overlap: a rank issues the next piece's encodes before it decodes and reduces the
// previous one, and the last piece's gather before the first decodes of the output finish.
TEST(CompressedScheduleProof, FlatAllReducePiecesAreIssuedAsAPipeline) {
  ScheduleRequest r = Request(2, 1000, Spec(weftCodecInt8, 16));
  r.chunk.chunk_elems = 250;  // 4 pieces
  StatusOr<Schedule> s = BuildSchedule(Compressed(), r);
  ASSERT_TRUE(s.ok());
  const std::vector<Step>& steps = s->ranks[0].steps;
  int encodes_before_first_reduce = 0;
  for (const Step& step : steps) {
    if (step.op == StepOp::kDecodeReduce) break;
    if (step.op == StepOp::kEncode) ++encodes_before_first_reduce;
  }
  EXPECT_EQ(encodes_before_first_reduce, 4) << "piece 0's 2 slices and piece 1's";
  ASSERT_TRUE(CheckSchedule(*s, r, CheckOptions()).ok());
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

// Encodings move only through encode, plain send/recv and decode (the executor sends an
// encoding's own size, which a copy does not know).
TEST(CompressedScheduleDefects, CopyOfAnEncoding) {
  const weftCompression spec = Spec(weftCodecInt8);
  Schedule s = Build(2, 100, spec);
  auto& steps = s.ranks[0].steps;
  ASSERT_EQ(steps[0].op, StepOp::kEncode);
  ASSERT_EQ(steps[1].op, StepOp::kEncode);
  ASSERT_EQ(steps[0].dst.count, steps[1].dst.count);
  steps.insert(steps.begin() + 2, CopyStep(steps[0].dst, steps[1].dst));
  ExpectRejected(s, spec, "only plain send/recv and decode may move an encoding");
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

// Reduce-scatter and allgather against a reference made with the codec directly: each rank's
// block encoded once with stream (rank << 32 | block), decoded, summed in float32 in rank order
// (reduce-scatter; avg divides once) or placed (allgather); residual = what encoding dropped.
std::string CompareWithCodecReference(Collective coll, int p, size_t n, weftRedOp_t op,
                                      const weftCompression& spec) {
  const bool rs = coll == Collective::kReduceScatter;
  const size_t in_count = rs ? n * p : n, out_count = rs ? n : n * p;
  return weft_test::RunRanks(p, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> want(out_count, 0.0f), decoded(n), out(out_count), residual(in_count, 0.0f);
    std::vector<uint8_t> enc(codec::EncodedBytes(spec, n));
    for (int q = 0; q < p; ++q) {
      const std::vector<float> xq = Contribution(q, in_count);
      const size_t block = rs ? static_cast<size_t>(rank) : 0;
      codec::Encode(spec, xq.data() + block * n, n, enc.data(), static_cast<uint64_t>(q) << 32 | block);
      codec::Decode(spec, enc.data(), n, decoded.data());
      for (size_t i = 0; i < n; ++i) {
        if (!rs) want[q * n + i] = decoded[i];
        else want[i] = q == 0 ? decoded[i] : want[i] + decoded[i];
      }
    }
    if (rs && op == weftAvg && p > 1)
      for (float& v : want) v /= static_cast<float>(p);
    const std::vector<float> x = Contribution(rank, in_count);
    const weftResult_t res =
        rs ? weftReduceScatterCompressed(x.data(), out.data(), n, weftFloat32, op, &spec,
                                         residual.data(), comm, nullptr)
           : weftAllGatherCompressed(x.data(), out.data(), n, weftFloat32, &spec,
                                     residual.data(), comm, nullptr);
    if (res != weftSuccess) return compress::LastCompressionError();
    if (std::memcmp(out.data(), want.data(), out_count * 4) != 0) return "output differs";
    // The residual holds x - decode(encode(x)) for this rank's own blocks.
    for (size_t b = 0; b < in_count / n; ++b) {
      codec::Encode(spec, x.data() + b * n, n, enc.data(), static_cast<uint64_t>(rank) << 32 | b);
      codec::Decode(spec, enc.data(), n, decoded.data());
      for (size_t i = 0; i < n; ++i)
        if (residual[b * n + i] != x[b * n + i] - decoded[i]) return "residual differs";
    }
    return "";
  });
}

TEST(CompressedScheduleExecutor, ReduceScatterAndAllGatherMatchTheCodecReference) {
  for (Collective coll : {Collective::kReduceScatter, Collective::kAllGather})
    for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecBf16})
      for (int p : {1, 2, 3, 4})
        for (size_t n : {size_t{3}, size_t{1000}})
          for (weftRedOp_t op : {weftSum, weftAvg}) {
            if (coll == Collective::kAllGather && op == weftAvg) continue;
            EXPECT_EQ(CompareWithCodecReference(coll, p, n, op, Spec(c)), "")
                << CollectiveName(coll) << " " << weftCodecName(c) << " p=" << p << " n=" << n;
          }
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

// Rank 0 encodes n values with spec[0] and sends them; with relay, rank 1 receives them and
// passes them on unchanged to rank 2 (a plain send of the received region). The last rank
// receives into a region sized for its spec and decodes with it. Returns the last rank's
// status; its output in *out.
Status SendOneEncoding(const weftCompression spec[2], size_t n, std::vector<float>* out,
                       bool relay = false) {
  const int p = relay ? 3 : 2;
  auto hub = std::make_shared<InprocHub>(p);
  std::vector<Status> result(p);
  out->assign(n, -1.0f);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      const weftCompression& mine = spec[r == 0 ? 0 : 1];
      const Region enc = Tmp(0, EncodedElements(mine, n));
      RankSchedule rs;
      rs.input_count = rs.output_count = n;
      rs.scratch_count = enc.count;
      if (r == 0) rs.steps = {EncodeStep(In(0, n), enc, 0), SendStep(1, enc)};
      else if (r == p - 1) rs.steps = {RecvStep(r - 1, enc), DecodeStep(enc, Out(0, n))};
      else rs.steps = {RecvStep(0, enc), SendStep(2, enc)};
      InprocTransport t(hub, r);
      std::vector<Transport*> peers(p, &t);
      std::vector<float> in = Contribution(r, n), unused(n);
      ScratchBuffer heap;
      const ExecContext ctx =
          weft_test::ThreadRankContext(r, p, &peers, &heap, &mine, "compressed schedule test");
      ExecBuffers b;
      b.input = in.data();
      b.output = r == p - 1 ? out->data() : unused.data();
      result[r] = ExecuteSchedule(rs, 4, ctx, b);
      if (!result[r].ok()) t.Abort(result[r]);
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < p - 1; ++r) EXPECT_TRUE(result[r].ok()) << result[r].message();
  return result[p - 1];
}

// The executor sends only the encoding (not the whole region, rounded up to elements) and the
// receive reports its size, which the decode checks: 257 int8 values at block 128 are 269
// bytes in a region of 68 elements (272 bytes); at block 256 they are 265 bytes, which a rank
// expecting block 128 refuses, naming both sizes, instead of decoding garbage.
TEST(CompressedScheduleExecutor, TheEncodedSizeTravelsAndTheDecodeChecksIt) {
  const size_t n = 257;
  const weftCompression same[2] = {Spec(weftCodecInt8, 128), Spec(weftCodecInt8, 128)};
  std::vector<float> out, want(n);
  ASSERT_EQ(codec::EncodedBytes(same[0], n), 269u);
  ASSERT_EQ(EncodedElements(same[0], n), 68u);
  Status st = SendOneEncoding(same, n, &out);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<float> x = Contribution(0, n);
  std::vector<uint8_t> enc(269);
  codec::Encode(same[0], x.data(), n, enc.data(), 0);
  codec::Decode(same[0], enc.data(), n, want.data());
  EXPECT_EQ(0, std::memcmp(out.data(), want.data(), n * 4));
  // Through a relay (received, then sent on unchanged): the same 269 bytes arrive.
  out.assign(n, 0.0f);
  st = SendOneEncoding(same, n, &out, /*relay=*/true);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(0, std::memcmp(out.data(), want.data(), n * 4));
  const weftCompression differ[2] = {Spec(weftCodecInt8, 256), Spec(weftCodecInt8, 128)};
  st = SendOneEncoding(differ, n, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("decode src holds 265 bytes, the codec encodes to exactly 269"),
            std::string::npos) << st.message();
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
  // At the codec's measured speed (compression_pays.h): between the two.
  StatusOr<SimResult> m = compress::SimulateCompressedSchedule(**fabric, Collective::kAllReduce, p,
                                                               count, spec);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->bytes_moved, want);
  // The table's rates scaled to this fabric's core (compress::CodecSpeedOn).
  const compress::CodecSpeed speed = compress::CodecSpeedOn(spec, (*fabric)->Compute(0));
  SimOptions measured;
  measured.encode_gbps = speed.encode_gbps;
  measured.decode_gbps = speed.decode_gbps;
  measured.encode_fixed_us = speed.encode_fixed_us;
  measured.decode_fixed_us = speed.decode_fixed_us;
  measured.fused_codec = &spec;  // the executor's codec chains (WEFT_FUSE_CODEC_STEPS default)
  EXPECT_EQ(m->time_us, SimulateSchedule(s, **fabric, 4, measured)->time_us);
}

// The simulator prices the executor's codec chains (exec/codec_chain.h): on the 2 x 2 harness's
// fabric, where the codecs and reductions run at DRAM speed, the hierarchical allreduce's
// chained steps run at the cache rates, so the fused schedule is predicted faster; top-k's one
// chain per piece (the host of two's reduce and encodes in one pass, its sum never written)
// saves less, but saves.
TEST(CompressedScheduleSim, PricesCodecChainsAtTheCacheRate) {
  auto fabric = MakePreset("netns:2x2@2", 0);
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  const AlgorithmInfo* hier = FindCompressedAlgorithm(Collective::kAllReduce, "compressed_hierarchical");
  ASSERT_NE(hier, nullptr);
  for (const weftCompression& spec : {Spec(weftCodecInt8), Spec(weftCodecTopK)}) {
    ScheduleRequest req = Request(4, size_t{16} << 20, spec);
    req.groups = {{0, 1}, {2, 3}};
    req.scope = PlanScope::AllRanks();
    StatusOr<Schedule> s = BuildSchedule(*hier, req);
    ASSERT_TRUE(s.ok()) << s.status().message();
    SimOptions plain;
    plain.encode_gbps = plain.decode_gbps = 4;
    SimOptions fused = plain;
    fused.fused_codec = &spec;
    const double a = SimulateSchedule(*s, **fabric, 4, plain)->time_us;
    const double b = SimulateSchedule(*s, **fabric, 4, fused)->time_us;
    EXPECT_LT(b, (spec.codec == weftCodecTopK ? 1.0 : 0.97) * a)
        << weftCodecName(spec.codec) << ": step by step " << a << " us, fused " << b << " us";
  }
}

// Every codec step costs its call's fixed cost on top of its values: a schedule of a few values
// per step is predicted slower by at least the fixed costs on one rank's path (that rank's
// encodes and decodes run one after another on its core).
TEST(CompressedScheduleSimulator, CodecStepsPayTheirFixedCost) {
  const int p = 4;
  const size_t count = 64;
  const weftCompression spec = Spec(weftCodecTopK);
  const Schedule s = Build(p, count, spec);
  auto fabric = MakePreset("host:" + std::to_string(p), 0);
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  SimOptions free_calls, fixed;
  free_calls.encode_gbps = fixed.encode_gbps = 2.6;
  free_calls.decode_gbps = fixed.decode_gbps = 20;
  fixed.encode_fixed_us = 7;
  fixed.decode_fixed_us = 0.05;
  StatusOr<SimResult> a = SimulateSchedule(s, **fabric, 4, free_calls);
  StatusOr<SimResult> b = SimulateSchedule(s, **fabric, 4, fixed);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  // Rank 0 encodes p slices of its input and its reduced slice, and decodes p contributions
  // and p gathered slices.
  size_t encodes = 0, decodes = 0;
  for (const Step& st : s.ranks[0].steps) {
    if (st.op == StepOp::kEncode) ++encodes;
    if (st.op == StepOp::kDecode || st.op == StepOp::kDecodeReduce) ++decodes;
  }
  EXPECT_EQ(encodes, static_cast<size_t>(p + 1));
  EXPECT_EQ(decodes, static_cast<size_t>(2 * p));
  EXPECT_GE(b->time_us - a->time_us, encodes * 7 + decodes * 0.05 - 1e-6)
      << a->time_us << " us without fixed costs, " << b->time_us << " with";
}

}  // namespace
}  // namespace weft
