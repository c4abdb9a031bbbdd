// Structural properties of the algorithm library: the names WEFT_ALGO uses exist, generators
// are pure (same request -> same schedule), and each algorithm moves the amount of data and
// takes the number of rounds its design promises (measured by the checker's execution).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "algorithms/patterns.h"
#include "algorithms/registry.h"
#include "algorithms/step_table.h"
#include "check/checker.h"

namespace weft {
namespace {

Schedule Build(Collective c, const std::string& name, int p, size_t count, size_t chunk = 0,
               std::vector<std::vector<int>> groups = {}) {
  const AlgorithmInfo* a = FindAlgorithm(c, name);
  EXPECT_NE(a, nullptr) << CollectiveName(c) << ":" << name;
  if (a == nullptr) return Schedule{};
  ScheduleRequest r;
  r.collective = c;
  r.nranks = p;
  r.count = count;
  r.root = 0;
  r.chunk.chunk_elems = chunk;
  r.groups = std::move(groups);
  StatusOr<Schedule> s = a->build(r);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Schedule{};
}

CheckStats Execute(const Schedule& s, size_t count, int root = 0) {
  ScheduleRequest r;
  r.collective = s.collective;
  r.nranks = s.nranks;
  r.count = count;
  r.root = root;
  CheckStats stats;
  CheckOptions o;
  Status st = CheckScheduleWithStats(s, r, o, &stats);
  EXPECT_TRUE(st.ok()) << st.message();
  return stats;
}

size_t Sends(const RankSchedule& rs) {
  size_t n = 0;
  for (const Step& st : rs.steps) n += SendPeer(st) >= 0;  // plain sends and fused forwards
  return n;
}

TEST(AlgorithmLibrary, RegistryHasTheNamesWeftAlgoUses) {
  const std::vector<std::pair<Collective, const char*>> expected = {
      {Collective::kAllReduce, "tree"},
      {Collective::kAllReduce, "halving_doubling"},
      {Collective::kAllReduce, "recursive_doubling"},
      {Collective::kAllReduce, "hierarchical"},
      {Collective::kAllReduce, "hierarchical_leader"},
      {Collective::kAllGather, "recursive_doubling"},
      {Collective::kAllGather, "bruck"},
      {Collective::kAllGather, "hierarchical"},
      {Collective::kReduceScatter, "halving_doubling"},
      {Collective::kReduceScatter, "pairwise"},
      {Collective::kReduceScatter, "hierarchical"},
      {Collective::kAllToAll, "pairwise"},
      {Collective::kAllToAll, "bruck"},
      {Collective::kAllToAll, "hierarchical"},
      {Collective::kAllToAllv, "pairwise"},
      {Collective::kAllToAllv, "hierarchical"},
      {Collective::kBroadcast, "chain"},
      {Collective::kBroadcast, "binomial"},
      {Collective::kBroadcast, "scatter_allgather"},
      {Collective::kReduce, "chain"},
      {Collective::kReduce, "binomial"},
      {Collective::kReduce, "scatter_allgather"},
      {Collective::kBarrier, "dissemination"},
  };
  for (const auto& e : expected)
    EXPECT_NE(FindAlgorithm(e.first, e.second), nullptr) << CollectiveName(e.first) << ":" << e.second;
  // No name is registered twice for one collective.
  std::set<std::pair<int, std::string>> seen;
  for (const AlgorithmInfo& a : AllAlgorithms())
    EXPECT_TRUE(seen.insert({static_cast<int>(a.collective), a.name}).second)
        << CollectiveName(a.collective) << ":" << a.name << " registered twice";
}

TEST(AlgorithmLibrary, GeneratorsArePure) {
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective == Collective::kAllToAllv || a.collective == Collective::kSendRecv) continue;
    ScheduleRequest r;
    r.collective = a.collective;
    r.nranks = 6;
    r.count = 37;
    r.root = 1;
    r.chunk.chunk_elems = 8;
    r.groups = {{0, 1, 2}, {3, 4, 5}};
    r.all_ranks_mappable = true;
    if (a.applicable && !a.applicable(r)) continue;
    StatusOr<Schedule> x = a.build(r), y = a.build(r);
    ASSERT_TRUE(x.ok() && y.ok()) << a.name;
    ASSERT_EQ(x->ranks.size(), y->ranks.size());
    for (size_t q = 0; q < x->ranks.size(); ++q) {
      ASSERT_EQ(x->ranks[q].steps.size(), y->ranks[q].steps.size()) << a.name;
      for (size_t i = 0; i < x->ranks[q].steps.size(); ++i) {
        const Step &u = x->ranks[q].steps[i], &v = y->ranks[q].steps[i];
        EXPECT_TRUE(u.op == v.op && u.peer == v.peer && u.channel == v.channel &&
                    u.src.offset == v.src.offset && u.dst.offset == v.dst.offset &&
                    u.src.count == v.src.count && u.dst.count == v.dst.count)
            << a.name << " rank " << q << " step " << i;
      }
    }
  }
}

