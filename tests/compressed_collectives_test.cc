// Compressed collectives (include/weft/weft_compress.h, src/compress/): results against an
// independent float64 reference within each codec's stated bound, bitwise identity across
// ranks, error feedback (the running mean converges), bad specs, streams, WEFT_COMPRESSION,
// the hierarchical placement (full precision inside hosts: thread ranks grouped into "hosts"
// by WEFT_INPROC_GROUPS; processes in two network namespaces by tests/netns_compress.cmake),
// and the same allreduce across processes.
//
// Thread-per-rank through weftCommInitAll; the multi-process case re-runs this binary as the
// workers (the DISABLED_ test below, selected with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "compress/compressed_schedule.h"
#include "compress/job_wide_compression.h"
#include "exec/chain_sink.h"
#include "exec/operand_sink.h"
#include "kernels/codec.h"
#include "kernels/codec_backend.h"
#include "kernels/half.h"
#include "test_util.h"
#include "weft/weft_compress.h"

namespace {

using weft_test::RunRanks;

weftCompression Spec(weftCodec_t codec, uint32_t flags = 0, float ratio = 0.01f) {
  weftCompression s;
  weftCompressionDefault(codec, &s);
  s.flags = flags;
  s.ratio = ratio;
  return s;
}

// Like RunRanks, with the thread ranks grouped into "hosts" of the sizes in `groups` ("2,2"):
// compressed allreduces then take the hierarchical placement. WEFT_INPROC_GROUPS is unset
// again before the ranks run (a communicator of another size made meanwhile would refuse it).
// What src/compress keeps per communicator is released before the communicators go
// (ReleaseCommunicator, the hook weftCommDestroy should call).
std::string RunRanksOnHosts(const char* groups, int n,
                            const std::function<std::string(weftComm_t, int)>& fn) {
  setenv("WEFT_INPROC_GROUPS", groups, 1);
  std::vector<weftComm_t> comms(n);
  const weftResult_t created = weftCommInitAll(comms.data(), n, nullptr);
  unsetenv("WEFT_INPROC_GROUPS");
  if (created != weftSuccess) return std::string("weftCommInitAll: ") + weftGetLastError(nullptr);
  const std::string failure = weft_test::RunOnComms(comms, fn);
  for (weftComm_t c : comms) {
    weft::compress::ReleaseCommunicator(c);
    weftCommDestroy(c);
  }
  return failure;
}

// Rank r's contribution: smooth values of varied sign and size, plus a large outlier.
float Input(int rank, size_t i, uint64_t seed = 1) {
  const double t = static_cast<double>(i) * 0.37 + rank * 1.91 + static_cast<double>(seed) * 0.13;
  double v = std::sin(t) * (1.0 + (i % 7)) + 0.25 * std::cos(3.1 * t + rank);
  if ((i + 13 * rank) % 509 == 0) v *= 40.0;
  return static_cast<float>(v);
}

// Per-codec (relative, absolute-of-max) error constants of codec_ref.h, slightly widened.
struct ErrorModel {
  double rel;
  double of_max;
};
ErrorModel Model(const weftCompression& s) {
  const double slack = 1 + std::ldexp(1.0, -10);
  const bool sr = s.flags & WEFT_COMPRESS_STOCHASTIC;
  switch (s.codec) {
    case weftCodecBf16: return {std::ldexp(1.0, -8) * slack, 1e-30};
    case weftCodecFp16: return {std::ldexp(1.0, -11) * slack, 1e-7};
    case weftCodecFp8E4M3: return {std::ldexp(1.0, -4) * slack, std::ldexp(1.0, -17)};
    case weftCodecFp8E5M2: return {std::ldexp(1.0, -3) * slack, std::ldexp(1.0, -29)};
    case weftCodecInt8: return {0, (sr ? 1.0 / 127 : 1.0 / 254) * slack};
    case weftCodecInt4: return {0, (sr ? 1.0 / 7 : 1.0 / 14) * slack};
    default: return {0, 1.0 * slack};  // sign1, top-k: dropped parts are bounded by the max
  }
}

// The bound on |allreduce result - exact sum| at element i: each contribution's encoding
// error, plus the reduced slice's re-encoding error, plus float32 summation (bounds use the
// whole vector's max, which is at least each block's). max_abs[q] = max |x[q]|.
double AllReduceBound(const weftCompression& s, const std::vector<std::vector<float>>& x,
                      const std::vector<double>& max_abs, size_t i, double exact, bool reencoded) {
  const ErrorModel m = Model(s);
  double contribution_error = 0, max_sum = 0, magnitude = 0;
  for (size_t q = 0; q < x.size(); ++q) {
    contribution_error += m.rel * std::fabs(static_cast<double>(x[q][i])) + m.of_max * max_abs[q];
    max_sum += max_abs[q] * (1 + m.rel) + m.of_max * max_abs[q];
    magnitude += std::fabs(static_cast<double>(x[q][i]));
  }
  double bound = contribution_error + 1e-6 * magnitude + 1e-30;
  if (reencoded) bound += m.rel * (std::fabs(exact) + contribution_error) + m.of_max * max_sum;
  return bound;
}

std::vector<double> MaxAbs(const std::vector<std::vector<float>>& x) {
  std::vector<double> m(x.size(), 0.0);
  for (size_t q = 0; q < x.size(); ++q)
    for (float v : x[q]) m[q] = std::max(m[q], std::fabs(static_cast<double>(v)));
  return m;
}

struct CaseResult {
  std::vector<std::vector<float>> out;  // per rank
  std::vector<std::vector<float>> in;   // per rank (as float32, after bf16 rounding)
};

std::vector<float> Contribution(int rank, size_t count, weftDataType_t dtype, uint64_t seed = 1) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    v[i] = Input(rank, i, seed);
    if (dtype == weftBfloat16) v[i] = weft::Bfloat16ToFloat(weft::FloatToBfloat16(v[i]));
  }
  return v;
}

void ToType(const std::vector<float>& v, weftDataType_t dtype, std::vector<uint8_t>* bytes) {
  bytes->assign(v.size() * (dtype == weftBfloat16 ? 2 : 4), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == weftBfloat16) {
      const uint16_t h = weft::FloatToBfloat16(v[i]);
      std::memcpy(bytes->data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes->data() + 4 * i, &v[i], 4);
    }
  }
}

std::vector<float> FromType(const std::vector<uint8_t>& bytes, weftDataType_t dtype, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == weftBfloat16) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = weft::Bfloat16ToFloat(h);
    } else {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    }
  }
  return v;
}

// groups: NULL for one host, else the "hosts" (RunRanksOnHosts).
CaseResult RunAllReduce(int nranks, size_t count, weftDataType_t dtype, weftRedOp_t op,
                        const weftCompression& spec, bool in_place, const char* groups = nullptr) {
  CaseResult r;
  r.out.resize(nranks);
  r.in.resize(nranks);
  for (int q = 0; q < nranks; ++q) r.in[q] = Contribution(q, count, dtype);
  std::mutex mu;
  const auto body = [&](weftComm_t comm, int rank) -> std::string {
    std::vector<uint8_t> send, recv;
    ToType(r.in[rank], dtype, &send);
    recv.assign(send.size(), 0xCD);
    void* out = in_place ? send.data() : recv.data();
    const weftResult_t res = weftAllReduceCompressed(send.data(), out, count, dtype, op, &spec,
                                                     nullptr, comm, nullptr);
    if (res != weftSuccess) return std::string("rank ") + std::to_string(rank) + ": " +
                                   weft::compress::LastCompressionError();
    std::lock_guard<std::mutex> l(mu);
    r.out[rank] = FromType(in_place ? send : recv, dtype, count);
    return "";
  };
  const std::string failure = groups != nullptr ? RunRanksOnHosts(groups, nranks, body)
                                                : RunRanks(nranks, body);
  EXPECT_EQ(failure, "");
  return r;
}

// Sizes of the "hosts" in a WEFT_INPROC_GROUPS value ("2,2" -> {2, 2}).
std::vector<int> GroupSizes(const char* groups) {
  std::vector<int> sizes;
  for (const char* p = groups; *p != '\0';) {
    char* end = nullptr;
    sizes.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
  }
  return sizes;
}

// What the hierarchical placement encodes: each host's float32 sum of its ranks' inputs (ranks
// are grouped consecutively). NULL groups: the ranks' own inputs (flat placement).
std::vector<std::vector<float>> EncodedContributions(const std::vector<std::vector<float>>& in,
                                                     const char* groups) {
  if (groups == nullptr) return in;
  std::vector<std::vector<float>> sums;
  int rank = 0;
  for (int size : GroupSizes(groups)) {
    std::vector<float> sum(in[0].size(), 0.0f);
    for (int k = 0; k < size; ++k, ++rank)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += in[rank][i];
    sums.push_back(sum);
  }
  return sums;
}

std::string CaseName(int n, size_t count, weftDataType_t t, weftRedOp_t op, const weftCompression& s) {
  return std::string(weftCodecName(s.codec)) + " flags=" + std::to_string(s.flags) + " ranks=" +
         std::to_string(n) + " count=" + std::to_string(count) + " " + weft_test::TypeName(t) +
         " " + weft_test::OpName(op);
}

