// Thread-per-rank collectives over the inproc transport with the algorithms the selector
// chooses (no forcing): ranks {1,2,3,5,8} at 1000 elements and a few at (1<<20)+3 (spanning
// several 1 MiB pipelining chunks), in place and out of place, every collective through the
// test_util harness (order-free exact reference, guard bytes around every buffer, sendbuff
// unmodified, untouched gaps and non-root buffers). At 1000 elements each dtype runs once with
// an op rotating over the five (bfloat16 avg at the large count); the full dtype x op x count sweep of every algorithm, forced, is
// forced_algorithms_test, so this file does not repeat it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/dtype.h"
#include "test_util.h"

using namespace weft_test;

namespace {

constexpr size_t kBig = (1u << 20) + 3;

struct Param {
  int ranks;
  size_t count;
  bool in_place;
};

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  return "r" + std::to_string(info.param.ranks) + "_n" + std::to_string(info.param.count) +
         (info.param.in_place ? "_inplace" : "_outofplace");
}

std::vector<Param> AllParams() {
  std::vector<Param> ps;
  for (int r : {1, 2, 3, 5, 8})
    for (bool ip : {false, true}) ps.push_back({r, 1000, ip});
  // The large count costs seconds per case on two cores (1M-element references per rank):
  // out of place on 2, 5 and 8 ranks, in place on 3.
  for (int r : {2, 5, 8}) ps.push_back({r, kBig, false});
  ps.push_back({3, kBig, true});
  return ps;
}

// (dtype, op) pairs: every dtype once, the op rotating; three pairs at the large count.
std::vector<TypeOp> Combos(size_t count) {
  if (count == kBig) return {{weftBfloat16, weftAvg}};
  std::vector<TypeOp> c;
  for (size_t k = 0; k < AllTypes().size(); ++k) c.push_back({AllTypes()[k], AllOps()[k % AllOps().size()]});
  return c;
}

class Collectives : public testing::TestWithParam<Param> {};

TEST_P(Collectives, EveryCollectiveExactWithGuards) {
  const Param p = GetParam();
  std::vector<CollectiveCase> cases;
  uint64_t seed = 1;
  for (const std::string coll : {"allreduce", "reducescatter", "reduce", "allgather", "broadcast", "alltoall", "alltoallv"}) {
    if (coll == "alltoallv" && p.in_place) continue;
    for (const TypeOp& to : Combos(p.count)) {
      // All-to-all at the largest count moves 1M elements per peer: up to 5 ranks.
      if ((coll == "alltoall" || coll == "alltoallv") && p.count == kBig && p.ranks > 5) continue;
      for (int root : {0, p.ranks - 1}) {
        if (root != 0 && coll != "reduce" && coll != "broadcast") continue;
        cases.push_back({coll, to.first, to.second, p.count, p.in_place, root, seed++});
      }
    }
  }
  std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
    return RunSweep(comm, rank, p.ranks, cases, "");
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Matrix, Collectives, testing::ValuesIn(AllParams()), ParamName);

// Send/recv in a ring inside a group (every rank sends right and receives from the left), so
// the order of calls cannot deadlock.
TEST(PointToPoint, GroupedRingExchange) {
  for (int n : {2, 3, 5, 8}) {
    std::string err = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
      std::vector<int32_t> out(1001, rank), in(1001, -1);
      weftGroupStart();
      weftSend(out.data(), out.size(), weftInt32, (rank + 1) % n, comm, nullptr);
      weftRecv(in.data(), in.size(), weftInt32, (rank - 1 + n) % n, comm, nullptr);
      if (weftGroupEnd() != weftSuccess) return std::string("group: ") + weftGetLastError(comm);
      for (int32_t v : in)
        if (v != (rank - 1 + n) % n) return "got " + std::to_string(v);
      return "";
    });
    EXPECT_EQ(err, "") << n << " ranks";
  }
}

TEST(PointToPoint, BlockingPairs) {
  std::string err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> buf(77, rank == 0 ? 3.5f : 0.f);
    weftResult_t r = rank == 0 ? weftSend(buf.data(), buf.size(), weftFloat32, 1, comm, nullptr)
                               : weftRecv(buf.data(), buf.size(), weftFloat32, 0, comm, nullptr);
    if (r != weftSuccess) return weftGetLastError(comm);
    if (buf[76] != 3.5f) return "wrong value";
    return "";
  });
  EXPECT_EQ(err, "");
}

TEST(PointToPoint, SendToSelfInGroup) {
  std::string err = RunRanks(1, [&](weftComm_t comm, int) -> std::string {
    std::vector<int64_t> a(10, 42), b(10, 0);
    weftGroupStart();
    weftSend(a.data(), 10, weftInt64, 0, comm, nullptr);
    weftRecv(b.data(), 10, weftInt64, 0, comm, nullptr);
    if (weftGroupEnd() != weftSuccess) return weftGetLastError(comm);
    return b[9] == 42 ? "" : "wrong value";
  });
  EXPECT_EQ(err, "");
}

