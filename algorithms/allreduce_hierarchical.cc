// Allreduce, hierarchical split-rail (groups = hosts): with K = the smallest group size and
// the vector cut into K slices,
//   1. inside each group, slice l is reduced to the group's local rank l (a reduce-scatter
//      built from K flat reduces);
//   2. across groups, the local ranks l (one "rail") allreduce slice l, in place;
//   3. inside each group, local rank l broadcasts slice l (an allgather built from K flat
//      broadcasts).
// Only K/p of the data crosses the slow tier per rank, on K rails in parallel. Uneven groups
// work: ranks beyond the K-th of a larger group contribute in step 1 and receive in step 3.
// Every phase is a flat generator applied to a subgroup and embedded (patterns.h).
//
// hierarchical_direct, the variant for one direct transport per host (groups_mappable):
// phases 1 and 3 use direct steps (group_direct.h): every member publishes its vector in its
// window and owner l reduces slice l straight from the members' windows in group order; after
// the rail, every member reads the finished slices from the owners' windows. Only the rails
// send messages. Its signals are fences (a signal issues after every earlier step), so its
// pipeline parts overlap less than the message variant's: the selector's simulation decides
// which pays on a given fabric and size.
//
// Pipelining: the three phases run one after another on a given element, so for large
// messages the vector is cut into parts (about one chunk per rail slice each) and the whole
// three-phase schedule is laid out once per part. Parts touch disjoint elements and scratch,
// so the executor's window overlaps part i's cross-group phase (the slow tier) with part
// i+1's in-group reduce and part i-1's in-group broadcast.
#include <algorithm>

#include "algorithms/group_direct.h"
#include "algorithms/patterns.h"

namespace weft {
namespace {

// Rail l (local rank l of every group) allreduces the slice [off, off + cnt) in place in
// the output, and (`finalize`) finalizes it.
Status EmbedRail(const ScheduleRequest& request, const std::vector<std::vector<int>>& groups,
                 int l, size_t off, size_t cnt, bool finalize, Schedule* s) {
  const std::string rail_algo =
      FirstRegistered(Collective::kAllReduce, {"ring", "halving_doubling", "recursive_doubling"});
  ScheduleRequest sub = request;
  sub.root = 0;
  sub.count = cnt;
  sub.all_ranks_mappable = sub.groups_mappable = false;  // rails cross groups: messages
  Embedding rail;
  for (const auto& g : groups) rail.members.push_back(g[l]);
  rail.place = SamePlacement({Buffer::kOutput, off}, {Buffer::kOutput, off},
                             {Buffer::kScratch, ScratchTop(*s, rail.members)});
  WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kAllReduce, rail_algo, sub, rail, s));
  if (finalize)
    for (int r : rail.members) s->ranks[r].steps.push_back(FinalizeStep(Out(off, cnt)));
  return OkStatus();
}

// One pipeline part with direct steps inside the groups (request.groups_mappable).
StatusOr<Schedule> BuildOnePartDirect(const ScheduleRequest& request,
                                      const std::vector<std::vector<int>>& groups, int K) {
  Schedule s = NewSchedule(request, "hierarchical");
  const size_t n = request.count;
  for (RankSchedule& rs : s.ranks) rs.input_count = rs.output_count = n;
  std::vector<std::pair<size_t, size_t>> slices(K);
  for (int l = 0; l < K; ++l) slices[l] = {PartOffset(n, K, l), PartSize(n, K, l)};
  for (const auto& g : groups)
    DirectReduceToOwners(&s, g, n, In(0, n), Out(0, n), ScratchTop(s, g), slices);
  for (int l = 0; l < K; ++l)
    if (slices[l].second > 0)
      WEFT_RETURN_IF_ERROR(
          EmbedRail(request, groups, l, slices[l].first, slices[l].second, true, &s));
  for (const auto& g : groups)
    DirectShareFromOwners(&s, g, Out(0, n), Out(0, n), ScratchTop(s, g), slices);
  s.window = 32;
  return s;
}

// Which phases of one part the message variant lays out: the front (reduces to the slice
// owners, the rails), the back (the owners finalize and broadcast), or both.
enum class Phases { kFront, kBack, kAll };

