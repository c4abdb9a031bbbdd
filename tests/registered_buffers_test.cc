// Registered buffers and zero-copy collectives (weftMemAlloc, weftCommRegister; src/core/
// registered_memory.h):
//  - the zero-copy schedules (allreduce twoshot, allgather / reduce-scatter direct with
//    ScheduleRequest::peer_buffers_mapped; all-to-all direct out of place) are proved by the checker for several rank counts,
//    counts, in place and out of place; planted defects (a peer's input read before its
//    signal, a buffer overwritten or returned while a peer still reads it) are rejected;
//  - over processes (2 and 4 ranks, shm): registered weftMemAlloc buffers run the zero-copy
//    variant (weftCommGetLastAlgorithm ends in "+zerocopy") and give bit-identical results to
//    the same calls on unregistered buffers, in place and out of place (all-to-all: out of
//    place only; in place it stages); a call where one rank's
//    buffer is not registered, registered malloc memory, and calls after weftCommDeregister all
//    take the staging path identically on every rank and stay correct;
//  - bad arguments get errors naming the argument and value.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "check/checker.h"
#include "test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

ScheduleRequest ZeroCopyRequest(Collective c, int p, size_t count) {
  ScheduleRequest r;
  r.collective = c;
  r.nranks = p;
  r.count = count;
  r.all_ranks_mappable = true;
  r.peer_buffers_mapped = true;
  // all-to-all reads in place only out of place on every rank (ProveAlgorithm then proves the
  // out-of-place run only)
  r.out_of_place = c == Collective::kAllToAll;
  return r;
}

struct ZeroCopyAlgo {
  Collective collective;
  const char* name;
};
const ZeroCopyAlgo kZeroCopyAlgos[] = {
    {Collective::kAllReduce, "twoshot"},
    {Collective::kAllGather, "direct"},
    {Collective::kReduceScatter, "direct"},
    {Collective::kAllToAll, "direct"},
};

TEST(ZeroCopyProof, CheckerProvesEveryZeroCopySchedule) {
  for (const ZeroCopyAlgo& a : kZeroCopyAlgos) {
    const AlgorithmInfo* info = FindAlgorithm(a.collective, a.name);
    ASSERT_NE(info, nullptr) << a.name;
    for (int p : {1, 2, 3, 4, 5, 8}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{1000}, size_t{1001}}) {
        Status st = ProveAlgorithm(*info, ZeroCopyRequest(a.collective, p, count));
        EXPECT_TRUE(st.ok()) << CollectiveName(a.collective) << " " << a.name << " p=" << p
                             << " count=" << count << ": " << st.message();
      }
    }
  }
}

// The zero-copy schedule reads peers' Input/Output regions (no staging through Scratch).
TEST(ZeroCopyProof, SchedulesReadPeersBuffersNotWindows) {
  for (const ZeroCopyAlgo& a : kZeroCopyAlgos) {
    StatusOr<Schedule> s =
        BuildSchedule(*FindAlgorithm(a.collective, a.name), ZeroCopyRequest(a.collective, 2, 1000));
    ASSERT_TRUE(s.ok()) << s.status().message();
    size_t user_reads = 0;
    for (const RankSchedule& rs : s->ranks) {
      EXPECT_EQ(rs.scratch_count, 0u) << a.name << ": 2 ranks need no scratch";
      for (const Step& st : rs.steps) {
        if (st.op != StepOp::kDirectRead && st.op != StepOp::kDirectReduce) continue;
        EXPECT_NE(st.remote.buffer, Buffer::kScratch) << a.name;
        ++user_reads;
      }
    }
    EXPECT_GT(user_reads, 0u) << a.name;
  }
}

