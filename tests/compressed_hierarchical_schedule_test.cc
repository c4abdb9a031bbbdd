// The hierarchical compressed allreduce and the compressed all-to-all(v) as schedules
// (algorithms/allreduce_compressed_hierarchical.cc, alltoallv_compressed.cc): the checker
// proves them (host shapes 1x1..4x4 and uneven hosts; uneven and empty blocks) and rejects
// planted defects (a host's partial sum re-quantized, the owner keeping its own float sum,
// compressing inside the host, a receiver that does not decode, a host member decoding bytes
// the lane's owner never forwarded).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/compressed.h"
#include "check/checker.h"
#include "kernels/codec.h"
#include "weft/weft_compress.h"

namespace weft {
namespace {

weftCompression Spec(weftCodec_t codec, uint32_t block = 128) {
  weftCompression s;
  weftCompressionDefault(codec, &s);
  s.block = block;
  s.ratio = 0.25f;
  return s;
}

// Hosts of the given sizes, ranks numbered host after host.
std::vector<std::vector<int>> Hosts(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> hosts;
  int next = 0;
  for (int n : sizes) {
    hosts.emplace_back();
    for (int i = 0; i < n; ++i) hosts.back().push_back(next++);
  }
  return hosts;
}

ScheduleRequest HierRequest(const std::vector<std::vector<int>>& hosts, size_t count,
                            const weftCompression& spec) {
  ScheduleRequest r;
  r.collective = Collective::kAllReduce;
  r.nranks = 0;
  for (const auto& h : hosts) r.nranks += static_cast<int>(h.size());
  r.count = count;
  r.codec = spec;
  r.groups = hosts;
  return r;
}

const AlgorithmInfo& Hierarchical() {
  const AlgorithmInfo* a = FindCompressedAlgorithm(Collective::kAllReduce, "compressed_hierarchical");
  EXPECT_NE(a, nullptr);
  return *a;
}

std::string Shape(const std::vector<std::vector<int>>& hosts) {
  std::string s;
  for (const auto& h : hosts) s += (s.empty() ? "" : ",") + std::to_string(h.size());
  return s;
}

TEST(HierarchicalCompressedScheduleProof, HostShapesOneByOneToFourByFour) {
  int proofs = 0;
  for (int H = 1; H <= 4; ++H)
    for (int L = 1; L <= 4; ++L)
      for (weftCodec_t c : {weftCodecInt8, weftCodecFp8E4M3, weftCodecSign1})
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{37}, size_t{300}}) {
          const ScheduleRequest r = HierRequest(Hosts(std::vector<int>(H, L)), count, Spec(c, 16));
          ASSERT_TRUE(Hierarchical().applicable(r));
          const Status st = ProveAlgorithm(Hierarchical(), r);  // in and out of place, avg
          ASSERT_TRUE(st.ok()) << H << "x" << L << " " << weftCodecName(c) << " count " << count
                               << ": " << st.message();
          ++proofs;
        }
  RecordProperty("proofs", proofs);
}

TEST(HierarchicalCompressedScheduleProof, UnevenHostsAndInterleavedRanks) {
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{
           {1, 2}, {2, 1}, {3, 1, 2}, {4, 1}, {1, 1, 3}, {2, 3, 4}, {4, 2, 3, 1}})
    for (size_t count : {size_t{1}, size_t{5}, size_t{101}, size_t{1000}}) {
      const ScheduleRequest r = HierRequest(Hosts(sizes), count, Spec(weftCodecInt4, 32));
      const Status st = ProveAlgorithm(Hierarchical(), r);
      ASSERT_TRUE(st.ok()) << Shape(r.groups) << " count " << count << ": " << st.message();
    }
  // Hosts whose ranks are not numbered host after host.
  ScheduleRequest r = HierRequest({{0, 3, 4}, {1, 5}, {2}}, 77, Spec(weftCodecInt8, 16));
  const Status st = ProveAlgorithm(Hierarchical(), r);
  EXPECT_TRUE(st.ok()) << st.message();
}

