// One test per README claim that no other test proved (issue 9), each named after its claim:
//   Failures:  after a failure the communicator refuses further work; nothing writes into the
//              caller's buffers afterwards; a timeout names the exact stuck peer and step.
//   weftCommSetTimeout, weftCommGetAsyncError, weft.hpp throwing weft::Error.
//   weftCommInitFromEnv's fallbacks: torchrun, Slurm and Open MPI variables (processes).
// Thread-per-rank tests (inproc transport) use a short per-communicator timeout so a failure
// takes a fraction of a second; their upper bounds carry seconds of slack for a loaded machine.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "test_util.h"
#include "weft/weft.hpp"

using namespace weft_test;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void WaitFor(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

bool AllEqual(const std::vector<float>& v, float x) {
  for (float f : v)
    if (f != x) return false;
  return true;
}

// ---- failures ----

// README: "after either, the communicator refuses further work (destroy or abort it)".
// Rank 1 stays away until rank 0 has timed out. Rank 0's next call (with a long timeout, so
// a call that is accepted would block or complete instead of failing at once) must fail at
// once with the original code, say why, and leave its buffers alone.
TEST(Failures, CommunicatorRefusesWorkAfterAFailure) {
  std::atomic<bool> failed{false}, refused{false};
  std::string err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> in(1000, 1.0f + rank), out(1000, -1.0f);
    if (rank == 1) {
      WaitFor(refused);
      return "";
    }
    weftCommSetTimeout(comm, 0.3);
    weftResult_t r = weftAllReduce(in.data(), out.data(), in.size(), weftFloat32, weftSum, comm, nullptr);
    failed = true;
    if (r != weftTimeout) return "first call: want weftTimeout, got " + std::to_string(r);
    // An accepted call would wait the 5 s timeout (rank 1 is away); a refusal takes
    // microseconds, so 2 s tells them apart with slack for a loaded machine.
    weftCommSetTimeout(comm, 5);
    std::fill(out.begin(), out.end(), -7.0f);
    double t0 = Now();
    r = weftAllReduce(in.data(), out.data(), in.size(), weftFloat32, weftSum, comm, nullptr);
    double took = Now() - t0;
    std::string msg = weftGetLastError(comm);
    if (took > 2.0) {
      refused = true;
      return "the call after the failure took " + std::to_string(took) + " s: it was run, not refused";
    }
    weftResult_t barrier = weftBarrier(comm, nullptr);
    refused = true;
    if (r != weftTimeout) return "call after the failure: want weftTimeout (the first error), got " + std::to_string(r);
    if (barrier == weftSuccess) return "a barrier after the failure was accepted";
    if (msg.find("unusable after an earlier failure") == std::string::npos)
      return "the refusal does not say why: '" + msg + "'";
    if (!AllEqual(out, -7.0f)) return "the refused call wrote into recvbuff";
    return "";
  });
  EXPECT_EQ(err, "");
}

// README: "Transports are aborted before the error is returned, so nothing writes into your
// buffers afterwards." Rank 0 times out; then the late rank 1 runs the same allreduce (sending
// its data towards rank 0); rank 0's recvbuff of the failed call must stay as rank 0 left it.
TEST(Failures, NothingWritesIntoCallerBuffersAfterAFailure) {
  std::atomic<bool> failed{false}, late_done{false};
  std::vector<float> rank0_out(1 << 16, -1.0f);
  std::string err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    std::vector<float> in(rank0_out.size(), 2.0f);
    if (rank == 1) {
      WaitFor(failed);
      weftCommSetTimeout(comm, 0.5);
      std::vector<float> out(in.size());
      weftResult_t r = weftAllReduce(in.data(), out.data(), in.size(), weftFloat32, weftSum, comm, nullptr);
      late_done = true;
      return r == weftSuccess ? "the late rank's allreduce succeeded without rank 0" : "";
    }
    weftCommSetTimeout(comm, 0.3);
    weftResult_t r = weftAllReduce(in.data(), rank0_out.data(), in.size(), weftFloat32, weftSum, comm, nullptr);
    std::fill(rank0_out.begin(), rank0_out.end(), -3.0f);  // the caller reuses its buffer
    failed = true;
    if (r != weftTimeout) return "want weftTimeout, got " + std::to_string(r);
    WaitFor(late_done);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return AllEqual(rank0_out, -3.0f) ? "" : "recvbuff of the failed call was written after it returned";
  });
  EXPECT_EQ(err, "");
}