void CheckAllReduce(int n, size_t count, weftDataType_t dtype, weftRedOp_t op,
                    const weftCompression& spec, bool in_place = false,
                    const char* groups = nullptr) {
  const CaseResult r = RunAllReduce(n, count, dtype, op, spec, in_place, groups);
  const std::string name = CaseName(n, count, dtype, op, spec) + (groups ? " hosts " : "") +
                           (groups ? groups : "");
  const std::vector<std::vector<float>> encoded = EncodedContributions(r.in, groups);
  const std::vector<double> max_abs = MaxAbs(encoded);
  for (int q = 1; q < n; ++q)
    ASSERT_EQ(0, std::memcmp(r.out[0].data(), r.out[q].data(), count * sizeof(float)))
        << name << ": rank " << q << " differs from rank 0";
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int q = 0; q < n; ++q) exact += r.in[q][i];
    double bound = AllReduceBound(spec, encoded, max_abs, i, exact, true);
    for (int q = 0; q < n; ++q) bound += 1e-6 * std::fabs(r.in[q][i]);  // host sums in float32
    double got = r.out[0][i];
    if (op == weftAvg) {
      exact /= n;
      bound /= n;
    }
    if (dtype == weftBfloat16) bound += std::ldexp(std::fabs(got), -8);
    ASSERT_LE(std::fabs(got - exact), bound) << name << " i=" << i << " exact=" << exact;
  }
}

TEST(CompressedAllReduce, WithinBoundAndIdenticalOnEveryRank) {
  for (weftCodec_t c : {weftCodecBf16, weftCodecFp16, weftCodecFp8E4M3, weftCodecFp8E5M2,
                        weftCodecInt8, weftCodecInt4, weftCodecSign1, weftCodecTopK})
    for (int n : {1, 2, 3})
      for (size_t count : {size_t{1}, size_t{130}, size_t{1000}})
        CheckAllReduce(n, count, weftFloat32, weftSum, Spec(c));
}

TEST(CompressedAllReduce, TypesOpsFlagsInPlaceAndFourRanks) {
  CheckAllReduce(4, 4099, weftBfloat16, weftAvg, Spec(weftCodecInt8));
  CheckAllReduce(4, 4099, weftFloat32, weftAvg, Spec(weftCodecFp8E4M3));
  CheckAllReduce(3, 777, weftFloat32, weftSum, Spec(weftCodecInt4, WEFT_COMPRESS_STOCHASTIC));
  CheckAllReduce(3, 777, weftFloat32, weftSum, Spec(weftCodecInt8, WEFT_COMPRESS_HADAMARD));
  CheckAllReduce(2, 1000, weftFloat32, weftSum, Spec(weftCodecInt8), /*in_place=*/true);
  CheckAllReduce(2, 1000, weftBfloat16, weftSum, Spec(weftCodecBf16), /*in_place=*/true);
}

// top-k with ratio 1 keeps everything: the result must be exactly the float32 sum in rank
// order, the same bits on every rank (this pins the slice/owner bookkeeping exactly).
TEST(CompressedAllReduce, LosslessTopKIsTheRankOrderSumBitwise) {
  for (int n : {2, 3, 4}) {
    const size_t count = 1001;
    const CaseResult r = RunAllReduce(n, count, weftFloat32, weftSum, Spec(weftCodecTopK, 0, 1.0f), false);
    for (size_t i = 0; i < count; ++i) {
      float sum = r.in[0][i];
      for (int q = 1; q < n; ++q) sum += r.in[q][i];
      for (int q = 0; q < n; ++q)
        ASSERT_EQ(weft::FloatBits(sum), weft::FloatBits(r.out[q][i])) << "ranks=" << n << " i=" << i;
    }
  }
}

// Error feedback: the same gradients every step; the running mean of K compressed results
// approaches the exact sum (error ~ C/K, where C grows as the codec keeps less: sign1 and
// top-k take hundreds of steps), while without feedback it stays where it starts.
double RunningMeanError(const weftCompression& spec, bool feedback, int steps, int n = 2,
                        const char* groups = nullptr) {
  const size_t count = 2000;
  std::vector<std::vector<float>> in(n);
  for (int q = 0; q < n; ++q) in[q] = Contribution(q, count, weftFloat32, 5);
  std::vector<std::vector<double>> mean(n, std::vector<double>(count, 0.0));
  const auto body = [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> residual(count, 0.0f), out(count);
    for (int k = 0; k < steps; ++k) {
      if (weftAllReduceCompressed(in[rank].data(), out.data(), count, weftFloat32, weftSum, &spec,
                                  feedback ? residual.data() : nullptr, comm, nullptr) != weftSuccess)
        return weft::compress::LastCompressionError();
      for (size_t i = 0; i < count; ++i) mean[rank][i] += out[i] / steps;
    }
    return "";
  };
  const std::string failure = groups != nullptr ? RunRanksOnHosts(groups, n, body) : RunRanks(n, body);
  EXPECT_EQ(failure, "");
  double err = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int q = 0; q < n; ++q) exact += in[q][i];
    err += (mean[0][i] - exact) * (mean[0][i] - exact);
    norm += exact * exact;
  }
  return std::sqrt(err / norm);
}

TEST(CompressedAllReduce, ErrorFeedbackMakesTheRunningMeanConverge) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecInt4, weftCodecSign1, weftCodecTopK}) {
    const weftCompression spec = Spec(c, 0, 0.05f);
    const double e1 = RunningMeanError(spec, true, 1);
    const double e10 = RunningMeanError(spec, true, 10);
    const double e100 = RunningMeanError(spec, true, 100);
    const double e1000 = RunningMeanError(spec, true, 1000);
    const double plain100 = RunningMeanError(spec, false, 100);
    std::printf("%-6s relative error of the running mean: K=1 %.3g  K=10 %.3g  K=100 %.3g  "
                "K=1000 %.3g  (no feedback, K=100: %.3g)\n", weftCodecName(c), e1, e10, e100,
                e1000, plain100);
    EXPECT_GT(e1, 0) << weftCodecName(c);
    EXPECT_LT(e10, e1) << weftCodecName(c);
    EXPECT_LT(e100, e10) << weftCodecName(c);
    EXPECT_LT(e1000, e100) << weftCodecName(c);
    // sign1 keeps the least (one bit and the block's mean), so its residual takes longest
    // to settle: measured K=1000 at 0.12 of K=1, the others at 0.01.
    EXPECT_LT(e1000, e1 * (c == weftCodecSign1 ? 0.25 : 0.1)) << weftCodecName(c);
    EXPECT_LT(e100, plain100 * 0.7) << weftCodecName(c) << ": feedback must beat no feedback";
  }
}

// ---- hierarchical placement (several hosts: full precision inside each) ----

TEST(HierarchicalCompressedAllReduce, WithinBoundAndIdenticalOnEveryRank) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecInt4, weftCodecSign1, weftCodecTopK})
    CheckAllReduce(4, 1000, weftFloat32, weftSum, Spec(c), false, "2,2");
  // Uneven slices (count not a multiple of the ranks per host; fewer elements than ranks),
  // three hosts, avg, bf16 and in place.
  CheckAllReduce(6, 1001, weftFloat32, weftSum, Spec(weftCodecInt8), false, "3,3");
  CheckAllReduce(6, 2, weftFloat32, weftSum, Spec(weftCodecInt8), false, "2,2,2");
  CheckAllReduce(6, 4099, weftFloat32, weftAvg, Spec(weftCodecFp8E4M3), false, "2,2,2");
  CheckAllReduce(4, 777, weftBfloat16, weftAvg, Spec(weftCodecInt8), false, "2,2");
  CheckAllReduce(4, 1000, weftFloat32, weftSum, Spec(weftCodecInt4), /*in_place=*/true, "2,2");
  // Uneven hosts (the schedule's lanes: a smaller host's ranks own several).
  CheckAllReduce(3, 1001, weftFloat32, weftAvg, Spec(weftCodecInt8), false, "2,1");
  CheckAllReduce(5, 777, weftFloat32, weftSum, Spec(weftCodecFp8E4M3), /*in_place=*/true, "3,2");
}



// The hierarchical schedule's bits, rebuilt with the codec alone on 2 hosts x 2 ranks (sum,
// deterministic codecs): host sums a + b in float32 per lane, each half of a lane encoded by
// its host, the decoded halves added in host order, that sum encoded once, and every rank
// holds its decode. These are also the bits of the composition it replaced whenever that one
// cut the same slices (one piece, count a multiple of the ranks per host: see
// hierarchical_allreduce.cc for where the two differ).
std::vector<float> HierarchicalReference(const std::vector<std::vector<float>>& in, size_t count,
                                         const weftCompression& spec) {
  std::vector<float> out(count);
  for (int l = 0; l < 2; ++l) {
    const size_t lane_at = l == 0 ? 0 : (count + 1) / 2, lane = l == 0 ? (count + 1) / 2 : count / 2;
    std::vector<float> sum;
    std::vector<std::vector<uint8_t>> enc(2);
    for (int t = 0; t < 2; ++t) {
      const size_t at = lane_at + (t == 0 ? 0 : (lane + 1) / 2), n = t == 0 ? (lane + 1) / 2 : lane / 2;
      if (n == 0) continue;
      sum.assign(n, 0.0f);
      for (int h = 0; h < 2; ++h) {
        std::vector<float> host(n), decoded(n);
        for (size_t i = 0; i < n; ++i) host[i] = in[2 * h][at + i] + in[2 * h + 1][at + i];
        std::vector<uint8_t> bytes(weft::codec::EncodedBytes(spec, n));
        weft::codec::Encode(spec, host.data(), n, bytes.data(), 0);
        weft::codec::Decode(spec, bytes.data(), n, decoded.data());
        for (size_t i = 0; i < n; ++i) sum[i] = h == 0 ? decoded[i] : sum[i] + decoded[i];
      }
      std::vector<uint8_t> reduced(weft::codec::EncodedBytes(spec, n));
      weft::codec::Encode(spec, sum.data(), n, reduced.data(), 0);
      weft::codec::Decode(spec, reduced.data(), n, out.data() + at);
    }
  }
  return out;
}

