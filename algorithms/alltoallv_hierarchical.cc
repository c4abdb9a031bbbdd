// All-to-allv, hierarchical (MoE dispatch with uneven token counts; groups = hosts, leader =
// first rank listed). Same shape as alltoall_hierarchical.cc with the request's per-pair
// counts and displacements:
//   1. aggregate: every member sends its input (up to its last block) to the group leader;
//   2. exchange: leader g packs the blocks its members hold for group h's members, [i][j]
//      order, and swaps one message with leader h (pairwise over groups);
//   3. scatter: the leader packs each member's incoming blocks in source-rank order and sends
//      one message; the member unpacks them to its receive displacements (gaps in the output
//      stay untouched). Empty blocks and empty messages are skipped on both sides.
// Out-of-place only (as MPI_Alltoallv).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllToAllvHierarchical(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  WEFT_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups, ValidGroups(request));
  const int p = request.nranks;
  const size_t n = static_cast<size_t>(p);
  if (request.a2av_counts.size() != n * n || request.a2av_send_displs.size() != n * n ||
      request.a2av_recv_displs.size() != n * n)
    return InvalidArgument("alltoallv needs nranks^2 = " + std::to_string(n * n) +
                           " counts and displacements, got " + std::to_string(request.a2av_counts.size()));
  Schedule s = NewSchedule(request, "hierarchical");
  auto count = [&](int src, int dst) { return request.a2av_counts[src * n + dst]; };
  auto sdispl = [&](int src, int dst) { return request.a2av_send_displs[src * n + dst]; };
  auto rdispl = [&](int dst, int src) { return request.a2av_recv_displs[dst * n + src]; };
  for (int r = 0; r < p; ++r)
    for (int q = 0; q < p; ++q) {
      s.ranks[r].input_count = std::max(s.ranks[r].input_count, sdispl(r, q) + count(r, q));
      s.ranks[r].output_count = std::max(s.ranks[r].output_count, rdispl(r, q) + count(q, r));
    }
  const int m = static_cast<int>(groups.size());
  std::vector<int> group_of(p);
  for (int g = 0; g < m; ++g)
    for (int r : groups[g]) group_of[r] = g;
  // Bytes of the pack from group a to group b: blocks [i][j], i in a, j in b.
  auto pack_size = [&](int a, int b) {
    size_t t = 0;
    for (int i : groups[a])
      for (int j : groups[b]) t += count(i, j);
    return t;
  };
  for (int g = 0; g < m; ++g) {
    const std::vector<int>& G = groups[g];
    const int leader = G[0];
    auto& L = s.ranks[leader].steps;
    // Leader scratch: members' inputs, then per-group send/recv packs, then one assembly area.
    size_t top = 0;
    std::vector<size_t> in_base(p, 0);
    for (int i : G) {
      in_base[i] = top;
      top += s.ranks[i].input_count;
    }
    std::vector<size_t> send_pack(m, 0), recv_pack(m, 0);
    for (int h = 0; h < m; ++h) {
      if (h == g) continue;
      send_pack[h] = top;
      top += pack_size(g, h);
      recv_pack[h] = top;
      top += pack_size(h, g);
    }
    const size_t assemble = top;
    // Where block (q -> j) sits at this leader after step 2.
    auto block_at = [&](int q, int j) -> size_t {
      const int h = group_of[q];
      if (h == g) return in_base[q] + sdispl(q, j);
      size_t at = recv_pack[h];
      for (int i : groups[h])
        for (int jj : G) {
          if (i == q && jj == j) return at;
          at += count(i, jj);
        }
      return at;
    };
    // 1. aggregate.
    if (s.ranks[leader].input_count > 0)
      L.push_back(CopyStep(In(0, s.ranks[leader].input_count), Tmp(in_base[leader], s.ranks[leader].input_count)));
    for (size_t k = 1; k < G.size(); ++k) {
      const size_t len = s.ranks[G[k]].input_count;
      if (len == 0) continue;
      s.ranks[G[k]].steps.push_back(SendStep(leader, In(0, len)));
      L.push_back(RecvStep(G[k], Tmp(in_base[G[k]], len)));
    }
    // 2. exchange packs with the other leaders.
    for (int k = 1; k < m; ++k) {
      const int to = Mod(g + k, m), from = Mod(g - k, m);
      size_t at = send_pack[to];
      for (int i : G)
        for (int j : groups[to]) {
          if (count(i, j) == 0) continue;
          L.push_back(CopyStep(Tmp(in_base[i] + sdispl(i, j), count(i, j)), Tmp(at, count(i, j))));
          at += count(i, j);
        }
      if (pack_size(g, to) > 0) L.push_back(SendStep(groups[to][0], Tmp(send_pack[to], pack_size(g, to))));
      if (pack_size(from, g) > 0) L.push_back(RecvStep(groups[from][0], Tmp(recv_pack[from], pack_size(from, g))));
    }
    // 3. scatter: one compact message per member, unpacked there.
    for (int j : G) {
      if (j == leader) {
        for (int q = 0; q < p; ++q)
          if (count(q, j) > 0) L.push_back(CopyStep(Tmp(block_at(q, j), count(q, j)), Out(rdispl(j, q), count(q, j))));
        continue;
      }
      size_t total = 0;
      for (int q = 0; q < p; ++q) {
        if (count(q, j) == 0) continue;
        L.push_back(CopyStep(Tmp(block_at(q, j), count(q, j)), Tmp(assemble + total, count(q, j))));
        total += count(q, j);
      }
      if (total == 0) continue;
      L.push_back(SendStep(j, Tmp(assemble, total)));
      auto& M = s.ranks[j].steps;
      M.push_back(RecvStep(leader, Tmp(0, total)));
      size_t at = 0;
      for (int q = 0; q < p; ++q) {
        if (count(q, j) == 0) continue;
        M.push_back(CopyStep(Tmp(at, count(q, j)), Out(rdispl(j, q), count(q, j))));
        at += count(q, j);
      }
    }
  }
  FitScratch(&s);
  s.window = 32;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllToAllv, "hierarchical", AlwaysApplicable,
                        BuildAllToAllvHierarchical);

}  // namespace
}  // namespace weft
