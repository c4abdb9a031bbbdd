// Inputs that expose the reduction order, and the README's determinism claims.
//
// Inputs are non-exact floats of both signs (test_util StoreNonExactInput), so every
// association order gives different bits. For algorithms whose order is documented (their
// file headers, README "Semantics", kernels/reduce.h), the expected bits are computed here,
// independently, in that order with weft's pairwise rounding (float16/bfloat16 round once per
// step; avg divides once at the end):
//   allreduce ring          segment j (of p, first count % p one longer) is added rank j,
//                           j+1, ..., j-1 (it starts at its owner's successor in the ring...)
//   allreduce recursive_doubling / halving_doubling
//                           fold (rank 2v hands its input to 2v+1 for v < p - p2), then
//                           partners at distance 1, 2, 4... (recursive doubling, whole vector)
//                           or p2/2, p2/4, ..., 1 (recursive halving, block b of p2 blocks)
//   reducescatter ring      block j: ranks j+1, j+2, ..., j
//   reducescatter pairwise  block j: ranks j, j-1, ..., j+1 (round k adds rank j-k's block)
//   reduce chain            root-1, root-2, ..., root+1, root
//   reduce binomial         children vr + 2^k, smallest subtree first, added to the input
// The determinism claims run for every reduction algorithm that runs on threads: bitwise
// identical run to run, on every rank, and for any chunk size; and close to the exact sum.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "test_util.h"

using namespace weft_test;