TEST(HierarchicalCompressedAllReduce, BitsOfTheScheduleRebuiltWithTheCodec) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecInt4, weftCodecBf16})
    for (size_t count : {size_t{1}, size_t{6}, size_t{1001}, size_t{4096}}) {
      const weftCompression spec = Spec(c);
      std::vector<std::vector<float>> in(4);
      for (int q = 0; q < 4; ++q) in[q] = Contribution(q, count, weftFloat32, 5);
      const std::vector<float> want = HierarchicalReference(in, count, spec);
      const std::string failure = RunRanksOnHosts("2,2", 4, [&](weftComm_t comm, int rank) -> std::string {
        std::vector<float> out(count);
        if (weftAllReduceCompressed(in[rank].data(), out.data(), count, weftFloat32, weftSum, &spec,
                                    nullptr, comm, nullptr) != weftSuccess)
          return weft::compress::LastCompressionError();
        const char* algorithm = nullptr;
        weftCommGetLastAlgorithm(comm, &algorithm);
        if (std::string(algorithm) != "compressed_hierarchical") return std::string("ran ") + algorithm;
        return std::memcmp(out.data(), want.data(), count * 4) == 0 ? "" : "other bits than the reference";
      });
      EXPECT_EQ(failure, "") << weftCodecName(c) << " count " << count;
    }
}

// The final decodes into a large output stream (codec::DecodeValuesStreamed) and give the
// same bits. Run by tests/job_wide_pipeline.cmake in a process whose WEFT_COPY_NT_THRESHOLD
// (read once) makes this test's outputs large.
TEST(HierarchicalCompressedAllReduce, DISABLED_StreamedFinalDecodesGiveTheSameBits) {
  const size_t count = 100003;
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecInt4})
    for (bool in_place : {false, true}) {
      const weftCompression spec = Spec(c);
      std::vector<std::vector<float>> in(4);
      for (int q = 0; q < 4; ++q) in[q] = Contribution(q, count, weftFloat32, 5);
      const std::vector<float> want = HierarchicalReference(in, count, spec);
      const uint64_t before = weft::CpuStreamedDecodes();
      const std::string failure = RunRanksOnHosts("2,2", 4, [&](weftComm_t comm, int rank) -> std::string {
        std::vector<float> out = in_place ? in[rank] : std::vector<float>(count);
        if (weftAllReduceCompressed(in_place ? out.data() : in[rank].data(), out.data(), count,
                                    weftFloat32, weftSum, &spec, nullptr, comm, nullptr) != weftSuccess)
          return weft::compress::LastCompressionError();
        return std::memcmp(out.data(), want.data(), count * 4) == 0 ? "" : "other bits than the reference";
      });
      EXPECT_EQ(failure, "") << weftCodecName(c) << " in place " << in_place;
      // Each rank decodes its own lane's and the other member's lane's encodings (2 hosts each).
      EXPECT_GE(weft::CpuStreamedDecodes() - before, 16u) << weftCodecName(c) << " in place " << in_place;
    }
}

// The placement is really hierarchical: two ranks of one host send x and -x + y, the other
// host sends zeros. Inside the host the sum y is exact, so only y is quantized (error ~ |y|
// / 254 for int8); the flat placement quantizes x and -x + y (error ~ |x| / 254). And each
// placement runs its own schedule (weftCommGetLastAlgorithm names it).
TEST(HierarchicalCompressedAllReduce, KeepsFullPrecisionInsideHosts) {
  const size_t count = 4096;
  std::vector<float> x(count), y(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = 1000.0f * static_cast<float>(std::sin(0.1 * i) + 2.0);
    y[i] = static_cast<float>(std::cos(0.37 * i));
  }
  const auto worst_error = [&](const weftCompression& spec) {
    std::vector<double> worst(4, 0.0);
    const std::string failure = RunRanksOnHosts("2,2", 4, [&](weftComm_t comm, int rank) -> std::string {
      std::vector<float> in(count, 0.0f), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = rank == 0 ? x[i] : rank == 1 ? -x[i] + y[i] : 0.0f;
      for (int call = 0; call < 2; ++call)
        if (weftAllReduceCompressed(in.data(), out.data(), count, weftFloat32, weftSum, &spec,
                                    nullptr, comm, nullptr) != weftSuccess)
          return weft::compress::LastCompressionError();
      const char* algorithm = nullptr;
      weftCommGetLastAlgorithm(comm, &algorithm);
      const bool flat = (spec.flags & WEFT_COMPRESS_FLAT) != 0;
      if (std::string(algorithm) != (flat ? "compressed" : "compressed_hierarchical"))
        return std::string("the ") + (flat ? "flat" : "hierarchical") + " placement ran " + algorithm;
      for (size_t i = 0; i < count; ++i)
        worst[rank] = std::max(worst[rank], std::fabs(static_cast<double>(out[i]) - (x[i] + (-x[i] + y[i]))));
      return "";
    });
    EXPECT_EQ(failure, "");
    return *std::max_element(worst.begin(), worst.end());
  };
  const double hierarchical = worst_error(Spec(weftCodecInt8));
  const double flat = worst_error(Spec(weftCodecInt8, WEFT_COMPRESS_FLAT));
  std::printf("int8, host sums y of x and -x + y: worst error hierarchical %.3g, flat %.3g\n",
              hierarchical, flat);
  EXPECT_LT(hierarchical, 2.0 / 254 * 1.01 + 1e-3) << "|y| <= 1: two int8 steps of 1/254";
  EXPECT_GT(flat, 20 * hierarchical) << "the flat placement quantizes x itself";
}

// On 2 hosts x 2 ranks each rank sends half the encoded bytes across hosts that the flat
// placement sends (it encodes half the data, and for 2 hosts instead of 4 ranks), and float32
// only inside its host.
TEST(HierarchicalCompressedAllReduce, HalvesTheBytesAcrossHosts) {
  const size_t count = size_t{1} << 20;
  const std::string failure = RunRanksOnHosts("2,2", 4, [&](weftComm_t comm, int rank) -> std::string {
    const weft::compress::AllReduceWireBytes hier =
        weft::compress::AllReduceCompressedWireBytes(Spec(weftCodecInt8), count, comm);
    const weft::compress::AllReduceWireBytes flat =
        weft::compress::AllReduceCompressedWireBytes(Spec(weftCodecInt8, WEFT_COMPRESS_FLAT), count, comm);
    size_t encoded = 0;
    weftCompression spec = Spec(weftCodecInt8);
    weftCompressedSize(&spec, count, &encoded);
    const double ratio = static_cast<double>(hier.across_hosts) / static_cast<double>(flat.across_hosts);
    if (ratio < 0.45 || ratio > 0.55) return "across hosts: hierarchical / flat = " + std::to_string(ratio);
    if (flat.across_hosts < encoded * 95 / 100 || flat.across_hosts > encoded * 105 / 100)
      return "flat across hosts " + std::to_string(flat.across_hosts) + ", expected ~" + std::to_string(encoded);
    if (hier.inside_hosts < count * 2) return "float32 half of the data inside the host";
    return "";
  });
  EXPECT_EQ(failure, "");
}

// Error feedback keeps exactly what was dropped: after one call, result + the sum of every
// rank's residual equals the exact sum of the inputs and the residuals the call started with
// (up to float32 rounding), in both placements. A residual that starts nonzero everywhere
// checks that each rank takes all of its own: zeroed where another rank keeps the feedback,
// overwritten where this one does (hierarchical_allreduce.cc, TakeResidual's stored ranges).
void CheckResidualsHoldWhatWasDropped(uint32_t flags, size_t count, const char* hosts = "2,2",
                                      bool nonzero_start = false, int calls = 1) {
  const int n = 4;
  std::vector<std::vector<float>> in(n), out(n), residual(n), start(n);
  for (int q = 0; q < n; ++q) {
    residual[q].assign(count, 0.0f);
    if (nonzero_start) {
      residual[q] = Contribution(q + 5, count, weftFloat32, 3);
      for (float& v : residual[q]) v *= 0.01f;
    }
  }
  const weftCompression spec = Spec(weftCodecInt4, flags);
  // Later calls start from the residual the call before left: the steady state, in which the
  // hierarchical placement builds input + residual only in the lanes each rank owns.
  for (int call = 0; call < calls; ++call) {
    for (int q = 0; q < n; ++q) {
      in[q] = Contribution(q + 11 * call, count, weftFloat32, 3);
      start[q] = residual[q];
    }
    const std::string failure = RunRanksOnHosts(hosts, n, [&](weftComm_t comm, int rank) -> std::string {
      out[rank].assign(count, 0.0f);
      return weftAllReduceCompressed(in[rank].data(), out[rank].data(), count, weftFloat32, weftSum,
                                     &spec, residual[rank].data(), comm, nullptr) == weftSuccess
                 ? "" : weft::compress::LastCompressionError();
    });
    ASSERT_EQ(failure, "");
    double dropped = 0;
    for (size_t i = 0; i < count; ++i) {
      double exact = 0, kept = out[0][i], magnitude = 0;
      for (int q = 0; q < n; ++q) {
        exact += static_cast<double>(in[q][i]) + start[q][i];
        kept += residual[q][i];
        magnitude += std::fabs(in[q][i]) + std::fabs(start[q][i]) + std::fabs(residual[q][i]);
        dropped += std::fabs(residual[q][i]);
      }
      ASSERT_LE(std::fabs(kept - exact), 1e-5 * magnitude + 1e-30)
          << "flags=" << flags << " call " << call << " i=" << i;
    }
    EXPECT_GT(dropped, 0) << "int4 drops something";
  }
}

