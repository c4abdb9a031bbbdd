// Flight recorder (src/core/flight_recorder.h, issue 11): every communicator keeps its last
// operations, and a call that times out or loses a peer dumps them — to stderr, or to
// WEFT_DEBUG_FILE per rank — naming the stuck call. Checked here on the ring itself, with
// threads of one process (forced timeout, dump to a file), with processes over shared memory
// and TCP (dump on stderr), through weftrun (which collects every rank's dump), and off
// (WEFT_FLIGHT_RECORDER=0).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/flight_recorder.h"
#include "test_util.h"
#include "weft/weft.h"

namespace {

using weft_test::BinPath;
using weft_test::LaunchRanks;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(FlightRecorderRing, KeepsTheLastEntriesOldestFirst) {
  weft::FlightRecorder rec(3);
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    weft::FlightEntry* e = rec.Begin(seq, "allreduce", 8 * seq);
    ASSERT_NE(e, nullptr);
    weft::FlightRecorder::SetPeers(e, {2, 0});
    if (seq < 5) rec.Complete(e, weft::OkStatus());
  }
  const std::string dump = rec.Format(1, 3, "test");
  EXPECT_TRUE(Has(dump, "rank 1 of 3")) << dump;
  EXPECT_TRUE(Has(dump, "last 3 of 5 operations")) << dump;
  EXPECT_FALSE(Has(dump, "seq=2 ")) << dump;  // overwritten
  const size_t s3 = dump.find("seq=3 "), s4 = dump.find("seq=4 "), s5 = dump.find("seq=5 ");
  ASSERT_NE(s3, std::string::npos);
  ASSERT_NE(s5, std::string::npos);
  EXPECT_LT(s3, s4);
  EXPECT_LT(s4, s5);
  EXPECT_TRUE(Has(dump, "seq=5 call=allreduce algorithm=- bytes=40")) << dump;
  EXPECT_TRUE(Has(dump, "peers=2,0 state=RUNNING")) << dump;
  EXPECT_TRUE(Has(dump, "(still running)")) << dump;
}

TEST(FlightRecorderRing, OffRecordsNothing) {
  weft::FlightRecorder rec(0);
  EXPECT_EQ(rec.Begin(1, "allreduce", 8), nullptr);
  EXPECT_FALSE(rec.enabled());
}

TEST(FlightRecorderRing, DebugFilePatternIsPerRankAsNcclDebugFile) {
  EXPECT_EQ(weft::ExpandDebugFilePattern("/tmp/w.%h.%p", 3, 77, "node1"), "/tmp/w.node1.77");
  EXPECT_EQ(weft::ExpandDebugFilePattern("/tmp/w.%r.log", 3, 77, "node1"), "/tmp/w.3.log");
  // Neither %r nor %p: the ranks of one job must not share the file.
  EXPECT_EQ(weft::ExpandDebugFilePattern("/tmp/w.%h", 3, 77, "node1"), "/tmp/w.node1.3");
  EXPECT_EQ(weft::ExpandDebugFilePattern("/tmp/100%%-%r", 0, 1, "h"), "/tmp/100%-0");
  EXPECT_EQ(weft::ExpandDebugFilePattern("/tmp/a%", 2, 1, "h"), "/tmp/a%.2");
}

// Threads of one process: rank 1 skips the fourth allreduce, rank 0 times out after 1 s and
// its dump (in WEFT_DEBUG_FILE) names that call as failed by timeout, the three before done.
TEST(FlightRecorderThreads, ForcedTimeoutDumpsTheStuckCallToTheDebugFile) {
  const std::string pattern = "/tmp/weft-flight-test-" + std::to_string(getpid()) + ".%r";
  const std::string file0 = weft::ExpandDebugFilePattern(pattern, 0, getpid(), "");
  const std::string file1 = weft::ExpandDebugFilePattern(pattern, 1, getpid(), "");
  unlink(file0.c_str());
  unlink(file1.c_str());
  setenv("WEFT_DEBUG_FILE", pattern.c_str(), 1);
  weftComm_t comms[2];
  ASSERT_EQ(weftCommInitAll(comms, 2, nullptr), weftSuccess);
  std::atomic<bool> rank0_done{false};
  weftResult_t stuck = weftSuccess;
  auto rank_fn = [&](int r) {
    weftCommSetTimeout(comms[r], 1.0);
    std::vector<float> buf(2, 1.0f);
    for (int i = 0; i < 3; ++i)
      if (weftAllReduce(buf.data(), buf.data(), 2, weftFloat32, weftSum, comms[r], nullptr) != weftSuccess)
        return;
    if (r == 0) {
      stuck = weftAllReduce(buf.data(), buf.data(), 2, weftFloat32, weftSum, comms[r], nullptr);
      rank0_done = true;
    } else {
      while (!rank0_done) usleep(10000);  // never calls: rank 0 must time out
    }
  };
  std::thread t0(rank_fn, 0), t1(rank_fn, 1);
  t0.join();
  t1.join();
  weftCommDestroy(comms[0]);
  weftCommDestroy(comms[1]);
  unsetenv("WEFT_DEBUG_FILE");
  EXPECT_EQ(stuck, weftTimeout);
  const std::string dump = ReadFile(file0);
  EXPECT_TRUE(Has(dump, "weft flight recorder: rank 0 of 2")) << dump;
  EXPECT_TRUE(Has(dump, "allreduce")) << dump;
  EXPECT_TRUE(Has(dump, "(call #4) failed: operation timed out")) << dump;
  EXPECT_TRUE(Has(dump, "seq=4 call=allreduce")) << dump;
  EXPECT_TRUE(Has(dump, "bytes=8 dtype=float32 op=sum peers=1 state=FAILED(operation timed out)"))
      << dump;
  for (const char* done : {"seq=1 call=allreduce", "seq=2 call=allreduce", "seq=3 call=allreduce"}) {
    const size_t at = dump.find(done);
    ASSERT_NE(at, std::string::npos) << done << "\n" << dump;
    EXPECT_EQ(dump.compare(dump.find("state=", at), 10, "state=done"), 0) << dump;
  }
  EXPECT_FALSE(Has(dump, "algorithm=- ")) << "every call had an algorithm\n" << dump;
  EXPECT_EQ(access(file1.c_str(), F_OK), -1) << "rank 1 did not fail and must not dump";
  unlink(file0.c_str());
}