// README: "no progress for WEFT_TIMEOUT seconds returns weftTimeout naming the step and the
// peer". A chain broadcast from root 1 (forced) makes every non-root's step 0 a receive from
// its predecessor; rank 1 never calls. The rank waiting on rank 1 directly must name exactly
// "step 0 (recv from rank 1)" (or its fused form, which also names where it forwards).
TEST(Failures, TimeoutNamesTheStuckPeerAndStep) {
  for (int n : {2, 3}) {
    setenv("WEFT_ALGO", "broadcast:chain", 1);
    std::atomic<bool> done{false};
    std::string err = RunRanks(n, [&](weftComm_t comm, int rank) -> std::string {
      if (rank == 1) {
        WaitFor(done);
        return "";
      }
      std::vector<int32_t> buf(100, rank);
      weftCommSetTimeout(comm, 0.3);
      weftResult_t r = weftBroadcast(buf.data(), buf.data(), buf.size(), weftInt32, 1, comm, nullptr);
      std::string msg = weftGetLastError(comm);
      if (rank == (2 % n)) done = true;  // the successor of rank 1 in the chain
      if (rank != 2 % n) return "";  // rank 0 of 3 waits on rank 2, which waits on rank 1
      if (r != weftTimeout) return "want weftTimeout, got " + std::to_string(r) + ": " + msg;
      // The middle rank's step 0 is a fused receive-and-forward (recv_copy_send) since the
      // chain uses fused primitives; it still names the step and the peer it waits on.
      if (msg.find("step 0 (recv from rank 1) made no progress") == std::string::npos &&
          msg.find("step 0 (recv_copy_send from rank 1 forward to rank 0) made no progress") ==
              std::string::npos)
        return "message does not name step 0 and peer rank 1 exactly: '" + msg + "'";
      return "";
    });
    unsetenv("WEFT_ALGO");
    EXPECT_EQ(err, "") << n << " ranks";
  }
}

// ---- weftCommSetTimeout ----

// "Per-communicator timeout in seconds (0 = never)": 0.5 s makes a stuck call fail after
// about 0.5 s (not WEFT_TIMEOUT's 300); 0 waits for a peer that comes 1.5 s late; a negative
// value is rejected naming the argument.
TEST(Timeouts, WeftCommSetTimeoutBoundsTheWait) {
  std::atomic<bool> done{false};
  std::string err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    if (rank == 1) {
      WaitFor(done);
      return "";
    }
    if (weftCommSetTimeout(comm, -1) != weftInvalidArgument ||
        std::string(weftGetLastError(comm)).find("seconds=-1") == std::string::npos)
      return std::string("negative timeout: ") + weftGetLastError(comm);
    weftCommSetTimeout(comm, 0.5);
    float x = 1, y = 0;
    double t0 = Now();
    weftResult_t r = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, comm, nullptr);
    double took = Now() - t0;
    done = true;
    if (r != weftTimeout) return "want weftTimeout, got " + std::to_string(r);
    // Lower bound: it waited the timeout. Upper bound: 0.5 s + slack for a loaded 2-core host.
    if (took < 0.45 || took > 5.0) return "timed out after " + std::to_string(took) + " s, set 0.5 s";
    return "";
  });
  EXPECT_EQ(err, "");
  err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    weftCommSetTimeout(comm, 0);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    float x = 1, y = 0;
    weftResult_t r = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, comm, nullptr);
    if (r != weftSuccess) return std::string("timeout 0 (never) still failed: ") + weftGetLastError(comm);
    return y == 2.0f ? "" : "wrong sum";
  });
  EXPECT_EQ(err, "");
}

// ---- weftCommGetAsyncError ----

