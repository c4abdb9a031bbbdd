// Regression tests for API entry checks found by the adversarial campaign (issue 11, minor):
// `Entry` (src/core/api.cc) read comm->rank before it had validated comm, so a stale or
// garbage handle crashed broadcast/reduce instead of returning weftInvalidArgument.
#include <gtest/gtest.h>

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

}  // namespace