namespace {

constexpr size_t kCount = 1001;
// Before main: the library reads WEFT_CHUNK_BYTES once, at the first collective.
const bool kChunkSet = setenv("WEFT_CHUNK_BYTES", "96", 1) == 0;
constexpr uint64_t kSeed = 20261123;
const std::vector<TypeOp> kFloatTypeOps = {
    {weftFloat32, weftSum}, {weftFloat64, weftSum}, {weftFloat16, weftSum},
    {weftBfloat16, weftSum}, {weftFloat32, weftAvg}, {weftBfloat16, weftAvg}};

size_t Part(size_t total, int parts, size_t i) {  // which of `parts` contiguous pieces holds i
  for (int j = 0; j < parts; ++j) {
    size_t off = total / parts * j + std::min<size_t>(j, total % parts);
    size_t size = total / parts + (static_cast<size_t>(j) < total % parts ? 1 : 0);
    if (i < off + size) return j;
  }
  return parts - 1;
}

std::vector<int> Cycle(int start, int n, int step) {  // start, start+step, ... (n ranks, mod n)
  std::vector<int> order;
  for (int k = 0; k < n; ++k) order.push_back(((start + step * k) % n + n) % n);
  return order;
}

int FloorPow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Fold leaves: participant v holds x[2v] + x[2v+1] for v < rem, else x[v + rem].
std::vector<double> FoldLeaves(weftDataType_t t, int n, size_t i, uint64_t seed) {
  const int p2 = FloorPow2(n), rem = n - p2;
  std::vector<double> leaf(p2);
  for (int v = 0; v < p2; ++v)
    leaf[v] = v < rem ? SumInOrder(t, {2 * v, 2 * v + 1}, i, seed) : NonExactInput(t, v + rem, i, seed);
  return leaf;
}

// Pairwise rounds over the p2 participants, in the order of `masks`.
std::vector<double> Butterfly(weftDataType_t t, std::vector<double> v, const std::vector<int>& masks) {
  for (int m : masks) {
    std::vector<double> next(v.size());
    for (size_t k = 0; k < v.size(); ++k) next[k] = AddInType(t, v[k], v[k ^ m]);
    v = next;
  }
  return v;
}

double BinomialSubtree(weftDataType_t t, int n, int root, int vr, size_t i, uint64_t seed) {
  double acc = NonExactInput(t, (vr + root) % n, i, seed);
  const int low = vr == 0 ? n : (vr & -vr);
  for (int mask = 1; mask < low && vr + mask < n; mask <<= 1)
    acc = AddInType(t, acc, BinomialSubtree(t, n, root, vr + mask, i, seed));
  return acc;
}

// The documented sum (before avg's division) of element g: the allreduce / reduce element, or
// reduce-scatter's global index (block g / count).
using OrderModel = std::function<double(weftDataType_t t, int n, size_t count, size_t g, int root)>;

struct Documented {
  std::string collective, algorithm;
  OrderModel sum;
};

std::vector<Documented> DocumentedOrders() {
  return {
      {"allreduce", "ring",
       [](weftDataType_t t, int n, size_t count, size_t g, int) {
         return SumInOrder(t, Cycle(static_cast<int>(Part(count, n, g)), n, 1), g, kSeed);
       }},
      {"allreduce", "recursive_doubling",
       [](weftDataType_t t, int n, size_t, size_t g, int) {
         std::vector<int> masks;
         for (int m = 1; m < FloorPow2(n); m <<= 1) masks.push_back(m);
         return Butterfly(t, FoldLeaves(t, n, g, kSeed), masks)[0];
       }},
      {"allreduce", "halving_doubling",
       [](weftDataType_t t, int n, size_t count, size_t g, int) {
         const int p2 = FloorPow2(n);
         std::vector<int> masks;
         for (int m = p2 / 2; m >= 1; m >>= 1) masks.push_back(m);
         return Butterfly(t, FoldLeaves(t, n, g, kSeed), masks)[Part(count, p2, g)];
       }},
      {"reducescatter", "ring",
       [](weftDataType_t t, int n, size_t count, size_t g, int) {
         return SumInOrder(t, Cycle(static_cast<int>(g / count) + 1, n, 1), g, kSeed);
       }},
      {"reducescatter", "pairwise",
       [](weftDataType_t t, int n, size_t count, size_t g, int) {
         return SumInOrder(t, Cycle(static_cast<int>(g / count), n, -1), g, kSeed);
       }},
      {"reduce", "chain",
       [](weftDataType_t t, int n, size_t, size_t g, int root) {
         return SumInOrder(t, Cycle(root - 1 + n, n, -1), g, kSeed);
       }},
      {"reduce", "binomial",
       [](weftDataType_t t, int n, size_t, size_t g, int root) {
         return BinomialSubtree(t, n, root, 0, g, kSeed);
       }},
  };
}

// One forced run on threads: every (dtype, op) of `tos` once; out[k][rank] = rank's recvbuff.
using Outputs = std::vector<std::vector<std::vector<unsigned char>>>;
// Threads have no selector: WEFT_ALGO forces the algorithm, WEFT_CHUNK_BYTES (96, set before
// main) is the chunk.
std::string RunForcedOnThreads(const std::string& coll, const std::string& algo, int n,
                               const std::vector<TypeOp>& tos, int root, Outputs* out) {
  if (!kChunkSet) return "could not set WEFT_CHUNK_BYTES";
  setenv("WEFT_ALGO", (coll + ":" + algo).c_str(), 1);
  // Hierarchical algorithms need groups ("hosts"): uneven ones, e.g. 2 + 3 + 4 for 9 ranks.
  const std::string groups = n == 1 ? "1" : n == 2 ? "1,1" : n == 3 ? "1,2" : n == 6 ? "1,2,3"
                             : n == 9 ? "2,3,4" : "3," + std::to_string(n - 3);
  setenv("WEFT_INPROC_GROUPS", groups.c_str(), 1);
  out->assign(tos.size(), std::vector<std::vector<unsigned char>>(n));
  std::string err = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
    weftCommSetTimeout(comm, 60);
    for (size_t k = 0; k < tos.size(); ++k) {
      const auto [t, op] = tos[k];
      const size_t es = weftTypeSize(t), in_count = coll == "reducescatter" ? kCount * n : kCount;
      GuardedBuffer send(in_count * es), recv(kCount * es);
      for (size_t i = 0; i < in_count; ++i) StoreNonExactInput(send.data(), t, rank, i, kSeed);
      weftResult_t r;
      if (coll == "allreduce") r = weftAllReduce(send.data(), recv.data(), kCount, t, op, comm, nullptr);
      else if (coll == "reduce") r = weftReduce(send.data(), recv.data(), kCount, t, op, root, comm, nullptr);
      else r = weftReduceScatter(send.data(), recv.data(), kCount, t, op, comm, nullptr);
      if (r != weftSuccess) return weftGetLastError(comm);
      std::string g = send.CheckGuards("sendbuff") + recv.CheckGuards("recvbuff");
      if (!g.empty()) return g;
      const char* used = nullptr;
      weftCommGetLastAlgorithm(comm, &used);
      if (!used || algo != used) return std::string("ran ") + (used ? used : "(none)");
      (*out)[k][rank].assign(recv.data(), recv.data() + recv.size());
    }
    return "";
  });
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_INPROC_GROUPS");
  return err;
}

