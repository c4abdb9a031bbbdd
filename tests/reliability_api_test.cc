// Regression tests for API entry checks found by the adversarial campaign (issue 11, minor):
// `Entry` (src/api/api.cc) read comm->rank before it had validated comm, so a stale or
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

// CheckCount (src/api/api_checks.cc) refuses a count whose buffer (count x blocks x element
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

// Every argument check of the collectives' entry (Entry in src/api/api.cc) fails the call with
// weftInvalidArgument and a message that names the function and the argument, in the order the
// checks run (a bad datatype is reported before a NULL buffer).
TEST(ReliabilityApi, EntryChecksNameTheFunctionAndTheArgument) {
  weftComm_t comm;
  ASSERT_EQ(weftCommInitAll(&comm, 1, nullptr), weftSuccess);
  float buf[4] = {};
  auto expect = [&](weftResult_t got, const char* fragment) {
    EXPECT_EQ(got, weftInvalidArgument) << fragment;
    const std::string msg = weftGetLastError(comm);
    EXPECT_NE(msg.find(fragment), std::string::npos) << "wanted '" << fragment << "' in: " << msg;
  };
  const auto bad_type = static_cast<weftDataType_t>(99);
  const auto bad_op = static_cast<weftRedOp_t>(99);
  expect(weftAllReduce(nullptr, buf, 4, weftFloat32, weftSum, comm, nullptr), "weftAllReduce: sendbuff is NULL");
  expect(weftAllReduce(buf, nullptr, 4, weftFloat32, weftSum, comm, nullptr), "weftAllReduce: recvbuff is NULL");
  expect(weftAllReduce(nullptr, buf, 4, bad_type, weftSum, comm, nullptr), "weftAllReduce: datatype=99");
  expect(weftAllReduce(buf, buf, 4, weftFloat32, bad_op, comm, nullptr), "weftAllReduce: op=99");
  expect(weftBroadcast(buf, buf, 4, weftFloat32, 5, comm, nullptr), "weftBroadcast: root=5");
  expect(weftReduce(buf, buf, 4, weftFloat32, bad_op, -1, comm, nullptr), "weftReduce: op=99");
  // A valid call after the refused ones works (argument errors do not poison the communicator).
  float in[4] = {1, 2, 3, 4}, out[4] = {};
  ASSERT_EQ(weftAllReduce(in, out, 4, weftFloat32, weftSum, comm, nullptr), weftSuccess);
  EXPECT_EQ(out[3], 4.0f);
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

}  // namespace