TEST(AlgorithmLibrary, RejectsBadRequests) {
  ScheduleRequest r;
  r.collective = Collective::kBroadcast;
  r.nranks = 4;
  r.count = 10;
  r.root = 7;
  Status st = FindAlgorithm(Collective::kBroadcast, "chain")->build(r).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("root 7"), std::string::npos) << st.message();
  ScheduleRequest h;
  h.collective = Collective::kAllReduce;
  h.nranks = 4;
  h.count = 10;
  h.groups = {{0, 1}, {1, 2, 3}};
  st = FindAlgorithm(Collective::kAllReduce, "hierarchical")->build(h).status();
  EXPECT_NE(st.message().find("rank 1 is in more than one group"), std::string::npos) << st.message();
  h.groups = {{0, 1}, {2}};
  st = FindAlgorithm(Collective::kAllReduce, "hierarchical")->build(h).status();
  EXPECT_NE(st.message().find("rank 3 is in no group"), std::string::npos) << st.message();
}

// Two steps are the same step: every field the executor reads.
bool SameStep(const Step& u, const Step& v) {
  auto same = [](const Region& a, const Region& b) {
    return a.buffer == b.buffer && a.offset == b.offset && a.count == b.count;
  };
  return u.op == v.op && u.peer == v.peer && u.to == v.to && u.channel == v.channel &&
         u.to_channel == v.to_channel && same(u.src, v.src) && same(u.dst, v.dst) &&
         same(u.remote, v.remote);
}

// Uneven all-to-allv tables (rank src sends src + dst + 1 + extra elements to dst, packed).
void FillAllToAllv(ScheduleRequest* r, size_t extra) {
  const int p = r->nranks;
  r->a2av_counts.assign(static_cast<size_t>(p) * p, 0);
  r->a2av_send_displs.assign(static_cast<size_t>(p) * p, 0);
  r->a2av_recv_displs.assign(static_cast<size_t>(p) * p, 0);
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b) r->a2av_counts[a * p + b] = static_cast<size_t>(a + b + 1) + extra;
  for (int a = 0; a < p; ++a) {
    size_t so = 0, ro = 0;
    for (int b = 0; b < p; ++b) {
      r->a2av_send_displs[a * p + b] = so;
      so += r->a2av_counts[a * p + b];
      r->a2av_recv_displs[a * p + b] = ro;  // [dst * p + src]: rank a receives from b
      ro += r->a2av_counts[b * p + a];
    }
  }
}

