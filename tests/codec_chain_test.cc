// Codec chains (exec/codec_chain.h): the executor runs a compressed schedule's runs of local
// codec work tile by tile, and the result must be the bits the steps give one by one. Each
// test builds a one-rank schedule of such a run, checks that the executor finds it as a chain
// (with or without the float32 value stored), runs it through ExecuteSchedule, and compares
// the encodings (copied to the output) and any stored value with the steps' semantics computed
// here on whole arrays with the codec and reduction kernels. The hierarchical allreduce's own
// schedule has its phase-1 and phase-4 runs found as chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/compressed.h"
#include "algorithms/registry.h"
#include "exec/chain_sink.h"
#include "exec/operand_sink.h"
#include "exec/codec_chain.h"
#include "exec/executor.h"
#include "exec/scratch.h"
#include "exec_test_util.h"
#include "kernels/codec.h"
#include "kernels/reduce.h"
#include "test_util.h"
#include "weft/weft_compress.h"

namespace weft {
namespace {

weftCompression Spec(weftCodec_t codec, uint32_t block = 128, uint32_t flags = 0) {
  return weft_test::CodecSpec(codec, block, flags, 0.01f, 0);
}

std::vector<weftCompression> Codecs() {
  return {Spec(weftCodecInt8), Spec(weftCodecInt8, 64, WEFT_COMPRESS_STOCHASTIC),
          Spec(weftCodecFp8E4M3), Spec(weftCodecFp8E5M2), Spec(weftCodecInt4),
          Spec(weftCodecInt4, 128, WEFT_COMPRESS_HADAMARD), Spec(weftCodecSign1),
          Spec(weftCodecBf16), Spec(weftCodecFp16)};
}

std::vector<float> Values(size_t n, int seed) {
  std::vector<float> v(n);
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed) * 7919u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = (static_cast<float>(x % 20001) - 10000.0f) / 977.0f;
  }
  return v;
}