TEST(Barrier, AllRanksArriveBeforeAnyLeaves) {
  for (int n : {1, 2, 3, 8}) {
    std::atomic<int> arrived{0};
    std::string err = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
      for (int round = 1; round <= 3; ++round) {
        arrived++;
        if (weftBarrier(comm, nullptr) != weftSuccess) return weftGetLastError(comm);
        if (arrived.load() < round * n) return "left the barrier before every rank arrived";
        if (weftBarrier(comm, nullptr) != weftSuccess) return weftGetLastError(comm);
      }
      return "";
    });
    EXPECT_EQ(err, "") << n << " ranks";
  }
}

TEST(Streams, AsyncCollectivesCompleteInOrder) {
  std::string err = RunRanks(3, [&](weftComm_t comm, int rank) -> std::string {
    weftStream_t s;
    if (weftStreamCreate(&s) != weftSuccess) return "stream create";
    std::vector<std::vector<float>> bufs(5, std::vector<float>(1000));
    for (int k = 0; k < 5; ++k) {
      for (auto& v : bufs[k]) v = static_cast<float>(rank + k);
      if (weftAllReduce(bufs[k].data(), bufs[k].data(), 1000, weftFloat32, weftSum, comm, s) != weftSuccess)
        return weftGetLastError(comm);
    }
    if (weftStreamSynchronize(s) != weftSuccess) return weftGetLastError(comm);
    if (weftStreamQuery(s) != weftSuccess) return "query after sync not idle";
    weftStreamDestroy(s);
    for (int k = 0; k < 5; ++k)
      if (bufs[k][999] != static_cast<float>(3 + 3 * k)) return "wrong sum in op " + std::to_string(k);
    return "";
  });
  EXPECT_EQ(err, "");
}

TEST(Split, ColorsAndKeys) {
  std::string err = RunRanks(5, [&](weftComm_t comm, int rank) -> std::string {
    int color = rank == 4 ? WEFT_SPLIT_NOCOLOR : rank % 2;
    weftComm_t sub = nullptr;
    // Reverse order inside each color through the key.
    if (weftCommSplit(comm, color, -rank, &sub) != weftSuccess) return weftGetLastError(comm);
    if (rank == 4) return sub == nullptr ? "" : "NOCOLOR rank got a communicator";
    int n = 0, r = 0;
    weftCommCount(sub, &n);
    weftCommUserRank(sub, &r);
    int want_n = 2;  // evens {0,2}, odds {1,3}
    int want_r = rank / 2 == 0 ? 1 : 0;  // larger old rank has the smaller key -> rank 0
    if (n != want_n || r != want_r)
      return "size " + std::to_string(n) + " rank " + std::to_string(r);
    int v = rank, sum = 0;
    if (weftAllReduce(&v, &sum, 1, weftInt32, weftSum, sub, nullptr) != weftSuccess)
      return weftGetLastError(sub);
    weftCommDestroy(sub);
    return sum == (color == 0 ? 2 : 4) ? "" : "sum " + std::to_string(sum);
  });
  EXPECT_EQ(err, "");
}

// The per-thread "last plan" cache of src/core/comm.cc (RunPlanned): a thread that cached the
// plan of a call must not reuse it after another thread's calls on the same communicator
// cleared the plan map (it is cleared past 1024 call shapes). Thread A runs count 7, thread B
// then runs 1100 other counts (the map is cleared once and refilled), thread A runs count 7
// again: a stale cache would run a freed plan (garbage, or a crash under ASan). Every result is
// checked: one rank, so the sum is the input.
TEST(PlanCache, AThreadsLastPlanIsNotReusedAfterAnotherThreadClearedThePlans) {
  weftComm_t comm;
  ASSERT_EQ(weftCommInitAll(&comm, 1, nullptr), weftSuccess);
  auto run = [&](size_t count) {
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 97) + 0.5f;
    if (weftAllReduce(in.data(), out.data(), count, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return std::string("count ") + std::to_string(count) + ": " + weftGetLastError(comm);
    for (size_t i = 0; i < count; ++i)
      if (out[i] != in[i]) return std::string("count ") + std::to_string(count) + ": wrong element " + std::to_string(i);
    return std::string();
  };
  std::string err_a1, err_b, err_a2;
  std::atomic<int> phase{0};  // 0: A caches count 7; 1: B fills and clears; 2: A again
  std::thread a([&] {
    err_a1 = run(7);
    err_a1 += run(7);  // the second call takes the cached plan
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
    err_a2 = run(7);  // must not take the plan cached before B cleared the map
  });
  while (phase.load() != 1) std::this_thread::yield();
  std::thread b([&] {
    for (size_t count = 8; count < 8 + 1100 && err_b.empty(); ++count) err_b = run(count);
  });
  b.join();
  phase = 2;
  a.join();
  EXPECT_EQ(err_a1, "");
  EXPECT_EQ(err_b, "");
  EXPECT_EQ(err_a2, "");
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

}  // namespace
