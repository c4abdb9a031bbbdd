// Regression tests for weftAllToAllv's argument arithmetic (issue 11, defect 2): every block
// end (displacement + count), its size in bytes and the sum of the counts must be computed
// without wrap-around. Before the fix `sdispls[p] + sendcounts[p]` wrapped ((SIZE_MAX - 1) + 2
// == 0 passed), the call read before the send buffer and returned success.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"

using namespace weft_test;

namespace {

// Runs weftAllToAllv on 2 thread ranks with the same (bad) table on both; returns each
// rank's result code and message.
struct Result {
  weftResult_t code[2] = {weftSuccess, weftSuccess};
  std::string message[2];
};

Result RunBadTable(std::vector<size_t> sc, std::vector<size_t> sd, std::vector<size_t> rc,
                   std::vector<size_t> rd) {
  Result r;
  std::string err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    weftCommSetTimeout(comm, 5);  // a call that wrongly proceeds must not hang the test
    std::vector<uint8_t> in(64, 1), out(64, 0);
    r.code[rank] = weftAllToAllv(in.data() + 16, sc.data(), sd.data(), out.data() + 16, rc.data(),
                                 rd.data(), weftUint8, comm, nullptr);
    r.message[rank] = weftGetLastError(comm);
    return "";
  });
  EXPECT_EQ(err, "");
  return r;
}

TEST(ReliabilityAllToAllv, SendDisplacementWrapIsRejected) {
  // Block 1: displacement SIZE_MAX, count 1: the end wraps to 0.
  Result r = RunBadTable({1, 1}, {0, SIZE_MAX}, {1, 1}, {0, 1});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.code[rank], weftInvalidArgument) << r.message[rank];
    EXPECT_NE(r.message[rank].find("sdispls[1]=18446744073709551615"), std::string::npos)
        << r.message[rank];
  }
}

TEST(ReliabilityAllToAllv, RecvDisplacementWrapIsRejected) {
  Result r = RunBadTable({1, 1}, {0, 1}, {1, 1}, {0, SIZE_MAX});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.code[rank], weftInvalidArgument) << r.message[rank];
    EXPECT_NE(r.message[rank].find("rdispls[1]"), std::string::npos) << r.message[rank];
  }
}

TEST(ReliabilityAllToAllv, BlockEndBeyondAnyBufferIsRejected) {
  // No wrap, but displacement + count exceeds what any buffer can hold (PTRDIFF_MAX bytes).
  const size_t big = static_cast<size_t>(PTRDIFF_MAX);
  Result r = RunBadTable({1, 1}, {0, big}, {1, 1}, {0, 1});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.code[rank], weftInvalidArgument) << r.message[rank];
    EXPECT_NE(r.message[rank].find("sdispls[1] + sendcounts[1]"), std::string::npos)
        << r.message[rank];
  }
}

TEST(ReliabilityAllToAllv, CountSumOverflowIsRejected) {
  // Each count fits on its own, their sum does not (in bytes of int64: 8 x).
  const size_t half = static_cast<size_t>(PTRDIFF_MAX) / 8 / 2 + 1;
  Result r = RunBadTable({half, half}, {0, 0}, {1, 1}, {0, 1});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.code[rank], weftSuccess) << r.message[rank];
  }
}

TEST(ReliabilityAllToAllv, ValidTableStillWorks) {
  std::string err = RunRanks(2, [](weftComm_t comm, int rank) -> std::string {
    std::vector<int32_t> in = {rank * 10, rank * 10 + 1, rank * 10 + 2}, out(4, -1);
    // rank sends 1 element to rank 0 and 2 to rank 1; receives accordingly.
    std::vector<size_t> sc = {1, 2}, sd = {0, 1};
    std::vector<size_t> rc = {static_cast<size_t>(rank + 1), static_cast<size_t>(rank + 1)};
    std::vector<size_t> rd = {0, static_cast<size_t>(rank + 1)};
    if (weftAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                      weftInt32, comm, nullptr) != weftSuccess)
      return weftGetLastError(comm);
    std::vector<int32_t> want = rank == 0 ? std::vector<int32_t>{0, 10, -1, -1}
                                          : std::vector<int32_t>{1, 2, 11, 12};
    return out == want ? "" : "rank " + std::to_string(rank) + ": wrong data";
  });
  EXPECT_EQ(err, "");
}

}  // namespace
