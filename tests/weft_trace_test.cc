// weft-trace (tools/weft-trace.cc): merges the ranks' flight-recorder dumps and names the first
// operation they did not all complete and the rank that held it up.
//   - a real job: 3 fault_worker ranks, rank 1 SIGSTOPped inside an allreduce; the survivors
//     time out and dump to WEFT_DEBUG_FILE; weft-trace must name rank 1 and the operation
//     (sequence number) the survivors' dumps show failing;
//   - written dumps: ranks that entered different calls under one sequence number (diverged),
//     and a rank that never entered the operation the others wait in.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

std::string RunCommand(const std::string& command) {
  std::string out;
  if (FILE* p = popen((command + " 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TempDir(const std::string& name) {
  std::string dir = "/tmp/weft_trace_" + name + "_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  return dir;
}

TEST(WeftTrace, NamesTheStoppedRankAndTheOperationTheOthersWaitIn) {
  const std::string dir = TempDir("stop");
  const weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      3, {weft_test::BinPath("fault_worker"), "stop", "1"},
      {{"WEFT_TIMEOUT", "2"}, {"WEFT_DEBUG_FILE", dir + "/fr.%r"}, {"WEFT_INIT_TIMEOUT", "30"}}, 60, {0, 2});
  ASSERT_FALSE(o.timed_out) << o.output[0] << o.output[2];
  // The operation the survivors' dumps show failing.
  std::smatch m;
  const std::string dump0 = ReadFile(dir + "/fr.0");
  ASSERT_TRUE(std::regex_search(dump0, m, std::regex("seq=([0-9]+) call=allreduce [^\\n]*state=FAILED")))
      << "no failed operation in rank 0's dump:\n" << dump0 << o.output[0];
  const std::string seq = m[1];
  const std::string out = RunCommand(weft_test::BinPath("weft-trace") + " " + dir + "/fr.0 " + dir + "/fr.2");
  EXPECT_NE(out.find("first stop: rank 1 at seq=" + seq + " (allreduce"), std::string::npos) << out << dump0;
  EXPECT_NE(out.find("left no dump"), std::string::npos) << out;
  EXPECT_NE(out.find("rank(s) 0, 2 entered seq=" + seq), std::string::npos) << out;
  RunCommand("rm -rf " + dir);
}

// A dump as FlightRecorder::Format writes it, from (seq, call, state) entries.
std::string Dump(int rank, int nranks, const std::vector<std::tuple<int, std::string, std::string>>& ops) {
  std::string s = "[" + std::to_string(rank) + "] weft flight recorder: rank " + std::to_string(rank) +
                  " of " + std::to_string(nranks) + " (pid 1, host h) at 2026-01-01T00:00:00.000000Z: why\n";
  for (const auto& [seq, call, state] : ops)
    s += "  seq=" + std::to_string(seq) + " call=" + call + " algorithm=ring bytes=8 dtype=float32 peers=1 state=" +
         state + " started=2026-01-01T00:00:00.000000Z duration_ms=1.000\n";
  return s + "end of flight recorder (rank " + std::to_string(rank) + ")\n";
}

TEST(WeftTrace, NamesRanksThatEnteredDifferentCalls) {
  const std::string dir = TempDir("diverged");
  std::ofstream(dir + "/log") << Dump(0, 2, {{4, "allreduce", "done"}, {5, "allreduce", "FAILED(timeout)"}})
                              << Dump(1, 2, {{4, "allreduce", "done"}, {5, "broadcast", "FAILED(timeout)"}});
  const std::string out = RunCommand(weft_test::BinPath("weft-trace") + " " + dir + "/log");
  EXPECT_NE(out.find("first divergence: seq=5"), std::string::npos) << out;
  EXPECT_NE(out.find("allreduce ring: rank(s) 0"), std::string::npos) << out;
  EXPECT_NE(out.find("broadcast ring: rank(s) 1"), std::string::npos) << out;
  RunCommand("rm -rf " + dir);
}

TEST(WeftTrace, NamesARankThatNeverEnteredTheOperation) {
  const std::string dir = TempDir("behind");
  std::ofstream(dir + "/log") << Dump(0, 3, {{6, "allreduce", "done"}, {7, "allreduce", "RUNNING"}})
                              << Dump(1, 3, {{6, "allreduce", "done"}, {7, "allreduce", "FAILED(timeout)"}})
                              << Dump(2, 3, {{5, "allreduce", "done"}, {6, "allreduce", "done"}});
  const std::string out = RunCommand(weft_test::BinPath("weft-trace") + " " + dir + "/log");
  EXPECT_NE(out.find("first stop: rank 2 at seq=7 (allreduce ring): it never entered"), std::string::npos) << out;
  EXPECT_NE(RunCommand(weft_test::BinPath("weft-trace") + " " + dir + "/none").find("cannot read"), std::string::npos);
  RunCommand("rm -rf " + dir);
}

}  // namespace
