// Every collective of weft.h over UCX forced (WEFT_TRANSPORT=ucx, WEFT_SHM_DISABLE=1 so every
// pair of this host goes over the network transport) for 2, 3 and 4 processes, with
// UCX_TLS=tcp and UCX_TLS=sm,tcp (UCX 1.13 refuses its shared-memory lanes in peer-failure
// mode, so sm,tcp runs over tcp/lo: README.md). The ranks are tests/helpers/
// ucx_collectives_worker processes: allreduce, reduce, broadcast, allgather, reduce-scatter and
// alltoall at 1, 3 and 100003 elements, alltoallv, a send/recv ring and a barrier, each
// checked exactly; each rank's WEFT_DEBUG=INFO line must say ucx serves its peers (no tcp).
// The same worker runs over the 2x2 network-namespace harness (tests/netns.cmake).
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace {

struct Param {
  const char* tls;
  int nranks;
};

class UcxCollectives : public testing::TestWithParam<Param> {};

TEST_P(UcxCollectives, EveryCollectiveExactOverForcedUcx) {
#ifndef WEFT_HAVE_UCX
  GTEST_SKIP() << "weft was built without UCX (WEFT_UCX=OFF or libucx-dev missing)";
#else
  const Param& p = GetParam();
  weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      p.nranks, {weft_test::BinPath("ucx_collectives_worker")},
      {{"WEFT_TRANSPORT", "ucx"}, {"WEFT_SHM_DISABLE", "1"}, {"UCX_TLS", p.tls}, {"WEFT_INIT_TIMEOUT", "30"},
       {"WEFT_TIMEOUT", "60"}, {"WEFT_DEBUG", "INFO"}},
      120);
  std::string all;
  for (int r = 0; r < p.nranks; ++r) all += "--- rank " + std::to_string(r) + ":\n" + o.output[r];
  ASSERT_FALSE(o.timed_out) << "UCX_TLS=" << p.tls << ": ranks still running after 120 s\n" << all;
  for (int r = 0; r < p.nranks; ++r) {
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << "UCX_TLS=" << p.tls << "\n" << all;
    EXPECT_NE(o.output[r].find("OK ucx collectives 21"), std::string::npos) << "UCX_TLS=" << p.tls << "\n" << all;
    EXPECT_NE(o.output[r].find("ucx to rank(s)"), std::string::npos) << "rank " << r << " logged no ucx peers\n" << all;
    EXPECT_EQ(o.output[r].find("tcp to rank(s)"), std::string::npos) << "rank " << r << " used tcp\n" << all;
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxCollectives,
                         testing::Values(Param{"tcp", 2}, Param{"tcp", 3}, Param{"tcp", 4}, Param{"sm,tcp", 2},
                                         Param{"sm,tcp", 3}, Param{"sm,tcp", 4}),
                         [](const testing::TestParamInfo<Param>& info) {
                           return std::string(info.param.tls[0] == 's' ? "SmTcp_" : "Tcp_") +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

}  // namespace