// RankSchedule::final_output_write by its definition, in O(steps^2): a step that writes Output
// is final when no later step reads any of it (as an operand, a reduction's accumulator, a
// finalize's dst or a message it sends). The final_output_write check below compares with it.
std::vector<uint8_t> FinalOutputWritesByDefinition(const RankSchedule& rs) {
  auto overlap = [](const Region& a, const Region& b) {
    return a.buffer == Buffer::kOutput && b.buffer == Buffer::kOutput && a.count > 0 && b.count > 0 &&
           a.offset < b.offset + b.count && b.offset < a.offset + a.count;
  };
  std::vector<uint8_t> want(rs.steps.size(), 0);
  for (size_t i = 0; i < rs.steps.size(); ++i) {
    const Step& w = rs.steps[i];
    if (!SemanticsOf(w.op).writes_dst || w.dst.buffer != Buffer::kOutput || w.dst.count == 0) continue;
    bool read_later = false;
    for (size_t j = i + 1; j < rs.steps.size() && !read_later; ++j) {
      const Step& l = rs.steps[j];
      const StepSemantics& m = SemanticsOf(l.op);
      auto reads = [&](StepOperand which) {
        return (which == StepOperand::kSrc ? m.reads_src : m.reads_dst) || m.lhs == which ||
               m.rhs == which || m.sends == which;
      };
      read_later = (reads(StepOperand::kSrc) && overlap(l.src, w.dst)) ||
                   (reads(StepOperand::kDst) && overlap(l.dst, w.dst));
    }
    want[i] = read_later ? 0 : 1;
  }
  return want;
}

