// All-to-all, hierarchical (the MoE dispatch pattern; groups = hosts, leader = first rank):
//   1. aggregate: every member sends its whole input to the group leader (scratch G[i]);
//   2. exchange: leader g packs, for every other group h, the blocks its members hold for h's
//      members into one message and swaps it with leader h (pairwise over groups);
//   3. scatter: the leader assembles each member's output (blocks in source-rank order) and
//      sends it in one message; its own output it assembles in place.
// The slow tier carries one large message per pair of groups instead of one per pair of ranks.
//
// Scratch layout at a leader of group g (s = group size, c = count):
//   G:    [0, s*p*c)                 member i's input at i*p*c
//   S[h]: outgoing pack for group h  (s * |h| * c), blocks [i][j] (i in g, j in h)
//   R[h]: incoming pack from group h (|h| * s * c), blocks [i][j] (i in h, j in g)
//   A:    one member's assembled output (p*c), reused per member
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllToAllHierarchical(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  Schedule s = NewSchedule(request, "hierarchical");
  const int p = request.nranks;
  const size_t c = request.count, pc = static_cast<size_t>(p) * c;
  for (RankSchedule& rs : s.ranks) rs.input_count = rs.output_count = pc;
  if (c == 0) return s;
  const int m = static_cast<int>(groups.size());
  std::vector<int> group_of(p), index_in(p);
  for (int g = 0; g < m; ++g)
    for (size_t i = 0; i < groups[g].size(); ++i) {
      group_of[groups[g][i]] = g;
      index_in[groups[g][i]] = static_cast<int>(i);
    }
  for (int g = 0; g < m; ++g) {
    const std::vector<int>& G = groups[g];
    const int leader = G[0];
    const size_t sg = G.size();
    auto& L = s.ranks[leader].steps;
    // scratch layout
    size_t top = sg * pc;
    std::vector<size_t> send_pack(m), recv_pack(m);
    for (int h = 0; h < m; ++h) {
      if (h == g) continue;
      send_pack[h] = top;
      top += sg * groups[h].size() * c;
      recv_pack[h] = top;
      top += groups[h].size() * sg * c;
    }
    const size_t assemble = top;
    s.ranks[leader].scratch_count = top + pc;
    // 1. aggregate the members' inputs.
    L.push_back(CopyStep(In(0, pc), Tmp(0, pc)));
    for (size_t i = 1; i < sg; ++i) {
      s.ranks[G[i]].steps.push_back(SendStep(leader, In(0, pc)));
      L.push_back(RecvStep(G[i], Tmp(i * pc, pc)));
    }
    // 2. exchange with the other leaders: round k pairs group g with g+k (send) / g-k (recv).
    for (int k = 1; k < m; ++k) {
      const int to = Mod(g + k, m), from = Mod(g - k, m);
      const auto& H = groups[to];
      size_t at = send_pack[to];
      for (size_t i = 0; i < sg; ++i)
        for (size_t j = 0; j < H.size(); ++j, at += c)
          L.push_back(CopyStep(Tmp(i * pc + H[j] * c, c), Tmp(at, c)));
      L.push_back(SendStep(groups[to][0], Tmp(send_pack[to], sg * H.size() * c)));
      L.push_back(RecvStep(groups[from][0], Tmp(recv_pack[from], groups[from].size() * sg * c)));
    }
    // 3. assemble each member's output (sources in rank order) and hand it over.
    for (size_t j = 0; j < sg; ++j) {
      const int dst = G[j];
      for (int q = 0; q < p; ++q) {
        const int h = group_of[q];
        const size_t i = static_cast<size_t>(index_in[q]);
        Region from = h == g ? Tmp(i * pc + dst * c, c)
                             : Tmp(recv_pack[h] + (i * sg + j) * c, c);
        L.push_back(CopyStep(from, dst == leader ? Out(q * c, c) : Tmp(assemble + q * c, c)));
      }
      if (dst != leader) {
        L.push_back(SendStep(dst, Tmp(assemble, pc)));
        s.ranks[dst].steps.push_back(RecvStep(leader, Out(0, pc)));
      }
    }
  }
  s.window = 32;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllToAll, "hierarchical", AlwaysApplicable,
                        BuildAllToAllHierarchical);

}  // namespace
}  // namespace weft