// Pieces in a software pipeline (request.chunk.chunk_elems: pieces of that many elements):
// messages of several pieces in flight at once still match, and every piece is right.
TEST(HierarchicalCompressedScheduleProof, PipelinedPieces) {
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{2, 2}, {3, 1, 2}, {2, 2, 2}, {1, 4}})
    for (size_t chunk : {size_t{7}, size_t{20}, size_t{64}})
      for (size_t count : {size_t{5}, size_t{95}, size_t{300}}) {
        ScheduleRequest r = HierRequest(Hosts(sizes), count, Spec(weftCodecInt8, 16));
        r.chunk.chunk_elems = chunk;
        const Status st = ProveAlgorithm(Hierarchical(), r);
        ASSERT_TRUE(st.ok()) << Shape(r.groups) << " chunk " << chunk << " count " << count << ": "
                             << st.message();
      }
  // 64 MiB of float32 on 2 x 2 is cut into 4 pieces without a chunk size.
  StatusOr<Schedule> s =
      BuildSchedule(Hierarchical(), HierRequest(Hosts({2, 2}), size_t{16} << 20, Spec(weftCodecInt8)));
  ASSERT_TRUE(s.ok());
  int encodes = 0;
  for (const Step& st : s->ranks[0].steps) encodes += st.op == StepOp::kEncode;
  EXPECT_EQ(encodes, 4 * 3) << "per piece: 2 host-sum halves and 1 reduced half";
}

// Across hosts only encodings; inside the host float32 lanes to their owner (full precision)
// and the owner's encodings of the result back (the same bytes every rank decodes).
TEST(HierarchicalCompressedScheduleProof, OnlyEncodingsCrossHosts) {
  const ScheduleRequest r = HierRequest(Hosts({2, 2}), 1024, Spec(weftCodecInt8));
  StatusOr<Schedule> s = BuildSchedule(Hierarchical(), r);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const size_t lane_encoded_half = EncodedElements(r.codec, 256);
  for (int rank = 0; rank < 4; ++rank) {
    size_t across = 0, inside = 0;
    for (const Step& st : s->ranks[rank].steps) {
      if (st.op != StepOp::kSend) continue;
      const bool same_host = (st.peer / 2) == (rank / 2);
      (same_host ? inside : across) += st.src.count;
    }
    EXPECT_EQ(across, 2 * lane_encoded_half) << "rank " << rank << ": contribution + reduced part";
    EXPECT_EQ(inside, 512u + 2 * lane_encoded_half)
        << "rank " << rank << ": its other lane in float32 to the owner, the encodings of its own "
                              "lane (both halves) back";
  }
}

void ExpectRejected(const Schedule& s, const ScheduleRequest& r, const std::string& why) {
  CheckOptions o;
  o.avg = true;
  const Status st = CheckSchedule(s, r, o);
  ASSERT_FALSE(st.ok()) << "accepted a schedule that should fail with: " << why;
  EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
}

int FindStep(const Schedule& s, int r, StepOp op, int k = 0) {
  const auto& steps = s.ranks[r].steps;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].op == op && k-- == 0) return static_cast<int>(i);
  return -1;
}

// On 3 hosts the owner re-encodes its sum after two hosts' contributions (a chain that
// re-quantizes at every hop), or encodes the decoded result once more.
TEST(HierarchicalCompressedScheduleDefects, ReQuantizedPartialSum) {
  const ScheduleRequest r = HierRequest(Hosts({2, 2, 2}), 120, Spec(weftCodecInt8, 16));
  StatusOr<Schedule> s = BuildSchedule(Hierarchical(), r);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(CheckSchedule(*s, r, CheckOptions()).ok());
  const int first_reduce = FindStep(*s, 0, StepOp::kDecodeReduce);
  const int reencode = FindStep(*s, 0, StepOp::kEncode, 3);  // after the 3 contributions
  ASSERT_GE(first_reduce, 0);
  ASSERT_GE(reencode, 0);
  const Step early = s->ranks[0].steps[reencode];
  s->ranks[0].steps.insert(s->ranks[0].steps.begin() + first_reduce + 1, early);
  ExpectRejected(*s, r, "re-quantizes a partial sum");
}