// Runs one rank's steps on `in` through the executor, with error feedback when `feedback`
// has a residual; returns the output.
std::vector<float> Run(const RankSchedule& rs, const weftCompression& spec, weftRedOp_t op,
                       int nranks, const std::vector<float>& in, const CodecFeedback& feedback = {}) {
  std::vector<float> out(rs.output_count, -7.0f);
  std::vector<Transport*> peers(1, nullptr);
  ScratchBuffer heap;
  // nranks: the average's divisor (no step talks to another rank)
  ExecContext ctx = weft_test::ThreadRankContext(0, nranks, &peers, &heap, &spec, "codec chain test");
  ctx.op = op;
  ctx.feedback = feedback;
  ExecBuffers b;
  b.input = in.data();
  b.output = out.data();
  const Status st = ExecuteSchedule(rs, 4, ctx, b);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::vector<uint8_t> Encoded(const weftCompression& spec, const float* v, size_t n, uint64_t stream) {
  std::vector<uint8_t> e(codec::EncodedBytes(spec, n));
  codec::Encode(spec, v, n, e.data(), stream);
  return e;
}

// The output holds encodings copied as float32 elements: their bytes.
void ExpectBytes(const std::vector<float>& out, size_t at, const std::vector<uint8_t>& want,
                 const std::string& what) {
  ASSERT_LE(at * 4 + want.size(), out.size() * 4) << what;
  EXPECT_EQ(0, std::memcmp(reinterpret_cast<const uint8_t*>(out.data()) + at * 4, want.data(),
                           want.size()))
      << what;
}

// The encoding half of the host reduce-then-encode schedules below: P at scratch [0, n), its
// sub-slices [0, h) and [h, n) encoded (streams 5 and 6) into scratch after it, and both
// encodings copied to the start of the output.
struct EncodedHalves {
  size_t n, h, e0, e1;
  Region p;
};
EncodedHalves HalvesOf(const weftCompression& spec, size_t n, size_t h) {
  return {n, h, EncodedElements(spec, h), EncodedElements(spec, n - h), Tmp(0, n)};
}
// rs's scratch (P, then the two encodings) and the steps that encode P's halves and copy them
// out, after rs's steps so far.
void AppendEncodedHalves(const EncodedHalves& x, RankSchedule* rs) {
  const Region enc0 = Tmp(x.n, x.e0), enc1 = Tmp(x.n + x.e0, x.e1);
  rs->scratch_count = x.n + x.e0 + x.e1;
  for (const Step& s : {EncodeStep(Region{x.p.buffer, 0, x.h}, enc0, 5),
                        EncodeStep(Region{x.p.buffer, x.h, x.n - x.h}, enc1, 6), CopyStep(enc0, Out(0, x.e0)),
                        CopyStep(enc1, Out(x.e0, x.e1))})
    rs->steps.push_back(s);
}
// The output's two encodings are those of sum's halves.
void ExpectEncodedHalves(const std::vector<float>& out, const weftCompression& spec, const EncodedHalves& x,
                         const float* sum, const std::string& what) {
  ExpectBytes(out, 0, Encoded(spec, sum, x.h, 5), what + " enc0");
  ExpectBytes(out, x.e0, Encoded(spec, sum + x.h, x.n - x.h, 6), what + " enc1");
}

// What error feedback leaves in a residual that started at `start` everywhere: for each
// encode k of `values_of[k]` (n_k values at spans[k].offset, stream streams[k]), the whole-array
// DroppedIntoResidual of its encoding, stored or added as the span says.
std::vector<float> ExpectedResidual(const weftCompression& spec, size_t size, float start,
                                    const std::vector<EncodedSpan>& spans,
                                    const std::vector<const float*>& values_of,
                                    const std::vector<uint64_t>& streams, float weight) {
  std::vector<float> r(size, start);
  for (size_t k = 0; k < spans.size(); ++k) {
    const std::vector<uint8_t> e = Encoded(spec, values_of[k], spans[k].count, streams[k]);
    codec::DroppedIntoResidual(spec, e.data(), spans[k].count, values_of[k],
                               spans[k].reduced ? codec::Feedback::kAdd : codec::Feedback::kStore,
                               weight, r.data() + spans[k].offset);
  }
  return r;
}

// Phase 1 of the hierarchical allreduce on a host of two: P holds the member's lane, the owner
// adds its own lane, then encodes P's sub-slices (here cut at a value no block boundary
// aligns with). `keep`: a later copy reads P, so the chain stores it. Then the same with
// error feedback: the chain puts what each encode drops into the residual tile by tile, and
// that is the whole-array DroppedIntoResidual's bits.
// Top-k's chains run each encode whole (tiled = false) and only where P is dead: kept, the
// steps run one by one.
void HostReduceThenEncode(const weftCompression& spec, bool keep, weftRedOp_t op = weftSum,
                          size_t n = 3001, size_t h = 1437) {
  const std::string what = std::string(codec::CodecName(spec.codec)) + (keep ? " kept" : " dead") +
                           (op == weftSum ? "" : " max");
  std::vector<float> in = Values(2 * n, 1);
  const EncodedHalves x = HalvesOf(spec, n, h);
  const Region p = x.p;
  const size_t e0 = x.e0, e1 = x.e1;
  RankSchedule rs;
  rs.input_count = 2 * n;
  rs.output_count = e0 + e1 + n;
  rs.steps = {CopyStep(In(n, n), p),  // the member's lane (received, in the real schedule)
              CopyStep(In(0, 1), Out(e0 + e1, 1)),  // not part of a chain: P stays as copied
              ReduceStep(In(0, n), p)};
  AppendEncodedHalves(x, &rs);
  if (keep) rs.steps.push_back(CopyStep(p, Out(e0 + e1, n)));
  const bool whole = spec.codec == weftCodecTopK;
  const std::vector<CodecChain> chains = FindCodecChains(rs.steps, spec, false);
  ASSERT_EQ(chains.size(), whole && keep ? 0u : 1u) << what;
  if (!chains.empty()) {
    EXPECT_EQ(chains[0].first, 2u);
    EXPECT_EQ(chains[0].last, 4u);
    EXPECT_EQ(chains[0].acc_dead, !keep) << what;
    EXPECT_EQ(chains[0].tiled, !whole) << what;
  }

  std::vector<float> sum(n);
  kernels::Reduce(sum.data(), in.data() + n, in.data(), n, weftFloat32, op);
  const std::vector<float> out = Run(rs, spec, op, 2, in);
  ExpectEncodedHalves(out, spec, x, sum.data(), what);
  if (keep) EXPECT_EQ(0, std::memcmp(out.data() + e0 + e1, sum.data(), n * 4)) << what;

  const std::vector<EncodedSpan> spans = {{0, false, h}, {h, false, n - h}};
  std::vector<float> residual(n, 3.0f);  // stale: the stores overwrite it
  CodecFeedback fb;
  fb.residual = residual.data();
  fb.spans = &spans;
  const std::vector<float> fed = Run(rs, spec, op, 2, in, fb);
  ExpectEncodedHalves(fed, spec, x, sum.data(), what + " with feedback");
  const std::vector<float> want =
      ExpectedResidual(spec, n, 3.0f, spans, {sum.data(), sum.data() + h}, {5, 6}, 1.0f);
  EXPECT_EQ(0, std::memcmp(residual.data(), want.data(), n * 4)) << what << " residual";
}

TEST(CodecChain, HostReduceThenEncodeIsBitwiseTheSteps) {
  for (const weftCompression& spec : Codecs()) {
    HostReduceThenEncode(spec, false);
    HostReduceThenEncode(spec, true);
  }
}

// Phase 1 on a host of four: P = m0 + m1 + m2 + m3 (a copy, three reduces, in group order),
// then its two sub-slices encoded. Every codec runs it as one chain: top-k's is `built` (P
// built in tiles and stored, each encode whole after); the bits are the steps' one by one.
TEST(CodecChain, HostOfFourReduceThenEncodeIsBitwiseTheSteps) {
  const size_t n = (size_t{1} << 16) + 5, h = 30001;
  for (const weftCompression& spec : Codecs()) {
    const std::string what = codec::CodecName(spec.codec);
    std::vector<float> in = Values(4 * n, 7);
    const EncodedHalves x = HalvesOf(spec, n, h);
    const Region p = x.p;
    RankSchedule rs;
    rs.input_count = 4 * n;
    rs.output_count = x.e0 + x.e1;
    rs.steps = {CopyStep(In(0, n), p), ReduceStep(In(n, n), p), ReduceStep(In(2 * n, n), p),
                ReduceStep(In(3 * n, n), p)};
    AppendEncodedHalves(x, &rs);
    const std::vector<CodecChain> chains = FindCodecChains(rs.steps, spec, false);
    ASSERT_EQ(chains.size(), 1u) << what;
    EXPECT_EQ(chains[0].last, 5u) << what;
    EXPECT_EQ(chains[0].built, spec.codec == weftCodecTopK) << what;
    EXPECT_EQ(chains[0].acc_dead, spec.codec != weftCodecTopK) << what;
    std::vector<float> sum(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n));
    for (int m = 1; m < 4; ++m) kernels::Reduce(sum.data(), sum.data(), in.data() + m * n, n, weftFloat32, weftSum);
    ExpectEncodedHalves(weft::Run(rs, spec, weftSum, 4, in), spec, x, sum.data(), what);
  }
}