// "The first asynchronous error on this communicator (a failed stream operation)": success
// while healthy; after an operation on a host stream fails, the stream reports it and
// weftCommGetAsyncError returns its code.
TEST(AsyncErrors, WeftCommGetAsyncErrorReportsAFailedStreamOperation) {
  std::atomic<bool> done{false};
  std::string err = RunRanks(2, [&](weftComm_t comm, int rank) -> std::string {
    weftResult_t async = weftInternalError;
    if (weftCommGetAsyncError(comm, &async) != weftSuccess || async != weftSuccess)
      return "healthy communicator reports " + std::to_string(async);
    if (weftCommGetAsyncError(comm, nullptr) != weftInvalidArgument) return "NULL asyncError accepted";
    float x = 1, y = 0;
    if (weftAllReduce(&x, &y, 1, weftFloat32, weftSum, comm, nullptr) != weftSuccess) return "first allreduce";
    if (rank == 1) {
      WaitFor(done);
      return "";
    }
    weftStream_t s = nullptr;
    if (weftStreamCreate(&s) != weftSuccess) return "stream";
    weftCommSetTimeout(comm, 0.3);
    weftResult_t enq = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, comm, s);
    weftResult_t sync = weftStreamSynchronize(s);
    weftStreamDestroy(s);
    done = true;
    if (enq != weftSuccess) return "enqueue on a stream failed at once: " + std::to_string(enq);
    if (sync != weftTimeout) return "stream synchronize: want weftTimeout, got " + std::to_string(sync);
    if (weftCommGetAsyncError(comm, &async) != weftSuccess || async != weftTimeout)
      return "after the failure: want weftTimeout, got " + std::to_string(async);
    return "";
  });
  EXPECT_EQ(err, "");
}

// ---- weft.hpp ----

// "it throws weft::Error (a std::runtime_error carrying the weftResult_t and the message) on
// any failure".
TEST(CppWrapper, WeftHppThrowsWeftErrorWithCodeAndMessage) {
  static_assert(std::is_base_of<std::runtime_error, weft::Error>::value, "weft::Error is a runtime_error");
  std::vector<weftComm_t> comms(2);
  ASSERT_EQ(weftCommInitAll(comms.data(), 2, nullptr), weftSuccess);
  std::string err = RunOnComms(comms, [&](weftComm_t handle, int rank) -> std::string {
    weft::Communicator comm(handle);  // owns the handle: destroyed with its scope
    if (comm.rank() != rank || comm.size() != 2) return "rank/size";
    float x = 1.0f + rank, y = 0;
    comm.allReduce(&x, &y, 1, weftFloat32, weftSum);  // success: no throw
    if (y != 3.0f) return "wrong sum";
    try {
      comm.allReduce(nullptr, &y, 1, weftFloat32, weftSum);
      return "a NULL sendbuff did not throw";
    } catch (const weft::Error& e) {
      if (e.code() != weftInvalidArgument) return "code " + std::to_string(e.code());
      if (std::string(e.what()).find("sendbuff") == std::string::npos) return std::string("message: ") + e.what();
    }
    try {
      comm.broadcast(&x, &y, 1, weftFloat32, /*root=*/7);
      return "a bad root did not throw";
    } catch (const std::runtime_error& e) {  // catchable as its base class
      if (std::string(e.what()).find("root=7") == std::string::npos) return std::string("message: ") + e.what();
    }
    return "";
  });
  EXPECT_EQ(err, "");
  weftUniqueId bogus;
  memset(&bogus, 0x5a, sizeof(bogus));
  try {
    weft::Communicator c = weft::Communicator::FromUniqueId(2, bogus, 0);
    ADD_FAILURE() << "a bogus unique id did not throw";
  } catch (const weft::Error& e) {
    EXPECT_NE(e.code(), weftSuccess);
    EXPECT_NE(std::string(e.what()).find("weftCommInitRank"), std::string::npos) << e.what();
  }
}

// ---- launcher environments (README "Environment": WEFT_* first, then torchrun, Slurm, Open MPI) ----

// The weft variables LaunchRanks sets, removed (an empty value unsets).
std::vector<std::pair<std::string, std::string>> WithoutWeftLayout() {
  return {{"WEFT_RANK", ""}, {"WEFT_WORLD_SIZE", ""}, {"WEFT_LOCAL_RANK", ""}, {"WEFT_ROOT", ""}};
}

// Every rank must report the rank the launcher variables gave it and sum the ranks correctly.
void ExpectLayout(const LaunchOutcome& o, int n, bool reversed, const std::string& launcher) {
  ASSERT_FALSE(o.timed_out) << launcher << ": timed out; rank 0:\n" << o.output[0];
  for (int r = 0; r < n; ++r) {
    int want = reversed ? n - 1 - r : r;
    EXPECT_TRUE(ExitedZero(o.status[r])) << launcher << " process " << r << ":\n" << o.output[r];
    EXPECT_NE(o.output[r].find("LAYOUT rank " + std::to_string(want) + " size " + std::to_string(n) + " OK"),
              std::string::npos)
        << launcher << " process " << r << ":\n" << o.output[r];
  }
}