// Compressing inside the host too: rank 1 sends its lane encoded, the owner decodes it into
// the host sum and so encodes a partial sum that went through the codec before.
TEST(HierarchicalCompressedScheduleDefects, CompressingInsideTheHost) {
  const ScheduleRequest r = HierRequest(Hosts({2, 2}), 64, Spec(weftCodecInt8, 16));
  StatusOr<Schedule> s = BuildSchedule(Hierarchical(), r);
  ASSERT_TRUE(s.ok());
  // Rank 1 sends lane 0 (input[0..32)) to rank 0; rank 0 receives it into a member region.
  auto& s1 = s->ranks[1].steps;
  auto& s0 = s->ranks[0].steps;
  const int send = FindStep(*s, 1, StepOp::kSend);
  const int recv = FindStep(*s, 0, StepOp::kRecv);
  ASSERT_GE(send, 0);
  ASSERT_GE(recv, 0);
  const Region lane = s1[send].src;
  const Region member = s0[recv].dst;
  const size_t enc = EncodedElements(r.codec, lane.count);
  const Region tmp1 = Tmp(s->ranks[1].scratch_count, enc);
  s->ranks[1].scratch_count += enc;
  s1[send] = SendStep(0, tmp1);
  s1.insert(s1.begin() + send, EncodeStep(lane, tmp1, 99));
  const Region tmp0 = Tmp(s->ranks[0].scratch_count, enc);
  s->ranks[0].scratch_count += enc;
  s0[recv] = RecvStep(1, tmp0);
  s0.insert(s0.begin() + recv + 1, DecodeStep(tmp0, member));
  ExpectRejected(*s, r, "re-quantizes a partial sum");
}

// The owner of a sub-slice writes its float32 sum into its output instead of decoding the
// bytes it sent: the contributions are right, the bits would differ from every other rank's.
TEST(HierarchicalCompressedScheduleDefects, OwnerKeepsItsOwnFloatSum) {
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{2, 2}, {1, 1}, {3, 2}}) {
    const ScheduleRequest r = HierRequest(Hosts(sizes), 90, Spec(weftCodecInt8, 16));
    StatusOr<Schedule> s = BuildSchedule(Hierarchical(), r);
    ASSERT_TRUE(s.ok());
    auto& steps = s->ranks[0].steps;
    const int reencode = FindStep(*s, 0, StepOp::kEncode, static_cast<int>(sizes.size()));
    ASSERT_GE(reencode, 0) << Shape(r.groups);
    const Region sum = steps[reencode].src;
    bool replaced = false;
    for (Step& st : steps)
      if (st.op == StepOp::kDecode && st.dst.buffer == Buffer::kOutput && st.dst.offset == 0) {
        st = CopyStep(sum, st.dst);
        replaced = true;
      }
    ASSERT_TRUE(replaced);
    ExpectRejected(*s, r, "would not hold bitwise-identical results");
  }
}

// Phase 6: a member decodes its partner's lane from the encodings the owner forwards. A member
// that decodes stale bytes instead (the owner's forward and its receive dropped) is refused.
TEST(HierarchicalCompressedScheduleDefects, MemberDecodesBytesItNeverReceived) {
  const ScheduleRequest r = HierRequest(Hosts({2, 2}), 64, Spec(weftCodecInt8, 16));
  StatusOr<Schedule> s = BuildSchedule(Hierarchical(), r);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(CheckSchedule(*s, r, CheckOptions()).ok());
  // Rank 0 owns lane 0 and forwards its encodings to rank 1: the last sends of rank 0 to rank 1
  // and the last receives of rank 1 from rank 0.
  auto& s0 = s->ranks[0].steps;
  auto& s1 = s->ranks[1].steps;
  int send = -1, recv = -1;
  for (size_t i = 0; i < s0.size(); ++i)
    if (s0[i].op == StepOp::kSend && s0[i].peer == 1) send = static_cast<int>(i);
  for (size_t i = 0; i < s1.size(); ++i)
    if (s1[i].op == StepOp::kRecv && s1[i].peer == 0) recv = static_cast<int>(i);
  ASSERT_GE(send, 0);
  ASSERT_GE(recv, 0);
  ASSERT_EQ(s0[send].src.buffer, Buffer::kScratch) << "an encoding is forwarded, not float32";
  s0.erase(s0.begin() + send);
  s1.erase(s1.begin() + recv);
  ExpectRejected(*s, r, "decodes what was never encoded");
}

