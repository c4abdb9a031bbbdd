// Fault tolerance as an API (issue 37): weftCommRevoke, weftCommShrink, weftCommFailedRanks,
// weftCommGetUniqueId + weftCommGrow, over shared memory, TCP and (built with it) UCX's tcp
// lane, on processes forked by weft_test::ForkRanks:
//   - kill -9 of rank 2, then of rank 0 (the rendezvous root's process), during a loop of
//     1 MiB allreduces on 4 ranks: every survivor gets an error, learns the dead rank from
//     weftCommFailedRanks, shrinks with WEFT_SHRINK_ABORT, and its first allreduce on the
//     3 ranks is exact; the time from the kill to that allreduce is printed ("RECOVERY");
//   - survivors passing different exclude lists agree on the union;
//   - a revoke from a watchdog thread unblocks its own rank and a peer blocked in a
//     collective, and tells a rank that calls later; shrink and destroy then succeed;
//   - 3 ranks grow to 4 with a new process; the allreduce over the 4 is exact.
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Env JobEnv(const std::string& transport) {
  Env env = weft_test::TransportEnv(transport);
  env.push_back({"WEFT_INIT_TIMEOUT", "30"});
  env.push_back({"WEFT_TIMEOUT", "60"});
  return env;
}

std::string All(const weft_test::LaunchOutcome& o) { return weft_test::AllOutput(o); }

std::string Field(const std::string& out, const std::string& key) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(key + " ([^\\n]*)")) ? m[1].str() : "";
}

// An allreduce of `count` floats where each rank contributes rank + 1 + i: "" when every
// element is the closed-form sum, else a message.
std::string ExactAllReduce(weftComm_t comm, size_t count) {
  int rank = -1, n = 0;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &n);
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(rank + 1 + i % 64);
  weftResult_t rc = weftAllReduce(x.data(), x.data(), count, weftFloat32, weftSum, comm, nullptr);
  if (rc != weftSuccess) return "allreduce failed: " + std::string(weftGetLastError(comm));
  for (size_t i = 0; i < count; ++i) {
    float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 64));
    if (x[i] != want) return "element " + std::to_string(i) + " = " + std::to_string(x[i]) + ", want " + std::to_string(want);
  }
  return "";
}

// ---- kill -9 during a loop of allreduces, then shrink ----

// One rank of the kill test. Prints "KILL AT t" (victim) or, on survivors, "FAILED <ranks>",
// "NEW <rank>/<size>", "EXACT <message or ok>", "RECOVERED AT t".
int KillAndShrinkRank(int rank, int victim) {
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    printf("FAIL init: %s\n", weftGetLastError(comm));
    return 2;
  }
  const size_t count = 1 << 18;  // 1 MiB of float32
  std::vector<float> buf(count, 1.0f);
  std::thread killer;
  weftResult_t rc = weftSuccess;
  for (int it = 0; it < 100000 && rc == weftSuccess; ++it) {
    if (rank == victim && it == 5)
      killer = std::thread([] {
        usleep(2000);  // inside allreduce #5
        printf("KILL AT %.6f\n", Now());
        fflush(stdout);
        raise(SIGKILL);
      });
    rc = weftAllReduce(buf.data(), buf.data(), count, weftFloat32, weftSum, comm, nullptr);
  }
  printf("ERROR %d: %s\n", static_cast<int>(rc), weftGetLastError(comm));
  int failed[8], nfailed = 0;
  if (weftCommFailedRanks(comm, failed, 8, &nfailed) != weftSuccess) {
    printf("FAIL failed ranks: %s\n", weftGetLastError(comm));
    return 3;
  }
  std::string list;
  for (int i = 0; i < nfailed && i < 8; ++i) list += std::to_string(failed[i]) + ",";
  printf("FAILED %s\n", list.c_str());
  weftComm_t small = nullptr;
  if (weftCommShrink(comm, failed, std::min(nfailed, 8), &small, WEFT_SHRINK_ABORT) != weftSuccess) {
    printf("FAIL shrink: %s\n", weftGetLastError(nullptr));
    return 4;
  }
  int r = -1, n = 0;
  weftCommUserRank(small, &r);
  weftCommCount(small, &n);
  printf("NEW %d/%d\n", r, n);
  std::string exact = ExactAllReduce(small, count);
  printf("RECOVERED AT %.6f\nEXACT %s\n", Now(), exact.empty() ? "ok" : exact.c_str());
  fflush(stdout);
  weftCommDestroy(small);
  weftCommDestroy(comm);
  if (killer.joinable()) killer.join();
  return 0;
}