TEST(HierarchicalCompressedAllReduce, ResidualsHoldWhatWasDropped) {
  for (const uint32_t flags : {0u, static_cast<uint32_t>(WEFT_COMPRESS_FLAT)})
    CheckResidualsHoldWhatWasDropped(flags, 1003);
}

TEST(HierarchicalCompressedAllReduce, ResidualsThatStartNonzeroAreTakenWhole) {
  for (const char* hosts : {"2,2", "3,1"})
    for (const uint32_t flags : {0u, static_cast<uint32_t>(WEFT_COMPRESS_FLAT)}) {
      SCOPED_TRACE(hosts);
      CheckResidualsHoldWhatWasDropped(flags, 1003, hosts, /*nonzero_start=*/true, /*calls=*/3);
      CheckResidualsHoldWhatWasDropped(flags, 70001, hosts, /*nonzero_start=*/true, /*calls=*/2);
    }
}

// Calls of 16 MiB and more are cut into pieces that the host and the slow tier work on at once
// (hierarchical_allreduce.cc): uneven pieces, avg, in place, with error feedback.
TEST(HierarchicalCompressedAllReduce, PipelinedPiecesWithinBoundAndIdentical) {
  const size_t count = (size_t{16} << 20) / 4 + 7;  // 2 pieces of 2 x part, padded
  CheckAllReduce(4, count, weftFloat32, weftAvg, Spec(weftCodecInt8), /*in_place=*/true, "2,2");
  CheckResidualsHoldWhatWasDropped(0, count);
}

TEST(HierarchicalCompressedAllReduce, ErrorFeedbackMakesTheRunningMeanConverge) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecSign1, weftCodecTopK}) {
    const weftCompression spec = Spec(c, 0, 0.05f);
    const double e1 = RunningMeanError(spec, true, 1, 4, "2,2");
    const double e10 = RunningMeanError(spec, true, 10, 4, "2,2");
    const double e200 = RunningMeanError(spec, true, 200, 4, "2,2");
    const double plain200 = RunningMeanError(spec, false, 200, 4, "2,2");
    std::printf("%-6s hierarchical, relative error of the running mean: K=1 %.3g  K=10 %.3g  "
                "K=200 %.3g  (no feedback, K=200: %.3g)\n", weftCodecName(c), e1, e10, e200, plain200);
    EXPECT_GT(e1, 0) << weftCodecName(c);
    EXPECT_LT(e10, e1) << weftCodecName(c);
    EXPECT_LT(e200, e10) << weftCodecName(c);
    EXPECT_LT(e200, plain200 * 0.7) << weftCodecName(c) << ": feedback must beat no feedback";
  }
}

// ---- reduce-scatter, allgather, all-to-all(v) ----

void CheckReduceScatter(weftCodec_t c) {
  const int n = 3;
  const size_t recvcount = 333;
  const weftCompression spec = Spec(c);
  std::vector<std::vector<float>> in(n), out(n);
  for (int q = 0; q < n; ++q) in[q] = Contribution(q, recvcount * n, weftFloat32);
  const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    out[rank].assign(recvcount, 0);
    std::vector<float> residual(recvcount * n, 0.0f);
    if (weftReduceScatterCompressed(in[rank].data(), out[rank].data(), recvcount, weftFloat32,
                                    weftSum, &spec, residual.data(), comm, nullptr) != weftSuccess)
      return weft::compress::LastCompressionError();
    return "";
  });
  ASSERT_EQ(failure, "");
  const std::vector<double> max_abs = MaxAbs(in);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < recvcount; ++i) {
      const size_t g = r * recvcount + i;
      double exact = 0;
      for (int q = 0; q < n; ++q) exact += in[q][g];
      ASSERT_LE(std::fabs(out[r][i] - exact), AllReduceBound(spec, in, max_abs, g, exact, false))
          << weftCodecName(c) << " rank " << r << " i=" << i;
    }
}

TEST(CompressedReduceScatter, WithinBound) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecBf16, weftCodecInt4}) CheckReduceScatter(c);
}


void CheckAllGather(weftCodec_t c) {
  const int n = 3;
  const size_t count = 500;
  const weftCompression spec = Spec(c);
  std::vector<std::vector<float>> in(n), out(n);
  for (int q = 0; q < n; ++q) in[q] = Contribution(q, count, weftFloat32);
  const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    out[rank].assign(count * n, 0);
    if (weftAllGatherCompressed(in[rank].data(), out[rank].data(), count, weftFloat32, &spec,
                                nullptr, comm, nullptr) != weftSuccess)
      return weft::compress::LastCompressionError();
    return "";
  });
  ASSERT_EQ(failure, "");
  for (int r = 1; r < n; ++r) ASSERT_EQ(out[0], out[r]) << weftCodecName(c);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) {
      const std::vector<std::vector<float>> one = {in[q]};
      ASSERT_LE(std::fabs(out[0][q * count + i] - in[q][i]), AllReduceBound(spec, one, MaxAbs(one), i, 0, false))
          << weftCodecName(c) << " block " << q << " i=" << i;
    }
}

TEST(CompressedAllGather, IdenticalEverywhereAndWithinBound) {
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E5M2, weftCodecSign1, weftCodecTopK}) CheckAllGather(c);
}

// bf16 values without a residual run the schedule on the bf16 buffers (no float32 staging):
// the float32 call's bits on the widened values, rounded to bf16, in place too; float32 and
// bf16 calls alternate on one communicator (their schedules' encoded regions differ).
TEST(CompressedAllGather, Bf16EqualsTheFloat32CallRounded) {
  const int n = 3;
  const size_t count = 301;
  for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecBf16, weftCodecTopK})
    for (bool in_place : {false, true}) {
      const weftCompression spec = Spec(c, 0, 0.1f);
      std::vector<std::vector<float>> out32(n);
      std::vector<std::vector<uint16_t>> out16(n);
      const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
        const std::vector<float> values = Contribution(rank, count, weftBfloat16, 3);
        std::vector<uint16_t> in16(count);
        for (size_t i = 0; i < count; ++i) in16[i] = weft::FloatToBfloat16(values[i]);
        out32[rank].assign(count * n, 0.0f);
        out16[rank].assign(count * n, 0);
        if (in_place) {
          std::copy(values.begin(), values.end(), out32[rank].begin() + rank * count);
          std::copy(in16.begin(), in16.end(), out16[rank].begin() + rank * count);
        }
        const void* send32 = in_place ? out32[rank].data() + rank * count : values.data();
        const void* send16 = in_place ? out16[rank].data() + rank * count : in16.data();
        if (weftAllGatherCompressed(send32, out32[rank].data(), count, weftFloat32, &spec, nullptr,
                                    comm, nullptr) != weftSuccess ||
            weftAllGatherCompressed(send16, out16[rank].data(), count, weftBfloat16, &spec, nullptr,
                                    comm, nullptr) != weftSuccess)
          return weft::compress::LastCompressionError();
        return "";
      });
      ASSERT_EQ(failure, "") << weftCodecName(c);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count * n; ++i)
          ASSERT_EQ(out16[r][i], weft::FloatToBfloat16(out32[r][i]))
              << weftCodecName(c) << (in_place ? " in place" : "") << " rank " << r << " i=" << i;
    }
}


// One rank's all-to-allv tables for counts[p][q] (elements rank p sends to rank q): send
// blocks back to back, received blocks `gap` elements apart (and after a first gap).
struct RankTables {
  std::vector<size_t> sc, sd, rc, rd;
  size_t send_total = 0, recv_total = 0;
};
RankTables TablesOf(const std::vector<std::vector<size_t>>& counts, int rank, size_t gap) {
  const int n = static_cast<int>(counts.size());
  RankTables t;
  t.recv_total = gap;
  for (int q = 0; q < n; ++q) {
    t.sc.push_back(counts[rank][q]);
    t.sd.push_back(t.send_total);
    t.send_total += counts[rank][q];
    t.rc.push_back(counts[q][rank]);
    t.rd.push_back(t.recv_total);
    t.recv_total += counts[q][rank] + gap;
  }
  return t;
}

// counts[p][q]: elements rank p sends to rank q (zeros and partial blocks included).
void CheckFp8DispatchOfUnevenBlocks(const std::vector<std::vector<size_t>>& counts =
                                        {{256, 0, 300}, {128, 129, 1}, {0, 384, 17}}) {
  const int n = static_cast<int>(counts.size());
  const weftCompression spec = Spec(weftCodecFp8E4M3);
  std::vector<std::vector<float>> in(n), out(n);
  const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    const RankTables t = TablesOf(counts, rank, 0);
    in[rank] = Contribution(rank, t.send_total, weftFloat32);
    out[rank].assign(t.recv_total, -1.0f);
    if (weftAllToAllvCompressed(in[rank].data(), t.sc.data(), t.sd.data(), out[rank].data(),
                                t.rc.data(), t.rd.data(), weftFloat32, &spec, comm, nullptr) != weftSuccess)
      return weft::compress::LastCompressionError();
    return "";
  });
  ASSERT_EQ(failure, "");
  for (int r = 0; r < n; ++r) {
    size_t offset = 0;
    for (int q = 0; q < n; ++q) {
      size_t send_offset = 0;
      for (int p = 0; p < r; ++p) send_offset += counts[q][p];
      const std::vector<float> block(in[q].begin() + send_offset, in[q].begin() + send_offset + counts[q][r]);
      double absmax = 0;
      for (float v : block) absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
      for (size_t i = 0; i < counts[q][r]; ++i)
        ASSERT_LE(std::fabs(out[r][offset + i] - block[i]),
                  std::ldexp(std::fabs(block[i]), -4) * 1.001 + std::ldexp(absmax, -17))
            << "from " << q << " to " << r << " i=" << i;
      offset += counts[q][r];
    }
  }
}

