// Allreduce, hierarchical through group leaders (groups = hosts; leader = first rank listed):
//   1. inside each group, reduce to the leader;
//   2. the leaders allreduce, in place in their output, and finalize;
//   3. inside each group, the leader broadcasts the result.
// Only one rank per group touches the slow tier: good when the inter-group link is shared or
// latency-bound; split-rail (`hierarchical`) moves less per rank for large messages.
// Every phase is a flat generator applied to a subgroup and embedded (patterns.h).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllReduceHierarchicalLeader(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
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
  // 1. reduce to each group's leader.
  for (const auto& g : groups) {
    Embedding e;
    e.members = g;
    e.place = SamePlacement({Buffer::kInput, 0}, {Buffer::kOutput, 0}, {Buffer::kScratch, 0});
    WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kReduce, reduce_algo, sub, e, &s));
  }
  // 2. leaders allreduce in place, then finalize.
  Embedding leaders;
  for (const auto& g : groups) leaders.members.push_back(g[0]);
  leaders.place = SamePlacement({Buffer::kOutput, 0}, {Buffer::kOutput, 0},
                                {Buffer::kScratch, ScratchTop(s, leaders.members)});
  WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kAllReduce, leader_algo, sub, leaders, &s));
  for (int r : leaders.members) s.ranks[r].steps.push_back(FinalizeStep(Out(0, n)));
  // 3. broadcast from each leader.
  for (const auto& g : groups) {
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

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "hierarchical_leader", AlwaysApplicable,
                        BuildAllReduceHierarchicalLeader);

}  // namespace
}  // namespace weft