struct KillCase {
  std::string transport;
  int victim;
};

class ElasticKill : public testing::TestWithParam<KillCase> {};

TEST_P(ElasticKill, SurvivorsLearnTheRankShrinkAndReduceExactly) {
  const KillCase& c = GetParam();
  const int n = 4;
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (r != c.victim) survivors.push_back(r);
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      n, [&](int r) { return KillAndShrinkRank(r, c.victim); }, JobEnv(c.transport), 90, survivors);
  ASSERT_FALSE(o.timed_out) << All(o);
  std::smatch m;
  const std::string kill_at = Field(o.output[c.victim], "KILL AT");
  ASSERT_FALSE(kill_at.empty()) << "the victim never killed itself:\n" << All(o);
  double slowest = 0;
  for (int r : survivors) {
    const std::string& out = o.output[r];
    ASSERT_TRUE(weft_test::ExitedZero(o.status[r])) << All(o);
    EXPECT_NE(Field(out, "ERROR").rfind("0:", 0), 0u) << "rank " << r << " never saw an error:\n" << All(o);
    EXPECT_NE(Field(out, "FAILED").find(std::to_string(c.victim) + ","), std::string::npos)
        << "rank " << r << " was not told rank " << c.victim << " failed:\n" << All(o);
    const int new_rank = r < c.victim ? r : r - 1;  // renumbered in order
    EXPECT_EQ(Field(out, "NEW"), std::to_string(new_rank) + "/3") << All(o);
    EXPECT_EQ(Field(out, "EXACT"), "ok") << All(o);
    slowest = std::max(slowest, std::stod(Field(out, "RECOVERED AT")) - std::stod(kill_at));
  }
  // Recorded, not judged (a loaded machine stretches it; the goal is under 2 s).
  printf("RECOVERY %s kill -9 of rank %d on 4 ranks -> first exact allreduce on 3: %.3f s\n",
         c.transport.c_str(), c.victim, slowest);
  RecordProperty("recovery_seconds", std::to_string(slowest));
}

std::vector<KillCase> KillCases() {
  std::vector<KillCase> cases;
  for (const std::string& t : weft_test::ProcessTransports())
    for (int victim : {2, 0}) cases.push_back({t, victim});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Transports, ElasticKill, testing::ValuesIn(KillCases()),
                         [](const testing::TestParamInfo<KillCase>& i) {
                           return i.param.transport + "_rank" + std::to_string(i.param.victim);
                         });

class Elastic : public testing::TestWithParam<std::string> {};

// ---- different exclude lists ----

TEST_P(Elastic, SurvivorsPassingDifferentListsAgreeOnTheUnion) {
  // Ranks 1 and 3 of 5 die after one allreduce; rank 0 excludes {1}, rank 2 {3}, rank 4
  // nothing: the survivors 0, 2, 4 become 0, 1, 2 of a 3-rank communicator.
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      5,
      [](int r) {
        weftComm_t comm = nullptr;
        if (weftCommInitFromEnv(&comm) != weftSuccess) return 2;
        if (!ExactAllReduce(comm, 1024).empty()) return 3;
        if (r == 1 || r == 3) {
          weftCommDestroy(comm);  // delivers what the peers still read of the allreduce
          raise(SIGKILL);
        }
        std::vector<int> exclude = r == 0 ? std::vector<int>{1} : r == 2 ? std::vector<int>{3} : std::vector<int>{};
        weftComm_t small = nullptr;
        if (weftCommShrink(comm, exclude.data(), static_cast<int>(exclude.size()), &small,
                           WEFT_SHRINK_DEFAULT) != weftSuccess) {
          printf("FAIL shrink: %s\n", weftGetLastError(nullptr));
          return 4;
        }
        int nr = -1, n = 0;
        weftCommUserRank(small, &nr);
        weftCommCount(small, &n);
        std::string exact = ExactAllReduce(small, 4096);
        printf("NEW %d/%d\nEXACT %s\n", nr, n, exact.empty() ? "ok" : exact.c_str());
        weftCommDestroy(small);
        weftCommDestroy(comm);
        return 0;
      },
      JobEnv(GetParam()), 60, {0, 2, 4});
  ASSERT_FALSE(o.timed_out) << All(o);
  const int survivors[] = {0, 2, 4};
  for (int i = 0; i < 3; ++i) {
    const int r = survivors[i];
    ASSERT_TRUE(weft_test::ExitedZero(o.status[r])) << All(o);
    EXPECT_EQ(Field(o.output[r], "NEW"), std::to_string(i) + "/3") << All(o);
    EXPECT_EQ(Field(o.output[r], "EXACT"), "ok") << All(o);
  }
}

