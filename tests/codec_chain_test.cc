// Codec chains (exec/codec_chain.h): the executor runs a compressed schedule's runs of local
// codec work tile by tile, and the result must be the bits the steps give one by one. Each
// test builds a one-rank schedule of such a run, checks that the executor finds it as a chain
// (with or without the float32 value stored), runs it through ExecuteSchedule, and compares
// the encodings (copied to the output) and any stored value with the steps' semantics computed
// here on whole arrays with the codec and reduction kernels. The hierarchical allreduce's own
// schedule has its phase-1 and phase-4 runs found as chains.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/compressed.h"
#include "algorithms/registry.h"
#include "exec/chain_sink.h"
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
  const Region p = Tmp(0, n);
  const size_t e0 = EncodedElements(spec, h), e1 = EncodedElements(spec, n - h);
  const Region enc0 = Tmp(n, e0), enc1 = Tmp(n + e0, e1);
  RankSchedule rs;
  rs.input_count = 2 * n;
  rs.output_count = e0 + e1 + n;
  rs.scratch_count = n + e0 + e1;
  rs.steps = {CopyStep(In(n, n), p),  // the member's lane (received, in the real schedule)
              CopyStep(In(0, 1), Out(e0 + e1, 1)),  // not part of a chain: P stays as copied
              ReduceStep(In(0, n), p), EncodeStep(Region{p.buffer, 0, h}, enc0, 5),
              EncodeStep(Region{p.buffer, h, n - h}, enc1, 6), CopyStep(enc0, Out(0, e0)),
              CopyStep(enc1, Out(e0, e1))};
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
  ExpectBytes(out, 0, Encoded(spec, sum.data(), h, 5), what + " enc0");
  ExpectBytes(out, e0, Encoded(spec, sum.data() + h, n - h, 6), what + " enc1");
  if (keep) EXPECT_EQ(0, std::memcmp(out.data() + e0 + e1, sum.data(), n * 4)) << what;

  const std::vector<EncodedSpan> spans = {{0, false, h}, {h, false, n - h}};
  std::vector<float> residual(n, 3.0f);  // stale: the stores overwrite it
  CodecFeedback fb;
  fb.residual = residual.data();
  fb.spans = &spans;
  const std::vector<float> fed = Run(rs, spec, op, 2, in, fb);
  ExpectBytes(fed, 0, Encoded(spec, sum.data(), h, 5), what + " enc0 with feedback");
  ExpectBytes(fed, e0, Encoded(spec, sum.data() + h, n - h, 6), what + " enc1 with feedback");
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
    const Region p = Tmp(0, n);
    const size_t e0 = EncodedElements(spec, h), e1 = EncodedElements(spec, n - h);
    const Region enc0 = Tmp(n, e0), enc1 = Tmp(n + e0, e1);
    RankSchedule rs;
    rs.input_count = 2 * n;
    rs.output_count = e0 + e1;
    rs.scratch_count = n + e0 + e1;
    rs.steps = {CopyStep(In(n, n), p), ReduceStep(In(0, n), p), EncodeStep(Region{p.buffer, 0, h}, enc0, 5),
                EncodeStep(Region{p.buffer, h, n - h}, enc1, 6), CopyStep(enc0, Out(0, e0)),
                CopyStep(enc1, Out(e0, e1))};
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
    ExpectBytes(out, 0, Encoded(spec, sum.data(), h, 5), what + " enc0");
    ExpectBytes(out, e0, Encoded(spec, sum.data() + h, n - h, 6), what + " enc1");
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

// The owner's phase-1 chain of the hierarchical allreduce, resolved: acc (what arrived) +=
// the input lane, then encodes of two parts of acc (with error feedback stored for the first).
struct SinkCase {
  std::vector<float> received, input, residual_whole, residual_streamed;
  std::vector<std::vector<uint8_t>> whole, streamed;  // the encodings
  std::vector<ChainStep> Steps(const weftCompression& spec, std::vector<std::vector<uint8_t>>* enc,
                               std::vector<float>* residual, size_t cut) const {
    const size_t n = received.size();
    std::vector<ChainStep> steps(3);
    steps[0].op = StepOp::kReduce;
    steps[0].src = input.data();
    const size_t parts[2][2] = {{0, cut}, {cut, n - cut}};
    enc->assign(2, {});
    for (int k = 0; k < 2; ++k) {
      ChainStep& e = steps[1 + k];
      e.op = StepOp::kEncode;
      e.offset = parts[k][0];
      e.count = parts[k][1];
      (*enc)[k].assign(codec::EncodedBytes(spec, e.count), 0);
      e.encoded = (*enc)[k].data();
      e.stream = 77 + k;
      if (k == 0) e.residual = residual->data();
    }
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
