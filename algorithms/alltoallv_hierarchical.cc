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

// The request's counts and the groups, with the per-group phases as methods.
class Plan {
 public:
  Plan(const ScheduleRequest& request, std::vector<std::vector<int>> groups, Schedule* s)
      : r_(request), n_(static_cast<size_t>(request.nranks)), groups_(std::move(groups)),
        group_of_(request.nranks), s_(s) {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (int rank : groups_[g]) group_of_[rank] = static_cast<int>(g);
  }
  size_t count(int src, int dst) const { return r_.a2av_counts[src * n_ + dst]; }
  size_t sdispl(int src, int dst) const { return r_.a2av_send_displs[src * n_ + dst]; }
  size_t rdispl(int dst, int src) const { return r_.a2av_recv_displs[dst * n_ + src]; }
  // Elements of the pack from group a to group b: blocks [i][j], i in a, j in b.
  size_t pack_size(int a, int b) const {
    size_t t = 0;
    for (int i : groups_[a])
      for (int j : groups_[b]) t += count(i, j);
    return t;
  }
  int groups() const { return static_cast<int>(groups_.size()); }
  void BuildGroup(int g);

 private:
  size_t BlockAt(int g, int q, int j) const;
  void Scatter(int g, size_t assemble);
  const ScheduleRequest& r_;
  const size_t n_;
  const std::vector<std::vector<int>> groups_;
  std::vector<int> group_of_;
  Schedule* s_;
  // Leader scratch of the group being built: members' inputs, then per-group packs.
  std::vector<size_t> in_base_, send_pack_, recv_pack_;
};

// Where block (q -> j) sits at group g's leader after the exchange.
size_t Plan::BlockAt(int g, int q, int j) const {
  const int h = group_of_[q];
  if (h == g) return in_base_[q] + sdispl(q, j);
  size_t at = recv_pack_[h];
  for (int i : groups_[h])
    for (int jj : groups_[g]) {
      if (i == q && jj == j) return at;
      at += count(i, jj);
    }
  return at;
}

// 3. scatter: one compact message per member, unpacked there to its receive displacements.
void Plan::Scatter(int g, size_t assemble) {
  const int leader = groups_[g][0], p = static_cast<int>(n_);
  auto& L = s_->ranks[leader].steps;
  for (int j : groups_[g]) {
    if (j == leader) {
      for (int q = 0; q < p; ++q)
        if (count(q, j) > 0) L.push_back(CopyStep(Tmp(BlockAt(g, q, j), count(q, j)), Out(rdispl(j, q), count(q, j))));
      continue;
    }
    size_t total = 0;
    for (int q = 0; q < p; ++q) {
      if (count(q, j) == 0) continue;
      L.push_back(CopyStep(Tmp(BlockAt(g, q, j), count(q, j)), Tmp(assemble + total, count(q, j))));
      total += count(q, j);
    }
    if (total == 0) continue;
    L.push_back(SendStep(j, Tmp(assemble, total)));
    auto& M = s_->ranks[j].steps;
    M.push_back(RecvStep(leader, Tmp(0, total)));
    size_t at = 0;
    for (int q = 0; q < p; ++q) {
      if (count(q, j) == 0) continue;
      M.push_back(CopyStep(Tmp(at, count(q, j)), Out(rdispl(j, q), count(q, j))));
      at += count(q, j);
    }
  }
}

// Group g's three phases, planned on its leader's scratch.
void Plan::BuildGroup(int g) {
  const std::vector<int>& G = groups_[g];
  const int leader = G[0], m = groups();
  auto& L = s_->ranks[leader].steps;
  size_t top = 0;
  in_base_.assign(n_, 0);
  for (int i : G) {
    in_base_[i] = top;
    top += s_->ranks[i].input_count;
  }
  send_pack_.assign(m, 0);
  recv_pack_.assign(m, 0);
  for (int h = 0; h < m; ++h) {
    if (h == g) continue;
    send_pack_[h] = top;
    top += pack_size(g, h);
    recv_pack_[h] = top;
    top += pack_size(h, g);
  }
  // 1. aggregate.
  const size_t own = s_->ranks[leader].input_count;
  if (own > 0) L.push_back(CopyStep(In(0, own), Tmp(in_base_[leader], own)));
  for (size_t k = 1; k < G.size(); ++k) {
    const size_t len = s_->ranks[G[k]].input_count;
    if (len == 0) continue;
    s_->ranks[G[k]].steps.push_back(SendStep(leader, In(0, len)));
    L.push_back(RecvStep(G[k], Tmp(in_base_[G[k]], len)));
  }
  // 2. exchange packs with the other leaders.
  for (int k = 1; k < m; ++k) {
    const int to = Mod(g + k, m), from = Mod(g - k, m);
    size_t at = send_pack_[to];
    for (int i : G)
      for (int j : groups_[to]) {
        if (count(i, j) == 0) continue;
        L.push_back(CopyStep(Tmp(in_base_[i] + sdispl(i, j), count(i, j)), Tmp(at, count(i, j))));
        at += count(i, j);
      }
    if (pack_size(g, to) > 0) L.push_back(SendStep(groups_[to][0], Tmp(send_pack_[to], pack_size(g, to))));
    if (pack_size(from, g) > 0) L.push_back(RecvStep(groups_[from][0], Tmp(recv_pack_[from], pack_size(from, g))));
  }
  Scatter(g, top);
}

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
  Plan plan(request, std::move(groups), &s);
  for (int r = 0; r < p; ++r)
    for (int q = 0; q < p; ++q) {
      s.ranks[r].input_count = std::max(s.ranks[r].input_count, plan.sdispl(r, q) + plan.count(r, q));
      s.ranks[r].output_count = std::max(s.ranks[r].output_count, plan.rdispl(r, q) + plan.count(q, r));
    }
  for (int g = 0; g < plan.groups(); ++g) plan.BuildGroup(g);
  FitScratch(&s);
  s.window = 32;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllToAllv, "hierarchical", AlwaysApplicable,
                        BuildAllToAllvHierarchical);

}  // namespace
}  // namespace weft