// The executor's plan for rank r (PlanScope::ForRank(r)) is exactly rank r's part of the
// whole schedule the checker proves, for every algorithm: same steps, counts and window, and
// no other rank's steps. This is what keeps one-rank plans as correct as the proved ones.
TEST(AlgorithmLibrary, OneRankPlanIsThatRankOfTheWholeSchedule) {
  size_t plans = 0;
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective == Collective::kSendRecv) continue;
    for (int p : {1, 2, 3, 4, 5, 7, 8, 9, 12}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{100}}) {
        for (size_t chunk : {size_t{0}, size_t{4}}) {
          ScheduleRequest r;
          r.collective = a.collective;
          r.nranks = p;
          r.count = count;
          r.root = p > 2 ? 2 : 0;
          r.chunk.chunk_elems = chunk;
          r.chunk.channels = chunk ? 2 : 1;
          r.all_ranks_mappable = true;
          for (int g = 0, next = 0; next < p; ++g) {  // uneven groups: 1, 2, 3, ... ranks
            r.groups.emplace_back();
            for (int k = 0; k <= g && next < p; ++k) r.groups.back().push_back(next++);
          }
          if (a.collective == Collective::kAllToAllv) FillAllToAllv(&r, count);
          if (a.applicable && !a.applicable(r)) continue;
          const std::string what = std::string(CollectiveName(a.collective)) + ":" + a.name + " p=" +
                                   std::to_string(p) + " count=" + std::to_string(count) +
                                   " chunk=" + std::to_string(chunk);
          StatusOr<Schedule> whole = BuildSchedule(a, r);
          ASSERT_TRUE(whole.ok()) << what << ": " << whole.status().message();
          ASSERT_TRUE(whole->scope.all()) << what;
          for (int rank = 0; rank < p; ++rank) {
            ScheduleRequest one = r;
            one.scope = PlanScope::ForRank(rank);
            StatusOr<Schedule> plan = BuildSchedule(a, one);
            ASSERT_TRUE(plan.ok()) << what << " rank " << rank << ": " << plan.status().message();
            ++plans;
            EXPECT_EQ(plan->scope.rank, rank) << what;
            EXPECT_EQ(plan->window, whole->window) << what;
            ASSERT_EQ(plan->ranks.size(), whole->ranks.size()) << what;
            for (int q = 0; q < p; ++q) {
              const RankSchedule &got = plan->ranks[q], &want = whole->ranks[q];
              if (q != rank) {
                EXPECT_TRUE(got.steps.empty() && got.scratch_count == 0 && got.input_count == 0)
                    << what << ": rank " << rank << "'s plan holds rank " << q << "'s steps";
                continue;
              }
              EXPECT_EQ(got.input_count, want.input_count) << what << " rank " << q;
              EXPECT_EQ(got.output_count, want.output_count) << what << " rank " << q;
              EXPECT_EQ(got.scratch_count, want.scratch_count) << what << " rank " << q;
              ASSERT_EQ(got.steps.size(), want.steps.size()) << what << " rank " << q;
              for (size_t i = 0; i < got.steps.size(); ++i)
                ASSERT_TRUE(SameStep(got.steps[i], want.steps[i])) << what << " rank " << q << " step " << i;
              if (!got.steps.empty())
                EXPECT_EQ(got.final_output_write, FinalOutputWritesByDefinition(got)) << what << " rank " << q;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(plans, 1000u);  // the sweep really ran
}

// The writes the executor may stream: twoshot's gathers into the output are final; oneshot's
// first term, copied into the output and reduced into afterwards, is not.
TEST(AlgorithmLibrary, FinalOutputWritesSeparateGathersFromAccumulators) {
  for (const char* name : {"oneshot", "twoshot"}) {
    ScheduleRequest r;
    r.collective = Collective::kAllReduce;
    r.nranks = 2;
    r.count = 1000;
    r.all_ranks_mappable = true;
    r.scope = PlanScope::ForRank(0);
    StatusOr<Schedule> plan = BuildSchedule(*FindAlgorithm(Collective::kAllReduce, name), r);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status().message();
    const RankSchedule& rs = plan->ranks[0];
    size_t final_writes = 0, rewritten = 0;
    for (size_t i = 0; i < rs.steps.size(); ++i) {
      if (rs.steps[i].dst.buffer != Buffer::kOutput || !SemanticsOf(rs.steps[i].op).writes_dst) continue;
      (rs.final_output_write[i] ? final_writes : rewritten) += 1;
    }
    if (std::string(name) == "twoshot") {
      EXPECT_EQ(final_writes, 2u) << "twoshot: its own part and the peer's, each written once";
      EXPECT_EQ(rewritten, 0u);
    } else {
      EXPECT_EQ(final_writes, 1u) << "oneshot: the finalize, last";
      EXPECT_EQ(rewritten, 2u) << "oneshot: the first term (reduced into) and the reduction (finalized)";
    }
  }
}

TEST(AlgorithmLibrary, OneRankPlanOutsideTheRanksIsRefused) {
  ScheduleRequest r;
  r.collective = Collective::kAllReduce;
  r.nranks = 4;
  r.count = 10;
  r.scope = PlanScope::ForRank(4);
  StatusOr<Schedule> s = BuildSchedule(*FindAlgorithm(Collective::kAllReduce, "ring"), r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), weftInvalidArgument);
  EXPECT_NE(s.status().message().find("scope rank 4"), std::string::npos) << s.status().message();
  // The checker proves whole schedules only: a one-rank plan is refused, not half-proved.
  r.scope = PlanScope::ForRank(1);
  s = BuildSchedule(*FindAlgorithm(Collective::kAllReduce, "ring"), r);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ScheduleRequest whole = r;
  whole.scope = PlanScope::AllRanks();
  Status st = CheckSchedule(*s, whole, CheckOptions());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("only rank 1"), std::string::npos) << st.message();
}

class RankCounts : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(P, RankCounts, ::testing::Values(1, 2, 3, 4, 5, 8, 13, 16));

TEST_P(RankCounts, RingAllReduceSendsTwoPMinusOneOverP) {
  const int p = GetParam();
  if (FindAlgorithm(Collective::kAllReduce, "ring") == nullptr) GTEST_SKIP() << "ring not registered";
  const size_t count = 240240;  // divisible by 1..16
  CheckStats st = Execute(Build(Collective::kAllReduce, "ring", p, count), count);
  for (int r = 0; r < p; ++r) EXPECT_EQ(st.elements_sent_by_rank[r], 2 * (p - 1) * count / p);
}

TEST_P(RankCounts, HalvingDoublingSendsTwoPMinusOneOverPForPowersOfTwo) {
  const int p = GetParam();
  const size_t count = 240240;
  CheckStats st = Execute(Build(Collective::kAllReduce, "halving_doubling", p, count), count);
  if ((p & (p - 1)) == 0) {
    for (int r = 0; r < p; ++r) EXPECT_EQ(st.elements_sent_by_rank[r], 2 * (p - 1) * count / p);
  } else {
    // The fold adds one full vector for the paired ranks (there and back).
    for (int r = 0; r < p; ++r) EXPECT_LE(st.elements_sent_by_rank[r], 2 * count + 2 * count);
  }
}

TEST_P(RankCounts, RecursiveDoublingTakesLog2Rounds) {
  const int p = GetParam();
  Schedule s = Build(Collective::kAllReduce, "recursive_doubling", p, 5);
  const int p2 = FloorPow2(p);
  int log2p2 = 0;
  while ((1 << log2p2) < p2) ++log2p2;
  for (int r = 0; r < p; ++r) EXPECT_LE(Sends(s.ranks[r]), static_cast<size_t>(log2p2 + 1)) << r;
  Execute(s, 5);
}

TEST_P(RankCounts, BruckAndDisseminationTakeCeilLog2Rounds) {
  const int p = GetParam();
  Schedule ag = Build(Collective::kAllGather, "bruck", p, 3);
  Schedule a2a = Build(Collective::kAllToAll, "bruck", p, 3);
  Schedule bar = Build(Collective::kBarrier, "dissemination", p, 0);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(Sends(ag.ranks[r]), static_cast<size_t>(CeilLog2(p)));
    EXPECT_EQ(Sends(a2a.ranks[r]), static_cast<size_t>(CeilLog2(p)));
    EXPECT_EQ(Sends(bar.ranks[r]), static_cast<size_t>(CeilLog2(p)));
  }
}