TEST(CompressedAllToAll, Fp8DispatchOfUnevenBlocks) {
  CheckFp8DispatchOfUnevenBlocks();
}

// WEFT_COMPRESSION_CHUNK_BYTES cuts every compressed collective into pipelined pieces (128
// values here: 3-8 pieces per call, none a multiple of a codec block): still within the bounds,
// identical on every rank, and the residuals still hold exactly what was dropped.
TEST(CompressedCollectives, PipelinedPiecesOnEveryCollective) {
  struct ChunkSetting {
    ChunkSetting() { setenv("WEFT_COMPRESSION_CHUNK_BYTES", "512", 1); }
    ~ChunkSetting() { unsetenv("WEFT_COMPRESSION_CHUNK_BYTES"); }
  } chunk;
  ASSERT_EQ(weft::compress::CompressionChunkElems(), 128u);
  for (weftCodec_t c : {weftCodecInt8, weftCodecSign1, weftCodecTopK}) {
    CheckAllReduce(3, 1000, weftFloat32, weftSum, Spec(c));
    CheckAllReduce(4, 1000, weftFloat32, weftAvg, Spec(c), /*in_place=*/true, "2,2");
  }
  CheckResidualsHoldWhatWasDropped(0, 1003);
  CheckResidualsHoldWhatWasDropped(WEFT_COMPRESS_FLAT, 1003);
  CheckReduceScatter(weftCodecInt8);
  CheckAllGather(weftCodecFp8E5M2);
  CheckFp8DispatchOfUnevenBlocks();
  // Ranks that send and receive very different amounts (a hot expert): sender and receiver
  // cut each block alike, by its own count (a rule over the table part each rank holds cut
  // 20 pieces on rank 0 and one on rank 1, and the call failed).
  CheckFp8DispatchOfUnevenBlocks({{3000, 5, 900}, {5, 5, 5}, {700, 5, 2}});
}

TEST(CompressedCollectives, ChunkSettingZeroIsOnePieceAndAutoIsTheRule) {
  setenv("WEFT_COMPRESSION_CHUNK_BYTES", "0", 1);
  EXPECT_EQ(weft::compress::CompressionChunkElems(), SIZE_MAX);
  setenv("WEFT_COMPRESSION_CHUNK_BYTES", "auto", 1);
  EXPECT_EQ(weft::compress::CompressionChunkElems(), 0u);
  setenv("WEFT_COMPRESSION_CHUNK_BYTES", "1M", 1);
  EXPECT_EQ(weft::compress::CompressionChunkElems(), size_t{1} << 18);
  unsetenv("WEFT_COMPRESSION_CHUNK_BYTES");
  EXPECT_EQ(weft::compress::CompressionChunkElems(), 0u);
}

TEST(CompressedAllToAll, EqualBlocksBf16) {
  const int n = 2;
  const size_t count = 100;
  const weftCompression spec = Spec(weftCodecBf16);
  std::vector<std::vector<float>> in(n), out(n);
  for (int q = 0; q < n; ++q) in[q] = Contribution(q, count * n, weftFloat32);
  const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    out[rank].assign(count * n, 0);
    return weftAllToAllCompressed(in[rank].data(), out[rank].data(), count, weftFloat32, &spec,
                                  comm, nullptr) == weftSuccess ? "" : weft::compress::LastCompressionError();
  });
  ASSERT_EQ(failure, "");
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i) {
        const float sent = in[q][r * count + i];
        EXPECT_EQ(out[r][q * count + i], weft::Bfloat16ToFloat(weft::FloatToBfloat16(sent)));
      }
}

// The all-to-all runs its proved schedule (alltoallv_compressed.cc) with the composition's
// encodings: each block is codec::Encode(block, stream rank << 32 | destination) decoded once,
// bit for bit, stochastic rounding included; in place too, and for bf16 buffers.
TEST(CompressedAllToAll, BitsOfEachBlockEncodedOnceAndInPlace) {
  const int n = 3;
  const size_t count = 300;
  for (const weftCompression& spec : {Spec(weftCodecFp8E4M3), Spec(weftCodecInt8, WEFT_COMPRESS_STOCHASTIC)})
    for (bool in_place : {false, true}) {
      std::vector<std::vector<float>> in(n), out(n);
      for (int q = 0; q < n; ++q) in[q] = Contribution(q, count * n, weftFloat32, 7);
      const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
        out[rank] = in_place ? in[rank] : std::vector<float>(count * n, 0.0f);
        const float* send = in_place ? out[rank].data() : in[rank].data();
        if (weftAllToAllCompressed(send, out[rank].data(), count, weftFloat32, &spec, comm, nullptr) != weftSuccess)
          return weft::compress::LastCompressionError();
        const char* algorithm = nullptr;
        weftCommGetLastAlgorithm(comm, &algorithm);
        return std::string(algorithm) == "compressed" ? "" : std::string("ran ") + algorithm;
      });
      ASSERT_EQ(failure, "");
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q) {
          std::vector<uint8_t> bytes(weft::codec::EncodedBytes(spec, count));
          std::vector<float> want(count);
          weft::codec::Encode(spec, in[q].data() + r * count, count, bytes.data(),
                              (static_cast<uint64_t>(q) << 32) | static_cast<uint32_t>(r));
          weft::codec::Decode(spec, bytes.data(), count, want.data());
          EXPECT_EQ(std::memcmp(out[r].data() + q * count, want.data(), count * 4), 0)
              << weftCodecName(spec.codec) << (in_place ? " in place" : "") << ": block " << q
              << " -> " << r;
        }
    }
  // bf16 buffers: widened, encoded, decoded, rounded back.
  const weftCompression spec = Spec(weftCodecFp8E4M3);
  std::vector<std::vector<uint16_t>> in(n), out(n);
  for (int q = 0; q < n; ++q) {
    const std::vector<float> v = Contribution(q, count * n, weftFloat32, 9);
    for (float x : v) in[q].push_back(weft::FloatToBfloat16(x));
  }
  const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    out[rank].assign(count * n, 0);
    return weftAllToAllCompressed(in[rank].data(), out[rank].data(), count, weftBfloat16, &spec,
                                  comm, nullptr) == weftSuccess ? "" : weft::compress::LastCompressionError();
  });
  ASSERT_EQ(failure, "");
  for (int q = 0; q < n; ++q) {
    std::vector<float> block(count), want(count);
    for (size_t i = 0; i < count; ++i) block[i] = weft::Bfloat16ToFloat(in[q][count + i]);
    std::vector<uint8_t> bytes(weft::codec::EncodedBytes(spec, count));
    weft::codec::Encode(spec, block.data(), count, bytes.data(), (static_cast<uint64_t>(q) << 32) | 1u);
    weft::codec::Decode(spec, bytes.data(), count, want.data());
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[1][q * count + i], weft::FloatToBfloat16(want[i])) << "block " << q << " i=" << i;
  }
}

// bf16 tokens run the schedule on the bf16 buffers themselves (no float32 staging): the bits
// are the float32 call's on the widened tokens, rounded to bf16, for every codec, uneven and
// empty blocks, pieces that split blocks (WEFT_COMPRESSION_CHUNK_BYTES) or not; the gaps
// between received blocks stay the caller's. float32 and bf16 calls of the same shape
// alternate on one communicator (their schedules differ: encoded regions count 4- or 2-byte
// elements), and float16 is refused by name.
std::string RunBf16AndFloat32AllToAllv(int n, const std::vector<std::vector<size_t>>& counts,
                                       const weftCompression& spec) {
  std::vector<std::vector<float>> out32(n);
  std::vector<std::vector<uint16_t>> in16(n), out16(n);
  std::vector<std::vector<bool>> gap(n);
  const std::string failure = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    const RankTables t = TablesOf(counts, rank, 1);  // a gap around every received block
    const size_t st = t.send_total, rt = t.recv_total;
    const std::vector<float> values = Contribution(rank, st, weftFloat32, 5);
    std::vector<float> in32(st);
    for (size_t i = 0; i < st; ++i) {
      in16[rank].push_back(weft::FloatToBfloat16(values[i]));
      in32[i] = weft::Bfloat16ToFloat(in16[rank][i]);
    }
    out32[rank].assign(rt, -1.0f);
    out16[rank].assign(rt, 0xBEEF);
    gap[rank].assign(rt, true);
    for (int q = 0; q < n; ++q) std::fill_n(gap[rank].begin() + t.rd[q], t.rc[q], false);
    // Alternating on one communicator: a bf16 call given the float32 call's schedule (a
    // schedule cache blind to the element size) fails, its encoded regions too small.
    for (int round = 0; round < 2; ++round) {
      if (weftAllToAllvCompressed(in32.data(), t.sc.data(), t.sd.data(), out32[rank].data(),
                                  t.rc.data(), t.rd.data(), weftFloat32, &spec, comm,
                                  nullptr) != weftSuccess ||
          weftAllToAllvCompressed(in16[rank].data(), t.sc.data(), t.sd.data(), out16[rank].data(),
                                  t.rc.data(), t.rd.data(), weftBfloat16, &spec, comm,
                                  nullptr) != weftSuccess)
        return weft::compress::LastCompressionError();
    }
    std::vector<uint16_t> half(st);
    if (weftAllToAllvCompressed(half.data(), t.sc.data(), t.sd.data(), half.data(), t.rc.data(),
                                t.rd.data(), weftFloat16, &spec, comm,
                                nullptr) != weftInvalidArgument ||
        std::string(weft::compress::LastCompressionError()).find("datatype=6") == std::string::npos)
      return std::string("float16 not refused by name: ") + weft::compress::LastCompressionError();
    return "";
  });
  if (!failure.empty()) return failure;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < out32[r].size(); ++i) {
      const uint16_t want = gap[r][i] ? 0xBEEF : weft::FloatToBfloat16(out32[r][i]);
      if (out16[r][i] != want)
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": bf16 " +
               std::to_string(out16[r][i]) + ", float32 rounded " + std::to_string(want);
    }
  return "";
}