// ---- all-to-all(v) ----

ScheduleRequest AllToAllvRequest(int p, const std::vector<size_t>& counts, const weftCompression& spec) {
  ScheduleRequest r;
  r.collective = Collective::kAllToAllv;
  r.nranks = p;
  r.codec = spec;
  r.a2av_counts = counts;
  r.a2av_send_displs.assign(p * p, 0);
  r.a2av_recv_displs.assign(p * p, 0);
  for (int a = 0; a < p; ++a) {
    size_t send = 0, recv = 0;
    for (int b = 0; b < p; ++b) {
      r.a2av_send_displs[a * p + b] = send;
      send += counts[a * p + b];
      r.a2av_recv_displs[a * p + b] = recv;
      recv += counts[b * p + a];
    }
  }
  return r;
}

// float32 (4-byte elements) and bf16 (2-byte: ScheduleRequest::elem_bytes) tokens alike.
TEST(CompressedAllToAllvScheduleProof, UnevenAndEmptyBlocks) {
  const AlgorithmInfo* a = FindCompressedAlgorithm(Collective::kAllToAllv);
  ASSERT_NE(a, nullptr);
  for (size_t elem_bytes : {4, 2})
    for (weftCodec_t c : {weftCodecFp8E4M3, weftCodecFp8E5M2, weftCodecInt8, weftCodecBf16, weftCodecTopK})
      for (int p = 1; p <= 6; ++p) {
        std::vector<size_t> counts(p * p);
        for (int i = 0; i < p * p; ++i) counts[i] = (i * 37 + 11) % 5 == 0 ? 0 : (i * 53) % 300 + 1;
        ScheduleRequest r = AllToAllvRequest(p, counts, Spec(c));
        r.elem_bytes = elem_bytes;
        ASSERT_TRUE(a->applicable(r));
        const Status st = ProveAlgorithm(*a, r);
        ASSERT_TRUE(st.ok()) << weftCodecName(c) << " p=" << p << " elem_bytes=" << elem_bytes
                             << ": " << st.message();
      }
}

