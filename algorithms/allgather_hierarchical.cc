// Allgather, hierarchical (groups = hosts; leader = first rank listed). Scratch holds all
// blocks in group order (group g's blocks at its position base):
//   1. inside each group, a flat allgather into the group's part of scratch;
//   2. across leaders, one broadcast per group of that group's part (from its leader);
//   3. inside each group, the leader broadcasts the other groups' parts;
//   4. every rank copies the blocks from group order to rank order in its output.
// hierarchical_direct, the variant for one direct transport per host (groups_mappable):
// phase 1 is the direct allgather and in phase 3 the members read the other groups' parts
// straight from the leader's window (its scratch) instead of the leader sending them
// (group_direct.h).
// Each group's data crosses the slow tier once per other group's leader. Every phase is a
// flat generator applied to a subgroup and embedded (patterns.h).
#include "algorithms/group_direct.h"
#include "algorithms/patterns.h"

namespace weft {
namespace {

// Phase 3 with direct steps: the leader signals that its scratch holds the other groups'
// parts; each member reads both ranges from the leader's window into its own scratch and
// signals back; the leader waits for those "done" signals before its operation ends.
void ReadFromLeaderWindow(Schedule* s, const std::vector<int>& group,
                          const std::pair<size_t, size_t> (&ranges)[2]) {
  const int leader = group[0];
  const std::vector<int> leader_only{leader};
  SignalEach(s, leader, group);
  for (size_t i = 1; i < group.size(); ++i) {
    WaitEach(s, group[i], leader_only);
    for (const auto& range : ranges)
      if (range.second > 0)
        PushFitted(s, group[i], DirectStep(leader, Tmp(range.first, range.second),
                                           Tmp(range.first, range.second), /*reduce=*/false));
    SignalEach(s, group[i], leader_only);
  }
  WaitEach(s, leader, group);
}

// Every rank copies the blocks from group order (scratch) to rank order (output), merging
// runs of consecutive ranks into one copy.
void CopyToRankOrder(Schedule* s, const std::vector<int>& order, size_t c) {
  for (RankSchedule& rs : s->ranks) {
    for (size_t i = 0; i < order.size();) {
      size_t j = i + 1;
      while (j < order.size() && order[j] == order[j - 1] + 1) ++j;
      rs.steps.push_back(CopyStep(Tmp(i * c, (j - i) * c), Out(order[i] * c, (j - i) * c)));
      i = j;
    }
  }
}

StatusOr<Schedule> BuildAllGatherHierarchical(const ScheduleRequest& request, bool direct) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  Schedule s = NewSchedule(request, "hierarchical");
  const int p = request.nranks;
  const size_t c = request.count;
  for (RankSchedule& rs : s.ranks) {
    rs.input_count = c;
    rs.output_count = static_cast<size_t>(p) * c;
    rs.scratch_count = static_cast<size_t>(p) * c;  // group-ordered blocks live at [0, p*c)
  }
  if (c == 0) {
    for (RankSchedule& rs : s.ranks) rs.scratch_count = 0;
    return s;
  }
  const std::string gather_algo =
      InGroupAlgorithm(Collective::kAllGather, direct, {"ring", "recursive_doubling", "bruck"});
  const std::string bcast_algo = FirstRegistered(Collective::kBroadcast, {"chain", "binomial"});
  std::vector<size_t> base(groups.size());  // element offset of group g's part
  std::vector<int> order;                   // rank at each group-order position
  for (size_t g = 0; g < groups.size(); ++g) {
    base[g] = order.size() * c;
    order.insert(order.end(), groups[g].begin(), groups[g].end());
  }
  std::vector<int> leaders;
  for (const auto& g : groups) leaders.push_back(g[0]);
  ScheduleRequest sub = request;
  // 1. allgather inside each group into its part of scratch.
  for (size_t g = 0; g < groups.size(); ++g) {
    Embedding e;
    e.members = groups[g];
    e.place = SamePlacement({Buffer::kInput, 0}, {Buffer::kScratch, base[g]},
                            {Buffer::kScratch, ScratchTop(s, groups[g])});
    ScheduleRequest in_group = InGroupRequest(sub, direct);
    in_group.count = c;
    WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kAllGather, gather_algo, in_group, e, &s));
  }
  // 2. each group's part to the other leaders.
  if (leaders.size() > 1) {
    for (size_t h = 0; h < groups.size(); ++h) {
      Embedding e;
      e.members = leaders;
      e.place = SamePlacement({Buffer::kScratch, base[h]}, {Buffer::kScratch, base[h]},
                              {Buffer::kScratch, ScratchTop(s, leaders)});
      sub.count = groups[h].size() * c;
      sub.root = static_cast<int>(h);
      WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kBroadcast, bcast_algo, sub, e, &s));
    }
  }
  // 3. inside each group, the leader broadcasts what the other groups sent (two ranges).
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() == 1) continue;
    const size_t end = base[g] + groups[g].size() * c, total = static_cast<size_t>(p) * c;
    const std::pair<size_t, size_t> ranges[2] = {{0, base[g]}, {end, total - end}};
    if (direct) {
      ReadFromLeaderWindow(&s, groups[g], ranges);
      continue;
    }
    for (const auto& range : ranges) {
      if (range.second == 0) continue;
      Embedding e;
      e.members = groups[g];
      e.place = SamePlacement({Buffer::kScratch, range.first}, {Buffer::kScratch, range.first},
                              {Buffer::kScratch, ScratchTop(s, groups[g])});
      sub.count = range.second;
      sub.root = 0;
      WEFT_RETURN_IF_ERROR(EmbedAlgorithm(Collective::kBroadcast, bcast_algo, sub, e, &s));
    }
  }
  // 4. group order -> rank order.
  CopyToRankOrder(&s, order, c);
  s.window = 32;
  return s;
}

StatusOr<Schedule> BuildMessages(const ScheduleRequest& r) { return BuildAllGatherHierarchical(r, false); }
StatusOr<Schedule> BuildDirect(const ScheduleRequest& r) { return BuildAllGatherHierarchical(r, true); }

WEFT_REGISTER_ALGORITHM(Collective::kAllGather, "hierarchical", AlwaysApplicable, BuildMessages);
WEFT_REGISTER_ALGORITHM(Collective::kAllGather, "hierarchical_direct", GroupsMappable, BuildDirect);

}  // namespace
}  // namespace weft
