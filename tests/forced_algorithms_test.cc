// Every registered algorithm, forced through WEFT_ALGO, run over a real transport (threads of
// one process, inproc) for ranks {2,3,4,5,8} and odd counts, in-place and out-of-place, with
// exact expected values. Hierarchical algorithms run on uneven groups (WEFT_INPROC_GROUPS,
// e.g. 3 + 5). Direct (shared-memory window) algorithms cannot run on threads without a
// window transport: forcing them must fail with weftInvalidUsage and a message that says so
// (they run for real over shm in direct_algorithms_test and process_test).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "test_util.h"

using namespace weft_test;

namespace {

std::string Groups(int n) {
  switch (n) {
    case 2: return "1,1";
    case 3: return "1,2";
    case 4: return "2,2";
    case 5: return "2,3";
    default: return "3," + std::to_string(n - 3);
  }
}

bool IsDirect(const std::string& name) {
  return name == "oneshot" || name == "twoshot" || name == "direct";
}

// Runs `coll` once on every rank and checks the result; returns "" or a message.
std::string RunOne(weft::Collective coll, weftComm_t comm, int rank, int n, size_t count,
                   bool in_place, weftResult_t* code) {
  const weftDataType_t t = weftFloat32;
  const weftRedOp_t op = (count % 2) ? weftSum : weftAvg;
  const size_t es = sizeof(float);
  std::vector<unsigned char> a(count * n * es + es), b(count * n * es + es, 0xAB);
  *code = weftSuccess;
  switch (coll) {
    case weft::Collective::kAllReduce: {
      FillInputs(a.data(), t, op, rank, count);
      void* dst = in_place ? a.data() : b.data();
      if ((*code = weftAllReduce(a.data(), dst, count, t, op, comm, nullptr))) return weftGetLastError(comm);
      return CheckReduced(dst, t, op, n, count);
    }
    case weft::Collective::kReduceScatter: {
      FillInputs(a.data(), t, op, rank, count * n);
      void* dst = in_place ? a.data() + rank * count * es : b.data();
      if ((*code = weftReduceScatter(a.data(), dst, count, t, op, comm, nullptr))) return weftGetLastError(comm);
      return CheckReduced(dst, t, op, n, count, rank * count);
    }
    case weft::Collective::kAllGather: {
      void* src = in_place ? b.data() + rank * count * es : a.data();
      FillInputs(src, t, weftSum, rank, count);
      if ((*code = weftAllGather(src, b.data(), count, t, comm, nullptr))) return weftGetLastError(comm);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          if (Load(b.data(), t, r * count + i) != InputValue(weftSum, r, i))
            return "allgather block " + std::to_string(r) + " element " + std::to_string(i);
      return "";
    }
    case weft::Collective::kBroadcast: {
      int root = n - 1;
      FillInputs(a.data(), t, weftSum, rank, count);
      void* dst = in_place ? a.data() : b.data();
      if ((*code = weftBroadcast(a.data(), dst, count, t, root, comm, nullptr))) return weftGetLastError(comm);
      for (size_t i = 0; i < count; ++i)
        if (Load(dst, t, i) != InputValue(weftSum, root, i)) return "broadcast element " + std::to_string(i);
      return "";
    }
    case weft::Collective::kReduce: {
      int root = 1 % n;
      FillInputs(a.data(), t, op, rank, count);
      void* dst = in_place ? a.data() : b.data();
      if ((*code = weftReduce(a.data(), dst, count, t, op, root, comm, nullptr))) return weftGetLastError(comm);
      return rank == root ? CheckReduced(dst, t, op, n, count) : "";
    }
    case weft::Collective::kAllToAll: {
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) Store(a.data(), t, q * count + i, (rank * 13 + q * 5 + i) % 100);
      void* dst = in_place ? a.data() : b.data();
      if ((*code = weftAllToAll(a.data(), dst, count, t, comm, nullptr))) return weftGetLastError(comm);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i)
          if (Load(dst, t, q * count + i) != static_cast<double>((q * 13 + rank * 5 + i) % 100))
            return "alltoall from " + std::to_string(q) + " element " + std::to_string(i);
      return "";
    }
    case weft::Collective::kAllToAllv: {
      // Skewed counts: rank r sends (r + q) % 3 * count / 2 elements to q (zeros included).
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t so = 0, ro = 0;
      for (int q = 0; q < n; ++q) {
        sc[q] = ((rank + q) % 3) * count / 2;
        rc[q] = ((q + rank) % 3) * count / 2;
        sd[q] = so; rd[q] = ro;
        so += sc[q] + 1;  // gaps between blocks
        ro += rc[q] + 1;
      }
      std::vector<float> in(so + 1), out(ro + 1, -1.f);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < sc[q]; ++i) in[sd[q] + i] = static_cast<float>(rank * 1000 + q * 10 + i % 7);
      if ((*code = weftAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), t, comm, nullptr)))
        return weftGetLastError(comm);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < rc[q]; ++i)
          if (out[rd[q] + i] != static_cast<float>(q * 1000 + rank * 10 + i % 7))
            return "alltoallv from " + std::to_string(q) + " element " + std::to_string(i);
      return "";
    }
    case weft::Collective::kBarrier:
      if ((*code = weftBarrier(comm, nullptr))) return weftGetLastError(comm);
      return "";
    default:
      return "";
  }
}

struct Case {
  const weft::AlgorithmInfo* algo;
  int ranks;
};

class Forced : public testing::TestWithParam<Case> {};

TEST_P(Forced, ExactResults) {
  const Case c = GetParam();
  std::string coll = weft::CollectiveName(c.algo->collective);
  std::string spec = coll + ":" + c.algo->name;
  setenv("WEFT_ALGO", spec.c_str(), 1);
  setenv("WEFT_INPROC_GROUPS", Groups(c.ranks).c_str(), 1);
  for (size_t count : {size_t{1}, size_t{7}, size_t{1001}, size_t{65537}}) {
    for (bool in_place : {false, true}) {
      if (c.algo->collective == weft::Collective::kAllToAllv && in_place) continue;  // no in-place alltoallv
      std::string err = RunRanks(c.ranks, [&](weftComm_t comm, int rank) -> std::string {
        weftResult_t code;
        std::string e = RunOne(c.algo->collective, comm, rank, c.ranks, count, in_place, &code);
        if (IsDirect(c.algo->name)) {
          // Threads have no shared window transport: forcing a direct algorithm is refused.
          std::string msg = weftGetLastError(comm);
          if (code != weftInvalidUsage || msg.find(c.algo->name) == std::string::npos)
            return "forcing " + c.algo->name + " on threads: code " + std::to_string(code) + " '" + msg + "'";
          return "";
        }
        if (!e.empty()) return e;
        const char* used = nullptr;
        weftCommGetLastAlgorithm(comm, &used);
        if (c.algo->collective != weft::Collective::kBarrier && used != c.algo->name)
          return std::string("ran ") + (used ? used : "?") + " instead of " + c.algo->name;
        return "";
      });
      EXPECT_EQ(err, "") << spec << " ranks " << c.ranks << " count " << count
                         << (in_place ? " in-place" : " out-of-place");
    }
  }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_INPROC_GROUPS");
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms())
    for (int n : {2, 3, 4, 5, 8}) cases.push_back({&a, n});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, Forced, testing::ValuesIn(AllCases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           return std::string(weft::CollectiveName(i.param.algo->collective)) + "_" +
                                  i.param.algo->name + "_r" + std::to_string(i.param.ranks);
                         });

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