// A schedule that reads a peer's buffer without the zero-copy request is refused.
TEST(ZeroCopyProof, PeersBuffersOnlyInZeroCopySchedules) {
  const AlgorithmInfo* info = FindAlgorithm(Collective::kAllGather, "direct");
  ScheduleRequest zc = ZeroCopyRequest(Collective::kAllGather, 2, 10);
  StatusOr<Schedule> s = BuildSchedule(*info, zc);
  ASSERT_TRUE(s.ok());
  ScheduleRequest plain = zc;
  plain.peer_buffers_mapped = false;
  Status st = CheckSchedule(*s, plain, CheckOptions{});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("must be the peer's scratch"), std::string::npos) << st.message();
}

// Removes the k-th step with op `op` of rank r.
void RemoveNth(Schedule& s, int r, StepOp op, int k) {
  auto& steps = s.ranks[r].steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].op != op || k-- > 0) continue;
    steps.erase(steps.begin() + i);
    return;
  }
  FAIL() << "no such step";
}

TEST(ZeroCopyProof, RejectsReadingAPeersInputBeforeItsSignal) {
  ScheduleRequest req = ZeroCopyRequest(Collective::kAllGather, 2, 16);
  StatusOr<Schedule> s = BuildSchedule(*FindAlgorithm(Collective::kAllGather, "direct"), req);
  ASSERT_TRUE(s.ok());
  RemoveNth(*s, 1, StepOp::kWait, 0);  // rank 1 no longer waits for rank 0's "ready"
  Status st = CheckSchedule(*s, req, CheckOptions{});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("before any signal of rank 0"), std::string::npos) << st.message();
}

TEST(ZeroCopyProof, RejectsOverwritingAnInputAPeerStillReads) {
  // In place, rank 0's gather writes output[part 1] = its input[part 1], which rank 1 reads in
  // its reduce phase; without waiting for rank 1's "reduced" signal that write races.
  ScheduleRequest req = ZeroCopyRequest(Collective::kAllReduce, 2, 64);
  StatusOr<Schedule> s = BuildSchedule(*FindAlgorithm(Collective::kAllReduce, "twoshot"), req);
  ASSERT_TRUE(s.ok());
  // Right after "ready", rank 0 overwrites part 1 of its buffer (in place: its input, which
  // rank 1 reduces from) instead of waiting for rank 1's "reduced".
  auto& steps = s->ranks[0].steps;
  ASSERT_EQ(steps[1].op, StepOp::kWait);
  steps.insert(steps.begin() + 2, CopyStep(In(0, 32), Out(32, 32)));
  CheckOptions in_place;
  in_place.in_place = true;
  Status st = CheckSchedule(*s, req, in_place);
  ASSERT_FALSE(st.ok());
  // Whichever the simulation meets first: the write after the read, or the read after it.
  const bool race = st.message().find("may still be reading it") != std::string::npos ||
                    st.message().find("with no happens-before") != std::string::npos;
  EXPECT_TRUE(race) << st.message();
}

TEST(ZeroCopyProof, RejectsReturningWhileAPeerStillReads) {
  ScheduleRequest req = ZeroCopyRequest(Collective::kReduceScatter, 2, 16);
  StatusOr<Schedule> s = BuildSchedule(*FindAlgorithm(Collective::kReduceScatter, "direct"), req);
  ASSERT_TRUE(s.ok());
  RemoveNth(*s, 0, StepOp::kWait, 1);  // rank 0's wait for "done": the last step
  Status st = CheckSchedule(*s, req, CheckOptions{});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("may return while"), std::string::npos) << st.message();
}

// ---- over processes ----

constexpr size_t kAllReduceCount = 300001;  // 1.2 MB of float32: above the zero-copy minimum
constexpr size_t kBlockCount = 100003;      // allgather / reduce-scatter per-rank block