struct OrderCase {
  Documented doc;
  int ranks;
};

void PrintTo(const OrderCase& c, std::ostream* os) {
  *os << c.doc.collective << ":" << c.doc.algorithm << " on " << c.ranks << " ranks";
}

class DocumentedOrder : public testing::TestWithParam<OrderCase> {};

// The bits every rank gets equal the documented order's, for every float type, sum and avg.
TEST_P(DocumentedOrder, ResultBitsFollowTheDocumentedOrder) {
  const OrderCase c = GetParam();
  const int n = c.ranks, root = n / 2;
  Outputs out;
  ASSERT_EQ(RunForcedOnThreads(c.doc.collective, c.doc.algorithm, n, kFloatTypeOps, root, &out), "");
  for (size_t k = 0; k < kFloatTypeOps.size(); ++k) {
    const auto [t, op] = kFloatTypeOps[k];
    const size_t es = weftTypeSize(t);
    std::vector<unsigned char> want(es);
    for (int rank = 0; rank < n; ++rank) {
      if (c.doc.collective == "reduce" && rank != root) continue;
      const size_t base = c.doc.collective == "reducescatter" ? rank * kCount : 0;
      for (size_t i = 0; i < kCount; ++i) {
        double sum = c.doc.sum(t, n, kCount, base + i, root);
        Store(want.data(), t, 0, op == weftAvg ? DivideInType(t, sum, n) : sum);
        if (!SameElement(out[k][rank].data() + i * es, want.data(), t, 0)) {
          ADD_FAILURE() << c.doc.collective << ":" << c.doc.algorithm << " " << TypeName(t) << " "
                        << OpName(op) << " rank " << rank << " element " << i << ": got "
                        << Load(out[k][rank].data(), t, i) << " want " << Load(want.data(), t, 0);
          break;
        }
      }
    }
  }
}

std::vector<OrderCase> OrderCases() {
  std::vector<OrderCase> cases;
  for (const Documented& d : DocumentedOrders())
    for (int n : {2, 3, 6, 7, 8, 9}) cases.push_back({d, n});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DocumentedOrder, testing::ValuesIn(OrderCases()),
                         [](const testing::TestParamInfo<OrderCase>& i) {
                           return i.param.doc.collective + "_" + i.param.doc.algorithm + "_r" +
                                  std::to_string(i.param.ranks);
                         });

// ---- the README's determinism claims, for every reduction algorithm that runs on threads ----

bool IsDirect(const std::string& name) {
  return name == "oneshot" || name == "twoshot" || name == "direct";
}
// hierarchical_direct needs two hosts with a window transport each (it runs over namespaces in
// netns_2x2_hierarchical_direct); threads and the processes of one host cannot run it.
bool NeedsTwoHosts(const std::string& name) { return name == "hierarchical_direct"; }

struct AlgoCase {
  const weft::AlgorithmInfo* algo;
  int ranks;
  std::string collective() const { return weft::CollectiveName(algo->collective); }
};

void PrintTo(const AlgoCase& c, std::ostream* os) {
  *os << c.collective() << ":" << c.algo->name << " on " << c.ranks << " ranks";
}

std::vector<AlgoCase> ReductionCases(bool allreduce_only) {
  std::vector<AlgoCase> cases;
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms()) {
    const std::string coll = weft::CollectiveName(a.collective);
    if (IsDirect(a.name) || NeedsTwoHosts(a.name) || !IsReduction(coll) ||
        (allreduce_only && coll != "allreduce"))
      continue;
    for (int n : {3, 6, 9}) cases.push_back({&a, n});
  }
  return cases;
}

std::string CaseName(const testing::TestParamInfo<AlgoCase>& i) {
  return i.param.collective() + "_" + i.param.algo->name + "_r" + std::to_string(i.param.ranks);
}

// Ranks whose recvbuff carries the result (reduce: the root only).
std::vector<int> ResultRanks(const AlgoCase& c, int root) {
  if (c.collective() == "reduce") return {root};
  std::vector<int> all;
  for (int r = 0; r < c.ranks; ++r) all.push_back(r);
  return all;
}