TEST(CompressedAllToAll, Bf16TokensEqualTheFloat32CallRoundedForEveryCodec) {
  const std::vector<std::vector<size_t>> counts = {{130, 0, 257}, {5, 1, 300}, {700, 129, 3}};
  const weftCodec_t codecs[] = {weftCodecBf16,  weftCodecFp16, weftCodecFp8E4M3, weftCodecFp8E5M2,
                                weftCodecInt8,  weftCodecInt4, weftCodecSign1,   weftCodecTopK};
  for (weftCodec_t c : codecs)
    EXPECT_EQ(RunBf16AndFloat32AllToAllv(3, counts, Spec(c, 0, 0.1f)), "") << weftCodecName(c);
  EXPECT_EQ(RunBf16AndFloat32AllToAllv(3, counts, Spec(weftCodecInt8, WEFT_COMPRESS_STOCHASTIC)), "");
  setenv("WEFT_COMPRESSION_CHUNK_BYTES", "400", 1);  // 100 values a piece: blocks split
  EXPECT_EQ(RunBf16AndFloat32AllToAllv(3, counts, Spec(weftCodecFp8E4M3)), "") << "pieces";
  EXPECT_EQ(RunBf16AndFloat32AllToAllv(3, counts, Spec(weftCodecTopK, 0, 0.1f)), "") << "pieces";
  unsetenv("WEFT_COMPRESSION_CHUNK_BYTES");
}

// ---- bad arguments, streams ----

TEST(CompressedCollectives, BadSpecsFailWithTheArgumentNamed) {
  const std::string failure = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> buf(64, 1.0f);
    struct Case {
      weftCompression spec;
      weftDataType_t dtype;
      weftRedOp_t op;
      const char* expect;
    };
    weftCompression unknown = Spec(weftCodecInt8), zero_block = Spec(weftCodecInt8),
                    zero_ratio = Spec(weftCodecTopK), big_ratio = Spec(weftCodecTopK);
    unknown.codec = static_cast<weftCodec_t>(42);
    zero_block.block = 0;
    zero_ratio.ratio = 0.0f;
    big_ratio.ratio = 1.5f;
    const Case cases[] = {
        {unknown, weftFloat32, weftSum, "spec->codec=42"},
        {zero_block, weftFloat32, weftSum, "spec->block=0"},
        {zero_ratio, weftFloat32, weftSum, "spec->ratio=0"},
        {big_ratio, weftFloat32, weftSum, "spec->ratio=1.5"},
        {Spec(weftCodecInt8), weftInt32, weftSum, "datatype=2"},
        {Spec(weftCodecInt8), weftFloat64, weftSum, "datatype=8"},
        {Spec(weftCodecInt8), weftFloat32, weftMax, "op=2"},
    };
    for (const Case& c : cases) {
      const weftResult_t r = weftAllReduceCompressed(buf.data(), buf.data(), buf.size(), c.dtype,
                                                     c.op, &c.spec, nullptr, comm, nullptr);
      const std::string message = weft::compress::LastCompressionError();
      if (r != weftInvalidArgument) return std::string(c.expect) + ": not weftInvalidArgument";
      if (message.find(c.expect) == std::string::npos || message.find("weftAllReduceCompressed") == std::string::npos)
        return std::string(c.expect) + ": message was '" + message + "'";
      if (std::string(weftGetLastError(comm)) != message)
        return "weftGetLastError does not carry the message";
    }
    if (weftAllReduceCompressed(buf.data(), buf.data(), 64, weftFloat32, weftSum, nullptr, nullptr,
                                comm, nullptr) != weftInvalidArgument)
      return "NULL spec accepted";
    if (weftAllGatherCompressed(buf.data(), nullptr, 8, weftFloat32, &cases[1].spec, nullptr, comm,
                                nullptr) != weftInvalidArgument)
      return "allgather with block 0 accepted";
    // After all these refusals the communicator still works (nothing was half-started).
    const weftCompression ok = Spec(weftCodecInt8);
    if (weftAllReduceCompressed(buf.data(), buf.data(), 64, weftFloat32, weftSum, &ok, nullptr,
                                comm, nullptr) != weftSuccess)
      return weft::compress::LastCompressionError();
    return "";
  });
  EXPECT_EQ(failure, "");
}

TEST(CompressedCollectives, HostStreamRunsInOrder) {
  const std::string failure = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    weftStream_t stream;
    if (weftStreamCreate(&stream) != weftSuccess) return "stream";
    std::vector<float> a(1000, 1.0f + rank), b(1000, 0.0f);
    // Plain allreduce enqueued first; the compressed one must see its result (in place).
    if (weftAllReduce(a.data(), a.data(), a.size(), weftFloat32, weftSum, comm, stream) != weftSuccess) return "enqueue";
    const weftCompression spec = Spec(weftCodecBf16);
    if (weftAllReduceCompressed(a.data(), b.data(), a.size(), weftFloat32, weftSum, &spec, nullptr,
                                comm, stream) != weftSuccess)
      return weft::compress::LastCompressionError();
    weftStreamSynchronize(stream);
    weftStreamDestroy(stream);
    for (float v : b)
      if (v != 6.0f) return "expected 2 x (1 + 2) = 6, got " + std::to_string(v);
    return "";
  });
  EXPECT_EQ(failure, "");
}

TEST(CompressedCollectives, OnAHostStreamTheCallQueuesAndReturns) {
  // Rank 0 queues a plain allreduce and then compressed calls on its stream; rank 1 joins the
  // plain allreduce only once rank 0's compressed calls have returned. A compressed call that
  // waited for the stream (instead of queueing) would wait for rank 1, which waits for it.
  std::atomic<bool> rank0_returned{false};
  const std::string failure = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    weftStream_t stream;
    if (weftStreamCreate(&stream) != weftSuccess) return "stream";
    std::vector<float> a(1000, 1.0f + rank), b(1000, 0.0f), c(2 * 300, 0.0f);
    std::vector<float> d(2 * 300);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(rank * 1000 + i);
    const weftCompression spec = Spec(weftCodecBf16);
    if (rank == 1) {
      for (int i = 0; i < 1000 && !rank0_returned.load(); ++i) usleep(10000);
      if (!rank0_returned.load()) return "rank 0's compressed calls did not return while its stream waited";
    }
    if (weftAllReduce(a.data(), a.data(), a.size(), weftFloat32, weftSum, comm, stream) != weftSuccess) return "enqueue";
    if (weftAllReduceCompressed(a.data(), b.data(), a.size(), weftFloat32, weftSum, &spec, nullptr,
                                comm, stream) != weftSuccess)
      return weft::compress::LastCompressionError();
    // weftAllToAllCompressed builds its count tables on its own stack: the queued call must
    // not read them after it returned.
    if (weftAllToAllCompressed(d.data(), c.data(), 300, weftFloat32, &spec, comm, stream) != weftSuccess)
      return weft::compress::LastCompressionError();
    if (rank == 0) rank0_returned.store(true);
    if (weftStreamSynchronize(stream) != weftSuccess) return std::string("sync: ") + weftGetLastError(comm);
    weftStreamDestroy(stream);
    for (float v : b)
      if (v != 6.0f) return "allreduce: expected 2 x (1 + 2) = 6, got " + std::to_string(v);
    for (int q = 0; q < 2; ++q)
      for (size_t i = 0; i < 300; ++i) {
        const float want = static_cast<float>(q * 1000 + rank * 300 + i);  // bf16: within 2^-8 relative
        const float got = c[q * 300 + i];
        if (std::fabs(got - want) > std::fabs(want) / 128 + 1e-6f)
          return "alltoall block " + std::to_string(q) + "[" + std::to_string(i) + "]: expected " +
                 std::to_string(want) + ", got " + std::to_string(got);
      }
    return "";
  });
  EXPECT_EQ(failure, "");
}

// ---- WEFT_COMPRESSION ----