// Processes: the victim (rank 1) never calls the fourth allreduce; rank 0 times out (1 s)
// and prints its dump on stderr, naming the stuck call and the peer it waited for.
class FlightRecorderProcesses : public testing::TestWithParam<std::string> {};

TEST_P(FlightRecorderProcesses, ForcedTimeoutDumpsTheStuckCallOnStderr) {
  std::vector<std::pair<std::string, std::string>> env = {{"WEFT_TIMEOUT", "1"},
                                                          {"WEFT_DEBUG_FILE", ""}};
  if (GetParam() == "tcp") env.push_back({"WEFT_SHM_DISABLE", "1"});
  weft_test::LaunchOutcome out =
      LaunchRanks(2, {BinPath("fault_worker"), "hang", "1"}, env, 60, /*must_finish=*/{0});
  ASSERT_FALSE(out.timed_out) << out.output[0];
  ASSERT_TRUE(WIFEXITED(out.status[0])) << out.output[0];
  EXPECT_EQ(WEXITSTATUS(out.status[0]), 3) << "rank 0 must fail the call\n" << out.output[0];
  const std::string& dump = out.output[0];
  EXPECT_TRUE(Has(dump, "weft flight recorder: rank 0 of 2")) << dump;
  EXPECT_TRUE(Has(dump, "(call #4) failed: operation timed out")) << dump;
  EXPECT_TRUE(Has(dump, "seq=4 call=allreduce")) << dump;
  EXPECT_TRUE(Has(dump, "bytes=8388608 dtype=float32 op=sum peers=1 state=FAILED(operation timed out)"))
      << dump;
  EXPECT_TRUE(Has(dump, "seq=3 call=allreduce")) << dump;
}

INSTANTIATE_TEST_SUITE_P(Transports, FlightRecorderProcesses, testing::Values("shm", "tcp"));

TEST(FlightRecorderProcessesOff, ZeroEntriesDumpsNothing) {
  weft_test::LaunchOutcome out =
      LaunchRanks(2, {BinPath("fault_worker"), "hang", "1"},
                  {{"WEFT_TIMEOUT", "1"}, {"WEFT_DEBUG_FILE", ""}, {"WEFT_FLIGHT_RECORDER", "0"}},
                  60, {0});
  ASSERT_FALSE(out.timed_out) << out.output[0];
  EXPECT_TRUE(Has(out.output[0], "ERROR ")) << out.output[0];
  EXPECT_FALSE(Has(out.output[0], "flight recorder")) << out.output[0];
}

// weftrun points WEFT_DEBUG_FILE at a directory of its own and prints every rank's dump once
// the job has failed.
TEST(FlightRecorderWeftrun, CollectsTheDumpsOfTheRanks) {
  const std::string cmd = "env -u WEFT_DEBUG_FILE WEFT_TIMEOUT=1 " + BinPath("weftrun") +
                          " -n 2 " + BinPath("fault_worker") + " hang 1 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 3) << text;
  const size_t block = text.find("weftrun: flight recorder of rank 0 (collected by weftrun):");
  ASSERT_NE(block, std::string::npos) << text;
  EXPECT_NE(text.find("seq=4 call=allreduce", block), std::string::npos) << text;
  EXPECT_NE(text.find("state=FAILED(operation timed out)", block), std::string::npos) << text;
}

}  // namespace
