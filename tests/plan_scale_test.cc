// One rank's plan at scale (issue 10, item 5): the communicator builds only its own rank's
// steps (PlanScope::ForRank), so a 1024-rank ring or pairwise plan holds O(p) steps and costs
// O(p) to build, where every rank's steps together are O(p^2). For ring allreduce, ring
// allgather, ring reduce-scatter and pairwise alltoall over 1024 ranks, for ranks 0 and 517:
//   - the plan holds at most kStepsPerRank * p steps (bound derived per algorithm below);
//   - every other rank's entry is empty;
//   - it equals that rank's steps in the all-ranks build (the one the checker proves);
//   - building it emitted under 1/50 of the all-ranks build's steps (work in steps, not time).
// Wall times are printed for the record (a benchmark, not asserted).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"

namespace weft {
namespace {

constexpr int kRanks = 1024;
// Steps per rank, per rank of the communicator: the loosest of the four algorithms' counts
// (unchunked: one chunk per segment or block):
//   ring allreduce      2(p-1) ring steps x (send + recv-reduce/recv) + 1 finalize = 4p - 3
//   ring allgather      1 copy + 1 send + (p-1) recv(-copy-send)                    = p + 1
//   ring reduce-scatter 1 send + (p-1) recv-reduce(-send) + 1 finalize              = p + 1
//   pairwise alltoall   (p-1) rounds x (send + recv + at most one staged copy) + 1 copy <= 3p
constexpr size_t kStepsPerRank = 4;
// The one-rank build emits its own ~c*p steps, the all-ranks build ~c*p^2: a ratio of 1/p
// (1/1024). 1/50 leaves room for any constant per-rank overhead a generator might add.
constexpr size_t kWorkRatio = 50;

struct Case {
  Collective collective;
  const char* algorithm;
  size_t count;  // API count: allreduce 4 elements per segment, the others 4 per block
};

bool SameStep(const Step& u, const Step& v) {
  auto same = [](const Region& a, const Region& b) {
    return a.buffer == b.buffer && a.offset == b.offset && a.count == b.count;
  };
  return u.op == v.op && u.peer == v.peer && u.to == v.to && u.channel == v.channel &&
         u.to_channel == v.to_channel && same(u.src, v.src) && same(u.dst, v.dst) &&
         same(u.remote, v.remote);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

class PlanScale : public ::testing::TestWithParam<Case> {};

TEST_P(PlanScale, OneRankPlanIsLinearInRanks) {
  const Case c = GetParam();
  const AlgorithmInfo* info = FindAlgorithm(c.collective, c.algorithm);
  ASSERT_NE(info, nullptr) << CollectiveName(c.collective) << ":" << c.algorithm;
  ScheduleRequest req;
  req.collective = c.collective;
  req.nranks = kRanks;
  req.count = c.count;

  auto t0 = std::chrono::steady_clock::now();
  BuildStats all_stats;
  StatusOr<Schedule> whole = BuildSchedule(*info, req, &all_stats);
  const double all_s = Seconds(t0);
  ASSERT_TRUE(whole.ok()) << whole.status().message();

  for (int rank : {0, 517}) {
    ScheduleRequest one = req;
    one.scope = PlanScope::ForRank(rank);
    BuildStats stats;
    auto t1 = std::chrono::steady_clock::now();
    StatusOr<Schedule> plan = BuildSchedule(*info, one, &stats);
    const double one_s = Seconds(t1);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const std::string what = std::string(CollectiveName(c.collective)) + ":" + c.algorithm +
                             " rank " + std::to_string(rank);
    ASSERT_EQ(plan->ranks.size(), static_cast<size_t>(kRanks)) << what;
    EXPECT_EQ(plan->scope.rank, rank) << what;

    // O(p): the plan's own steps are bounded by kStepsPerRank * p, and nobody else's exist.
    const std::vector<Step>& mine = plan->ranks[rank].steps;
    EXPECT_LE(mine.size(), kStepsPerRank * kRanks) << what;
    EXPECT_GE(mine.size(), static_cast<size_t>(kRanks - 1)) << what << ": fewer steps than ring hops";
    size_t others = 0;
    for (int q = 0; q < kRanks; ++q)
      if (q != rank) others += plan->ranks[q].steps.size();
    EXPECT_EQ(others, 0u) << what << " holds other ranks' steps";

    // Correctness unchanged: the same steps as this rank's part of the whole schedule.
    const RankSchedule& want = whole->ranks[rank];
    EXPECT_EQ(plan->ranks[rank].scratch_count, want.scratch_count) << what;
    EXPECT_EQ(plan->window, whole->window) << what;
    ASSERT_EQ(mine.size(), want.steps.size()) << what;
    for (size_t i = 0; i < mine.size(); ++i)
      ASSERT_TRUE(SameStep(mine[i], want.steps[i])) << what << " step " << i;

    // Work: the generator emitted only this rank's steps, not every rank's.
    EXPECT_EQ(stats.emitted_steps, mine.size()) << what;
    EXPECT_LT(stats.emitted_steps * kWorkRatio, all_stats.emitted_steps) << what;
    printf("[ plan ] %s: %zu steps (all ranks: %zu), build %.3f ms (all ranks %.1f ms)\n", what.c_str(),
           mine.size(), all_stats.emitted_steps, one_s * 1e3, all_s * 1e3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ring, PlanScale,
    ::testing::Values(Case{Collective::kAllReduce, "ring", 4 * kRanks},
                      Case{Collective::kAllGather, "ring", 4},
                      Case{Collective::kReduceScatter, "ring", 4},
                      Case{Collective::kAllToAll, "pairwise", 4}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(CollectiveName(i.param.collective)) + "_" + i.param.algorithm;
    });

}  // namespace
}  // namespace weft
