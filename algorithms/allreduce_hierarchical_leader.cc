// Allreduce, hierarchical through group leaders (groups = hosts; leader = first rank listed):
//   1. inside each group, reduce to the leader;
//   2. the leaders allreduce, in place in their output;
//   3. the leaders finalize, and inside each group the leader broadcasts the result.
// Only one rank per group touches the slow tier: good when the inter-group link is shared or
// latency-bound; split-rail (`hierarchical`) moves less per rank for large messages.
// Every phase is a flat generator applied to a subgroup and embedded (patterns.h).
//
// Pipelining: laid out once over the whole vector, the leader's program runs the three phases
// one after another (its window cannot reach the leaders' allreduce before the in-group reduce
// of the whole vector is nearly done), so the slow link idles during phases 1 and 3: on 2
// namespace hosts x 2 ranks at 2 Gbit/s that was ~60 ms of a 334 ms 64 MiB allreduce. With a
// chunk policy the vector is cut into parts (up to 32, at least a chunk each) and the three-phase
// schedule is laid out once per part, as `hierarchical` does: parts touch disjoint elements
// and scratch, so the executor's window overlaps part i's leaders' allreduce (the slow tier)
// with part i+1's in-group reduce and part i-1's in-group broadcast.
#include <algorithm>

#include "algorithms/patterns.h"

namespace weft {
namespace {

// Which phases of one part to lay out: the front (reduce to the leaders, the leaders'
// allreduce), the back (finalize and broadcast from the leaders), or both.
enum class Phases { kFront, kBack, kAll };

// The phases `which` over the whole of `request` (one pipeline part).
StatusOr<Schedule> BuildLeaderPart(const ScheduleRequest& request,
                                   const std::vector<std::vector<int>>& groups, Phases which) {
  Schedule s = NewSchedule(request, "hierarchical_leader");
  const size_t n = request.count;
  for (RankSchedule& rs : s.ranks) rs.input_count = rs.output_count = n;
  if (n == 0) return s;
  const std::string reduce_algo = FirstRegistered(Collective::kReduce, {"chain", "binomial"});
  const std::string leader_algo =
      FirstRegistered(Collective::kAllReduce, {"ring", "halving_doubling", "recursive_doubling"});
  const std::string bcast_algo = FirstRegistered(Collective::kBroadcast, {"chain", "binomial"});
  ScheduleRequest sub = request;
  sub.root = 0;
  const bool front = which != Phases::kBack, back = which != Phases::kFront;
  // 1. reduce to each group's leader.
  for (const auto& g : groups) {
    if (!front) break;
    Embedding e;
    e.members = g;
    e.place = SamePlacement({Buffer::kInput, 0}, {Buffer::kOutput, 0}, {Buffer::kScratch, 0});
    WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kReduce, reduce_algo, sub, e, &s));
  }
  // 2. leaders allreduce in place.
  Embedding leaders;
  if (front) {
    for (const auto& g : groups) leaders.members.push_back(g[0]);
    leaders.place = SamePlacement({Buffer::kOutput, 0}, {Buffer::kOutput, 0},
                                  {Buffer::kScratch, ScratchTop(s, leaders.members)});
    WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kAllReduce, leader_algo, sub, leaders, &s));
  }
  // 3. each leader finalizes (a local step over the part: it waits for the leaders' allreduce,
  // so it opens the back, never holding up the next part's front) and broadcasts.
  if (back)
    for (const auto& g : groups) s.ranks[g[0]].steps.push_back(FinalizeStep(Out(0, n)));
  for (const auto& g : groups) {
    if (!back) break;
    if (g.size() == 1) continue;
    Embedding e;
    e.members = g;
    e.place = SamePlacement({Buffer::kOutput, 0}, {Buffer::kOutput, 0},
                            {Buffer::kScratch, ScratchTop(s, g)});
    WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kBroadcast, bcast_algo, sub, e, &s));
  }
  s.window = 32;
  return s;
}

// Bounds the schedule's size; more parts add little overlap. Parts are at least one chunk
// long (a part of 4 chunks still pipelines its chunks inside each phase).
constexpr size_t kMaxParts = 32;

// Lays out phases `which` of part i (of `parts`) over the elements it covers.
Status EmbedPart(const ScheduleRequest& request, const std::vector<std::vector<int>>& groups,
                 size_t parts, size_t i, Phases which, Schedule* s) {
  return EmbedAllReducePart(
      request, parts, i,
      [&](const ScheduleRequest& sub) { return BuildLeaderPart(sub, groups, which); }, s);
}

StatusOr<Schedule> BuildAllReduceHierarchicalLeader(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  const size_t n = request.count;
  const size_t parts = request.chunk.chunk_elems == 0
                           ? 1
                           : std::min(kMaxParts, NumChunks(n, request.chunk.chunk_elems));
  if (parts <= 1) return BuildLeaderPart(request, groups, Phases::kAll);
  Schedule s = NewSchedule(request, "hierarchical_leader");
  for (RankSchedule& rs : s.ranks) rs.input_count = rs.output_count = n;
  // Part i's broadcast is laid out after part i+1's front: a rank issues in program order and
  // a broadcast send waits for its part's allreduce to finish, so laid out right behind it, it
  // would hold back the next part's reduce until then and the link would idle while that
  // reduce runs (~2 ms per part on the calibrated 2x2 namespace fabric, in weft-sim's trace).
  for (size_t i = 0; i <= parts; ++i) {
    if (i < parts) WEFT_RETURN_IF_ERROR(EmbedPart(request, groups, parts, i, Phases::kFront, &s));
    if (i > 0) WEFT_RETURN_IF_ERROR(EmbedPart(request, groups, parts, i - 1, Phases::kBack, &s));
  }
  s.window = 64;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "hierarchical_leader", AlwaysApplicable,
                        BuildAllReduceHierarchicalLeader);

}  // namespace
}  // namespace weft
