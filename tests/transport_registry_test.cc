// Tests of the transport registry (transports/registry.h) and of how init wires it: which
// transport serves each peer (shm inside a host, the network transport across hosts or with
// WEFT_SHM_DISABLE=1), WEFT_TRANSPORT=ucx running collectives over UCX, and bad values of
// WEFT_TRANSPORT failing with an error that names the variable and the value.
//
// The multi-process cases fork ranks from this test (no exec), each joining a loopback
// rendezvous through weftCommInitFromEnv and reporting back through a file: a line per check.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "test_util.h"
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/comm.h"
#include "transports/registry.h"
#include "weft/weft.h"

namespace weft {
namespace {

TransportSetupContext TwoHosts(int per_host) {
  TransportSetupContext ctx;
  ctx.nranks = 2 * per_host;
  for (int r = 0; r < ctx.nranks; ++r) ctx.host_of.push_back(r / per_host);
  ctx.settings.shm_enabled.assign(ctx.nranks, true);
  return ctx;
}

std::string EntryName(const TransportPlan& plan, int a, int b) {
  return TransportRegistry()[plan.entry(a, b)].name;
}

TEST(TransportRegistry, ShmInsideAHostNetworkAcross) {
  TransportSetupContext ctx = TwoHosts(2);
  StatusOr<TransportPlan> plan = PlanTransports(ctx);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(EntryName(*plan, 0, 1), "shm");
  EXPECT_EQ(EntryName(*plan, 3, 2), "shm");
  EXPECT_EQ(EntryName(*plan, 0, 2), "tcp");
  EXPECT_EQ(EntryName(*plan, 3, 1), "tcp");
  EXPECT_EQ(plan->entry(1, 1), -1);
}

TEST(TransportRegistry, ShmDisabledOnOneRankSendsItsPairsToTheNetwork) {
  TransportSetupContext ctx = TwoHosts(3);
  ctx.settings.shm_enabled[1] = false;
  StatusOr<TransportPlan> plan = PlanTransports(ctx);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(EntryName(*plan, 0, 1), "tcp");
  EXPECT_EQ(EntryName(*plan, 1, 2), "tcp");
  EXPECT_EQ(EntryName(*plan, 0, 2), "shm");
}

TEST(TransportRegistry, UcxTakesTheNetworkPairsWhenChosen) {
  TransportSetupContext ctx = TwoHosts(2);
  ctx.settings.use_ucx = true;
  StatusOr<TransportPlan> plan = PlanTransports(ctx);
#ifdef WEFT_HAVE_UCX
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(EntryName(*plan, 0, 1), "shm");  // shm > ucx on one host
  EXPECT_EQ(EntryName(*plan, 0, 3), "ucx");
  for (size_t e = 0; e < TransportRegistry().size(); ++e)
    if (std::string(TransportRegistry()[e].name) == "tcp") EXPECT_FALSE(plan->used[e]);
#else
  // Without UCX nothing reaches the other host: the plan says which pair.
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("no transport reaches rank"), std::string::npos);
#endif
}

TEST(TransportRegistry, ParsesWeftTransport) {
  EXPECT_EQ(*ParseTransportSetting(""), NetworkTransportChoice::kAuto);
  EXPECT_EQ(*ParseTransportSetting("ucx"), NetworkTransportChoice::kUcx);
  EXPECT_EQ(*ParseTransportSetting("^ucx"), NetworkTransportChoice::kTcp);
  StatusOr<NetworkTransportChoice> bad = ParseTransportSetting("bogus");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), weftInvalidArgument);
  EXPECT_NE(bad.status().message().find("WEFT_TRANSPORT=bogus"), std::string::npos) << bad.status().message();
}

// ---- processes ----


using RankBody = std::function<std::string(weftComm_t comm, int rank, int n)>;
struct RankResult {
  int exit_code = -1;
  std::string report;  // what the rank wrote (its checks' failures, or the init error)
};

// Forks n ranks with `env` (weft_test::ForkRanks); each inits from the environment and runs
// `body` (whose non-empty return is a failure). A rank whose init fails reports
// "INIT <code>: <message>". Ranks still running after `timeout_s` are killed (exit_code -1).
std::vector<RankResult> RunProcesses(int n, const std::vector<std::pair<std::string, std::string>>& env,
                                     const RankBody& body, double timeout_s = 60) {
  static const std::string kOpen = "\nRANK REPORT<<", kClose = ">>\n";
  std::vector<std::pair<std::string, std::string>> all = {{"WEFT_INIT_TIMEOUT", "30"}};
  all.insert(all.end(), env.begin(), env.end());
  weft_test::LaunchOutcome o = weft_test::ForkRanks(
      n,
      [&](int r) {
        weftComm_t comm = nullptr;
        weftResult_t rc = weftCommInitFromEnv(&comm);
        std::string report = rc != weftSuccess
                                 ? "INIT " + std::to_string(rc) + ": " + weftGetLastError(comm)
                                 : body(comm, r, n);
        if (comm != nullptr) weftCommDestroy(comm);
        printf("%s%s%s", kOpen.c_str(), report.c_str(), kClose.c_str());
        return report.empty() ? 0 : 1;
      },
      all, timeout_s);
  std::vector<RankResult> out(n);
  for (int r = 0; r < n; ++r) {
    const int st = o.status[r];
    out[r].exit_code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    // The report is what the rank printed between the markers (its log lines are around it).
    const std::string& text = o.output[r];
    size_t at = text.rfind(kOpen), end = at == std::string::npos ? at : text.find(kClose, at);
    out[r].report = end == std::string::npos ? "no report; output:\n" + text
                                             : text.substr(at + kOpen.size(), end - at - kOpen.size());
  }
  return out;
}