TEST(JobWideCompression, SettingsAndTheHookFunction) {
  setenv("WEFT_COMPRESSION", "int3", 1);
  weft::compress::JobWideSettings s = weft::compress::ReadJobWideSettings();
  EXPECT_TRUE(s.enabled);
  EXPECT_NE(s.parse_error.message().find("WEFT_COMPRESSION=int3"), std::string::npos) << s.parse_error.message();
  setenv("WEFT_COMPRESSION", "int8", 1);
  setenv("WEFT_COMPRESSION_MIN_BYTES", "4096", 1);
  setenv("WEFT_COMPRESSION", "int4:block=64,always", 1);
  s = weft::compress::ReadJobWideSettings();
  EXPECT_TRUE(s.parse_error.ok()) << s.parse_error.message();
  EXPECT_TRUE(s.always);
  EXPECT_EQ(s.spec.codec, weftCodecInt4);
  EXPECT_EQ(s.spec.block, 64u);
  setenv("WEFT_COMPRESSION", "int8", 1);
  s = weft::compress::ReadJobWideSettings();
  EXPECT_TRUE(s.parse_error.ok()) << s.parse_error.message();
  EXPECT_FALSE(s.always);
  EXPECT_EQ(s.spec.codec, weftCodecInt8);
  EXPECT_EQ(s.min_bytes, 4096u);
  // The function weftAllReduce would call: applies to large float sums, not to the rest, and
  // keeps a residual per buffer (so the running mean converges without the caller's help).
  const std::string failure = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> in(4096), out(4096);
    for (size_t i = 0; i < in.size(); ++i) in[i] = Input(rank, i);
    weft::Status st;
    std::vector<int32_t> ints(4096, 1);
    if (weft::compress::MaybeRunJobWideCompression(s, ints.data(), ints.data(), ints.size(), weftInt32,
                                                   weftSum, comm, nullptr, &st))
      return "int32 must stay uncompressed";
    if (weft::compress::MaybeRunJobWideCompression(s, in.data(), out.data(), 100, weftFloat32,
                                                   weftSum, comm, nullptr, &st))
      return "below WEFT_COMPRESSION_MIN_BYTES must stay uncompressed";
    // One host (threads of one process): compression never pays; "always" overrides that.
    if (weft::compress::MaybeRunJobWideCompression(s, in.data(), out.data(), in.size(),
                                                   weftFloat32, weftSum, comm, nullptr, &st))
      return "compressed on one host";
    weft::compress::JobWideSettings always = s;
    always.always = true;
    std::vector<double> mean(in.size(), 0.0);
    double first_error = 0, norm = 0, mean_error = 0;
    for (int k = 0; k < 20; ++k) {
      if (!weft::compress::MaybeRunJobWideCompression(always, in.data(), out.data(), in.size(),
                                                      weftFloat32, weftSum, comm, nullptr, &st))
        return "large float32 sum not compressed";
      if (!st.ok()) return st.message();
      for (size_t i = 0; i < in.size(); ++i) {
        mean[i] += out[i] / 20.0;
        const double exact = static_cast<double>(Input(0, i)) + Input(1, i);
        if (k == 0) first_error += (out[i] - exact) * (out[i] - exact);
        if (k == 0) norm += exact * exact;
      }
    }
    for (size_t i = 0; i < in.size(); ++i) {
      const double exact = static_cast<double>(Input(0, i)) + Input(1, i);
      mean_error += (mean[i] - exact) * (mean[i] - exact);
    }
    first_error = std::sqrt(first_error / norm);
    mean_error = std::sqrt(mean_error / norm);
    if (!(first_error > 0) || mean_error > first_error / 5)
      return "no feedback kept per buffer: one call " + std::to_string(first_error) +
             ", mean of 20 " + std::to_string(mean_error);
    return "";
  });
  EXPECT_EQ(failure, "");
  unsetenv("WEFT_COMPRESSION");
  unsetenv("WEFT_COMPRESSION_MIN_BYTES");
}

// WEFT_COMPRESSION's residuals are weft's own, so the hierarchical allreduce knows they are
// zero outside its lanes (zero everywhere when new, and as the last call left them) and never
// reads them to check (KnownResidual); a caller's residual is checked every call. Both give
// the same bits call after call on 2,2 and 3,1 hosts (the feedback of each call feeds the next).
TEST(JobWideCompression, OwnResidualsAreNotCheckedAndGiveTheCallersBits) {
  weft::compress::JobWideSettings s;
  s.enabled = true;
  s.always = true;
  s.spec = Spec(weftCodecInt4);
  s.min_bytes = 0;
  const size_t count = 70001;
  for (const char* hosts : {"2,2", "3,1"}) {
    SCOPED_TRACE(hosts);
    const std::string failure = RunRanksOnHosts(hosts, 4, [&](weftComm_t comm, int rank) -> std::string {
      std::vector<float> own(count), theirs(count), residual(count, 0.0f);
      for (int call = 0; call < 3; ++call) {
        const std::vector<float> in = Contribution(rank + 7 * call, count, weftFloat32, 3);
        const size_t before = weft::compress::ResidualZeroChecksOnThisThread();
        weft::Status st;
        if (!weft::compress::MaybeRunJobWideCompression(s, in.data(), own.data(), count, weftFloat32,
                                                        weftSum, comm, nullptr, &st) || !st.ok())
          return "job-wide call " + std::to_string(call) + ": " + st.message();
        const size_t job_wide_checks = weft::compress::ResidualZeroChecksOnThisThread() - before;
        if (weftAllReduceCompressed(in.data(), theirs.data(), count, weftFloat32, weftSum, &s.spec,
                                    residual.data(), comm, nullptr) != weftSuccess)
          return weft::compress::LastCompressionError();
        const size_t caller_checks = weft::compress::ResidualZeroChecksOnThisThread() - before - job_wide_checks;
        if (job_wide_checks != 0) return "call " + std::to_string(call) + ": weft's own residual read to check it";
        if (caller_checks != 1) return "call " + std::to_string(call) + ": the caller's residual not checked";
        if (std::memcmp(own.data(), theirs.data(), count * sizeof(float)) != 0)
          return "call " + std::to_string(call) + ": the job-wide result differs from the caller-residual one";
      }
      return "";
    });
    EXPECT_EQ(failure, "");
  }
}

// WEFT_COMPRESSION on the public weftAllReduce, launched by tests/job_wide_pipeline.cmake with
// WEFT_COMPRESSION=int8:always (the setting is read once per process): the call is checked
// first, as any weftAllReduce (a bad one fails naming weftAllReduce and its argument, not the
// compressed path), a count of 0 runs nothing, and a valid call runs compressed through the
// communicator's pipeline (algorithm named, result within int8's bound, identical bits).
TEST(JobWideCompression, DISABLED_AfterTheArgumentChecks) {
  const char* setting = std::getenv("WEFT_COMPRESSION");
  ASSERT_TRUE(setting != nullptr && std::string(setting) == "int8:always")
      << "run through ctest (tests/job_wide_pipeline.cmake), which sets WEFT_COMPRESSION";
  std::vector<float> buf(4096, 1.0f);
  EXPECT_EQ(weftAllReduce(buf.data(), buf.data(), buf.size(), weftFloat32, weftSum, nullptr, nullptr),
            weftInvalidArgument);
  std::string error = weftGetLastError(nullptr);
  EXPECT_NE(error.find("weftAllReduce"), std::string::npos) << error;
  EXPECT_EQ(error.find("WEFT_COMPRESSION"), std::string::npos) << "checked after compression: " << error;
  const std::string failure = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> in(4096), out(4096, 0.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = Input(rank, i);
    if (weftAllReduce(nullptr, out.data(), in.size(), weftFloat32, weftSum, comm, nullptr) != weftInvalidArgument)
      return "NULL sendbuff accepted";
    const std::string null_error = weftGetLastError(comm);
    if (null_error.find("sendbuff") == std::string::npos || null_error.find("WEFT_COMPRESSION") != std::string::npos)
      return "NULL sendbuff: " + null_error;
    const char* algorithm = nullptr;
    if (weftAllReduce(in.data(), out.data(), 0, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return "count 0 failed";
    weftCommGetLastAlgorithm(comm, &algorithm);
    if (std::string(algorithm) != "") return std::string("count 0 ran ") + algorithm;
    if (weftAllReduce(in.data(), out.data(), in.size(), weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return std::string("compressed call failed: ") + weftGetLastError(comm);
    weftCommGetLastAlgorithm(comm, &algorithm);
    if (std::string(algorithm).find("compressed") == std::string::npos)
      return std::string("not compressed: ") + algorithm;
    double max_abs = 0;
    for (size_t i = 0; i < in.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(Input(0, i)) + Input(1, i)));
    for (size_t i = 0; i < in.size(); ++i) {
      const double exact = static_cast<double>(Input(0, i)) + Input(1, i);
      if (std::fabs(out[i] - exact) > max_abs / 50) return "element " + std::to_string(i) + " off";
    }
    return "";
  });
  EXPECT_EQ(failure, "");
}

// ---- processes ----

// The worker: one rank of a compressed int8 allreduce over processes; prints a checksum of
// the result bits so the launcher can compare ranks. Runs only when launched below.
// What both process workers start with: this rank joins the job (weftCommInitFromEnv) and runs
// an allreduce compressed with `codec` (int8 unless told), with a residual, of every rank's
// Contribution.
struct WorkerRun {
  weftComm_t comm = nullptr;
  int n = 0, rank = 0;
  weftCompression spec{};
  std::vector<std::vector<float>> in;
  std::vector<float> out, residual;
};

void RunWorker(size_t count, WorkerRun* w, weftCodec_t codec = weftCodecInt8) {
  ASSERT_EQ(weftCommInitFromEnv(&w->comm), weftSuccess) << weftGetLastError(nullptr);
  weftCommCount(w->comm, &w->n);
  weftCommUserRank(w->comm, &w->rank);
  w->spec = Spec(codec);
  w->in.resize(w->n);
  for (int q = 0; q < w->n; ++q) w->in[q] = Contribution(q, count, weftFloat32);
  w->out.assign(count, 0.0f);
  w->residual.assign(count, 0.0f);
  ASSERT_EQ(weftAllReduceCompressed(w->in[w->rank].data(), w->out.data(), count, weftFloat32, weftSum,
                                    &w->spec, w->residual.data(), w->comm, nullptr), weftSuccess)
      << weft::compress::LastCompressionError();
}

TEST(CompressedProcesses, DISABLED_Worker) {
  const size_t count = 100003;
  WorkerRun w;
  ASSERT_NO_FATAL_FAILURE(RunWorker(count, &w));
  const int n = w.n;
  const weftCompression& spec = w.spec;
  const std::vector<std::vector<float>>& in = w.in;
  const std::vector<float>& out = w.out;
  weftComm_t comm = w.comm;
  uint64_t checksum = 1469598103934665603ull;
  const std::vector<double> max_abs = MaxAbs(in);
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int q = 0; q < n; ++q) exact += in[q][i];
    ASSERT_LE(std::fabs(out[i] - exact), AllReduceBound(spec, in, max_abs, i, exact, true)) << "i=" << i;
    checksum = (checksum ^ weft::FloatBits(out[i])) * 1099511628211ull;
  }
  std::printf("CHECKSUM %llx\n", static_cast<unsigned long long>(checksum));
  weftCommDestroy(comm);
}