// The phases `which` over the whole of `request` (one pipeline part); the direct variant
// always lays out all three.
StatusOr<Schedule> BuildOnePart(const ScheduleRequest& request, bool direct, Phases which) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  Schedule s = NewSchedule(request, "hierarchical");
  const size_t n = request.count;
  for (RankSchedule& rs : s.ranks) rs.input_count = rs.output_count = n;
  if (n == 0) return s;
  size_t k_slices = groups[0].size();
  for (const auto& g : groups) k_slices = std::min(k_slices, g.size());
  const int K = static_cast<int>(k_slices);
  if (direct) return BuildOnePartDirect(request, groups, K);
  const std::string reduce_algo = FirstRegistered(Collective::kReduce, {"chain", "binomial"});
  const std::string bcast_algo = FirstRegistered(Collective::kBroadcast, {"chain", "binomial"});
  std::vector<int> all(request.nranks);
  for (int r = 0; r < request.nranks; ++r) all[r] = r;
  ScheduleRequest sub = request;
  // Finalizes wait in the back: a finalize is a local step over the slice, so it waits for
  // the rail to finish, and in program order it would hold back this rank's part in the
  // other slices' reduces (and the next part's front) until then.
  for (int l = 0; l < K && which != Phases::kBack; ++l) {
    const size_t off = PartOffset(n, K, l), cnt = PartSize(n, K, l);
    if (cnt == 0) continue;
    sub.count = cnt;
    // 1. reduce slice l to local rank l of every group.
    for (const auto& g : groups) {
      Embedding e;
      e.members = g;
      e.place = SamePlacement({Buffer::kInput, off}, {Buffer::kOutput, off},
                              {Buffer::kScratch, ScratchTop(s, g)});
      sub.root = l;
      WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kReduce, reduce_algo, sub, e, &s));
    }
    // 2. rail l: allreduce of slice l across groups, in place in the output.
    WEFT_RETURN_IF_ERROR(EmbedRail(request, groups, l, off, cnt, false, &s));
  }
  for (int l = 0; l < K && which != Phases::kFront; ++l) {
    const size_t off = PartOffset(n, K, l), cnt = PartSize(n, K, l);
    if (cnt == 0) continue;
    sub.count = cnt;
    // 3. local rank l finalizes the finished slice l and broadcasts it inside its group.
    for (const auto& g : groups) s.ranks[g[l]].steps.push_back(FinalizeStep(Out(off, cnt)));
    for (const auto& g : groups) {
      if (g.size() == 1) continue;
      Embedding e;
      e.members = g;
      e.place = SamePlacement({Buffer::kOutput, off}, {Buffer::kOutput, off},
                              {Buffer::kScratch, ScratchTop(s, g)});
      sub.root = l;
      WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kBroadcast, bcast_algo, sub, e, &s));
    }
  }
  s.window = 32;
  return s;
}

constexpr size_t kMaxParts = 32;  // bounds schedule size; more parts add little overlap
// The direct variant publishes each part's whole vector in its window and reads the peers'
// windows: a part much larger than the cache makes both in-group phases DRAM-bound, and its
// fences (a signal waits for every earlier step, the previous part's rail included) keep the
// slow link idle for their whole length. Measured on 2 namespace hosts x 2 and x 4 ranks at
// 2 Gbit/s, 64 MiB float32: one part 360-470 ms, 8 parts of 8 MiB 417-423 ms, 32 parts of
// 2 MiB 298-312 ms (link bound 268). So a chunked direct schedule's parts hold at most
// kDirectPartElems elements (2 MiB of float32; up to kMaxParts) whatever the chunk size.
// Unchunked stays one part: on fast fabrics every part pays its fences' latency (a 128-rank
// fat tree at 16 MiB: 407 us in one part, 1664 us in eight), and the selector weighs both.
constexpr size_t kDirectPartElems = size_t{512} << 10;

size_t NumParts(const ScheduleRequest& request, size_t k, bool direct) {
  const size_t n = request.count;
  size_t parts = request.chunk.chunk_elems == 0 ? 1 : NumChunks(n, request.chunk.chunk_elems * k);
  if (direct && request.chunk.chunk_elems > 0) parts = std::max(parts, NumChunks(n, kDirectPartElems));
  return std::min(kMaxParts, parts);
}

// Lays out phases `which` of part i (of `parts`) over the elements it covers.
Status EmbedPart(const ScheduleRequest& request, size_t parts, size_t i, bool direct, Phases which,
                 Schedule* s) {
  return EmbedAllReducePart(
      request, parts, i,
      [&](const ScheduleRequest& sub) { return BuildOnePart(sub, direct, which); }, s);
}

StatusOr<Schedule> BuildAllReduceHierarchical(const ScheduleRequest& request, bool direct) {
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  size_t k = groups[0].size();
  for (const auto& g : groups) k = std::min(k, g.size());
  const size_t parts = NumParts(request, k, direct);
  if (parts <= 1) return BuildOnePart(request, direct, Phases::kAll);
  Schedule s = NewSchedule(request, "hierarchical");
  for (RankSchedule& rs : s.ranks) rs.input_count = rs.output_count = request.count;
  // Message variant: part i's back (finalize, broadcast) is laid out after part i+1's front,
  // so that a rank waiting for part i's rails to finish has already posted part i+1's
  // reduces and rails (in program order they would wait behind part i's back). The direct
  // variant's fences drain everything in flight anyway: its parts stay whole.
  for (size_t i = 0; i <= parts; ++i) {
    if (direct) {
      if (i < parts) WEFT_RETURN_IF_ERROR(EmbedPart(request, parts, i, true, Phases::kAll, &s));
      continue;
    }
    if (i < parts) WEFT_RETURN_IF_ERROR(EmbedPart(request, parts, i, false, Phases::kFront, &s));
    if (i > 0) WEFT_RETURN_IF_ERROR(EmbedPart(request, parts, i - 1, false, Phases::kBack, &s));
  }
  s.window = 64;
  return s;
}

StatusOr<Schedule> BuildMessages(const ScheduleRequest& r) { return BuildAllReduceHierarchical(r, false); }
StatusOr<Schedule> BuildDirect(const ScheduleRequest& r) { return BuildAllReduceHierarchical(r, true); }

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "hierarchical", AlwaysApplicable, BuildMessages);
WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "hierarchical_direct", GroupsMappable, BuildDirect);

}  // namespace
}  // namespace weft
