// Patterns shared by the schedule generators: schedule set-up, chunk arithmetic, rank orders
// (chain, binomial tree), and composition of sub-schedules (EmbedSchedule), so that
// hierarchical algorithms are built from the flat generators applied to subgroups instead of
// being written by hand per case.
//
// Everything here is header-only and pure (no I/O); generators stay pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "common/status.h"

namespace weft {

// A schedule for `request` with every rank present and no steps yet.
inline Schedule NewSchedule(const ScheduleRequest& request, const std::string& algorithm) {
  Schedule s;
  s.collective = request.collective;
  s.algorithm = algorithm;
  s.nranks = request.nranks;
  s.count = request.count;
  s.root = request.root;
  s.scope = request.scope;
  s.ranks.resize(request.nranks > 0 ? request.nranks : 0);
  return s;
}

// The ranks a generator builds steps for: request.scope's one rank (the executor's plan) or
// all of them (checker, simulator). Generators whose ranks' steps are independent loop over
// this instead of [0, p), which makes one rank's plan cost that rank's steps only.
inline std::vector<int> RanksToBuild(const ScheduleRequest& request) {
  std::vector<int> ranks;
  if (!request.scope.all()) {
    if (request.scope.rank < request.nranks) ranks.push_back(request.scope.rank);
    return ranks;
  }
  for (int r = 0; r < request.nranks; ++r) ranks.push_back(r);
  return ranks;
}

// Common argument checks every generator does first.
inline Status CheckRequestBasics(const ScheduleRequest& request) {
  if (request.nranks < 1)
    return InvalidArgument("nranks " + std::to_string(request.nranks) + " must be >= 1");
  if ((request.collective == Collective::kBroadcast || request.collective == Collective::kReduce) &&
      (request.root < 0 || request.root >= request.nranks))
    return InvalidArgument("root " + std::to_string(request.root) + " out of range [0, " +
                           std::to_string(request.nranks) + ")");
  return OkStatus();
}

// One pipeline chunk of a segment: [offset, offset + count).
struct Chunk {
  size_t offset;
  size_t count;
};

// Splits the segment [offset, offset + n) into pieces of at most `chunk_elems` (0 = one
// piece). An empty segment gives no chunks: nothing is sent for it.
inline std::vector<Chunk> SplitChunks(size_t offset, size_t n, size_t chunk_elems) {
  std::vector<Chunk> chunks;
  if (n == 0) return chunks;
  size_t step = chunk_elems == 0 ? n : chunk_elems;
  for (size_t o = 0; o < n; o += step) chunks.push_back(Chunk{offset + o, std::min(step, n - o)});
  return chunks;
}

// Sends `send` and receives into `recv` chunk by chunk, interleaved (send chunk j, recv chunk
// j, ...), so that with in-order issue and a bounded window both directions progress; the two
// regions may differ in size by a few elements (uneven parts).
template <typename EmitSend, typename EmitRecv>
void InterleaveChunks(const Region& send, const Region& recv, size_t chunk_elems,
                      EmitSend emit_send, EmitRecv emit_recv) {
  std::vector<Chunk> a = SplitChunks(send.offset, send.count, chunk_elems);
  std::vector<Chunk> b = SplitChunks(recv.offset, recv.count, chunk_elems);
  for (size_t j = 0; j < std::max(a.size(), b.size()); ++j) {
    if (j < a.size()) emit_send(Region{send.buffer, a[j].offset, a[j].count}, j);
    if (j < b.size()) emit_recv(Region{recv.buffer, b[j].offset, b[j].count}, j);
  }
}

// Channel for the i-th chunk: round-robin over the policy's channels.
inline uint16_t ChunkChannel(const ChunkPolicy& policy, size_t i) {
  int channels = policy.channels < 1 ? 1 : policy.channels;
  return static_cast<uint16_t>(i % static_cast<size_t>(channels));
}

inline int Mod(int a, int p) { return ((a % p) + p) % p; }

// Binomial tree rooted at `root` over p ranks (relative rank v = r - root): the parent of v is
// v with its lowest set bit cleared; children are v + 2^k for 2^k below v's lowest set bit.
inline int BinomialParent(int rank, int root, int p) {
  int v = Mod(rank - root, p);
  if (v == 0) return -1;
  return Mod((v & (v - 1)) + root, p);
}
// Children in the order a broadcast should serve them: largest subtree first.
inline std::vector<int> BinomialChildren(int rank, int root, int p) {
  int v = Mod(rank - root, p);
  std::vector<int> children;
  int limit = 1;
  while (limit < p) limit <<= 1;
  int low = v == 0 ? limit : (v & -v);
  for (int mask = low >> 1; mask >= 1; mask >>= 1)
    if (v + mask < p) children.push_back(Mod(v + mask + root, p));
  return children;
}

// NCCL's double binary tree (ncclGetBtree): tree 0's parent of rank r with lowest set bit b is
// (r ^ b) | (b << 1), or r ^ b when that is out of range; rank 0 is the root. Tree 1 is the
// mirror (even p) or the shift by one (odd p) of tree 0. One definition for the generator
// (allreduce_tree.cc) and the cost model (src/tune/analytic_model.cc), which must time it.
inline int BtreeParent(int r, int p) {
  if (r == 0) return -1;
  int bit = 1;
  while (!(r & bit)) bit <<= 1;
  int up = (r ^ bit) | (bit << 1);
  if (up >= p) up = r ^ bit;
  return up;
}
// Parent of rank r in tree t (0 or 1), -1 at the root.
inline int DoubleTreeParent(int t, int r, int p) {
  if (t == 0) return BtreeParent(r, p);
  if (p % 2 == 0) {
    int u = BtreeParent(p - 1 - r, p);
    return u < 0 ? -1 : p - 1 - u;
  }
  int u = BtreeParent(Mod(r - 1, p), p);
  return u < 0 ? -1 : Mod(u + 1, p);
}

inline int CeilLog2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
inline int FloorPow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// Folding p ranks onto the largest power of two p2 <= p (recursive doubling/halving for
// non-powers of two): the first 2*rem ranks pair up (even r hands its data to r+1 and sits
// out), the rest take part directly. Participant v stands for the contiguous ranks
// [FirstRank(v), FirstRank(v+1)).
struct Fold {
  int p2 = 1, rem = 0;
  explicit Fold(int p) : p2(FloorPow2(p)), rem(p - FloorPow2(p)) {}
  int Participant(int r) const { return r < 2 * rem ? (r % 2 ? r / 2 : -1) : r - rem; }
  int RankOf(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  int FirstRank(int v) const { return v < rem ? 2 * v : v + rem; }
};

// Grows each rank's scratch_count to cover every Scratch region its steps name, and each
// peer's to cover the remote regions read from it (one place, so generators never get the
// arithmetic wrong).
// FitScratchStep does it for one step of `rank` (what EmbedSchedule uses for the steps it
// appends, so that composing k sub-schedules costs their steps, not k passes over the parent).
inline void FitScratchStep(Schedule* s, int rank, const Step& st) {
  auto grow = [](RankSchedule& rs, const Region& r) {
    if (r.buffer == Buffer::kScratch && r.count > 0)
      rs.scratch_count = std::max(rs.scratch_count, r.offset + r.count);
  };
  grow(s->ranks[rank], st.src);
  grow(s->ranks[rank], st.dst);
  if ((st.op == StepOp::kDirectRead || st.op == StepOp::kDirectReduce) && st.peer >= 0 &&
      st.peer < static_cast<int>(s->ranks.size()))
    grow(s->ranks[st.peer], st.remote);
}
inline void FitScratch(Schedule* s) {
  for (int r = 0; r < static_cast<int>(s->ranks.size()); ++r)
    for (const Step& st : s->ranks[r].steps) FitScratchStep(s, r, st);
}

// Where one buffer of a sub-schedule lands in the parent: `buffer` at element `base`.
struct BufferPlacement {
  Buffer buffer = Buffer::kInput;
  size_t base = 0;
};

// How a sub-schedule over members[0..m) is placed into the parent schedule.
struct Embedding {
  std::vector<int> members;  // sub rank i -> parent rank members[i]
  // Placement of sub rank i's buffer b in the parent; called per (sub rank, buffer).
  std::function<BufferPlacement(int sub_rank, Buffer buffer)> place;
  uint16_t channel_offset = 0;
  // Sub-schedules of reductions end with kFinalize; inside a bigger reduction that is too
  // early (only part of the ranks have contributed), so the parent drops them and adds its
  // own where the element is complete.
  bool drop_finalize = true;
};

inline Region PlaceRegion(const Embedding& e, int sub_rank, const Region& r) {
  BufferPlacement p = e.place(sub_rank, r.buffer);
  return Region{p.buffer, p.base + r.offset, r.count};
}

// Appends every step of `sub` to the parent ranks it maps to (program order kept per rank),
// remapping peers, regions and channels. Scratch counts grow to cover the appended steps
// (FitScratchStep; steps already in the parent were fitted when they were added).
inline void EmbedSchedule(const Schedule& sub, const Embedding& e, Schedule* parent) {
  for (int i = 0; i < static_cast<int>(sub.ranks.size()); ++i) {
    const int member = e.members[i];
    for (const Step& st : sub.ranks[i].steps) {
      if (e.drop_finalize && st.op == StepOp::kFinalize) continue;
      Step out = st;
      out.peer = st.peer >= 0 ? e.members[st.peer] : -1;
      out.to = st.to >= 0 ? e.members[st.to] : -1;  // fused steps' forward
      out.channel = static_cast<uint16_t>(st.channel + e.channel_offset);
      out.to_channel = static_cast<uint16_t>(st.to_channel + e.channel_offset);
      out.src = PlaceRegion(e, i, st.src);
      out.dst = PlaceRegion(e, i, st.dst);
      if (st.peer >= 0) out.remote = PlaceRegion(e, st.peer, st.remote);
      parent->ranks[member].steps.push_back(out);
      FitScratchStep(parent, member, out);
    }
  }
}

// The largest scratch_count over `ranks`: a fresh scratch base for the next embedded
// sub-schedule, so that concurrently running subs never share scratch (no false hazards).
inline size_t ScratchTop(const Schedule& s, const std::vector<int>& ranks) {
  size_t top = 0;
  for (int r : ranks) top = std::max(top, s.ranks[r].scratch_count);
  return top;
}

// The usual placement: every sub buffer maps to (parent buffer, base) the same on all members.
inline std::function<BufferPlacement(int, Buffer)> SamePlacement(BufferPlacement input,
                                                                 BufferPlacement output,
                                                                 BufferPlacement scratch) {
  return [=](int, Buffer b) {
    return b == Buffer::kInput ? input : b == Buffer::kOutput ? output : scratch;
  };
}

// Part i of `parts` of an allreduce cut along the vector (the pipelined hierarchical
// allreduces): `build_part` makes the schedule of the sub-request for that part's elements,
// which is laid out at the part's offset of input and output, with fresh scratch, so that
// parts never share a region. An empty part adds nothing.
inline Status EmbedAllReducePart(
    const ScheduleRequest& request, size_t parts, size_t i,
    const std::function<StatusOr<Schedule>(const ScheduleRequest&)>& build_part, Schedule* parent) {
  ScheduleRequest sub = request;
  const size_t off = PartOffset(request.count, static_cast<int>(parts), static_cast<int>(i));
  sub.count = PartSize(request.count, static_cast<int>(parts), static_cast<int>(i));
  if (sub.count == 0) return OkStatus();
  WEFT_ASSIGN_OR_RETURN(Schedule part, build_part(sub));
  Embedding e;
  e.members.resize(request.nranks);
  for (int r = 0; r < request.nranks; ++r) e.members[r] = r;
  e.drop_finalize = false;  // each part is a complete allreduce of its elements
  e.place = SamePlacement({Buffer::kInput, off}, {Buffer::kOutput, off},
                          {Buffer::kScratch, ScratchTop(*parent, e.members)});
  EmbedSchedule(part, e, parent);
  return OkStatus();
}

// The first registered of `names` for `collective` (sub-algorithm choice with fallbacks).
inline std::string FirstRegistered(Collective collective, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (FindAlgorithm(collective, n) != nullptr) return n;
  return *names.begin();
}

// Builds the sub-schedule of `algorithm` for `collective` over `members` and embeds it.
inline Status EmbedAlgorithm(Collective collective, const std::string& algorithm,
                             ScheduleRequest sub_request, const Embedding& e, Schedule* parent) {
  sub_request.collective = collective;
  sub_request.nranks = static_cast<int>(e.members.size());
  sub_request.groups.clear();
  // The parent's scope names a parent rank, not a sub rank, and compositions size scratch from
  // every member's (ScratchTop): sub-schedules are built for all members; BuildSchedule trims
  // the parent to its scope.
  sub_request.scope = PlanScope::AllRanks();
  const AlgorithmInfo* info = FindAlgorithm(collective, algorithm);
  if (info == nullptr)
    return InternalError(std::string("sub-algorithm ") + CollectiveName(collective) + ":" +
                         algorithm + " is not registered");
  StatusOr<Schedule> sub = info->build(sub_request);
  if (!sub.ok())
    return sub.status().WithContext(std::string("sub-schedule ") + CollectiveName(collective) +
                                    ":" + algorithm);
  EmbedSchedule(*sub, e, parent);
  return OkStatus();
}

// The groups of a request, validated: every rank in exactly one group. Empty request.groups
// gives one group of all ranks.
inline StatusOr<std::vector<std::vector<int>>> ValidGroups(const ScheduleRequest& request) {
  std::vector<std::vector<int>> groups = request.groups;
  if (groups.empty()) {
    groups.emplace_back();
    for (int r = 0; r < request.nranks; ++r) groups[0].push_back(r);
    return groups;
  }
  std::vector<int> seen(request.nranks, 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) return InvalidArgument("groups[" + std::to_string(g) + "] is empty");
    for (int r : groups[g]) {
      if (r < 0 || r >= request.nranks)
        return InvalidArgument("groups[" + std::to_string(g) + "] holds rank " +
                               std::to_string(r) + " outside [0, " +
                               std::to_string(request.nranks) + ")");
      if (seen[r]++)
        return InvalidArgument("rank " + std::to_string(r) + " is in more than one group");
    }
  }
  for (int r = 0; r < request.nranks; ++r)
    if (!seen[r]) return InvalidArgument("rank " + std::to_string(r) + " is in no group");
  return groups;
}

inline bool AlwaysApplicable(const ScheduleRequest&) { return true; }

}  // namespace weft
