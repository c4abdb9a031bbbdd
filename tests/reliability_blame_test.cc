// Who gets blamed (issue 34, item 4), tested deterministically rather than by the fault
// matrix's odds:
//   - a chain: 3 ranks run a forced ring allreduce; rank 1 never calls it (alive, silent).
//     Rank 2 waits on rank 1, rank 0 waits on rank 2: rank 0's error must name rank 1, two hops
//     away, and must not call the healthy relay (rank 2) failed, closed or stuck. Once with
//     equal timeouts (the survivors' culprit announcements decide) and once with rank 2 timing
//     out first (its abort reaches rank 0 first: the note or header must name rank 1, not 2);
//   - an all-to-allv whose counts disagree on one rank fails on every rank at once with
//     weftInvalidUsage naming the pair, not on that rank alone while the others wait for
//     WEFT_TIMEOUT.
// Over shared memory, TCP and (built with it) UCX's tcp lane, processes forked by ForkRanks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <unistd.h>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

Env JobEnv(const std::string& transport) {
  Env env = weft_test::TransportEnv(transport);
  env.push_back({"WEFT_INIT_TIMEOUT", "30"});
  return env;
}

std::string All(const weft_test::LaunchOutcome& o) { return weft_test::AllOutput(o); }

// Creates the rank's communicator from the environment, or prints why not.
weftComm_t InitOrSay() {
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    printf("FAIL init: %s\n", weftGetLastError(comm));
    return nullptr;
  }
  return comm;
}

// The line "ERROR <code>: <message>" a rank printed, or "".
std::string ErrorLine(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("ERROR [0-9]+: .*")) ? m.str() : "";
}

class Blame : public testing::TestWithParam<std::string> {};

// Rank 1 stays out of the call; ranks 0 and 2 time out after `timeout0` and `timeout2` s.
void ExpectChainNamesRankOne(const std::string& transport, double timeout0, double timeout2) {
  Env env = JobEnv(transport);
  env.push_back({"WEFT_ALGO", "allreduce:ring"});
  env.push_back({"WEFT_TIMEOUT", "30"});  // each rank sets its own below
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      3,
      [&](int r) {
        weftComm_t comm = InitOrSay();
        if (comm == nullptr) return 2;
        if (r == 1) {  // alive and silent: never calls, never closes
          sleep(60);
          return 0;
        }
        weftCommSetTimeout(comm, r == 0 ? timeout0 : timeout2);
        std::vector<float> x(1 << 16, 1.0f);
        weftResult_t rc = weftAllReduce(x.data(), x.data(), x.size(), weftFloat32, weftSum, comm, nullptr);
        printf("ERROR %d: %s\n", static_cast<int>(rc), weftGetLastError(comm));
        weftCommDestroy(comm);
        return 0;
      },
      env, 60, {0, 2});
  ASSERT_FALSE(o.timed_out) << All(o);
  const std::string line = ErrorLine(o.output[0]);
  ASSERT_FALSE(line.empty()) << All(o);
  printf("rank 0 (%s): %s\n", transport.c_str(), line.c_str());
  EXPECT_EQ(line.rfind("ERROR 0:", 0), std::string::npos) << "rank 0 succeeded:\n" << All(o);
  // The verdict names rank 1: as the failed rank of a relayed report, or the rank that may be stuck.
  EXPECT_TRUE(std::regex_search(line, std::regex("rank 1 (failed|may be stuck)"))) << All(o);
  // ... and never the healthy relay.
  EXPECT_FALSE(std::regex_search(line, std::regex("rank 2( \\([^)]*\\))? (failed|may be stuck|aborted|closed)")))
      << All(o);
}

TEST_P(Blame, ChainWithEqualTimeoutsNamesTheSilentRankTwoHopsAway) {
  ExpectChainNamesRankOne(GetParam(), 1.5, 1.5);
}

TEST_P(Blame, ChainWhoseRelayTimesOutFirstNamesTheSilentRankNotTheRelay) {
  ExpectChainNamesRankOne(GetParam(), 6, 1);
}

TEST_P(Blame, AllToAllvCountsThatDisagreeFailEveryRankAtOnce) {
  Env env = JobEnv(GetParam());
  env.push_back({"WEFT_TIMEOUT", "60"});
  const int n = 3;
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      n,
      [&](int r) {
        weftComm_t comm = InitOrSay();
        if (comm == nullptr) return 2;
        std::vector<size_t> sc(n, 4), sd(n), rc(n, 4), rd(n);
        for (int i = 0; i < n; ++i) sd[i] = rd[i] = 4 * i;
        if (r == 1) rc[2] = 3;  // rank 2 sends rank 1 four elements; rank 1 expects three
        std::vector<float> in(4 * n, 1.0f), out(4 * n);
        auto start = std::chrono::steady_clock::now();
        weftResult_t code = weftAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(),
                                          rd.data(), weftFloat32, comm, nullptr);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        printf("ERROR %d: %s\nSECONDS %.3f\n", static_cast<int>(code), weftGetLastError(comm), s);
        weftCommDestroy(comm);
        return 0;
      },
      env, 60);
  ASSERT_FALSE(o.timed_out) << All(o);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(weft_test::ExitedZero(o.status[r])) << All(o);
    const std::string line = ErrorLine(o.output[r]);
    EXPECT_EQ(line.rfind("ERROR " + std::to_string(weftInvalidUsage) + ":", 0), 0u) << All(o);
    EXPECT_NE(line.find("recvcounts[2] = 3 but rank 2 sends it 4"), std::string::npos) << All(o);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(o.output[r], m, std::regex("SECONDS ([0-9.]+)"))) << All(o);
    // WEFT_TIMEOUT is 60 s: a rank that was not told would wait that long.
    EXPECT_LT(std::stod(m[1]), 20.0) << All(o);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Blame, testing::ValuesIn(weft_test::ProcessTransports()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
