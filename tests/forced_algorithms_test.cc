// Every registered algorithm, forced, run over threads of one process (inproc transport) for
// every dtype x op, in place and out of place, at counts 0, 1, chunk*k - 1, chunk*k and
// chunk*k + 1 (k = 2n + 1: every rank's share spans several chunks), on 1, 2, 3, 4, 6, 7, 8
// and 9 ranks, with the order-free reference of test_util (integers wrap, negative floats,
// NaN/inf/-0 for max/min, avg divided once) and guard bytes around every buffer.
//
// Threads of one process have no selector (it is built with the fabric of a multi-process
// communicator): WEFT_ALGO forces the algorithm and WEFT_CHUNK_BYTES sets the chunk, read once
// per process, so this file sets it (96 bytes) before any collective runs. Every call must
// report the forced algorithm. Hierarchical algorithms run on uneven groups
// (WEFT_INPROC_GROUPS, e.g. 2 + 3 + 4). Direct (shared-memory window) algorithms cannot run on
// threads: forcing them must fail with weftInvalidUsage naming them; they run over shm in
// forced_algorithms_processes_test, as every algorithm does over shm and tcp.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "test_util.h"

using namespace weft_test;

namespace {

constexpr size_t kChunkBytes = 96;
// Before main: the library reads WEFT_CHUNK_BYTES once, at the first collective.
const bool kChunkSet = setenv("WEFT_CHUNK_BYTES", std::to_string(kChunkBytes).c_str(), 1) == 0;

std::string Groups(int n) {
  switch (n) {
    case 1: return "1";
    case 2: return "1,1";
    case 3: return "1,2";
    case 4: return "2,2";
    case 6: return "1,2,3";
    case 9: return "2,3,4";
    default: return "3," + std::to_string(n - 3);
  }
}

// Algorithms that need mapped windows (threads have none): the flat direct ones, and
// hierarchical_direct (a window per host; it runs in netns_2x2_hierarchical_direct).
bool IsDirect(const std::string& name) {
  return name == "oneshot" || name == "twoshot" || name == "direct" || name == "hierarchical_direct";
}

struct Case {
  const weft::AlgorithmInfo* algo;
  int ranks;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << weft::CollectiveName(c.algo->collective) << ":" << c.algo->name << " on " << c.ranks << " ranks";
}

class Forced : public testing::TestWithParam<Case> {};

TEST_P(Forced, EveryTypeOpCountExact) {
  const Case c = GetParam();
  const std::string coll = weft::CollectiveName(c.algo->collective);
  ASSERT_TRUE(kChunkSet);
  setenv("WEFT_ALGO", (coll + ":" + c.algo->name).c_str(), 1);
  setenv("WEFT_INPROC_GROUPS", Groups(c.ranks).c_str(), 1);
  const std::vector<CollectiveCase> cases = ForcedSweep(coll, c.ranks, kChunkBytes, AllTypeOps());
  std::string err = RunRanks(c.ranks, [&](weftComm_t comm, int rank) -> std::string {
    weftCommSetTimeout(comm, 60);  // a wedged case fails in a minute instead of 300 s
    return RunSweep(comm, rank, c.ranks, cases, c.algo->name);
  });
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_INPROC_GROUPS");
  EXPECT_EQ(err, "") << coll << ":" << c.algo->name << " on " << c.ranks << " ranks ("
                     << cases.size() << " calls per rank)";
}

std::vector<Case> ThreadCases() {
  std::vector<Case> cases;
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms()) {
    if (IsDirect(a.name)) continue;
    for (int n : {1, 2, 3, 4, 6, 7, 8, 9}) cases.push_back({&a, n});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, Forced, testing::ValuesIn(ThreadCases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           return std::string(weft::CollectiveName(i.param.algo->collective)) + "_" +
                                  i.param.algo->name + "_r" + std::to_string(i.param.ranks);
                         });

TEST(ForcedOnThreads, DirectAlgorithmsAreRefusedWithInvalidUsageNamingThem) {
  int checked = 0;
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms()) {
    if (!IsDirect(a.name)) continue;
    const std::string coll = weft::CollectiveName(a.collective);
    setenv("WEFT_ALGO", (coll + ":" + a.name).c_str(), 1);
    std::string err = RunRanks(3, [&](weftComm_t comm, int rank) -> std::string {
      CollectiveCase c{coll, weftFloat32, weftSum, 1000, false, 0, 7};
      weftResult_t code = weftSuccess;
      RunCollectiveCase(comm, rank, 3, c, &code);
      std::string msg = weftGetLastError(comm);
      if (code != weftInvalidUsage || msg.find(a.name) == std::string::npos)
        return "code " + std::to_string(code) + " '" + msg + "'";
      return "";
    });
    unsetenv("WEFT_ALGO");
    EXPECT_EQ(err, "") << coll << ":" << a.name;
    ++checked;
  }
  EXPECT_GE(checked, 3) << "expected oneshot, twoshot and the direct algorithms to be registered";
}

TEST(WeftAlgo, BadStringFailsCollectivesWithInvalidUsage) {
  setenv("WEFT_ALGO", "allreduce:no_such_algorithm", 1);
  std::string err = RunRanks(2, [&](weftComm_t comm, int) -> std::string {
    float x = 1, y = 0;
    weftResult_t r = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, comm, nullptr);
    std::string msg = weftGetLastError(comm);
    if (r != weftInvalidUsage) return "code " + std::to_string(r);
    if (msg.find("no_such_algorithm") == std::string::npos) return "message: " + msg;
    return "";
  });
  unsetenv("WEFT_ALGO");
  EXPECT_EQ(err, "");
}

TEST(WeftAlgo, SizeRangesPickPerCall) {
  setenv("WEFT_ALGO", "allreduce:0-1K:recursive_doubling,1K-inf:ring", 1);
  std::string err = RunRanks(3, [&](weftComm_t comm, int) -> std::string {
    std::vector<float> small(8, 1.f), big(4096, 1.f);
    const char* used = nullptr;
    weftAllReduce(small.data(), small.data(), small.size(), weftFloat32, weftSum, comm, nullptr);
    weftCommGetLastAlgorithm(comm, &used);
    if (std::string(used) != "recursive_doubling") return std::string("small ran ") + used;
    weftAllReduce(big.data(), big.data(), big.size(), weftFloat32, weftSum, comm, nullptr);
    weftCommGetLastAlgorithm(comm, &used);
    if (std::string(used) != "ring") return std::string("big ran ") + used;
    return big[10] == 3.f && small[3] == 3.f ? "" : "wrong values";
  });
  unsetenv("WEFT_ALGO");
  EXPECT_EQ(err, "");
}

}  // namespace
