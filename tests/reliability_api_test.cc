// Regression tests for API entry checks found by the adversarial campaign (issue 11, minor):
// `Entry` (src/core/api.cc) read comm->rank before it had validated comm, so a stale or
// garbage handle crashed broadcast/reduce instead of returning weftInvalidArgument.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace {

// An address in the first page: never mapped, so reading a field through it faults.
weftComm_t GarbageComm() { return reinterpret_cast<weftComm_t>(static_cast<uintptr_t>(64)); }

TEST(ReliabilityApi, BroadcastOnGarbageCommIsAnErrorNotACrash) {
  std::vector<float> buf(4);
  EXPECT_EQ(weftBroadcast(buf.data(), buf.data(), buf.size(), weftFloat32, 1, GarbageComm(), nullptr),
            weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("not a live communicator"), std::string::npos)
      << weftGetLastError(nullptr);
}

TEST(ReliabilityApi, ReduceOnGarbageCommIsAnErrorNotACrash) {
  std::vector<float> buf(4);
  EXPECT_EQ(weftReduce(buf.data(), buf.data(), buf.size(), weftFloat32, weftSum, 0, GarbageComm(),
                       nullptr),
            weftInvalidArgument);
}

// CheckCount (src/core/api_checks.cc) refuses a count whose buffer (count x blocks x element
// bytes) exceeds PTRDIFF_MAX, naming the argument; the largest count that fits passes it. The
// boundary pins the overflow-checked multiplication that replaced the divisions.
TEST(ReliabilityApi, CountWhoseBufferOverflowsIsRefusedNamingTheArgument) {
  weftComm_t comms[2];
  ASSERT_EQ(weftCommInitAll(comms, 2, nullptr), weftSuccess);
  float buf[4] = {};
  const size_t limit = static_cast<size_t>(PTRDIFF_MAX);
  // allreduce: count x 4 bytes; 2^61 x 4 = 2^63 > PTRDIFF_MAX.
  EXPECT_EQ(weftAllReduce(buf, buf, limit / 4 + 1, weftFloat32, weftSum, comms[0], nullptr),
            weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(comms[0])).find("count=2305843009213693952 overflows"),
            std::string::npos)
      << weftGetLastError(comms[0]);
  // allgather: sendcount x 2 ranks x 4 bytes, and a count whose product wraps around 2^64.
  EXPECT_EQ(weftAllGather(buf, buf, limit / 8 + 1, weftFloat32, comms[0], nullptr), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(comms[0])).find("sendcount="), std::string::npos)
      << weftGetLastError(comms[0]);
  EXPECT_EQ(weftAllGather(buf, buf, SIZE_MAX / 2 + 1, weftFloat32, comms[0], nullptr), weftInvalidArgument);
  EXPECT_EQ(weftReduceScatter(buf, buf, SIZE_MAX, weftUint8, weftSum, comms[0], nullptr),
            weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(comms[0])).find("recvcount="), std::string::npos)
      << weftGetLastError(comms[0]);
  for (weftComm_t c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

}  // namespace
