// All-to-all, hierarchical (the MoE dispatch pattern; groups = hosts, leader = first rank):
//   1. aggregate: every member sends its whole input to the group leader (scratch G[i]);
//   2. exchange: leader g packs, for every other group h, the blocks its members hold for h's
//      members into one message and swaps it with leader h (pairwise over groups);
//   3. scatter: the leader assembles each member's output (blocks in source-rank order) and
//      sends it in one message; its own output it assembles in place.
// The slow tier carries one large message per pair of groups instead of one per pair of ranks.
//
// hierarchical_direct, the variant for one direct transport per host (groups_mappable):
// phases 1 and 3 use direct steps instead of messages (group_direct.h): each member publishes its input in its window
// and the leader reads the blocks it packs and assembles straight from there; the leader
// assembles every member's output in its own window (A_j per member) and the member reads it.
//
// Scratch layout at a leader of group g (s = group size, c = count):
//   G:    [0, s*p*c)                 member i's input at i*p*c
//   S[h]: outgoing pack for group h  (s * |h| * c), blocks [i][j] (i in g, j in h)
//   R[h]: incoming pack from group h (|h| * s * c), blocks [i][j] (i in h, j in g)
//   A:    one member's assembled output (p*c), reused per member
#include "algorithms/group_direct.h"
#include "algorithms/patterns.h"

namespace weft {
namespace {

// Phase 1: the members' inputs reach the leader: sent into G[i] of its scratch, or (direct)
// published in each member's own window for the leader to read.
void Aggregate(Schedule* s, const std::vector<int>& G, size_t pc, bool direct) {
  const int leader = G[0];
  s->ranks[leader].steps.push_back(CopyStep(In(0, pc), Tmp(0, pc)));
  for (size_t i = 1; i < G.size(); ++i) {
    if (direct) {
      PushFitted(s, G[i], CopyStep(In(0, pc), Tmp(0, pc)));
      SignalEach(s, G[i], {leader});
      WaitEach(s, leader, {G[i]});
      continue;
    }
    s->ranks[G[i]].steps.push_back(SendStep(leader, In(0, pc)));
    s->ranks[leader].steps.push_back(RecvStep(G[i], Tmp(i * pc, pc)));
  }
}

// Direct hand-over: the leader is done reading the members' windows; each member reads its
// output (assembled at `assemble` + j*pc of the leader's scratch) from the leader's window and
// signals back before the leader may end.
void DirectHandOver(Schedule* s, const std::vector<int>& G, size_t assemble, size_t pc) {
  const int leader = G[0];
  SignalEach(s, leader, G);
  for (size_t j = 1; j < G.size(); ++j) {
    WaitEach(s, G[j], {leader});
    PushFitted(s, G[j], DirectStep(leader, Tmp(assemble + j * pc, pc), Out(0, pc), false));
    SignalEach(s, G[j], {leader});
  }
  WaitEach(s, leader, G);
}

StatusOr<Schedule> BuildAllToAllHierarchical(const ScheduleRequest& request, bool direct) {
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
    s.ranks[leader].scratch_count = top + (direct ? sg : 1) * pc;
    // Block i -> q (member i's input block for rank q) into `dst` at the leader: from the
    // aggregated copy, or (direct) straight from member i's window.
    auto block = [&](size_t i, int q, Region dst) {
      return direct && i > 0 ? DirectStep(G[i], Tmp(q * c, c), dst, /*reduce=*/false)
                             : CopyStep(Tmp(i * pc + q * c, c), dst);
    };
    // 1. aggregate the members' inputs (direct: members publish them in their windows).
    Aggregate(&s, G, pc, direct);
    // 2. exchange with the other leaders: round k pairs group g with g+k (send) / g-k (recv).
    for (int k = 1; k < m; ++k) {
      const int to = Mod(g + k, m), from = Mod(g - k, m);
      const auto& H = groups[to];
      size_t at = send_pack[to];
      for (size_t i = 0; i < sg; ++i)
        for (size_t j = 0; j < H.size(); ++j, at += c) L.push_back(block(i, H[j], Tmp(at, c)));
      L.push_back(SendStep(groups[to][0], Tmp(send_pack[to], sg * H.size() * c)));
      L.push_back(RecvStep(groups[from][0], Tmp(recv_pack[from], groups[from].size() * sg * c)));
    }
    // 3. assemble each member's output (sources in rank order) and hand it over.
    for (size_t j = 0; j < sg; ++j) {
      const int dst = G[j];
      const size_t a = assemble + (direct ? j * pc : 0);  // direct: one region per member
      for (int q = 0; q < p; ++q) {
        const int h = group_of[q];
        const size_t i = static_cast<size_t>(index_in[q]);
        const Region to = dst == leader ? Out(q * c, c) : Tmp(a + q * c, c);
        L.push_back(h == g ? block(i, dst, to)
                           : CopyStep(Tmp(recv_pack[h] + (i * sg + j) * c, c), to));
      }
      if (dst != leader && !direct) {
        L.push_back(SendStep(dst, Tmp(a, pc)));
        s.ranks[dst].steps.push_back(RecvStep(leader, Out(0, pc)));
      }
    }
    if (direct && sg > 1) DirectHandOver(&s, G, assemble, pc);
  }
  s.window = 32;
  return s;
}

StatusOr<Schedule> BuildMessages(const ScheduleRequest& r) { return BuildAllToAllHierarchical(r, false); }
StatusOr<Schedule> BuildDirect(const ScheduleRequest& r) { return BuildAllToAllHierarchical(r, true); }

WEFT_REGISTER_ALGORITHM(Collective::kAllToAll, "hierarchical", AlwaysApplicable, BuildMessages);
WEFT_REGISTER_ALGORITHM(Collective::kAllToAll, "hierarchical_direct", GroupsMappable, BuildDirect);

}  // namespace
}  // namespace weft