// Top-k: at this size the sum's encodes take the one pass that reads both inputs and stores
// no sum (codec::EncodeOfSum); a max, error feedback and a short input build P and encode it.
TEST(CodecChain, TopKHostReduceThenEncodeIsBitwiseTheSteps) {
  const weftCompression spec = Spec(weftCodecTopK);
  for (weftRedOp_t op : {weftSum, weftMax}) {
    HostReduceThenEncode(spec, false, op, (size_t{1} << 17) + 3, 70001);
    HostReduceThenEncode(spec, true, op, (size_t{1} << 17) + 3, 70001);
  }
  HostReduceThenEncode(spec, false);
}

// Phase 4: decode the first host's contribution, decode-reduce the others', finalize, encode
// the reduced slice once.
void DecodeReduceThenEncode(const weftCompression& spec, weftRedOp_t op, bool keep) {
  const size_t n = 2 * 4096 + 515;  // tiles of 4096 and a tail that is no whole block
  const std::string what = std::string(codec::CodecName(spec.codec)) + (keep ? " kept" : " dead") +
                           (op == weftAvg ? " avg" : " sum");
  std::vector<float> in = Values(3 * n, 2);
  const size_t e = EncodedElements(spec, n);
  const Region c0 = Tmp(0, e), c1 = Tmp(e, e), c2 = Tmp(2 * e, e), p = Tmp(3 * e, n),
               g = Tmp(3 * e + n, e);
  RankSchedule rs;
  rs.input_count = 3 * n;
  rs.output_count = e + n;
  rs.scratch_count = 4 * e + n;
  rs.steps = {EncodeStep(In(0, n), c0, 1),     EncodeStep(In(n, n), c1, 2),
              EncodeStep(In(2 * n, n), c2, 3), DecodeStep(c0, p),
              DecodeReduceStep(c1, p),         DecodeReduceStep(c2, p),
              FinalizeStep(p),                 EncodeStep(p, g, 9),
              CopyStep(g, Out(0, e))};
  if (keep) rs.steps.push_back(CopyStep(p, Out(e, n)));
  const std::vector<CodecChain> chains = FindCodecChains(rs.steps, spec, false);
  ASSERT_EQ(chains.size(), 1u) << what;
  EXPECT_EQ(chains[0].first, 3u);
  EXPECT_EQ(chains[0].last, 7u);
  EXPECT_EQ(chains[0].acc_dead, !keep) << what;

  std::vector<float> sum(n), d(n);
  codec::Decode(spec, Encoded(spec, in.data(), n, 1).data(), n, sum.data());
  for (int k = 1; k < 3; ++k) {
    codec::Decode(spec, Encoded(spec, in.data() + k * n, n, 1 + k).data(), n, d.data());
    kernels::Reduce(sum.data(), sum.data(), d.data(), n, weftFloat32, op);
  }
  if (op == weftAvg) kernels::Finalize(sum.data(), n, weftFloat32, op, 3);
  const std::vector<float> out = Run(rs, spec, op, 3, in);
  ExpectBytes(out, 0, Encoded(spec, sum.data(), n, 9), what + " reduced");
  if (keep) EXPECT_EQ(0, std::memcmp(out.data() + e, sum.data(), n * 4)) << what;

  // Feedback: the three input encodes run one by one (stored), the reduced one in the chain
  // (added, weighted) over the first of them.
  const std::vector<EncodedSpan> spans = {{0, false, n}, {n, false, n}, {2 * n, false, n}, {0, true, n}};
  std::vector<float> residual(3 * n, -1.0f);
  CodecFeedback fb;
  fb.residual = residual.data();
  fb.spans = &spans;
  fb.reduced_weight = 3.0f;
  const std::vector<float> fed = Run(rs, spec, op, 3, in, fb);
  ExpectBytes(fed, 0, Encoded(spec, sum.data(), n, 9), what + " reduced with feedback");
  const std::vector<float> want = ExpectedResidual(
      spec, 3 * n, -1.0f, spans, {in.data(), in.data() + n, in.data() + 2 * n, sum.data()}, {1, 2, 3, 9}, 3.0f);
  EXPECT_EQ(0, std::memcmp(residual.data(), want.data(), 3 * n * 4)) << what << " residual";
}