TEST(Launchers, TorchrunVariablesInitAComm) {
  auto env = WithoutWeftLayout();
  env.insert(env.end(), {{"RANK", "{rrank}"}, {"WORLD_SIZE", "3"}, {"LOCAL_RANK", "{rrank}"},
                         {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "{port}"}});
  ExpectLayout(LaunchRanks(3, {BinPath("weft_test_worker"), "layout"}, env, 60), 3, true, "torchrun");
}

int PortForSlurmJob() {  // weft derives Slurm's rendezvous port as 29500 + job id % 20000
  for (int port = 29500 + getpid() % 20000, tries = 0; tries < 200; ++tries, port = 29500 + (port - 29500 + 97) % 20000) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (ok) return port;
  }
  return 29500;
}

TEST(Launchers, SlurmVariablesInitAComm) {
  auto env = WithoutWeftLayout();
  env.insert(env.end(), {{"SLURM_PROCID", "{rrank}"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "{rrank}"},
                         {"SLURM_JOB_NODELIST", "localhost"},
                         {"SLURM_JOB_ID", std::to_string(PortForSlurmJob() - 29500)}, {"SLURM_STEP_ID", "0"}});
  ExpectLayout(LaunchRanks(3, {BinPath("weft_test_worker"), "layout"}, env, 60), 3, true, "Slurm");
}

TEST(Launchers, OpenMpiVariablesInitAComm) {
  auto env = WithoutWeftLayout();
  env.insert(env.end(), {{"OMPI_COMM_WORLD_RANK", "{rrank}"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "{rrank}"}, {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "{port}"}});
  ExpectLayout(LaunchRanks(3, {BinPath("weft_test_worker"), "layout"}, env, 60), 3, true, "Open MPI");
}

// WEFT_* come first: with torchrun's variables also set (reversed), the WEFT_* layout wins.
TEST(Launchers, WeftVariablesTakePrecedence) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", "{rrank}"}, {"WORLD_SIZE", "3"}, {"LOCAL_RANK", "{rrank}"},
      {"SLURM_PROCID", "{rrank}"}, {"SLURM_NTASKS", "3"}, {"OMPI_COMM_WORLD_RANK", "{rrank}"},
      {"OMPI_COMM_WORLD_SIZE", "3"}};
  ExpectLayout(LaunchRanks(3, {BinPath("weft_test_worker"), "layout"}, env, 60), 3, false, "WEFT_*");
}

// ---- WEFT_CHUNK_BYTES ----

// README: "WEFT_CHUNK_BYTES | pipelining chunk when the selector does not choose | 1 MiB".
// Thread-per-rank communicators have no selector. The chunk shows in the WEFT_DEBUG=INFO line
// of each first-time schedule ("-> ring (chunk N elems, ...)"): 4096 bytes of float32 are
// 1024 elements; unset, the 1 MiB default is 262144. (Process communicators always run the
// selector, which chooses the chunk itself.) A fresh process per setting, since the library
// reads the variable once.
TEST(Environment, WeftChunkBytesSetsThePipeliningChunk) {
  auto run = [](const std::string& chunk) {
    std::vector<std::pair<std::string, std::string>> env = {{"WEFT_DEBUG", "INFO"}, {"WEFT_ALGO", "allreduce:ring"},
                                                            {"WEFT_CHUNK_BYTES", chunk}};
    LaunchOutcome o = LaunchRanks(1, {BinPath("weft_test_worker"), "threads"}, env, 60);
    EXPECT_TRUE(ExitedZero(o.status[0])) << o.output[0];
    EXPECT_NE(o.output[0].find("OK threads"), std::string::npos) << o.output[0];
    return o.output[0];
  };
  std::string out = run("4096");
  EXPECT_NE(out.find("-> ring (chunk 1024 elems"), std::string::npos) << out;
  out = run("");  // unset: the default
  EXPECT_NE(out.find("-> ring (chunk 262144 elems"), std::string::npos) << out;
}

}  // namespace
