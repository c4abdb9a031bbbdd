// Reduce-scatter, hierarchical (groups = hosts; leader = first rank listed):
//   1. inside each group, a flat reduce of the whole input to the leader (into scratch);
//   2. across leaders, for each group, a flat reduce of that group's blocks (each run of
//      consecutive ranks) to the group's leader, in place in its scratch;
//   3. the leader finalizes and hands every member its block; members finalize nothing
//      (their block arrives complete and finalized).
// Only leaders touch the slow tier, each sending (p - own group)/p of the data once. Every
// phase is a flat generator applied to a subgroup and embedded (patterns.h).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceScatterHierarchical(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  Schedule s = NewSchedule(request, "hierarchical");
  const int p = request.nranks;
  const size_t c = request.count, pc = static_cast<size_t>(p) * c;
  for (RankSchedule& rs : s.ranks) {
    rs.input_count = pc;
    rs.output_count = c;
  }
  if (c == 0) return s;
  for (const auto& g : groups) s.ranks[g[0]].scratch_count = pc;  // leaders: sums at [0, p*c)
  const std::string reduce_algo = FirstRegistered(Collective::kReduce, {"chain", "binomial"});
  std::vector<int> leaders;
  for (const auto& g : groups) leaders.push_back(g[0]);
  ScheduleRequest sub = request;
  // 1. reduce the whole input to each group's leader.
  for (const auto& g : groups) {
    Embedding e;
    e.members = g;
    e.place = SamePlacement({Buffer::kInput, 0}, {Buffer::kScratch, 0},
                            {Buffer::kScratch, ScratchTop(s, g)});
    sub.count = pc;
    sub.root = 0;
    WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kReduce, reduce_algo, sub, e, &s));
  }
  // 2. leaders reduce group h's blocks to leader h (one reduce per run of consecutive ranks).
  if (leaders.size() > 1) {
    for (size_t h = 0; h < groups.size(); ++h) {
      std::vector<int> ranks = groups[h];
      std::sort(ranks.begin(), ranks.end());
      for (size_t i = 0; i < ranks.size();) {
        size_t j = i + 1;
        while (j < ranks.size() && ranks[j] == ranks[j - 1] + 1) ++j;
        Embedding e;
        e.members = leaders;
        const size_t off = static_cast<size_t>(ranks[i]) * c;
        e.place = SamePlacement({Buffer::kScratch, off}, {Buffer::kScratch, off},
                                {Buffer::kScratch, ScratchTop(s, leaders)});
        sub.count = (j - i) * c;
        sub.root = static_cast<int>(h);
        WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kReduce, reduce_algo, sub, e, &s));
        i = j;
      }
    }
  }
  // 3. the leader finalizes and hands out the blocks.
  for (const auto& g : groups) {
    auto& lead = s.ranks[g[0]].steps;
    for (int d : g) {
      lead.push_back(FinalizeStep(Tmp(d * c, c)));
      if (d == g[0]) {
        lead.push_back(CopyStep(Tmp(d * c, c), Out(0, c)));
      } else {
        lead.push_back(SendStep(d, Tmp(d * c, c)));
        s.ranks[d].steps.push_back(RecvStep(g[0], Out(0, c)));
      }
    }
  }
  s.window = 32;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduceScatter, "hierarchical", AlwaysApplicable,
                        BuildReduceScatterHierarchical);

}  // namespace
}  // namespace weft