// Feedback spans that do not match the schedule's encodes are refused, naming both counts.
TEST(CodecChain, FeedbackSpansMustMatchTheEncodes) {
  const weftCompression spec = Spec(weftCodecInt8);
  RankSchedule rs;
  rs.input_count = 256;
  rs.output_count = 256;
  rs.scratch_count = EncodedElements(spec, 256);
  rs.steps = {EncodeStep(In(0, 256), Tmp(0, EncodedElements(spec, 256)), 1)};
  std::vector<float> in(256, 1.0f), out(256), residual(256);
  const std::vector<EncodedSpan> spans;  // none for one encode
  std::vector<Transport*> peers(1, nullptr);
  ScratchBuffer heap;
  ExecContext ctx = weft_test::ThreadRankContext(0, 1, &peers, &heap, &spec, "codec chain test");
  ctx.feedback.residual = residual.data();
  ctx.feedback.spans = &spans;
  ExecBuffers b;
  b.input = in.data();
  b.output = out.data();
  const Status st = ExecuteSchedule(rs, 4, ctx, b);
  EXPECT_EQ(st.code(), weftInternalError) << st.message();
  EXPECT_NE(st.message().find("0 spans for 1 encode steps"), std::string::npos) << st.message();
}

TEST(CodecChain, DecodeReduceThenEncodeIsBitwiseTheSteps) {
  for (const weftCompression& spec : Codecs())
    for (weftRedOp_t op : {weftSum, weftAvg}) {
      DecodeReduceThenEncode(spec, op, false);
      DecodeReduceThenEncode(spec, op, true);
    }
}

// Error feedback's steady state on a host of two: the owner's lane reads as input + residual
// (ExecBuffers::addend), which the host-reduce chain adds tile by tile, building nothing into
// the patch; the encodings are those of member + (input + residual), and the feedback then
// overwrites the residual it read.
TEST(CodecChain, ChainsAddThePatchedInputsAddend) {
  for (const weftCompression& spec : Codecs()) {
    const std::string what = codec::CodecName(spec.codec);
    const size_t n = 3001, h = 1437;
    std::vector<float> in = Values(2 * n, 3), residual = Values(n, 4);
    for (float& r : residual) r *= 0.01f;
    const std::vector<float> start = residual;
    const EncodedHalves halves = HalvesOf(spec, n, h);
    RankSchedule rs;
    rs.input_count = 2 * n;
    rs.output_count = halves.e0 + halves.e1;
    rs.steps = {CopyStep(In(n, n), halves.p), ReduceStep(In(0, n), halves.p)};
    AppendEncodedHalves(halves, &rs);
    ASSERT_EQ(FindCodecChains(rs.steps, spec, false).size(), 1u) << what;
    std::vector<float> x(n), sum(n);
    for (size_t i = 0; i < n; ++i) x[i] = in[i] + start[i];
    kernels::Reduce(sum.data(), in.data() + n, x.data(), n, weftFloat32, weftSum);

    std::vector<float> out(rs.output_count, -7.0f), patch(2 * n, -9.0f);
    std::vector<Transport*> peers(1, nullptr);
    ScratchBuffer heap;
    ExecContext ctx = weft_test::ThreadRankContext(0, 2, &peers, &heap, &spec, "codec chain test");
    const std::vector<EncodedSpan> spans = {{0, false, h}, {h, false, n - h}};
    ctx.feedback.residual = residual.data();
    ctx.feedback.spans = &spans;
    const std::vector<ElementRange> lane = {{0, n}};
    ExecBuffers b;
    b.input = in.data();
    b.output = out.data();
    b.patch = patch.data();
    b.addend = residual.data();
    b.patched = &lane;
    const Status st = ExecuteSchedule(rs, 4, ctx, b);
    ASSERT_TRUE(st.ok()) << st.message();
    ExpectEncodedHalves(out, spec, halves, sum.data(), what);
    EXPECT_EQ(patch[0], -9.0f) << what << ": the chain built the patch instead of adding in its tiles";
    const std::vector<float> want =
        ExpectedResidual(spec, n, 0.0f, spans, {sum.data(), sum.data() + h}, {5, 6}, 1.0f);
    EXPECT_EQ(0, std::memcmp(residual.data(), want.data(), n * 4)) << what << " residual";
  }
}

// An input patch (ExecBuffers::patch): input regions inside a patched range read as input +
// addend (built into the patch for steps outside chains), the others as the input; a region
// that straddles a range's edge is refused before any step runs.
TEST(CodecChain, InputPatchReadsItsRangesAndRefusesStraddlingRegions) {
  RankSchedule rs;
  rs.input_count = 512;
  rs.output_count = 512;
  rs.steps = {CopyStep(In(0, 256), Out(0, 256)), CopyStep(In(256, 256), Out(256, 256))};
  std::vector<float> in(512, 1.0f), addend(512, 0.5f), patch(512, 0.0f), out(512, 0.0f);
  std::vector<Transport*> peers(1, nullptr);
  ScratchBuffer heap;
  const weftCompression spec = Spec(weftCodecInt8);
  ExecContext ctx = weft_test::ThreadRankContext(0, 1, &peers, &heap, &spec, "codec chain test");
  ExecBuffers b;
  b.input = in.data();
  b.output = out.data();
  b.patch = patch.data();
  b.addend = addend.data();
  const std::vector<ElementRange> second = {{256, 512}};
  b.patched = &second;
  Status st = ExecuteSchedule(rs, 4, ctx, b);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[255], 1.0f);
  EXPECT_EQ(out[256], 1.5f);
  EXPECT_EQ(out[511], 1.5f);
  const std::vector<ElementRange> straddles = {{100, 300}};
  b.patched = &straddles;
  st = ExecuteSchedule(rs, 4, ctx, b);
  EXPECT_EQ(st.code(), weftInternalError) << st.message();
  EXPECT_NE(st.message().find("straddle the patched range [100, 300)"), std::string::npos) << st.message();
}