TEST_P(RankCounts, PairwiseAllToAllSendsEachBlockOnce) {
  const int p = GetParam();
  const size_t count = 9;
  CheckStats st = Execute(Build(Collective::kAllToAll, "pairwise", p, count), count);
  for (int r = 0; r < p; ++r) EXPECT_EQ(st.elements_sent_by_rank[r], (p - 1) * count);
  EXPECT_EQ(st.messages, static_cast<size_t>(p * (p - 1)));
}

TEST_P(RankCounts, ChainAndScatterAllgatherBroadcastTraffic) {
  const int p = GetParam();
  const size_t count = 1000;
  CheckStats chain = Execute(Build(Collective::kBroadcast, "chain", p, count, 100), count);
  CheckStats sag = Execute(Build(Collective::kBroadcast, "scatter_allgather", p, count, 100), count);
  for (int r = 0; r < p; ++r) {
    // chain: every rank but the last forwards the message once.
    EXPECT_EQ(chain.elements_sent_by_rank[r], r == p - 1 || p == 1 ? 0 : count) << r;
    // scatter+allgather: nobody sends more than twice (p-1)/p of it.
    EXPECT_LE(sag.elements_sent_by_rank[r], 2 * count) << r;
  }
}

// Depth of tree t of the double binary tree, read back from the schedule: with one channel
// and no chunking tree t runs on channel t, and a rank's parent is the peer it receives the
// final result from.
int TreeDepth(const Schedule& s, int t) {
  const int p = s.nranks;
  std::vector<int> parent(p, -1);
  for (int r = 0; r < p; ++r) {
    const auto& steps = s.ranks[r].steps;
    for (size_t i = 0; i < steps.size(); ++i)
      if ((steps[i].op == StepOp::kRecv || steps[i].op == StepOp::kRecvCopySend) &&
          steps[i].channel == t)
        parent[r] = steps[i].peer;
  }
  int depth = 0;
  for (int r = 0; r < p; ++r) {
    int d = 0;
    for (int x = r; parent[x] >= 0 && d <= p; x = parent[x]) ++d;
    EXPECT_LE(d, p) << "cycle in tree " << t;
    depth = std::max(depth, d);
  }
  return depth;
}

