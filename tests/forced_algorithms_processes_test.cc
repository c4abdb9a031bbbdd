// Every registered algorithm, forced with small chunks, across processes over the real
// transports: shared memory (direct window algorithms included) and TCP (WEFT_SHM_DISABLE=1;
// direct algorithms need mapped windows and are refused there). Processes cost more than
// threads, so each algorithm runs a representative subset of dtype x op (weft_test_worker's
// ProcessCombos: float32 avg, wrapping int8 sum, float16 max with NaN/inf/-0, and one pair
// rotating over the 50) at the forced sweep's counts, in place and out of place; the full
// dtype x op matrix runs on threads in forced_algorithms_test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "test_util.h"

using namespace weft_test;

namespace {

bool IsDirect(const std::string& name) {
  return name == "oneshot" || name == "twoshot" || name == "direct";
}

struct Config {
  bool tcp;
  int ranks;
};

class ForcedOverProcesses : public testing::TestWithParam<Config> {};

TEST_P(ForcedOverProcesses, EveryAlgorithmExactWithGuards) {
  const Config cfg = GetParam();
  std::vector<std::string> argv = {BinPath("weft_test_worker"), "forced", "96"};
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms()) {
    if (cfg.tcp && IsDirect(a.name)) continue;
    // needs two hosts with a window each: netns_2x2_hierarchical_direct runs it
    if (a.name == "hierarchical_direct") continue;
    argv.push_back(std::string(weft::CollectiveName(a.collective)) + ":" + a.name);
  }
  std::vector<std::pair<std::string, std::string>> env;
  if (cfg.tcp) env.push_back({"WEFT_SHM_DISABLE", "1"});
  LaunchOutcome o = LaunchRanks(cfg.ranks, argv, env, 280);
  ASSERT_FALSE(o.timed_out) << "timed out after " << o.seconds << " s; rank 0:\n" << o.output[0];
  for (int r = 0; r < cfg.ranks; ++r) {
    EXPECT_TRUE(ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
    EXPECT_NE(o.output[r].find("OK forced"), std::string::npos) << "rank " << r << ":\n" << o.output[r];
  }
  RecordProperty("seconds", std::to_string(o.seconds));
}

INSTANTIATE_TEST_SUITE_P(ShmAndTcp, ForcedOverProcesses,
                         testing::Values(Config{false, 3}, Config{false, 7}, Config{true, 4},
                                         Config{true, 9}),
                         [](const testing::TestParamInfo<Config>& i) {
                           return std::string(i.param.tcp ? "tcp" : "shm") + "_r" +
                                  std::to_string(i.param.ranks);
                         });

}  // namespace