// Runs processes; each inits from the environment and runs `body` (non-empty = failure).
// With `same_algorithms`, WEFT_ALGO pins the algorithms, registered or not, so the results
// can be compared bit for bit on any rank count (different algorithms add in different
// orders; registered calls still take their zero-copy variant under WEFT_ALGO); without it
// the selector chooses (on 2 ranks every order gives the same bits).
// `algo`, when not empty, is WEFT_ALGO itself.
std::string RunRanksProcesses(int n, const std::function<std::string(weftComm_t, int, int)>& body,
                              bool same_algorithms = false, const std::string& algo = "") {
  std::vector<std::pair<std::string, std::string>> env = {{"WEFT_INIT_TIMEOUT", "30"},
                                                          {"WEFT_TIMEOUT", "60"}};
  if (same_algorithms)
    env.push_back({"WEFT_ALGO", "allreduce:twoshot;allgather:direct;reducescatter:direct;alltoall:direct"});
  if (!algo.empty()) env.push_back({"WEFT_ALGO", algo});
  weft_test::LaunchOutcome o = weft_test::ForkRanks(
      n,
      [&](int r) {
        weftComm_t comm = nullptr;
        std::string report = weftCommInitFromEnv(&comm) != weftSuccess
                                 ? std::string("init: ") + weftGetLastError(comm)
                                 : body(comm, r, n);
        if (comm != nullptr) weftCommDestroy(comm);
        if (!report.empty()) fprintf(stderr, "FAILED rank %d: %s\n", r, report.c_str());
        return report.empty() ? 0 : 1;
      },
      env, 120);
  std::string failures;
  for (int r = 0; r < n; ++r)
    if (!weft_test::ExitedZero(o.status[r])) failures += "rank " + std::to_string(r) + ":\n" + o.output[r];
  return failures;
}

std::string LastAlgorithm(weftComm_t comm) {
  const char* name = "";
  weftCommGetLastAlgorithm(comm, &name);
  return name;
}

bool EndsWithZeroCopy(const std::string& name) {
  return name.size() > 9 && name.compare(name.size() - 9, 9, "+zerocopy") == 0;
}

// One collective on (send, recv); `in_place` uses recv (at NCCL's offset) as the input.
weftResult_t Run(const std::string& c, const float* send, float* recv, bool in_place, weftComm_t comm,
                 int rank) {
  if (c == "allreduce")
    return weftAllReduce(in_place ? recv : send, recv, kAllReduceCount, weftFloat32, weftSum, comm, nullptr);
  if (c == "allgather")
    return weftAllGather(in_place ? recv + rank * kBlockCount : send, recv, kBlockCount, weftFloat32, comm,
                         nullptr);
  if (c == "alltoall") return weftAllToAll(in_place ? recv : send, recv, kBlockCount, weftFloat32, comm, nullptr);
  return weftReduceScatter(in_place ? recv : send, in_place ? recv + rank * kBlockCount : recv, kBlockCount,
                           weftFloat32, weftSum, comm, nullptr);
}

// weftMemAlloc's a send and a receive buffer of `bytes` and registers both with `comm`; false
// (weftGetLastError says why) when any step fails.
bool AllocAndRegister(weftComm_t comm, size_t bytes, void** send, void** recv, void** hs, void** hr) {
  return weftMemAlloc(send, bytes) == weftSuccess && weftMemAlloc(recv, bytes) == weftSuccess &&
         weftCommRegister(comm, *send, bytes, hs) == weftSuccess &&
         weftCommRegister(comm, *recv, bytes, hr) == weftSuccess;
}

struct Sizes {
  size_t in, out;  // elements
};
Sizes SizesOf(const std::string& c, int n) {
  if (c == "allreduce") return {kAllReduceCount, kAllReduceCount};
  if (c == "allgather") return {kBlockCount, kBlockCount * n};
  if (c == "alltoall") return {kBlockCount * n, kBlockCount * n};
  return {kBlockCount * n, kBlockCount};
}

// Fills the call's input: the send buffer, or (in place) the receive buffer at NCCL's place.
void Fill(const std::string& c, float* send, float* recv, bool in_place, int rank, int n) {
  const Sizes z = SizesOf(c, n);
  float* in = !in_place ? send : c == "allgather" ? recv + rank * kBlockCount : recv;
  for (size_t i = 0; i < z.in; ++i) weft_test::StoreNonExactInput(in, weftFloat32, rank, i, 17);
}