// What may not be a chain: top-k's decodes (it selects over a whole encode), an encode that a tile of a
// decode would read after an earlier tile wrote it, encodes that decode runs cannot tile
// (an unaligned boundary inside P), and runs whose value the caller keeps (error feedback).
TEST(CodecChain, WhatIsNoChain) {
  const size_t n = 1000;
  const Region p = Tmp(0, n), c = Tmp(n, 300), g = Tmp(n + 300, 300);
  const std::vector<Step> decode_then_encode = {DecodeStep(c, p), EncodeStep(p, g, 1)};
  EXPECT_TRUE(FindCodecChains(decode_then_encode, Spec(weftCodecTopK), false).empty());
  EXPECT_EQ(FindCodecChains(decode_then_encode, Spec(weftCodecInt8), false).size(), 1u);
  const std::vector<Step> overwrites_its_source = {DecodeStep(c, p), EncodeStep(p, c, 1)};
  EXPECT_TRUE(FindCodecChains(overwrites_its_source, Spec(weftCodecInt8), false).empty());
  const std::vector<Step> unaligned = {DecodeStep(c, p), EncodeStep(Tmp(0, 500), g, 1),
                                       EncodeStep(Tmp(500, 500), Tmp(n + 600, 300), 2)};
  EXPECT_TRUE(FindCodecChains(unaligned, Spec(weftCodecInt8, 128), false).empty());
  EXPECT_EQ(FindCodecChains(unaligned, Spec(weftCodecInt8, 100), false).size(), 1u);
  const std::vector<CodecChain> kept = FindCodecChains(decode_then_encode, Spec(weftCodecInt8), true);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_FALSE(kept[0].acc_dead);
}

// The hierarchical allreduce of 2^20 values in 4 pieces on 2 hosts x 2 ranks.
StatusOr<Schedule> HierarchicalOn2x2(const weftCompression& spec) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(Collective::kAllReduce, "compressed_hierarchical");
  if (algorithm == nullptr) return InvalidArgument("no compressed_hierarchical allreduce");
  ScheduleRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = 4;
  req.count = size_t{1} << 20;
  req.codec = spec;
  req.groups = {{0, 1}, {2, 3}};
  req.chunk.chunk_elems = req.count / 4;  // 4 pieces
  return BuildSchedule(*algorithm, req);
}

// Per piece, every rank's host reduce and its reduced slice run as chains whose sums nothing
// reads later.
TEST(CodecChain, TheHierarchicalAllReduceRunsAsChains) {
  const weftCompression spec = Spec(weftCodecInt8);
  StatusOr<Schedule> sched = HierarchicalOn2x2(spec);
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  for (int r = 0; r < 4; ++r) {
    const std::vector<CodecChain> chains = FindCodecChains(sched->ranks[r].steps, spec, false);
    EXPECT_EQ(chains.size(), 8u) << "rank " << r;  // 4 pieces x (host reduce, reduced slice)
    for (const CodecChain& c : chains) EXPECT_TRUE(c.acc_dead) << "rank " << r << " step " << c.first;
  }
}

// Top-k on hosts of two: per piece, every rank's host reduce (one reduce of the received lane,
// then the encodes) is an untiled chain; its reduced slices (decodes) are no chain.
TEST(CodecChain, TopKHierarchicalAllReduceRunsItsHostReduceAsAChain) {
  const weftCompression spec = Spec(weftCodecTopK);
  StatusOr<Schedule> sched = HierarchicalOn2x2(spec);
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  for (int r = 0; r < 4; ++r) {
    const std::vector<Step>& steps = sched->ranks[r].steps;
    const std::vector<CodecChain> chains = FindCodecChains(steps, spec, false);
    EXPECT_EQ(chains.size(), 4u) << "rank " << r;
    for (const CodecChain& c : chains) {
      EXPECT_FALSE(c.tiled);
      EXPECT_EQ(steps[c.first].op, StepOp::kReduce) << "rank " << r << " step " << c.first;
    }
  }
}

}  // namespace
}  // namespace weft

// ---- ChainSink: a receive streamed into its chain (exec/chain_sink.h) ----