// ---- revoke ----

TEST_P(Elastic, RevokeUnblocksCollectivesAndShrinkAndDestroyFollow) {
  // Rank 2 stays out of the first allreduce for a while, so ranks 0 and 1 block in it; a
  // watchdog thread of rank 0 revokes. Ranks 0 and 1 must return weftRemoteError saying
  // "revoked"; rank 2's late call must fail too (it was told). All then shrink (nobody
  // excluded) and reduce exactly; destroying the revoked communicator succeeds.
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      3,
      [](int r) {
        weftComm_t comm = nullptr;
        if (weftCommInitFromEnv(&comm) != weftSuccess) return 2;
        std::thread watchdog;
        if (r == 0)
          watchdog = std::thread([comm] {
            usleep(500000);
            printf("REVOKE %d\n", static_cast<int>(weftCommRevoke(comm, 0)));
          });
        if (r == 2) usleep(1500000);
        std::vector<float> x(1 << 16, 1.0f);
        const double start = Now();
        weftResult_t rc = weftAllReduce(x.data(), x.data(), x.size(), weftFloat32, weftSum, comm, nullptr);
        printf("FIRST %d %.3f: %s\n", static_cast<int>(rc), Now() - start, weftGetLastError(comm));
        if (watchdog.joinable()) watchdog.join();
        weftComm_t again = nullptr;
        weftResult_t src = weftCommShrink(comm, nullptr, 0, &again, WEFT_SHRINK_DEFAULT);
        if (src != weftSuccess) {
          printf("FAIL shrink: %s\n", weftGetLastError(nullptr));
          return 4;
        }
        std::string exact = ExactAllReduce(again, 4096);
        int nr = -1, n = 0;
        weftCommUserRank(again, &nr);
        weftCommCount(again, &n);
        printf("NEW %d/%d\nEXACT %s\n", nr, n, exact.empty() ? "ok" : exact.c_str());
        printf("DESTROY %d\n", static_cast<int>(weftCommDestroy(comm)));
        weftCommDestroy(again);
        return 0;
      },
      JobEnv(GetParam()), 60);
  ASSERT_FALSE(o.timed_out) << All(o);
  EXPECT_EQ(Field(o.output[0], "REVOKE"), "0") << All(o);
  for (int r = 0; r < 3; ++r) {
    const std::string& out = o.output[r];
    ASSERT_TRUE(weft_test::ExitedZero(o.status[r])) << All(o);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("FIRST ([0-9]+) ([0-9.]+): (.*)"))) << All(o);
    EXPECT_EQ(std::stoi(m[1]), weftRemoteError) << "rank " << r << ":\n" << All(o);
    EXPECT_NE(m[3].str().find("revoked the communicator"), std::string::npos) << "rank " << r << ":\n" << All(o);
    // WEFT_TIMEOUT is 60 s: "promptly" is far below it (the revoke comes 0.5 s in).
    EXPECT_LT(std::stod(m[2]), 20.0) << All(o);
    EXPECT_EQ(Field(out, "NEW"), std::to_string(r) + "/3") << All(o);
    EXPECT_EQ(Field(out, "EXACT"), "ok") << All(o);
    EXPECT_EQ(Field(out, "DESTROY"), "0") << All(o);
  }
}

