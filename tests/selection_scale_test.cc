// Selection at scale: the analytic pre-filter (src/tune/analytic_model.h, selector.h) must pick
// what full simulation picks (or a candidate within 5% of its predicted time), bound the work
// of a 1024-rank decision (counted in simulated candidates, not wall time), explain itself,
// and leave rank counts up to 64 untouched (every candidate simulated).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "algorithms/algo_override.h"
#include "algorithms/registry.h"
#include "topo/presets.h"
#include "tune/analytic_model.h"
#include "tune/selector.h"

namespace weft {
namespace {

std::shared_ptr<const Fabric> Preset(const std::string& name) {
  auto f = MakePreset(name);
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.value();
}

ScheduleRequest AllReduce(int n, size_t bytes) {
  ScheduleRequest r;
  r.collective = Collective::kAllReduce;
  r.nranks = n;
  r.count = std::max<size_t>(1, bytes / 4);
  return r;
}

ScheduleRequest PerRankBlocks(Collective c, int n, size_t bytes) {  // bytes: nccl-tests size
  ScheduleRequest r;
  r.collective = c;
  r.nranks = n;
  r.count = std::max<size_t>(1, bytes / 4 / n);
  return r;
}

struct Case {
  std::string preset;
  size_t bytes;
  Collective collective = Collective::kAllReduce;
};

class PrefilterEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(PrefilterEquivalence, SameChoiceAsFullSimulationOrWithinFivePercent) {
  auto f = Preset(GetParam().preset);
  ASSERT_GT(f->nranks(), Selector::kFullSimulationMaxRanks) << "the pre-filter must be active";
  Selector filtered(f, AlgoOverrides(), true), full(f, AlgoOverrides(), true);
  full.SetFullSimulationForTesting(true);
  const Collective c = GetParam().collective;
  ScheduleRequest a = c == Collective::kAllReduce ? AllReduce(f->nranks(), GetParam().bytes)
                                                  : PerRankBlocks(c, f->nranks(), GetParam().bytes);
  ScheduleRequest b = a;
  auto df = filtered.Choose(&a, 4);
  auto dr = full.Choose(&b, 4);
  ASSERT_TRUE(df.ok()) << df.status().message();
  ASSERT_TRUE(dr.ok()) << dr.status().message();
  EXPECT_EQ(df->why.find("analytic only"), std::string::npos) << df->why;
  // The pre-filter acted: fewer candidates simulated, or algorithms left out. (Leaving one
  // out can hand the chunk grid to a cheaper fourth one: more, smaller simulations.)
  int kept = 0, considered = 0;
  const size_t at = df->why.find("pre-filter simulated ");
  ASSERT_NE(at, std::string::npos) << df->why;
  ASSERT_EQ(sscanf(df->why.c_str() + at, "pre-filter simulated %d of %d", &kept, &considered), 2) << df->why;
  EXPECT_TRUE(filtered.simulated_candidates() < full.simulated_candidates() || kept < considered)
      << filtered.simulated_candidates() << " vs " << full.simulated_candidates() << ": " << df->why;
  if (df->algorithm == dr->algorithm) SUCCEED();
  else EXPECT_LE(df->predicted_us, 1.05 * dr->predicted_us) << "pre-filter: " << df->why << "\nfull: " << dr->why;
}

INSTANTIATE_TEST_SUITE_P(Presets, PrefilterEquivalence,
                         ::testing::Values(Case{"dgx-h100:16", 8}, Case{"dgx-h100:16", 64 << 10},
                                           Case{"dgx-h100:16", 1 << 20}, Case{"dgx-h100:16", 16 << 20},
                                           Case{"dgx-h100-fattree:16:4", 1 << 20},
                                           Case{"dgx-h100-fattree:16:4", 16 << 20},
                                           Case{"dgx-h100:16", 64 << 10, Collective::kAllToAll},
                                           Case{"dgx-h100:16", 1 << 20, Collective::kAllToAll},
                                           Case{"dgx-h100:16", 16 << 20, Collective::kAllToAll},
                                           Case{"dgx-h100-fattree:16:4", 16 << 20, Collective::kAllToAll},
                                           Case{"dgx-h100:16", 64 << 10, Collective::kReduceScatter},
                                           Case{"dgx-h100:16", 16 << 20, Collective::kReduceScatter},
                                           Case{"dgx-h100-fattree:16:4", 1 << 20, Collective::kReduceScatter},
                                           Case{"dgx-h100:16", 64 << 10, Collective::kAllGather},
                                           Case{"dgx-h100:16", 16 << 20, Collective::kAllGather},
                                           Case{"dgx-h100-fattree:16:4", 1 << 20, Collective::kAllGather}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = i.param.preset + "_" + std::to_string(i.param.bytes) +
                                           (i.param.collective == Collective::kAllReduce ? "" : std::string("_") + CollectiveName(i.param.collective));
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(PrefilterWork, ThousandRankDecisionSimulatesFewCandidates) {
  auto f = Preset("dgx-h100:128");  // 1024 ranks
  Selector sel(f, AlgoOverrides(), true);
  ScheduleRequest r = AllReduce(f->nranks(), 1 << 20);
  auto d = sel.Choose(&r, 4);
  ASSERT_TRUE(d.ok()) << d.status().message();
  size_t algorithms = 0;
  for (const AlgorithmInfo& a : AllAlgorithms()) algorithms += a.collective == Collective::kAllReduce;
  // Full simulation would evaluate every algorithm plus a 9-point chunk grid for 3+ of them;
  // the pre-filter keeps 2 algorithms (and any with an analytic estimate within 2x).
  EXPECT_LE(sel.simulated_candidates(), 2u * 10u) << d->why;
  EXPECT_LT(sel.simulated_candidates(), algorithms + 3 * 9) << d->why;
  EXPECT_NE(d->why.find("pre-filter simulated"), std::string::npos) << d->why;
}

TEST(PrefilterExplain, EveryCandidateShowsItsAnalyticEstimate) {
  auto f = Preset("dgx-h100:128");
  Selector sel(f, AlgoOverrides(), true);
  std::vector<Decision> all = sel.Explain(AllReduce(f->nranks(), 1 << 20), 4);
  ASSERT_FALSE(all.empty());
  size_t skipped = 0, simulated = 0;
  for (const Decision& d : all) {
    if (d.why.find("not applicable") != std::string::npos) continue;
    if (d.why.find("no analytic pattern") == std::string::npos)
      EXPECT_NE(d.why.find("analytic"), std::string::npos) << d.why;
    skipped += d.why.find("not simulated") != std::string::npos;
    simulated += d.why.find(" simulated,") != std::string::npos;
  }
  EXPECT_GT(skipped, 0u);
  EXPECT_GT(simulated, 0u);
}

// The steps= figure a simulated candidate's explanation reports (0 when there is none).
double SimulatedSteps(const std::string& why) {
  const size_t at = why.find(" simulated, steps=");
  return at == std::string::npos ? 0 : std::atof(why.c_str() + at + 18);
}

TEST(PrefilterWork, LargeCallsStayWithinTheBuildBudget) {
  // Every candidate a 1024-rank decision simulates fits the work budget (unchunked ones get
  // 4x): an algorithm without an analytic pattern escapes both the pre-filter and the budget
  // (hierarchical_direct did: chunked 64K, 19M steps per candidate, 35-45 s per size).
  auto f = Preset("dgx-h100:128");
  Selector sel(f, AlgoOverrides(), true);
  for (size_t bytes : {size_t{16} << 20, size_t{64} << 20}) {
    size_t simulated = 0;
    for (const Decision& d : sel.Explain(AllReduce(f->nranks(), bytes), 4)) {
      const double steps = SimulatedSteps(d.why);
      simulated += steps > 0;
      EXPECT_LE(steps, 4 * Selector::kScaleBuildBudget) << bytes << " B: " << d.why;
    }
    EXPECT_GT(simulated, 0u) << bytes << " B";
  }
}

TEST(AnalyticModel, EveryApplicableAlgorithmOfTheModelledCollectivesHasAPattern) {
  // Fabrics with several hosts and mappable groups, where every hierarchical variant applies,
  // and one host (the direct algorithms). An algorithm without a pattern escapes the
  // pre-filter and the work budget at scale.
  for (const char* preset : {"dgx-h100:16", "netns:2x4", "host:4"})
    for (Collective c : {Collective::kAllReduce, Collective::kAllToAll, Collective::kReduceScatter,
                         Collective::kAllGather}) {
      auto f = Preset(preset);
      ScheduleRequest r = c == Collective::kAllReduce ? AllReduce(f->nranks(), 16 << 20)
                                                      : PerRankBlocks(c, f->nranks(), 16 << 20);
      r.collective = c;
      // The reduce-scatter and allgather hierarchical compositions have no pattern: their
      // schedules are small (tens of steps per rank), so simulating them costs little.
      const bool exempt = c == Collective::kReduceScatter || c == Collective::kAllGather;
      r.groups = f->HostGroups();
      r.groups_mappable = f->GroupsMappable(true);
      r.all_ranks_mappable = f->AllRanksMappable(true);
      for (const AlgorithmInfo& a : AllAlgorithms()) {
        if (a.collective != c || !a.applicable(r) ||
            (exempt && (a.name == "hierarchical" || a.name == "hierarchical_direct")))
          continue;
        EXPECT_TRUE(EstimateAnalytic(a, r, 4, *f, true).known) << preset << ": " << a.name;
      }
    }
}

TEST(AnalyticModel, AllToAllPatternsAreOptimisticAndNear) {
  // Against the simulation of the same unchunked schedule (64 ranks: every candidate is
  // simulated): at most 5% over (a pre-filter must not drop what the simulation would
  // pick), at least 40% of it.
  auto f = Preset("dgx-h100:8");
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{64} << 20}) {
    Selector sel(f, AlgoOverrides(), true);
    ScheduleRequest r = PerRankBlocks(Collective::kAllToAll, f->nranks(), bytes);
    std::vector<Decision> all = sel.Explain(r, 4);
    r.groups = f->HostGroups();
    r.groups_mappable = f->GroupsMappable(true);
    size_t checked = 0;
    for (const Decision& d : all) {
      if (!d.algorithm || d.chunk.chunk_elems != 0 || SimulatedSteps(d.why) <= 0) continue;
      const AnalyticEstimate e = EstimateAnalytic(*d.algorithm, r, 4, *f, true);
      ASSERT_TRUE(e.known) << d.algorithm->name;
      ++checked;
      EXPECT_LE(e.time_us, 1.05 * d.predicted_us) << bytes << " B: " << e.formula << " vs " << d.why;
      EXPECT_GE(e.time_us, 0.4 * d.predicted_us) << bytes << " B: " << e.formula << " vs " << d.why;
    }
    EXPECT_GE(checked, 4u) << bytes << " B";
  }
}

TEST(AnalyticModel, HierarchicalDirectIsOptimisticAndClose) {
  // The pre-filter must not drop what the simulation would pick: the estimate may be low,
  // not high; and it should be near enough to rank it (within 30% here).
  auto f = Preset("dgx-h100:8");  // 64 ranks: every candidate simulated
  const AlgorithmInfo* a = FindAlgorithm(Collective::kAllReduce, "hierarchical_direct");
  ASSERT_NE(a, nullptr);
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
    Selector sel(f, AlgoOverrides(), true);
    ScheduleRequest r = AllReduce(f->nranks(), bytes);
    std::vector<Decision> all = sel.Explain(r, 4);
    r.groups = f->HostGroups();
    r.groups_mappable = f->GroupsMappable(true);
    const AnalyticEstimate e = EstimateAnalytic(*a, r, 4, *f, true);
    ASSERT_TRUE(e.known);
    bool found = false;
    for (const Decision& d : all)
      if (d.algorithm == a && d.chunk.chunk_elems == 0 && SimulatedSteps(d.why) > 0) {
        found = true;
        EXPECT_LE(e.time_us, d.predicted_us) << bytes << " B: " << e.formula << " vs " << d.why;
        EXPECT_GE(e.time_us, 0.7 * d.predicted_us) << bytes << " B: " << e.formula << " vs " << d.why;
      }
    EXPECT_TRUE(found) << "hierarchical_direct unchunked was not simulated at " << bytes << " B";
  }
}

TEST(PrefilterSmall, UpToSixtyFourRanksEverythingIsSimulated) {
  auto f = Preset("dgx-h100:8");  // 64 ranks
  Selector sel(f, AlgoOverrides(), true);
  std::vector<Decision> all = sel.Explain(AllReduce(f->nranks(), 1 << 20), 4);
  for (const Decision& d : all) {
    EXPECT_EQ(d.why.find("not simulated"), std::string::npos) << d.why;
    EXPECT_EQ(d.why.find("analytic only"), std::string::npos) << d.why;
  }
}

TEST(AnalyticModel, RingClosedFormMatchesItsSimulation) {
  // A rank-symmetric pattern on a uniform tier: the closed form should be close to the
  // discrete-event result (within 10%).
  auto f = Preset("dgx-h100:8");  // 64 ranks: every candidate simulated
  const AlgorithmInfo* ring = FindAlgorithm(Collective::kAllReduce, "ring");
  ASSERT_NE(ring, nullptr);
  Selector sel(f, AlgoOverrides(), true);
  std::vector<Decision> all = sel.Explain(AllReduce(f->nranks(), 1 << 20), 4);
  ScheduleRequest r = AllReduce(f->nranks(), 1 << 20);
  r.groups = f->HostGroups();
  AnalyticEstimate a = EstimateAnalytic(*ring, r, 4, *f, true);
  ASSERT_TRUE(a.known);
  bool found = false;
  for (const Decision& d : all)
    if (d.algorithm == ring && d.chunk.chunk_elems == 0 && d.why.find(" simulated,") != std::string::npos) {
      found = true;
      EXPECT_NEAR(a.time_us, d.predicted_us, 0.10 * d.predicted_us) << d.why;
    }
  EXPECT_TRUE(found) << "ring unchunked was not simulated";
}

TEST(AnalyticModel, TcpStackCarriesEachMessagesOverhead) {
  // Over TCP loopback the machine's stack is the bottleneck; each message's fixed cost is kernel
  // CPU it takes from the stack (as the engine books it), so a ring of 64 KiB chunks is
  // estimated slower than one of 512 KiB chunks by about the extra messages' overheads.
  auto f = Preset("host:2");
  const AlgorithmInfo* ring = FindAlgorithm(Collective::kAllReduce, "ring");
  ASSERT_NE(ring, nullptr);
  const double ovh = f->table().link(LinkType::kLoopback).overhead_us;
  auto estimate = [&](size_t chunk_bytes) {
    ScheduleRequest r = AllReduce(2, 8 << 20);
    r.chunk.chunk_elems = chunk_bytes / 4;
    return EstimateAnalytic(*ring, r, 4, *f, /*shm=*/false);
  };
  AnalyticEstimate small = estimate(64 << 10), big = estimate(512 << 10);
  ASSERT_TRUE(small.known && big.known);
  // 8 MiB over 2 ranks: each rank sends 128 chunks of 64 KiB, or 16 of 512 KiB, through the one
  // stack (the streams alone, without it, made the difference 1 x (128 - 16) overheads).
  EXPECT_GT(small.time_us - big.time_us, 0.8 * 2 * (128 - 16) * ovh) << small.time_us << " vs " << big.time_us;
}

}  // namespace
}  // namespace weft