std::string FirstDiff(const Outputs& a, const Outputs& b, const std::vector<int>& ranks) {
  for (size_t k = 0; k < a.size(); ++k)
    for (int r : ranks)
      if (a[k][r] != b[k][r])
        return TypeName(kFloatTypeOps[k].first) + " " + OpName(kFloatTypeOps[k].second) + " rank " +
               std::to_string(r) + " differs";
  return "";
}

class Determinism : public testing::TestWithParam<AlgoCase> {};
class EveryRank : public testing::TestWithParam<AlgoCase> {};

// "applies the same reductions in the same order on every run": two runs, same bits.
TEST_P(Determinism, RunToRunBitwiseIdentical) {
  const AlgoCase c = GetParam();
  Outputs first, second;
  ASSERT_EQ(RunForcedOnThreads(c.collective(), c.algo->name, c.ranks, kFloatTypeOps, 1, &first), "");
  ASSERT_EQ(RunForcedOnThreads(c.collective(), c.algo->name, c.ranks, kFloatTypeOps, 1, &second), "");
  EXPECT_EQ(FirstDiff(first, second, ResultRanks(c, 1)), "");
}

// The result is the sum up to the rounding of one addition per rank (so a reordering bug is
// caught by the tests above, and a wrong result by this one), avg divided once.
TEST_P(Determinism, WithinRoundingOfTheExactSum) {
  const AlgoCase c = GetParam();
  const int n = c.ranks, root = n - 1;
  Outputs out;
  ASSERT_EQ(RunForcedOnThreads(c.collective(), c.algo->name, n, kFloatTypeOps, root, &out), "");
  for (size_t k = 0; k < kFloatTypeOps.size(); ++k) {
    const auto [t, op] = kFloatTypeOps[k];
    const double u = t == weftFloat64 ? 0x1p-53 : t == weftFloat32 ? 0x1p-24 : t == weftFloat16 ? 0x1p-11 : 0x1p-8;
    for (int rank : ResultRanks(c, root)) {
      const size_t base = c.collective() == "reducescatter" ? rank * kCount : 0;
      for (size_t i = 0; i < kCount; ++i) {
        double exact = 0, magnitude = 0;
        for (int q = 0; q < n; ++q) {
          double x = NonExactInput(t, q, base + i, kSeed);
          exact += x;
          magnitude += std::fabs(x);
        }
        double bound = (n + 1) * u * magnitude;
        if (op == weftAvg) exact /= n, bound /= n;
        double got = Load(out[k][rank].data(), t, i);
        if (!(std::fabs(got - exact) <= bound)) {
          ADD_FAILURE() << TypeName(t) << " " << OpName(op) << " rank " << rank << " element " << i
                        << ": got " << got << " exact " << exact << " bound " << bound;
          break;
        }
      }
    }
  }
}

// "every allreduce hands all ranks the same bits".
TEST_P(EveryRank, AllreduceGivesEveryRankTheSameBits) {
  const AlgoCase c = GetParam();
  Outputs out;
  ASSERT_EQ(RunForcedOnThreads(c.collective(), c.algo->name, c.ranks, kFloatTypeOps, 0, &out), "");
  for (size_t k = 0; k < out.size(); ++k)
    for (int r = 1; r < c.ranks; ++r)
      EXPECT_TRUE(out[k][r] == out[k][0]) << TypeName(kFloatTypeOps[k].first) << " "
                                          << OpName(kFloatTypeOps[k].second) << ": rank " << r
                                          << " differs from rank 0";
}

// "The direct (shared-memory) algorithms reduce in rank order, so they match each other":
// processes over shm, each direct reduction forced in turn, bits equal to ((x0 + x1) + x2)...
TEST(DirectAlgorithms, ReduceInRankOrderSoTheyMatchEachOther) {
  std::vector<std::string> argv = {BinPath("weft_test_worker"), "rank-order", "4096"};
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms())
    if (IsDirect(a.name) && IsReduction(weft::CollectiveName(a.collective)))
      argv.push_back(std::string(weft::CollectiveName(a.collective)) + ":" + a.name);
  ASSERT_GE(argv.size(), 5u) << "expected oneshot, twoshot and direct reduce-scatter";
  for (int n : {3, 6}) {
    LaunchOutcome o = LaunchRanks(n, argv, {}, 120);
    ASSERT_FALSE(o.timed_out) << n << " ranks: " << o.output[0];
    for (int r = 0; r < n; ++r)
      EXPECT_NE(o.output[r].find("OK rank-order"), std::string::npos) << n << " ranks, rank " << r << ":\n" << o.output[r];
  }
}