// Runs collective c on registered weftMemAlloc buffers and on plain ones, compares bitwise.
std::string CompareRegisteredWithPlain(weftComm_t comm, int rank, int n, const std::string& c,
                                       bool in_place, float* reg_send, float* reg_recv) {
  const Sizes z = SizesOf(c, n);
  std::vector<float> send(z.in), recv(std::max(z.out, z.in));
  Fill(c, send.data(), recv.data(), in_place, rank, n);
  Fill(c, reg_send, reg_recv, in_place, rank, n);
  const std::string what = c + (in_place ? " in place" : " out of place");
  if (Run(c, send.data(), recv.data(), in_place, comm, rank) != weftSuccess)
    return what + " (plain): " + weftGetLastError(comm);
  if (EndsWithZeroCopy(LastAlgorithm(comm))) return what + ": plain buffers ran " + LastAlgorithm(comm);
  if (Run(c, reg_send, reg_recv, in_place, comm, rank) != weftSuccess)
    return what + " (registered): " + weftGetLastError(comm);
  // An all-to-all in place must stage its blocks (block q is read by peer q and overwritten by
  // its block): registered or not, it copies.
  const bool zero_copy = !(c == "alltoall" && in_place);
  if (EndsWithZeroCopy(LastAlgorithm(comm)) != zero_copy)
    return what + ": registered buffers ran " + LastAlgorithm(comm) +
           (zero_copy ? ", not a zero-copy variant" : ", a zero-copy variant in place");
  // In place, reduce-scatter's output is block `rank` of the receive buffer.
  const size_t at = c == "reducescatter" && in_place ? rank * kBlockCount : 0;
  const float* plain_out = recv.data() + at;
  const float* reg_out = reg_recv + at;
  if (std::memcmp(plain_out, reg_out, z.out * sizeof(float)) != 0) {
    for (size_t i = 0; i < z.out; ++i)
      if (std::memcmp(&plain_out[i], &reg_out[i], sizeof(float)) != 0)
        return what + ": element " + std::to_string(i) + " differs: plain " + std::to_string(plain_out[i]) +
               ", registered " + std::to_string(reg_out[i]);
  }
  return "";
}

