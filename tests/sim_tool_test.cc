// weft-sim as a user runs it (tools/weft-sim.cc): -a ALGO predicts what the library runs when
// WEFT_ALGO forces that algorithm (the selector's chunk and channels for it, not an unchunked
// schedule), and --breakdown shows where the simulated time went.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

std::string Shell(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

// The data rows (lines starting with the size), split into fields.
std::vector<std::vector<std::string>> Rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> fields;
    for (std::string x; f >> x;) fields.push_back(x);
    if (!fields.empty() && std::isdigit(static_cast<unsigned char>(fields[0][0]))) rows.push_back(fields);
  }
  return rows;
}

const std::string kSim = weft_test::BinPath("weft-sim");

}  // namespace

// Columns: size count type algorithm chunk ch time ...
TEST(WeftSimTool, ForcedAlgorithmGetsTheLibrarysChunkAndChannels) {
  const std::string call = " --preset host:4 -C allreduce -b 64K -e 16M -f 4";
  int st_a = -1, st_env = -1;
  auto a = Rows(Shell(kSim + call + " -a ring", &st_a));
  auto env = Rows(Shell("WEFT_ALGO=allreduce:ring " + kSim + call, &st_env));
  ASSERT_EQ(st_a, 0);
  ASSERT_EQ(st_env, 0);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(a.size(), env.size());
  bool some_chunked = false;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_GE(a[i].size(), 7u);
    EXPECT_EQ(a[i][3], "ring");
    EXPECT_EQ(a[i][4], env[i][4]) << "chunk at " << a[i][0];
    EXPECT_EQ(a[i][5], env[i][5]) << "channels at " << a[i][0];
    EXPECT_EQ(a[i][6], env[i][6]) << "time at " << a[i][0];
    some_chunked |= a[i][4] != "none";
  }
  // The library pipelines a ring of megabytes; an unchunked prediction would not be what runs.
  EXPECT_TRUE(some_chunked);
  // --chunk / --channels still pin the schedule.
  int st = -1;
  auto pinned = Rows(Shell(kSim + " --preset host:4 -C allreduce -b 16M -e 16M -a ring --chunk 0 --channels 1", &st));
  ASSERT_EQ(st, 0);
  ASSERT_EQ(pinned.size(), 1u);
  EXPECT_EQ(pinned[0][4], "none");
  EXPECT_EQ(pinned[0][5], "1");
}

TEST(WeftSimTool, UnknownOrInapplicableAlgorithmIsAClearError) {
  int st = -1;
  std::string out = Shell(kSim + " --preset host:2 -C allreduce -b 1M -e 1M -a nosuch", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("no algorithm 'nosuch' for allreduce"), std::string::npos) << out;
  out = Shell(kSim + " --preset netns:2x2 -C allreduce -b 1M -e 1M -a twoshot", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("cannot run this call"), std::string::npos) << out;
}

TEST(WeftSimTool, BreakdownShowsEveryRanksFinishAndTheBusyResources) {
  int st = -1;
  std::string out = Shell(kSim + " --preset host:4 -C allreduce -b 4M -e 4M -a ring --breakdown", &st);
  ASSERT_EQ(st, 0) << out;
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(out.find("rank " + std::to_string(r) + " done at"), std::string::npos) << out;
  EXPECT_NE(out.find("busy "), std::string::npos) << out;
  EXPECT_NE(out.find("core"), std::string::npos) << out;
  EXPECT_NE(out.find("messages"), std::string::npos) << out;
}