// On bf16 tokens the encoded regions count 2-byte elements: each holds its block's exact
// encoded size in as few of them as fit; other element sizes are refused by name. The
// allgather's schedule on bf16 values is proved too.
TEST(CompressedAllToAllvScheduleProof, EncodedRegionsCountTheCallsElements) {
  const AlgorithmInfo* a = FindCompressedAlgorithm(Collective::kAllToAllv);
  ScheduleRequest r = AllToAllvRequest(2, {0, 301, 0, 0}, Spec(weftCodecFp8E4M3));
  for (size_t elem_bytes : {4, 2}) {
    r.elem_bytes = elem_bytes;
    StatusOr<Schedule> s = BuildSchedule(*a, r);
    ASSERT_TRUE(s.ok()) << s.status().message();
    const size_t bytes = codec::EncodedBytes(r.codec, 301);  // 3 scales + 301 codes
    ASSERT_EQ(s->ranks[0].steps[0].op, StepOp::kEncode);
    EXPECT_EQ(s->ranks[0].steps[0].dst.count, (bytes + elem_bytes - 1) / elem_bytes);
  }
  r.elem_bytes = 3;
  StatusOr<Schedule> s = BuildSchedule(*a, r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not elements of 3 bytes"), std::string::npos)
      << s.status().message();
  // The allgather on bf16 values, proved in and out of place, pipelined or not.
  ScheduleRequest g;
  g.collective = Collective::kAllGather;
  g.nranks = 3;
  g.count = 301;
  g.codec = Spec(weftCodecFp8E4M3);
  g.elem_bytes = 2;
  for (size_t chunk : {size_t{0}, size_t{64}}) {
    g.chunk.chunk_elems = chunk;
    const Status st = ProveAlgorithm(*FindCompressedAlgorithm(Collective::kAllGather), g);
    EXPECT_TRUE(st.ok()) << "chunk " << chunk << ": " << st.message();
  }
}

// Pipelined pieces: every block cut into the same pieces, several in flight; blocks smaller
// than the piece count (empty pieces) and empty blocks included.
TEST(CompressedAllToAllvScheduleProof, PipelinedPieces) {
  const AlgorithmInfo* a = FindCompressedAlgorithm(Collective::kAllToAllv);
  ASSERT_NE(a, nullptr);
  for (int p = 1; p <= 5; ++p)
    for (size_t chunk : {size_t{3}, size_t{50}}) {
      std::vector<size_t> counts(p * p);
      for (int i = 0; i < p * p; ++i) counts[i] = (i * 37 + 11) % 5 == 0 ? 0 : (i * 53) % 300 + 1;
      ScheduleRequest r = AllToAllvRequest(p, counts, Spec(weftCodecFp8E4M3));
      r.chunk.chunk_elems = chunk;
      const Status st = ProveAlgorithm(*a, r);
      ASSERT_TRUE(st.ok()) << "p=" << p << " chunk=" << chunk << ": " << st.message();
    }
}

// Every block crosses the wire encoded: the bytes sent are the encoded sizes.
TEST(CompressedAllToAllvScheduleProof, SendsEncodedBlocks) {
  const int p = 4;
  const ScheduleRequest r = AllToAllvRequest(p, std::vector<size_t>(p * p, 1024), Spec(weftCodecFp8E4M3));
  CheckStats stats;
  StatusOr<Schedule> s = BuildSchedule(*FindCompressedAlgorithm(Collective::kAllToAllv), r);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(CheckScheduleWithStats(*s, r, CheckOptions(), &stats).ok());
  for (int q = 0; q < p; ++q)
    EXPECT_EQ(stats.elements_sent_by_rank[q], 3 * EncodedElements(r.codec, 1024));
  EXPECT_LT(EncodedElements(r.codec, 1024), 1024u * 3 / 10) << "fp8: about a quarter of float32";
}

TEST(CompressedAllToAllvScheduleDefects, ReceiverThatDoesNotDecode) {
  const int p = 3;
  const ScheduleRequest r = AllToAllvRequest(p, std::vector<size_t>(p * p, 40), Spec(weftCodecFp8E4M3));
  StatusOr<Schedule> s = BuildSchedule(*FindCompressedAlgorithm(Collective::kAllToAllv), r);
  ASSERT_TRUE(s.ok());
  // Rank 2 drops the decode of the block from rank 0: its output block stays unwritten.
  auto& steps = s->ranks[2].steps;
  const int d = FindStep(*s, 2, StepOp::kDecode);
  ASSERT_GE(d, 0);
  steps.erase(steps.begin() + d);
  const Status st = CheckSchedule(*s, r, CheckOptions());
  EXPECT_FALSE(st.ok());
  // Rank 1 encodes its block for rank 0 twice (a second lossy hop).
  s = BuildSchedule(*FindCompressedAlgorithm(Collective::kAllToAllv), r);
  ASSERT_TRUE(s.ok());
  auto& s1 = s->ranks[1].steps;
  const int e = FindStep(*s, 1, StepOp::kEncode);
  ASSERT_GE(e, 0);
  const Region enc = s1[e].dst;
  const Region again = Tmp(s->ranks[1].scratch_count, 40);
  s->ranks[1].scratch_count += 40;
  s1.insert(s1.begin() + e + 1, DecodeStep(enc, again));
  s1.insert(s1.begin() + e + 2, EncodeStep(again, enc, 50));
  ExpectRejected(*s, r, "re-quantizes a partial sum");  // one contribution, quantized twice
}

}  // namespace
}  // namespace weft