std::string ZeroCopyBody(weftComm_t comm, int rank, int n) {
  const size_t bytes = kBlockCount * 4 * sizeof(float) * 4;  // enough for every call at n <= 4
  void *send = nullptr, *recv = nullptr, *hs = nullptr, *hr = nullptr;
  if (weftMemAlloc(&send, bytes) != weftSuccess || weftMemAlloc(&recv, bytes) != weftSuccess)
    return std::string("weftMemAlloc: ") + weftGetLastError(comm);
  if (reinterpret_cast<uintptr_t>(send) % 4096 != 0) return "weftMemAlloc memory is not page-aligned";
  if (weftCommRegister(comm, send, bytes, &hs) != weftSuccess ||
      weftCommRegister(comm, recv, bytes, &hr) != weftSuccess)
    return std::string("weftCommRegister: ") + weftGetLastError(comm);
  std::string err;
  for (const char* c : {"allreduce", "allgather", "reducescatter", "alltoall"})
    for (bool in_place : {false, true})
      if (err.empty())
        err = CompareRegisteredWithPlain(comm, rank, n, c, in_place, static_cast<float*>(send),
                                         static_cast<float*>(recv));
  // Mixed: rank 0 passes an unregistered receive buffer; every rank must take the staging
  // path (the same schedule everywhere) and still be right.
  if (err.empty()) {
    std::vector<float> plain_recv(kAllReduceCount), expect(kAllReduceCount);
    float* out = rank == 0 ? plain_recv.data() : static_cast<float*>(recv);
    for (size_t i = 0; i < kAllReduceCount; ++i)
      weft_test::StoreNonExactInput(send, weftFloat32, rank, i, 17);
    if (weftAllReduce(send, out, kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      err = std::string("mixed call: ") + weftGetLastError(comm);
    else if (EndsWithZeroCopy(LastAlgorithm(comm)))
      err = "mixed call ran " + LastAlgorithm(comm) + " although rank 0's buffer is not registered";
    else if (weftAllReduce(send, expect.data(), kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      err = std::string("reference call: ") + weftGetLastError(comm);
    else if (std::memcmp(out, expect.data(), kAllReduceCount * sizeof(float)) != 0)
      err = "mixed call: wrong result";
  }
  // Deregistered: staging again, still right; a second deregistration is an error.
  if (err.empty()) {
    if (weftCommDeregister(comm, hs) != weftSuccess) return std::string("deregister: ") + weftGetLastError(comm);
    std::vector<float> expect(kAllReduceCount);
    if (weftAllReduce(send, recv, kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      err = std::string("after deregister: ") + weftGetLastError(comm);
    else if (EndsWithZeroCopy(LastAlgorithm(comm)))
      err = "after deregister the call still ran " + LastAlgorithm(comm);
    else if (weftAllReduce(send, expect.data(), kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess ||
             std::memcmp(recv, expect.data(), kAllReduceCount * sizeof(float)) != 0)
      err = "after deregister: wrong result";
    if (err.empty() && weftCommDeregister(comm, hs) != weftInvalidArgument)
      err = "a second weftCommDeregister of the same handle did not fail";
    if (err.empty() && std::string(weftGetLastError(comm)).find("deregistered already") == std::string::npos)
      err = std::string("double deregister message: ") + weftGetLastError(comm);
  }
  weftCommDeregister(comm, hr);
  weftMemFree(send);
  weftMemFree(recv);
  return err;
}

TEST(ZeroCopyProcesses, TwoRanksMatchUnregisteredBitwise) {
  std::string f = RunRanksProcesses(2, ZeroCopyBody);
  EXPECT_TRUE(f.empty()) << f;
}

TEST(ZeroCopyProcesses, FourRanksMatchUnregisteredBitwise) {
  std::string f = RunRanksProcesses(4, ZeroCopyBody, /*same_algorithms=*/true);
  EXPECT_TRUE(f.empty()) << f;
}

// Registered malloc memory cannot be mapped by peers: the calls copy as unregistered ones do,
// on every rank, also when only some ranks' registered buffers are malloc memory.
std::string MallocRegistrationBody(weftComm_t comm, int rank, bool malloc_here) {
  const size_t bytes = kAllReduceCount * sizeof(float);
  std::vector<float> heap_send(kAllReduceCount), heap_recv(kAllReduceCount), expect(kAllReduceCount);
  void *send = heap_send.data(), *recv = heap_recv.data(), *hs = nullptr, *hr = nullptr;
  if (!malloc_here && (weftMemAlloc(&send, bytes) != weftSuccess || weftMemAlloc(&recv, bytes) != weftSuccess))
    return weftGetLastError(comm);
  std::string err;
  if (weftCommRegister(comm, send, bytes, &hs) != weftSuccess ||
      weftCommRegister(comm, recv, bytes, &hr) != weftSuccess)
    err = std::string("register: ") + weftGetLastError(comm);
  for (size_t i = 0; err.empty() && i < kAllReduceCount; ++i)
    weft_test::StoreNonExactInput(send, weftFloat32, rank, i, 3);
  if (err.empty() && weftAllReduce(send, recv, kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
    err = weftGetLastError(comm);
  if (err.empty() && EndsWithZeroCopy(LastAlgorithm(comm))) err = "malloc memory ran " + LastAlgorithm(comm);
  if (err.empty() && (weftCommDeregister(comm, hs) != weftSuccess || weftCommDeregister(comm, hr) != weftSuccess))
    err = std::string("deregister: ") + weftGetLastError(comm);
  if (err.empty() &&
      (weftAllReduce(send, expect.data(), kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess ||
       std::memcmp(recv, expect.data(), bytes) != 0))
    err = "wrong result";
  if (!malloc_here) {
    weftMemFree(send);
    weftMemFree(recv);
  }
  return err;
}

TEST(ZeroCopyProcesses, RegisteredMallocMemoryTakesTheStagingPath) {
  std::string f = RunRanksProcesses(2, [](weftComm_t comm, int rank, int) {
    return MallocRegistrationBody(comm, rank, /*malloc_here=*/true);
  });
  EXPECT_TRUE(f.empty()) << f;
}

TEST(ZeroCopyProcesses, OneRankWithMallocMemoryKeepsEveryRankOnTheStagingPath) {
  std::string f = RunRanksProcesses(3, [](weftComm_t comm, int rank, int) {
    return MallocRegistrationBody(comm, rank, /*malloc_here=*/rank == 1);
  });
  EXPECT_TRUE(f.empty()) << f;
}

// Memory freed while registered (without weftCommDeregister) and allocated again (often at
// the same address) is not registered: the call copies, and peers never read the old pages.
TEST(ZeroCopyProcesses, MemoryFreedWhileRegisteredIsNotReadInPlace) {
  std::string f = RunRanksProcesses(2, [](weftComm_t comm, int rank, int) -> std::string {
    const size_t bytes = kAllReduceCount * sizeof(float);
    void *send = nullptr, *recv = nullptr, *hs = nullptr, *hr = nullptr;
    if (!AllocAndRegister(comm, bytes, &send, &recv, &hs, &hr)) return weftGetLastError(comm);
    weftMemFree(recv);
    void* again = nullptr;
    if (weftMemAlloc(&again, bytes) != weftSuccess) return weftGetLastError(comm);
    for (size_t i = 0; i < kAllReduceCount; ++i) weft_test::StoreNonExactInput(send, weftFloat32, rank, i, 5);
    std::vector<float> expect(kAllReduceCount);
    if (weftAllReduce(send, again, kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return weftGetLastError(comm);
    std::string err;
    if (EndsWithZeroCopy(LastAlgorithm(comm)))
      err = std::string("reallocated memory") + (again == recv ? " (same address)" : "") + " ran " +
            LastAlgorithm(comm);
    else if (weftAllReduce(send, expect.data(), kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess ||
             std::memcmp(again, expect.data(), bytes) != 0)
      err = "wrong result";
    weftCommDeregister(comm, hs);
    weftMemFree(send);
    weftMemFree(again);
    return err;
  });
  EXPECT_TRUE(f.empty()) << f;
}

// Zero-copy calls between single-round oneshot calls (which return while peers may still read
// their window half) on 3 ranks, whose rank 2 folds in its window: the window hand-over and the
// agreement's signal round keep every result right.
TEST(ZeroCopyProcesses, InterleavedWithSingleRoundCallsOnThreeRanks) {
  std::string f = RunRanksProcesses(3, [](weftComm_t comm, int rank, int n) -> std::string {
    const size_t bytes = kAllReduceCount * sizeof(float);
    void *send = nullptr, *recv = nullptr, *hs = nullptr, *hr = nullptr;
    if (!AllocAndRegister(comm, bytes, &send, &recv, &hs, &hr)) return weftGetLastError(comm);
    std::string err;
    std::vector<float> small_in(1024), small_out(1024);
    float* big_in = static_cast<float*>(send);
    float* big_out = static_cast<float*>(recv);
    for (int round = 0; round < 6 && err.empty(); ++round) {
      // Small integers: every order of addition gives the exact sum.
      for (size_t i = 0; i < small_in.size(); ++i) small_in[i] = static_cast<float>((rank + 1) * (i % 7 + round));
      for (size_t i = 0; i < kAllReduceCount; ++i) big_in[i] = static_cast<float>((rank + 1) * (i % 5 + round));
      if (weftAllReduce(small_in.data(), small_out.data(), 1024, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
        return weftGetLastError(comm);
      if (LastAlgorithm(comm) != "oneshot") return "the small call ran " + LastAlgorithm(comm) + ", not oneshot";
      if (weftAllReduce(big_in, big_out, kAllReduceCount, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
        return weftGetLastError(comm);
      if (!EndsWithZeroCopy(LastAlgorithm(comm))) err = "registered call ran " + LastAlgorithm(comm);
      const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
      for (size_t i = 0; err.empty() && i < small_out.size(); ++i)
        if (small_out[i] != ranks_sum * (i % 7 + round)) err = "small call, round " + std::to_string(round) + ": wrong";
      for (size_t i = 0; err.empty() && i < kAllReduceCount; ++i)
        if (big_out[i] != ranks_sum * (i % 5 + round)) err = "registered call, round " + std::to_string(round) + ": wrong";
    }
    weftCommDeregister(comm, hs);
    weftCommDeregister(comm, hr);
    weftMemFree(send);
    weftMemFree(recv);
    return err;
  }, /*same_algorithms=*/false, /*algo=*/"allreduce:0-64K:oneshot");  // larger: the selector's
  EXPECT_TRUE(f.empty()) << f;
}

TEST(RegisteredMemoryArgs, BadArgumentsNameTheArgument) {
  void* p = nullptr;
  EXPECT_EQ(weftMemAlloc(nullptr, 64), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("ptr is NULL"), std::string::npos);
  EXPECT_EQ(weftMemAlloc(&p, 0), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("size=0"), std::string::npos);
  ASSERT_EQ(weftMemAlloc(&p, 100), weftSuccess);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[99] = 1;  // usable, zero-filled elsewhere
  EXPECT_EQ(static_cast<char*>(p)[0], 0);
  int on_stack = 0;
  EXPECT_EQ(weftMemFree(&on_stack), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("not returned by weftMemAlloc"), std::string::npos);
  EXPECT_EQ(weftMemFree(p), weftSuccess);
  EXPECT_EQ(weftMemFree(p), weftInvalidArgument);  // double free
  EXPECT_NE(std::string(weftGetLastError(nullptr)).find("freed already"), std::string::npos);
  EXPECT_EQ(weftMemFree(nullptr), weftInvalidArgument);

  weftComm_t comm = nullptr;
  int dev = 0;
  ASSERT_EQ(weftCommInitAll(&comm, 1, &dev), weftSuccess);
  std::vector<char> buf(64);
  void* h = nullptr;
  EXPECT_EQ(weftCommRegister(comm, nullptr, 64, &h), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(comm)).find("buff is NULL"), std::string::npos);
  EXPECT_EQ(weftCommRegister(comm, buf.data(), 0, &h), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(comm)).find("size=0"), std::string::npos);
  EXPECT_EQ(weftCommRegister(comm, buf.data(), 64, nullptr), weftInvalidArgument);
  EXPECT_EQ(weftCommRegister(nullptr, buf.data(), 64, &h), weftInvalidArgument);
  int not_a_handle = 0;
  EXPECT_EQ(weftCommDeregister(comm, &not_a_handle), weftInvalidArgument);
  EXPECT_NE(std::string(weftGetLastError(comm)).find("is not a registration of this communicator"),
            std::string::npos);
  EXPECT_EQ(weftCommDeregister(comm, nullptr), weftInvalidArgument);
  ASSERT_EQ(weftCommRegister(comm, buf.data(), 64, &h), weftSuccess);
  EXPECT_EQ(weftCommDeregister(comm, h), weftSuccess);
  EXPECT_EQ(weftCommDeregister(comm, h), weftInvalidArgument);
  weftCommDestroy(comm);
}

}  // namespace
}  // namespace weft
