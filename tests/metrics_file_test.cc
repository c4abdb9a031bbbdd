// WEFT_METRICS_FILE (src/core/metrics.h): one JSON line per completed collective per rank,
// with the call's sequence number, collective, bytes, dtype, algorithm, transports, time and
// bandwidths; nothing for a failed call. Two forked ranks over shared memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"

namespace {

TEST(MetricsFile, OneJsonLinePerCompletedCollective) {
  const std::string base = "/tmp/weft_metrics_" + std::to_string(getpid());
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      2,
      [](int) {
        weftComm_t comm = nullptr;
        if (weftCommInitFromEnv(&comm) != weftSuccess) return 2;
        std::vector<float> x(1 << 16, 1.0f), y(2 << 16);
        for (int i = 0; i < 3; ++i)
          if (weftAllReduce(x.data(), x.data(), x.size(), weftFloat32, weftSum, comm, nullptr) != weftSuccess) return 3;
        if (weftAllGather(x.data(), y.data(), x.size(), weftFloat32, comm, nullptr) != weftSuccess) return 4;
        // A bad call fails before it runs: no line.
        if (weftAllReduce(x.data(), x.data(), x.size(), weftFloat32, static_cast<weftRedOp_t>(99), comm,
                          nullptr) == weftSuccess)
          return 5;
        weftCommDestroy(comm);
        return 0;
      },
      {{"WEFT_METRICS_FILE", base + ".%r"}}, 60);
  ASSERT_FALSE(o.timed_out);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(weft_test::ExitedZero(o.status[r])) << o.output[r];
    std::ifstream f(base + "." + std::to_string(r));
    std::vector<std::string> lines;
    for (std::string line; std::getline(f, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 4u) << "rank " << r;
    const std::regex shape(
        "\\{\"comm\":\"0x[0-9a-f]+\",\"rank\":([01]),\"nranks\":2,\"seq\":([0-9]+),\"collective\":\"([a-z]+)\","
        "\"bytes\":([0-9]+),\"dtype\":\"float32\",\"algorithm\":\"[a-z_+]+\",\"transport\":\"shm\","
        "\"time_us\":[0-9.]+,\"algbw_GBps\":[0-9.]+,\"busbw_GBps\":[0-9.]+\\}");
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(lines[i], m, shape)) << lines[i];
      EXPECT_EQ(m[1], std::to_string(r));
      EXPECT_EQ(m[2], std::to_string(i + 1));
      EXPECT_EQ(m[3], i < 3 ? "allreduce" : "allgather");
      EXPECT_EQ(m[4], i < 3 ? "262144" : "524288") << lines[i];
    }
    unlink((base + "." + std::to_string(r)).c_str());
  }
}

}  // namespace