// The workers of tests/netns_compress.cmake: 2 hosts x L ranks in network namespaces (shm
// inside, TCP across). The compressed allreduce must take the hierarchical placement (its
// schedule is the last algorithm the communicator ran), stream what the host reduce receives
// (hosts of two: the lane into the chain; of three and more: the lanes into its operands),
// stay within int8's bound for host sums, give every rank the same bits (compared through an
// allgather of checksums) and keep in the residuals what it dropped.
void HierarchicalWorker(size_t count, weftCodec_t codec = weftCodecInt8) {
  WorkerRun w;
  ASSERT_NO_FATAL_FAILURE(RunWorker(count, &w, codec));
  ASSERT_TRUE(w.n >= 4 && w.n % 2 == 0) << "run as 2 hosts x L ranks (perf/netns/run.sh)";
  const int n = w.n, rank = w.rank, per_host = n / 2;
  const weftCompression& spec = w.spec;
  const std::vector<std::vector<float>>& in = w.in;
  const std::vector<float>& out = w.out;
  const std::vector<float>& residual = w.residual;
  weftComm_t comm = w.comm;
  const char* algorithm = nullptr;
  ASSERT_EQ(weftCommGetLastAlgorithm(comm, &algorithm), weftSuccess);
  EXPECT_STREQ(algorithm, "compressed_hierarchical") << "the hierarchical placement was not taken";
  // Each lane owner receives its members' lanes over shm straight into its codec chain.
  if (weft::StreamedChainsEnabled() && per_host == 2)
    EXPECT_GT(weft::StreamedChainsStarted(), 0u) << "no receive streamed into a chain";
  if (weft::StreamedChainsEnabled() && weft::OperandStreamsEnabled() && per_host > 2)
    EXPECT_GT(weft::OperandStreamsStarted(), 0u) << "no receives streamed into a chain's operands";
  const std::string groups = std::to_string(per_host) + "," + std::to_string(per_host);  // run.sh: r = L h + l
  const std::vector<std::vector<float>> sums = EncodedContributions(in, groups.c_str());
  const std::vector<double> max_abs = MaxAbs(sums);
  uint64_t checksum = 1469598103934665603ull;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0, magnitude = 0;
    for (int q = 0; q < n; ++q) exact += in[q][i], magnitude += std::fabs(in[q][i]);
    ASSERT_LE(std::fabs(out[i] - exact), AllReduceBound(spec, sums, max_abs, i, exact, true) + 1e-6 * magnitude)
        << "i=" << i;
    checksum = (checksum ^ weft::FloatBits(out[i])) * 1099511628211ull;
  }
  std::vector<uint64_t> all(n);
  ASSERT_EQ(weftAllGather(&checksum, all.data(), 1, weftUint64, comm, nullptr), weftSuccess);
  for (int q = 0; q < n; ++q) EXPECT_EQ(all[q], checksum) << "rank " << q << " has other bits";
  // Every rank's residual, summed with the result, is the exact sum.
  std::vector<float> residuals(count);
  ASSERT_EQ(weftAllReduce(residual.data(), residuals.data(), count, weftFloat32, weftSum, comm, nullptr),
            weftSuccess);
  for (size_t i = 0; i < count; ++i) {
    double exact = 0, magnitude = std::fabs(residuals[i]);
    for (int q = 0; q < n; ++q) exact += in[q][i], magnitude += std::fabs(in[q][i]);
    ASSERT_LE(std::fabs(out[i] + residuals[i] - exact), 1e-5 * magnitude) << "i=" << i;
  }
  std::printf("HIERARCHICAL OK rank %d checksum %llx\n", rank, static_cast<unsigned long long>(checksum));
  weft::compress::ReleaseCommunicator(comm);
  weftCommDestroy(comm);
}

TEST(CompressedProcesses, DISABLED_HierarchicalWorker) { HierarchicalWorker(100003); }
// Lanes of ~1 MiB: the single-copy path (the ring's below 256 KiB), two pieces.
TEST(CompressedProcesses, DISABLED_HierarchicalWorkerLargeLanes) { HierarchicalWorker(800003); }
// Top-k 1%: on hosts of 3+ its host reduce is a built chain (P in tiles, each encode whole).
TEST(CompressedProcesses, DISABLED_HierarchicalWorkerLargeLanesTopK) { HierarchicalWorker(800003, weftCodecTopK); }

std::string ChecksumLine(const std::string& output) {
  const size_t at = output.find("CHECKSUM ");
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

TEST(CompressedProcesses, AllReduceIdenticalAcrossProcesses) {
  const int n = 3;
  // WEFT_TIMEOUT bounds every collective, so a broken worker exits rather than hangs.
  const weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      n, {"/proc/self/exe", "--gtest_filter=CompressedProcesses.DISABLED_Worker",
          "--gtest_also_run_disabled_tests"},
      {{"WEFT_TIMEOUT", "60"}}, 120);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
    ASSERT_NE(ChecksumLine(o.output[r]), "") << "rank " << r << ":\n" << o.output[r];
    EXPECT_EQ(ChecksumLine(o.output[0]), ChecksumLine(o.output[r])) << "rank " << r;
  }
}

// The worker for WEFT_COMPRESSION: a plain weftAllReduce of a large float32 sum. Prints
// EXACT when every element equals the uncompressed sum, else the largest error relative to the
// largest magnitude; a failing call prints its code and weftGetLastError().
TEST(CompressedProcesses, DISABLED_JobWideWorker) {
  weftComm_t comm;
  ASSERT_EQ(weftCommInitFromEnv(&comm), weftSuccess) << weftGetLastError(nullptr);
  int n = 0, rank = 0;
  weftCommCount(comm, &n);
  weftCommUserRank(comm, &rank);
  ASSERT_EQ(n, 2);
  const size_t count = 50000;
  std::vector<std::vector<float>> in(n);
  for (int q = 0; q < n; ++q) in[q] = Contribution(q, count, weftFloat32);
  std::vector<float> out(count);
  const weftResult_t r = weftAllReduce(in[rank].data(), out.data(), count, weftFloat32, weftSum,
                                       comm, nullptr);
  if (r != weftSuccess) {
    std::printf("FAILED %s: %s\n", weftGetErrorString(r), weftGetLastError(comm));
  } else {
    // With 2 ranks every uncompressed algorithm returns the float sum in[0][i] + in[1][i].
    double worst = 0, largest = 0;
    for (size_t i = 0; i < count; ++i) {
      const float exact = in[0][i] + in[1][i];
      worst = std::max(worst, static_cast<double>(std::fabs(out[i] - exact)));
      largest = std::max(largest, static_cast<double>(std::fabs(exact)));
    }
    if (worst == 0) std::printf("EXACT\n");
    else std::printf("RELERR %g\n", worst / largest);
  }
  weftCommDestroy(comm);
}

weft_test::LaunchOutcome RunJobWide(const std::string& setting) {
  return weft_test::LaunchRanks(
      2, {"/proc/self/exe", "--gtest_filter=CompressedProcesses.DISABLED_JobWideWorker",
          "--gtest_also_run_disabled_tests"},
      {{"WEFT_TIMEOUT", "60"}, {"WEFT_COMPRESSION", setting}}, 120);
}

// WEFT_COMPRESSION=int8:always changes what a plain weftAllReduce returns (int8-quantized,
// within int8's error) without any code change; unset, the same call is exact, and so it is
// with WEFT_COMPRESSION=int8 on one host (compression does not pay where nothing crosses a
// slow tier: compression_pays.h); a bad value fails the call with a message naming the
// variable.
TEST(CompressedProcesses, JobWideSettingReachesPlainAllReduce) {
  const weft_test::LaunchOutcome off = RunJobWide("");
  const weft_test::LaunchOutcome one_host = RunJobWide("int8");
  const weft_test::LaunchOutcome int8 = RunJobWide("int8:always");
  const weft_test::LaunchOutcome bad = RunJobWide("int3");
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(off.output[r].find("EXACT"), std::string::npos) << off.output[r];
    EXPECT_NE(one_host.output[r].find("EXACT"), std::string::npos) << one_host.output[r];
    const size_t at = int8.output[r].find("RELERR ");
    ASSERT_NE(at, std::string::npos) << int8.output[r];
    const double relerr = std::atof(int8.output[r].c_str() + at + 7);
    EXPECT_GT(relerr, 0.0);
    EXPECT_LT(relerr, 0.02) << "int8 keeps 1/127 of each block's range per rank";
    EXPECT_NE(bad.output[r].find("FAILED invalid argument"), std::string::npos) << bad.output[r];
    EXPECT_NE(bad.output[r].find("WEFT_COMPRESSION=int3"), std::string::npos) << bad.output[r];
  }
}

}  // namespace
