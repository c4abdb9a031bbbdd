// Regression tests for issue 11, defect 1: ranks calling collectives that do not match must
// never get success with wrong data, and none may hang. Each case runs
// bin/reliability_mismatch_worker in N processes (shared memory or TCP on loopback) with a
// forced algorithm, and checks every rank's RESULT line: a success must carry correct data,
// at least one rank must report the mismatch (weftInvalidUsage, naming "mismatched call" or,
// with WEFT_CHECK=1, every rank's call), the others fail too (weftInvalidUsage or
// weftRemoteError: the detecting rank aborts), all well before the 20 s call timeout.
// Before the fix, `count` (oneshot) and the others returned weftSuccess with stale or wrong data.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

struct RankResult {
  bool finished = false;
  int exit_code = -1;
  std::string output;
};

// Runs `n` ranks of `argv` with the weft environment plus `env`; kills what is still running
// after `timeout_s` (its `finished` stays false).
std::vector<RankResult> LaunchRanks(int n, const std::vector<std::string>& argv, const Env& env,
                                    double timeout_s) {
  std::string root = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<pid_t> pids(n);
  std::vector<std::string> files(n);
  std::vector<RankResult> results(n);
  for (int r = 0; r < n; ++r) {
    files[r] = "/tmp/weft_reliability_" + std::to_string(getpid()) + "_" + std::to_string(r);
    pids[r] = fork();
    if (pids[r] == 0) {
      int fd = open(files[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      setenv("WEFT_RANK", std::to_string(r).c_str(), 1);
      setenv("WEFT_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("WEFT_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WEFT_ROOT", root.c_str(), 1);
      setenv("WEFT_SECRET", "00112233445566778899aabbccddeeff", 1);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < n; ++r) {
      int status = 0;
      if (results[r].finished || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      results[r].finished = true;
      results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      --left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r) {
    if (!results[r].finished) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
    std::ifstream f(files[r]);
    std::stringstream ss;
    ss << f.rdbuf();
    results[r].output = ss.str();
    unlink(files[r].c_str());
  }
  return results;
}

std::string Field(const std::string& out, const std::string& key) {
  std::smatch m;
  std::regex re(key + "=([^ \\n]*)");
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

// Runs a mismatch scenario and checks the contract described at the top of the file.
void ExpectDetected(const std::string& scenario, int n, Env env) {
  auto start = std::chrono::steady_clock::now();
  std::vector<RankResult> res =
      LaunchRanks(n, {weft_test::BinPath("reliability_mismatch_worker"), scenario}, env, 60);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int failed = 0, named = 0;
  std::string all;
  for (int r = 0; r < n; ++r) all += "--- rank " + std::to_string(r) + "\n" + res[r].output;
  for (int r = 0; r < n; ++r) {
    const std::string& out = res[r].output;
    ASSERT_TRUE(res[r].finished) << "rank " << r << " hung\n" << all;
    ASSERT_NE(out.find("RESULT"), std::string::npos) << all;
    EXPECT_NE(Field(out, "check"), "WRONG") << "rank " << r << " got success with wrong data\n" << all;
    int code = std::atoi(Field(out, "code").c_str());
    if (code == weftSuccess) continue;
    ++failed;
    EXPECT_TRUE(code == weftInvalidUsage || code == weftRemoteError) << all;
    EXPECT_EQ(out.find("timed out"), std::string::npos) << "a timeout, not a detection\n" << all;
    if (code == weftInvalidUsage &&
        (out.find("mismatched call") != std::string::npos || out.find("WEFT_CHECK") != std::string::npos))
      ++named;
  }
  EXPECT_GE(failed, 1) << "every rank returned success on mismatched calls\n" << all;
  EXPECT_GE(named, 1) << "no rank named the mismatch\n" << all;
  EXPECT_LT(secs, 20) << "detection took as long as the timeout\n" << all;
}

Env Shm(const std::string& algo) { return {{"WEFT_ALGO", algo}}; }
Env Tcp(const std::string& algo) {
  return {{"WEFT_ALGO", algo}, {"WEFT_SHM_DISABLE", "1"}};
}

TEST(ReliabilityMismatch, CountOneShotShm2) { ExpectDetected("count", 2, Shm("allreduce:oneshot")); }
TEST(ReliabilityMismatch, CountTwoShotShm4) { ExpectDetected("count4", 4, Shm("allreduce:twoshot")); }
TEST(ReliabilityMismatch, CountRingShm2) { ExpectDetected("count_large", 2, Shm("allreduce:ring")); }
TEST(ReliabilityMismatch, BroadcastVsAllReduceTcp) {
  ExpectDetected("bcast_vs_allreduce", 2, Tcp("allreduce:ring;broadcast:chain"));
}
TEST(ReliabilityMismatch, DtypeOneShotShm) { ExpectDetected("dtype", 2, Shm("allreduce:oneshot")); }
TEST(ReliabilityMismatch, DtypeRingTcp) { ExpectDetected("dtype", 2, Tcp("allreduce:ring")); }
TEST(ReliabilityMismatch, OpOneShotShm) { ExpectDetected("op", 2, Shm("allreduce:oneshot")); }
TEST(ReliabilityMismatch, OpRingTcp) { ExpectDetected("op", 2, Tcp("allreduce:ring")); }
TEST(ReliabilityMismatch, RootTcp3) { ExpectDetected("root", 3, Tcp("broadcast:chain")); }

TEST(ReliabilityMismatch, WeftCheckNamesEveryRanksCall) {
  std::vector<RankResult> res = LaunchRanks(
      2, {weft_test::BinPath("reliability_mismatch_worker"), "op"},
      {{"WEFT_CHECK", "1"}, {"WEFT_ALGO", "allreduce:oneshot"}}, 60);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(res[r].finished) << res[r].output;
    EXPECT_EQ(std::atoi(Field(res[r].output, "code").c_str()), weftInvalidUsage) << res[r].output;
    // Both ranks name both calls.
    EXPECT_NE(res[r].output.find("op=sum"), std::string::npos) << res[r].output;
    EXPECT_NE(res[r].output.find("op=max"), std::string::npos) << res[r].output;
    EXPECT_NE(res[r].output.find("rank " + std::to_string(1 - r) + " called"), std::string::npos)
        << res[r].output;
  }
}

TEST(ReliabilityMismatch, MatchedCallsStillSucceedWithAndWithoutCheck) {
  for (const char* check : {"0", "1"}) {
    std::vector<RankResult> res = LaunchRanks(
        2, {weft_test::BinPath("reliability_mismatch_worker"), "match"}, {{"WEFT_CHECK", check}}, 60);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(res[r].finished) << res[r].output;
      EXPECT_EQ(res[r].exit_code, 0) << "WEFT_CHECK=" << check << ": " << res[r].output;
    }
  }
}

}  // namespace