// ---- grow ----

TEST_P(Elastic, ThreeRanksGrowToFourWithANewProcess) {
  const std::string id_file = "/tmp/weft_elastic_grow_" + std::to_string(getpid()) + "_" + GetParam();
  unlink(id_file.c_str());
  Env env = JobEnv(GetParam());
  env.push_back({"WEFT_WORLD_SIZE", "3"});  // process 3 is the newcomer: it does not init from env
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      4,
      [&](int r) {
        weftComm_t grown = nullptr;
        weftComm_t comm = nullptr;
        if (r < 3) {
          if (weftCommInitFromEnv(&comm) != weftSuccess) return 2;
          if (r == 0) {
            weftUniqueId id;
            if (weftCommGetUniqueId(comm, &id) != weftSuccess) return 3;
            std::ofstream(id_file + ".tmp", std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof(id));
            rename((id_file + ".tmp").c_str(), id_file.c_str());
          }
          if (weftCommGrow(comm, 4, nullptr, -1, &grown) != weftSuccess) {
            printf("FAIL grow: %s\n", weftGetLastError(nullptr));
            return 4;
          }
        } else {
          weftUniqueId id;
          for (int i = 0; i < 3000 && access(id_file.c_str(), R_OK) != 0; ++i) usleep(10000);
          std::ifstream(id_file, std::ios::binary).read(reinterpret_cast<char*>(&id), sizeof(id));
          if (weftCommGrow(nullptr, 4, &id, 3, &grown) != weftSuccess) {
            printf("FAIL grow: %s\n", weftGetLastError(nullptr));
            return 4;
          }
        }
        int nr = -1, n = 0;
        weftCommUserRank(grown, &nr);
        weftCommCount(grown, &n);
        std::string exact = ExactAllReduce(grown, 1 << 18);
        printf("NEW %d/%d\nEXACT %s\n", nr, n, exact.empty() ? "ok" : exact.c_str());
        weftCommDestroy(grown);
        weftCommDestroy(comm);
        return 0;
      },
      env, 60);
  unlink(id_file.c_str());
  ASSERT_FALSE(o.timed_out) << All(o);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(weft_test::ExitedZero(o.status[r])) << All(o);
    EXPECT_EQ(Field(o.output[r], "NEW"), std::to_string(r) + "/4") << All(o);
    EXPECT_EQ(Field(o.output[r], "EXACT"), "ok") << All(o);
  }
}

// ---- argument checks ----

TEST(ElasticArguments, BadArgumentsNameTheArgumentAndValue) {
  weftComm_t comms[2];
  ASSERT_EQ(weftCommInitAll(comms, 2, nullptr), weftSuccess);
  weftComm_t out = nullptr;
  int bad = 7;
  EXPECT_EQ(weftCommShrink(comms[0], &bad, 1, &out, WEFT_SHRINK_DEFAULT), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("excludeRanks[0]=7"), std::string::npos);
  EXPECT_EQ(weftCommShrink(comms[0], nullptr, 0, &out, 5), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("shrinkFlags=5"), std::string::npos);
  EXPECT_EQ(weftCommShrink(comms[0], nullptr, 0, &out, WEFT_SHRINK_DEFAULT), weftInvalidUsage);
  EXPECT_EQ(weftCommRevoke(comms[0], 3), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("revokeFlags=3"), std::string::npos);
  int ranks[4], count = -1;
  EXPECT_EQ(weftCommFailedRanks(comms[0], ranks, 4, &count), weftSuccess);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(weftCommFailedRanks(comms[0], nullptr, 4, &count), weftInvalidArgument);
  EXPECT_EQ(weftCommGrow(nullptr, 4, nullptr, 3, &out), weftInvalidArgument);
  for (weftComm_t c : comms) weftCommDestroy(c);
}

INSTANTIATE_TEST_SUITE_P(Transports, Elastic, testing::ValuesIn(weft_test::ProcessTransports()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