namespace weft {
namespace {

// Appends a chain's encodes of acc's two parts [0, cut) and [cut, n) into *enc (streams
// stream and stream + 1), error feedback stored into *residual for the first.
void AppendTwoEncodes(const weftCompression& spec, size_t n, size_t cut, uint64_t stream,
                      std::vector<std::vector<uint8_t>>* enc, std::vector<float>* residual,
                      std::vector<ChainStep>* steps) {
  const size_t parts[2][2] = {{0, cut}, {cut, n - cut}};
  enc->assign(2, {});
  for (int k = 0; k < 2; ++k) {
    ChainStep e;
    e.op = StepOp::kEncode;
    e.offset = parts[k][0];
    e.count = parts[k][1];
    (*enc)[k].assign(codec::EncodedBytes(spec, e.count), 0);
    e.encoded = (*enc)[k].data();
    e.stream = stream + k;
    if (k == 0) e.residual = residual->data();
    steps->push_back(e);
  }
}

// The owner's phase-1 chain of the hierarchical allreduce, resolved: acc (what arrived) +=
// the input lane, then encodes of two parts of acc (with error feedback stored for the first).
struct SinkCase {
  std::vector<float> received, input, residual_whole, residual_streamed;
  std::vector<std::vector<uint8_t>> whole, streamed;  // the encodings
  std::vector<ChainStep> Steps(const weftCompression& spec, std::vector<std::vector<uint8_t>>* enc,
                               std::vector<float>* residual, size_t cut) const {
    std::vector<ChainStep> steps(1);
    steps[0].op = StepOp::kReduce;
    steps[0].src = input.data();
    AppendTwoEncodes(spec, received.size(), cut, 77, enc, residual, &steps);
    return steps;
  }
};

TEST(ChainSink, PiecesOfAnySizeGiveTheWholeChainsBits) {
  const size_t n = 3 * 4096 * 4 + 1000;  // several bounce buffers' tiles and a short tail
  for (const weftCompression& spec : Codecs()) {
    const size_t align = codec::EncodeRangeAlignment(spec);
    if (align == 0) continue;
    const size_t cut = (n / 3) / align * align;
    SinkCase c;
    c.received = Values(n, 1);
    c.input = Values(n, 2);
    c.residual_whole.assign(n, 0.0f);
    c.residual_streamed.assign(n, 0.0f);
    // The chain as the executor runs it once the receive is whole.
    std::vector<float> acc = c.received;
    RunCodecChain(c.Steps(spec, &c.whole, &c.residual_whole, cut), acc.data(), n, true, spec,
                  weftSum, 2);
    // Streamed: the bytes of `received` in pieces of every awkward size, mid-element too.
    std::vector<float> untouched(n, -3.0f);  // acc's memory: a dead acc is never written
    ChainSink sink;
    sink.Start(c.Steps(spec, &c.streamed, &c.residual_streamed, cut), untouched.data(), n, spec,
               weftSum, 2);
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(c.received.data());
    const size_t total = n * sizeof(float), sizes[] = {1, 3, 4093, 65536, 7, 300000};
    for (size_t at = 0, k = 0; at < total; ++k) {
      size_t room = 0;
      unsigned char* to = sink.Space(&room);
      ASSERT_GT(room, 0u);
      const size_t m = std::min({room, sizes[k % 6], total - at});
      std::memcpy(to, bytes + at, m);
      sink.Landed(m);
      at += m;
      ASSERT_EQ(sink.Finished(), at == total) << "all tiles ran before the last byte landed";
    }
    const std::string what = std::string(codec::CodecName(spec.codec)) + " block " + std::to_string(spec.block);
    for (int k = 0; k < 2; ++k) EXPECT_EQ(c.streamed[k], c.whole[k]) << what << " encode " << k;
    EXPECT_EQ(c.residual_streamed, c.residual_whole) << what;
    EXPECT_EQ(untouched, std::vector<float>(n, -3.0f)) << what << ": the dead acc was written";
  }
}

TEST(ChainSink, StreamsOnlyARecvIntoAChainThatReadsItAndDropsIt) {
  const Region lane{Buffer::kScratch, 0, 8192}, in{Buffer::kInput, 0, 8192};
  std::vector<Step> steps = {RecvStep(1, lane), ReduceStep(in, lane),
                             EncodeStep(lane, Region{Buffer::kScratch, 8192, 2048}, 0)};
  CodecChain c;
  c.first = 1;
  c.last = 2;
  c.acc = lane;
  c.acc_dead = true;
  EXPECT_TRUE(StreamsIntoChain(steps, 0, c));
  c.acc_dead = false;  // a later step reads the lane: it must be stored
  EXPECT_FALSE(StreamsIntoChain(steps, 0, c));
  c.acc_dead = true;
  steps[1] = CopyStep(in, lane);  // the opener overwrites what arrived
  EXPECT_FALSE(StreamsIntoChain(steps, 0, c));
  steps[1] = ReduceStep(in, lane);
  steps[0] = RecvStep(1, Region{Buffer::kScratch, 0, 4096});  // only part of the lane arrives
  EXPECT_FALSE(StreamsIntoChain(steps, 0, c));
}

}  // namespace
}  // namespace weft

// ---- OperandSink: receives streamed into a chain's operands (exec/operand_sink.h) ----