TEST_P(RankCounts, DoubleBinaryTreeIsLogDepthAndBalanced) {
  const int p = GetParam();
  const size_t count = 1000;
  Schedule s = Build(Collective::kAllReduce, "tree", p, count);
  for (int t = 0; t < 2; ++t) EXPECT_LE(TreeDepth(s, t), CeilLog2(p) + 1) << "tree " << t;
  CheckStats st = Execute(s, count);
  // Each tree carries half; a rank sends its partial up and the result down to <= 2 children
  // per tree: at most 3 halves per tree.
  for (int r = 0; r < p; ++r) EXPECT_LE(st.elements_sent_by_rank[r], 3 * count) << r;
}

// Elements rank r sends to ranks outside its group.
size_t CrossGroupSends(const Schedule& s, const std::vector<std::vector<int>>& groups, int r) {
  std::vector<int> group_of(s.nranks);
  for (size_t g = 0; g < groups.size(); ++g)
    for (int q : groups[g]) group_of[q] = static_cast<int>(g);
  size_t n = 0;
  for (const Step& st : s.ranks[r].steps)
    if (SendPeer(st) >= 0 && group_of[SendPeer(st)] != group_of[r]) n += SentRegion(st).count;
  return n;
}

TEST(AlgorithmLibrary, SplitRailMovesLessAcrossGroupsThanFlat) {
  if (FindAlgorithm(Collective::kAllReduce, "ring") == nullptr) GTEST_SKIP() << "ring not registered";
  // 4 hosts x 4 ranks, ranks of a host interleaved as a ring would see them worst.
  std::vector<std::vector<int>> groups = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  const size_t count = 4800;
  Schedule flat = Build(Collective::kAllReduce, "ring", 16, count);
  Schedule rail = Build(Collective::kAllReduce, "hierarchical", 16, count, 0, groups);
  Schedule lead = Build(Collective::kAllReduce, "hierarchical_leader", 16, count, 0, groups);
  size_t flat_max = 0, rail_max = 0, lead_total = 0, rail_total = 0;
  for (int r = 0; r < 16; ++r) {
    flat_max = std::max(flat_max, CrossGroupSends(flat, groups, r));
    rail_max = std::max(rail_max, CrossGroupSends(rail, groups, r));
    rail_total += CrossGroupSends(rail, groups, r);
    lead_total += CrossGroupSends(lead, groups, r);
  }
  // split-rail: each rank's rail carries 2*(m-1)/m of a 1/K slice.
  EXPECT_EQ(rail_max, 2 * 3 * (count / 4) / 4);
  EXPECT_LT(rail_max, flat_max);
  // the leader variant sends the same total across groups, but from one rank per group.
  EXPECT_EQ(lead_total, rail_total);
  Execute(rail, count);
  Execute(lead, count);
}

TEST(AlgorithmLibrary, HierarchicalAllToAllSendsOneMessagePerGroupPair) {
  std::vector<std::vector<int>> groups = {{0, 1, 2}, {3, 4, 5, 6, 7}};  // uneven: 3 + 5
  Schedule s = Build(Collective::kAllToAll, "hierarchical", 8, 4, 0, groups);
  size_t cross_messages = 0;
  for (int r = 0; r < 8; ++r)
    for (const Step& st : s.ranks[r].steps)
      if (st.op == StepOp::kSend && (st.peer < 3) != (r < 3)) ++cross_messages;
  EXPECT_EQ(cross_messages, 2u);
  Execute(s, 4);
}

}  // namespace
}  // namespace weft