// "" when every peer of this rank is served by a transport named `want`.
std::string CheckPeerTransports(weftComm_t comm, int rank, int n, const std::string& want) {
  std::string bad;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    Transport* t = comm->peer_transport[p];
    std::string got = t == nullptr ? "none" : t->name();
    if (got != want) bad += "peer " + std::to_string(p) + " over " + got + " (want " + want + "); ";
  }
  return bad;
}

// Allreduce (sum of ranks+1 per element) and alltoall (rank*1000 + destination) checks.
std::string RunCollectives(weftComm_t comm, int rank, int n) {
  const size_t count = 100000;  // 400 KB: past the eager sizes of every lane
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1 + (i % 7));
  if (weftAllReduce(buf.data(), buf.data(), count, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
    return std::string("allreduce: ") + weftGetLastError(comm);
  for (size_t i = 0; i < count; ++i) {
    float want = static_cast<float>(n * (n + 1) / 2 + n * (i % 7));
    if (buf[i] != want) return "allreduce: element " + std::to_string(i) + " is " + std::to_string(buf[i]);
  }
  const size_t per = 1000;
  std::vector<int32_t> send(per * n), recv(per * n, -1);
  for (int d = 0; d < n; ++d)
    for (size_t i = 0; i < per; ++i) send[d * per + i] = rank * 1000 + d + static_cast<int32_t>(i) * 7;
  if (weftAllToAll(send.data(), recv.data(), per, weftInt32, comm, nullptr) != weftSuccess)
    return std::string("alltoall: ") + weftGetLastError(comm);
  for (int s = 0; s < n; ++s)
    for (size_t i = 0; i < per; ++i)
      if (recv[s * per + i] != s * 1000 + rank + static_cast<int32_t>(i) * 7)
        return "alltoall: block from rank " + std::to_string(s) + " element " + std::to_string(i) + " wrong";
  return "";
}

std::string AllReports(const std::vector<RankResult>& res) {
  std::string s;
  for (size_t r = 0; r < res.size(); ++r)
    s += "rank " + std::to_string(r) + " (exit " + std::to_string(res[r].exit_code) + "): " + res[r].report + "\n";
  return s;
}

TEST(TransportRegistryProcesses, SameHostPeersUseShmAndTcpWhenShmIsDisabled) {
  auto shm = RunProcesses(3, {}, [](weftComm_t c, int r, int n) {
    return CheckPeerTransports(c, r, n, "shm") + RunCollectives(c, r, n);
  });
  for (const RankResult& r : shm) EXPECT_EQ(r.exit_code, 0) << AllReports(shm);
  auto tcp = RunProcesses(3, {{"WEFT_SHM_DISABLE", "1"}, {"WEFT_TRANSPORT", "tcp"}},
                          [](weftComm_t c, int r, int n) {
                            return CheckPeerTransports(c, r, n, "tcp") + RunCollectives(c, r, n);
                          });
  for (const RankResult& r : tcp) EXPECT_EQ(r.exit_code, 0) << AllReports(tcp);
}

TEST(TransportRegistryProcesses, BogusWeftTransportFailsInitNamingTheVariableAndValue) {
  auto res = RunProcesses(2, {{"WEFT_TRANSPORT", "bogus"}},
                          [](weftComm_t, int, int) { return std::string("init succeeded"); });
  for (size_t r = 0; r < res.size(); ++r) {
    EXPECT_EQ(res[r].exit_code, 1) << AllReports(res);
    EXPECT_EQ(res[r].report.rfind("INIT " + std::to_string(weftInvalidArgument), 0), 0u) << AllReports(res);
    EXPECT_NE(res[r].report.find("WEFT_TRANSPORT=bogus"), std::string::npos) << AllReports(res);
  }
}

TEST(TransportRegistryProcesses, UcxRunsCollectivesWhenChosen) {
#ifndef WEFT_HAVE_UCX
  GTEST_SKIP() << "weft was built without UCX (WEFT_UCX=OFF or libucx-dev missing)";
#else
  // Same host: shm off so that the peers go over the network transport, UCX's tcp and
  // shared-memory lanes (the latter refuse peer-failure mode; UCX picks tcp/lo for them).
  for (const char* tls : {"tcp", "sm,tcp"}) {
    auto res = RunProcesses(3, {{"WEFT_TRANSPORT", "ucx"}, {"WEFT_SHM_DISABLE", "1"}, {"UCX_TLS", tls}},
                            [](weftComm_t c, int r, int n) {
                              return CheckPeerTransports(c, r, n, "ucx") + RunCollectives(c, r, n);
                            });
    for (const RankResult& r : res) EXPECT_EQ(r.exit_code, 0) << "UCX_TLS=" << tls << "\n" << AllReports(res);
  }
#endif
}

}  // namespace
}  // namespace weft
