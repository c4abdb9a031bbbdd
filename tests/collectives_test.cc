// Thread-per-rank collectives over the inproc transport: ranks {1,2,3,4,5,8} x counts
// {0,1,7,1000,(1<<20)+3} x every dtype x op, in-place and out-of-place, exact expected values.
// The largest count runs a representative subset of (dtype, op) to keep the suite fast on two
// cores; every (dtype, op) pair runs at the other counts.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
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
  for (int r : {1, 2, 3, 4, 5, 8})
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, kBig})
      for (bool ip : {false, true}) ps.push_back({r, n, ip});
  return ps;
}

// (dtype, op) pairs to run at this count.
std::vector<std::pair<weftDataType_t, weftRedOp_t>> Combos(size_t count, bool reduce) {
  std::vector<std::pair<weftDataType_t, weftRedOp_t>> c;
  if (count == kBig) {
    c = {{weftFloat32, weftSum}, {weftBfloat16, weftAvg}, {weftInt8, weftMax}};
    if (!reduce) c.resize(2);
    return c;
  }
  for (weftDataType_t t : AllTypes()) {
    if (!reduce) {
      c.push_back({t, weftSum});
      continue;
    }
    for (weftRedOp_t o : AllOps()) c.push_back({t, o});
  }
  return c;
}

class Collectives : public testing::TestWithParam<Param> {};

TEST_P(Collectives, AllReduce) {
  const Param p = GetParam();
  std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
    for (auto [t, op] : Combos(p.count, true)) {
      size_t es = weftTypeSize(t);
      std::vector<unsigned char> in(p.count * es + 1), out(p.count * es + 1, 0xAB);
      FillInputs(in.data(), t, op, rank, p.count);
      void* dst = p.in_place ? in.data() : out.data();
      if (weftAllReduce(in.data(), dst, p.count, t, op, comm, nullptr) != weftSuccess)
        return std::string("weftAllReduce: ") + weftGetLastError(comm);
      std::string e = CheckReduced(dst, t, op, p.ranks, p.count);
      if (!e.empty()) return "allreduce " + e;
      if (!p.in_place) {
        // The input must be left untouched.
        std::vector<unsigned char> again(p.count * es + 1);
        FillInputs(again.data(), t, op, rank, p.count);
        if (memcmp(again.data(), in.data(), p.count * es) != 0) return "allreduce modified sendbuff";
      }
    }
    return "";
  });
  EXPECT_EQ(err, "");
}

TEST_P(Collectives, ReduceScatter) {
  const Param p = GetParam();
  std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
    for (auto [t, op] : Combos(p.count, true)) {
      size_t es = weftTypeSize(t);
      size_t total = p.count * p.ranks;
      std::vector<unsigned char> in(total * es + 1), out(p.count * es + 1, 0xAB);
      FillInputs(in.data(), t, op, rank, total);
      void* dst = p.in_place ? in.data() + rank * p.count * es : out.data();
      if (weftReduceScatter(in.data(), dst, p.count, t, op, comm, nullptr) != weftSuccess)
        return std::string("weftReduceScatter: ") + weftGetLastError(comm);
      std::string e = CheckReduced(dst, t, op, p.ranks, p.count, rank * p.count);
      if (!e.empty()) return "reducescatter " + e;
    }
    return "";
  });
  EXPECT_EQ(err, "");
}

TEST_P(Collectives, AllGather) {
  const Param p = GetParam();
  std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
    for (auto [t, op] : Combos(p.count, false)) {
      size_t es = weftTypeSize(t);
      std::vector<unsigned char> out(p.count * p.ranks * es + 1, 0xAB), in(p.count * es + 1);
      void* src = p.in_place ? out.data() + rank * p.count * es : in.data();
      FillInputs(src, t, op, rank, p.count);
      if (weftAllGather(src, out.data(), p.count, t, comm, nullptr) != weftSuccess)
        return std::string("weftAllGather: ") + weftGetLastError(comm);
      for (int r = 0; r < p.ranks; ++r)
        for (size_t i = 0; i < p.count; ++i) {
          double got = Load(out.data(), t, r * p.count + i), want = InputValue(op, r, i);
          if (got != want)
            return "allgather " + TypeName(t) + " block " + std::to_string(r) + " element " +
                   std::to_string(i) + ": got " + std::to_string(got) + " want " +
                   std::to_string(want);
        }
    }
    return "";
  });
  EXPECT_EQ(err, "");
}