// Every reduction algorithm over processes (shm: the selector runs, so a tuning file forces the
// algorithm and the chunk; direct algorithms included), its result digested per rank:
// "reductions give the same result for any chunk size (chunking never reorders additions)"
// (no chunking, 96 B, 4 KiB), the same on a second run, and every allreduce rank the same.
TEST(DeterminismAcrossProcesses, AnyChunkSizeRunToRunAndEveryRankGiveTheSameBits) {
  std::vector<std::string> specs;
  for (const weft::AlgorithmInfo& a : weft::AllAlgorithms())
    if (IsReduction(weft::CollectiveName(a.collective)) && !NeedsTwoHosts(a.name))
      specs.push_back(std::string(weft::CollectiveName(a.collective)) + ":" + a.name);
  const int n = 5;
  auto digests = [&](const std::string& chunk) {
    std::vector<std::string> argv = {BinPath("weft_test_worker"), "digest", chunk};
    argv.insert(argv.end(), specs.begin(), specs.end());
    LaunchOutcome o = LaunchRanks(n, argv, {}, 200);
    EXPECT_FALSE(o.timed_out) << "chunk " << chunk << ": " << o.output[0];
    std::vector<std::string> lines(n);
    for (int r = 0; r < n; ++r) {
      EXPECT_NE(o.output[r].find("OK digest"), std::string::npos) << "chunk " << chunk << " rank " << r << ":\n" << o.output[r];
      std::istringstream in(o.output[r]);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("DIGEST ", 0) == 0) lines[r] += line + "\n";
    }
    return lines;
  };
  // The lines of `got` that differ from `want` (same order: the worker prints a fixed sequence).
  auto differing = [](const std::string& want, const std::string& got) {
    std::istringstream a(want), b(got);
    std::string out;
    for (std::string x, y; std::getline(a, x) && std::getline(b, y);)
      if (x != y) out += "  want " + x + "\n   got " + y + "\n";
    return out;
  };
  const std::vector<std::string> base = digests("96");
  ASSERT_FALSE(base[0].empty());
  for (int r = 1; r < n; ++r) {  // every allreduce: the same bits on every rank
    std::string d = differing(base[0], base[r]), mismatched;
    std::istringstream in(d);
    for (std::string line; std::getline(in, line);)
      if (line.find(" allreduce:") != std::string::npos) mismatched += line + "\n";
    EXPECT_EQ(mismatched, "") << "rank " << r << " vs rank 0";
  }
  const std::vector<std::string> again = digests("96");
  for (int r = 0; r < n; ++r) EXPECT_EQ(differing(base[r], again[r]), "") << "second run, rank " << r;
  // Known exception (reported, issue 9): allreduce:hierarchical pipelines its parts by the chunk
  // (commit ff1f380), so its blocks - and the order of additions - change with the chunk size.
  std::string hierarchical;
  for (const std::string chunk : {"0", "4096"}) {
    const std::vector<std::string> other = digests(chunk);
    for (int r = 0; r < n; ++r) {
      std::istringstream in(differing(base[r], other[r]));
      std::string rest;
      for (std::string line; std::getline(in, line);) {
        if (line.find("allreduce:hierarchical ") != std::string::npos) hierarchical += line + "\n";
        else rest += line + "\n";
      }
      EXPECT_EQ(rest, "") << "chunk " << chunk << " bytes, rank " << r;
    }
  }
  if (!hierarchical.empty() && !HasFailure())
    GTEST_SKIP() << "every other reduction passed; README claim violated by allreduce:hierarchical (reported in "
                    "issue 9): its result changes with the chunk size:\n" << hierarchical.substr(0, 600);
}

INSTANTIATE_TEST_SUITE_P(Reductions, Determinism, testing::ValuesIn(ReductionCases(false)), CaseName);
INSTANTIATE_TEST_SUITE_P(Allreduces, EveryRank, testing::ValuesIn(ReductionCases(true)), CaseName);

}  // namespace