namespace weft {
namespace {

// A host of four's phase-1 chain, resolved: acc = m0, += m1, += the input lane (this rank is
// member 2), += m3, then encodes of two parts of acc (error feedback stored for the first).
// m0, m1 and m3 arrive from the other members: the sink's sources 0, 1, 2.
struct OperandCase {
  size_t n = 6 * 16384 + 1000, cut = 0;  // 389 KiB: more than a source's buffer
  std::vector<std::vector<float>> members;  // m0, m1, input, m3
  std::vector<ChainStep> Steps(const weftCompression& spec, std::vector<std::vector<uint8_t>>* enc,
                               std::vector<float>* residual) const {
    std::vector<ChainStep> steps(4);
    steps[0].op = StepOp::kCopy;
    for (int m = 0; m < 4; ++m) {
      if (m > 0) steps[m].op = StepOp::kReduce;
      steps[m].src = members[m].data();
    }
    AppendTwoEncodes(spec, n, cut, 91, enc, residual, &steps);
    return steps;
  }
};

// Feeds the sources in turns, each a piece of `sizes[k % 5]` bytes (mid-element too), skipping
// a source that asks for later unless `force` (a transport that cannot wait); returns the
// sink's encodings. The sources' memory (where spills go) starts as -7.
struct Fed {
  std::vector<std::vector<uint8_t>> enc;
  std::vector<float> residual;
  std::vector<std::vector<float>> memory;
  std::vector<float> acc;
};
Fed FeedOperands(const OperandCase& c, const weftCompression& spec, int force_source) {
  Fed f;
  f.residual.assign(c.n, 0.0f);
  f.memory.assign(3, std::vector<float>(c.n, -7.0f));
  f.acc.assign(c.n, -3.0f);
  const std::vector<ChainStep> steps = c.Steps(spec, &f.enc, &f.residual);
  const size_t readers[3] = {0, 1, 3};
  std::vector<OperandSink::Source> sources;
  for (int s = 0; s < 3; ++s) sources.push_back({readers[s], f.memory[s].data()});
  OperandSink sink;
  sink.set_patience(std::chrono::hours(1));  // whatever the machine's load: no spill by time
  sink.Start(steps, sources, f.acc.data(), c.n, /*acc_dead=*/true, spec, weftSum, 4);
  const size_t total = c.n * sizeof(float), sizes[] = {3, 70001, 4093, 131072, 9};
  std::vector<size_t> at(3, 0);
  for (size_t turn = 0; !(at[0] == total && at[1] == total && at[2] == total); ++turn) {
    const int s = static_cast<int>(turn % 3);
    if (at[s] == total) continue;
    // The forced source runs ahead; the others start only once it is done.
    if (force_source >= 0 && s != force_source && at[force_source] < total) continue;
    RecvSink* in = sink.source(static_cast<size_t>(s));
    if (s != force_source && in->Later()) continue;
    size_t room = 0;
    unsigned char* to = in->Space(&room);
    EXPECT_GT(room, 0u);
    const size_t m = std::min({room, sizes[turn % 5], total - at[s]});
    std::memcpy(to, reinterpret_cast<const unsigned char*>(c.members[readers[s]].data()) + at[s], m);
    in->Landed(m);
    at[s] += m;
    EXPECT_EQ(sink.AllLanded(), sink.Finished());
  }
  EXPECT_TRUE(sink.Finished());
  return f;
}

OperandCase MakeOperandCase(const weftCompression& spec) {
  OperandCase c;
  const size_t align = std::max<size_t>(1, codec::EncodeRangeAlignment(spec));
  c.cut = (c.n / 3) / align * align;
  for (int m = 0; m < 4; ++m) c.members.push_back(Values(c.n, 10 + m));
  return c;
}

// Whatever order and sizes the sources' pieces land in, the chain's encodings and residual are
// the bits of the chain run on the whole lanes; in step, nothing spills and neither the
// sources' memory nor the dead acc is written.
TEST(OperandSink, SourcesInAnyOrderGiveTheWholeChainsBits) {
  for (const weftCompression& spec : Codecs()) {  // top-k's chain is built: P stored, encodes whole
    const OperandCase c = MakeOperandCase(spec);
    const bool built = codec::EncodeRangeAlignment(spec) == 0;
    std::vector<std::vector<uint8_t>> whole;
    std::vector<float> residual(c.n, 0.0f), acc(c.n);
    RunCodecChain(c.Steps(spec, &whole, &residual), acc.data(), c.n, true, spec, weftSum, 4);
    const uint64_t spilled = OperandSourcesSpilled();
    const Fed f = FeedOperands(c, spec, -1);
    const std::string what = std::string(codec::CodecName(spec.codec)) + " block " + std::to_string(spec.block);
    for (int k = 0; k < 2; ++k) EXPECT_EQ(f.enc[k], whole[k]) << what << " encode " << k;
    EXPECT_EQ(f.residual, residual) << what;
    EXPECT_EQ(OperandSourcesSpilled(), spilled) << what << ": sources in step spilled";
    for (int s = 0; s < 3; ++s) EXPECT_EQ(f.memory[s], std::vector<float>(c.n, -7.0f)) << what << " source " << s;
    if (!built) EXPECT_EQ(f.acc, std::vector<float>(c.n, -3.0f)) << what << ": the dead acc was written";
    if (built) EXPECT_EQ(f.acc, acc) << what << ": the built P";
  }
}

// A source that cannot wait (a transport that already holds the bytes) spills: the rest of its
// lane lands in its memory and the tiles read it there, with the same bits. A source that
// runs ahead of lagging ones waits (Later) no longer than its patience, then spills.
TEST(OperandSink, SourcesThatCannotWaitSpillAndKeepTheBits) {
  const weftCompression spec = Spec(weftCodecInt8);
  const OperandCase c = MakeOperandCase(spec);
  std::vector<std::vector<uint8_t>> whole;
  std::vector<float> residual(c.n, 0.0f), acc(c.n);
  RunCodecChain(c.Steps(spec, &whole, &residual), acc.data(), c.n, true, spec, weftSum, 4);
  const uint64_t spilled = OperandSourcesSpilled();
  const Fed f = FeedOperands(c, spec, 1);
  EXPECT_EQ(OperandSourcesSpilled(), spilled + 1) << "the source fed whole spills, the others not";
  for (int k = 0; k < 2; ++k) EXPECT_EQ(f.enc[k], whole[k]) << "encode " << k;
  EXPECT_EQ(f.residual, residual);
  const std::vector<float>& m1 = c.members[1];
  EXPECT_TRUE(std::equal(m1.end() - 1000, m1.end(), f.memory[1].end() - 1000)) << "the spill's tail is not in memory";
  // The lagging case: source 0 fills its buffer, source 1 and 2 send nothing.
  std::vector<std::vector<uint8_t>> enc;
  std::vector<float> res(c.n, 0.0f), memory(c.n), acc2(c.n);
  OperandSink sink;
  const auto patience = std::chrono::milliseconds(5);
  sink.set_patience(patience);
  sink.Start(c.Steps(spec, &enc, &res), {{0, memory.data()}, {1, memory.data()}, {3, memory.data()}},
             acc2.data(), c.n, true, spec, weftSum, 4);
  RecvSink* in = sink.source(0);
  size_t fed = 0;
  while (!in->Later()) {
    size_t room = 0;
    unsigned char* to = in->Space(&room);
    std::memcpy(to, reinterpret_cast<const unsigned char*>(c.members[0].data()) + fed, room);
    in->Landed(room);
    fed += room;
    ASSERT_LE(fed, OperandSink::kSourceBytes) << "a lagging sink kept taking bytes";
  }
  EXPECT_GT(fed + OperandSink::kMinPiece, OperandSink::kSourceBytes);
  const uint64_t before = OperandSourcesSpilled();
  std::this_thread::sleep_for(patience + std::chrono::milliseconds(5));
  EXPECT_FALSE(in->Later()) << "past its patience, it spills";
  EXPECT_EQ(OperandSourcesSpilled(), before + 1);
  size_t room = 0;
  EXPECT_EQ(in->Space(&room), reinterpret_cast<unsigned char*>(memory.data()) + fed) << "spilled: the rest goes to memory";
  EXPECT_EQ(room, c.n * sizeof(float) - fed);
  EXPECT_TRUE(std::equal(c.members[0].begin(), c.members[0].begin() + static_cast<std::ptrdiff_t>(fed / sizeof(float)), memory.begin()))
      << "what the source held went to memory";
}

// On hosts of four, each rank's host reduce (per piece: copy, three reduces, the encodes)
// streams the three lanes the other members send (top-k's built chain too); on hosts of two
// the received lane is the chain's acc (ChainSink's case), and no operand streams.
void HostsOfFourStreamThreeLanes(const weftCompression& spec) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(Collective::kAllReduce, "compressed_hierarchical");
  ASSERT_NE(algorithm, nullptr);
  ScheduleRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = 8;
  req.count = size_t{1} << 20;
  req.codec = spec;
  req.groups = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  req.chunk.chunk_elems = req.count / 4;  // 4 pieces
  StatusOr<Schedule> sched = BuildSchedule(*algorithm, req);
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  for (int r = 0; r < 8; ++r) {
    const std::vector<Step>& steps = sched->ranks[r].steps;
    size_t streamed = 0;
    for (const CodecChain& c : FindCodecChains(steps, spec, false)) {
      const std::vector<StreamedOperand> ops = StreamedOperands(steps, c);
      if (steps[c.first].op != StepOp::kCopy) {  // the reduced slice: decodes, no receive
        EXPECT_TRUE(ops.empty()) << "rank " << r << " step " << c.first;
        continue;
      }
      ASSERT_EQ(ops.size(), 3u) << "rank " << r << " step " << c.first;
      ++streamed;
      std::vector<int> peers;
      for (const StreamedOperand& o : ops) {
        const Step& recv = steps[o.recv];
        EXPECT_EQ(recv.peer / 4, r / 4) << "a lane from another host";
        peers.push_back(recv.peer);
        EXPECT_EQ(steps[c.first + o.reader].src.offset, recv.dst.offset) << "rank " << r;
      }
      std::sort(peers.begin(), peers.end());
      EXPECT_EQ(std::unique(peers.begin(), peers.end()), peers.end()) << "rank " << r;
      EXPECT_EQ(ops.back().recv + 1, c.first) << "the receives run up to the chain";
    }
    EXPECT_EQ(streamed, 4u) << "rank " << r << ": one host reduce per piece";
  }
  StatusOr<Schedule> two = HierarchicalOn2x2(spec);
  ASSERT_TRUE(two.ok());
  for (int r = 0; r < 4; ++r)
    for (const CodecChain& c : FindCodecChains(two->ranks[r].steps, spec, false))
      EXPECT_TRUE(StreamedOperands(two->ranks[r].steps, c).empty()) << "rank " << r;
}

TEST(OperandSink, TheHostReduceOfHostsOfFourStreamsItsThreeLanes) {
  for (weftCodec_t codec : {weftCodecInt8, weftCodecTopK}) HostsOfFourStreamThreeLanes(Spec(codec));
}

}  // namespace
}  // namespace weft