TEST_P(Collectives, Broadcast) {
  const Param p = GetParam();
  for (int root : {0, p.ranks - 1}) {
    std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
      for (auto [t, op] : Combos(p.count, false)) {
        size_t es = weftTypeSize(t);
        std::vector<unsigned char> in(p.count * es + 1), out(p.count * es + 1, 0xAB);
        FillInputs(in.data(), t, op, rank, p.count);
        void* dst = p.in_place ? in.data() : out.data();
        if (weftBroadcast(in.data(), dst, p.count, t, root, comm, nullptr) != weftSuccess)
          return std::string("weftBroadcast: ") + weftGetLastError(comm);
        for (size_t i = 0; i < p.count; ++i)
          if (Load(dst, t, i) != InputValue(op, root, i))
            return "broadcast root " + std::to_string(root) + " " + TypeName(t) + " element " +
                   std::to_string(i);
      }
      return "";
    });
    EXPECT_EQ(err, "") << "root " << root;
  }
}

TEST_P(Collectives, Reduce) {
  const Param p = GetParam();
  const int root = p.ranks / 2;
  std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
    for (auto [t, op] : Combos(p.count, true)) {
      size_t es = weftTypeSize(t);
      std::vector<unsigned char> in(p.count * es + 1), out(p.count * es + 1, 0xAB);
      FillInputs(in.data(), t, op, rank, p.count);
      void* dst = p.in_place ? in.data() : out.data();
      if (weftReduce(in.data(), dst, p.count, t, op, root, comm, nullptr) != weftSuccess)
        return std::string("weftReduce: ") + weftGetLastError(comm);
      if (rank == root) {
        std::string e = CheckReduced(dst, t, op, p.ranks, p.count);
        if (!e.empty()) return "reduce " + e;
      }
    }
    return "";
  });
  EXPECT_EQ(err, "");
}

TEST_P(Collectives, AllToAll) {
  const Param p = GetParam();
  // At the largest count (1M elements per peer) one dtype keeps the run short.
  const std::vector<weftDataType_t> types = p.count == kBig ? std::vector<weftDataType_t>{weftFloat32}
                                                             : std::vector<weftDataType_t>{weftFloat32, weftInt8, weftFloat64};
  std::string err = RunRanks(p.ranks, [&](weftComm_t comm, int rank) -> std::string {
    for (weftDataType_t t : types) {
      size_t es = weftTypeSize(t);
      size_t total = p.count * p.ranks;
      std::vector<unsigned char> in(total * es + 1), out(total * es + 1, 0xAB);
      // Block for peer q from rank r holds value (r * 13 + q * 5 + i) % 100.
      for (int q = 0; q < p.ranks; ++q)
        for (size_t i = 0; i < p.count; ++i) Store(in.data(), t, q * p.count + i, (rank * 13 + q * 5 + i) % 100);
      void* dst = p.in_place ? in.data() : out.data();
      if (weftAllToAll(in.data(), dst, p.count, t, comm, nullptr) != weftSuccess)
        return std::string("weftAllToAll: ") + weftGetLastError(comm);
      for (int q = 0; q < p.ranks; ++q)
        for (size_t i = 0; i < p.count; ++i)
          if (Load(dst, t, q * p.count + i) != static_cast<double>((q * 13 + rank * 5 + i) % 100))
            return "alltoall " + TypeName(t) + " from " + std::to_string(q) + " element " + std::to_string(i);
    }
    return "";
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

}  // namespace
