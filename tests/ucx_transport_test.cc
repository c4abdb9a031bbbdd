// Tests for transports/ucx: the UCX (UCP) transport over UCX's tcp and shared-memory lanes
// (this machine has no RDMA device), the UCX lane listing, and the libibverbs NIC discovery.
//
// Two harnesses, as for tcp:
//   - threads as ranks: each thread joins a bootstrap and creates its own UcxTransport (own
//     UCP context + worker); UCX's transports are chosen with UcxOptions::tls.
//   - processes: this test binary re-executes itself with WEFT_UCX_TEST_CHILD=<scenario>; a
//     static initializer runs the scenario before gtest's main and _exit()s. The child picks
//     its lanes from UCX_TLS in its environment (the path a real job takes). Used for a
//     peer killed with SIGKILL and for the benchmark.
// Covers: send/recv of 0..16 MiB between every pair of 2-4 ranks with UCX_TLS=tcp and
// sm,tcp; per-channel ordering; tag and size mismatches named like tcp's; a killed peer
// (both lane sets) failing a pending recv with RemoteError naming it within seconds; normal
// shutdown; Abort from another thread; bad arguments; the ib port parser (HDR, NDR) and
// discovery on a host without devices. A DISABLED_ benchmark compares with the tcp transport.
#ifndef WEFT_HAVE_UCX
#include <gtest/gtest.h>
// Built without UCX (WEFT_UCX=OFF or libucx-dev not found): nothing to test, and say so.
TEST(UcxTransportTest, NotBuilt) { GTEST_SKIP() << "weft was built without UCX (libucx-dev not found or WEFT_UCX=OFF)"; }
#else
#include "transports/ucx/ucx_transport.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/ucx/ib_discovery.h"
#include "transports/ucx/ucx_selection.h"

extern char** environ;

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Status WaitAll(Transport* t, const std::vector<TransportRequest*>& reqs, double timeout_s = 30) {
  Clock::time_point t0 = Clock::now();
  while (true) {
    bool all = true;
    for (TransportRequest* r : reqs) all = all && r->done.load(std::memory_order_acquire);
    if (all) break;
    if (Since(t0) > timeout_s) return TimeoutError("test: requests not done in time");
    Status st = t->Progress(1000);
    if (!st.ok()) return st;
  }
  for (TransportRequest* r : reqs) {
    if (!r->status.ok()) return r->status;
  }
  return OkStatus();
}

struct Rank {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<BootstrapAdapter> adapter;
  std::unique_ptr<UcxTransport> ucx;
};

UcxOptions WithTls(const std::string& tls) {
  UcxOptions o;
  o.tls = tls;
  o.connect_timeout_s = 30;
  return o;
}

StatusOr<Rank> MakeRank(const BootstrapId& id, int rank, int nranks, const UcxOptions& opts) {
  Rank r;
  StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(id, rank, nranks, 30);
  if (!bs.ok()) return bs.status();
  r.bootstrap = std::move(*bs);
  r.adapter = std::make_unique<BootstrapAdapter>(r.bootstrap.get());
  StatusOr<std::unique_ptr<UcxTransport>> t = UcxTransport::Create(r.adapter.get(), opts);
  if (!t.ok()) return t.status();
  r.ucx = std::move(*t);
  return r;
}

BootstrapId StartRoot() {
  StatusOr<BootstrapId> id =
      StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), net::Secret::Random(), 60);
  EXPECT_TRUE(id.ok()) << id.status().message();
  return *id;
}

void RunThreads(int n, const UcxOptions& opts, const std::function<void(int, Rank&)>& fn) {
  BootstrapId id = StartRoot();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      StatusOr<Rank> rank = MakeRank(id, r, n, opts);
      ASSERT_TRUE(rank.ok()) << "rank " << r << ": " << rank.status().message();
      fn(r, *rank);
      EXPECT_TRUE(rank->bootstrap->Barrier().ok());  // keep transports alive until all are done
    });
  }
  for (auto& t : threads) t.join();
}

uint8_t Pattern(int src, int dst, int channel, size_t k, size_t i) {
  return static_cast<uint8_t>(src * 31 + dst * 17 + channel * 7 + k * 13 + i * 3 + (i >> 8));
}

// ---- processes: this binary re-executed as a rank ----

std::string IdToHex(const BootstrapId& id) {
  weftUniqueId uid;
  EXPECT_TRUE(PackUniqueId(id, &uid).ok());
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < sizeof(uid.internal); ++i) {
    unsigned char c = static_cast<unsigned char>(uid.internal[i]);
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

StatusOr<BootstrapId> IdFromHex(const std::string& s) {
  weftUniqueId uid;
  if (s.size() != 2 * sizeof(uid.internal)) return InvalidArgument("bad id hex");
  for (size_t i = 0; i < sizeof(uid.internal); ++i) {
    uid.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return UnpackUniqueId(uid);
}

// Starts this binary as rank `rank` of `nranks` running `scenario`, with `extra` env entries.
pid_t SpawnChild(const std::string& scenario, const BootstrapId& id, int rank, int nranks,
                 const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, "UCX_TLS=", 8) != 0) env.push_back(*e);
  }
  env.push_back("WEFT_UCX_TEST_CHILD=" + scenario);
  env.push_back("WEFT_UCX_TEST_RANK=" + std::to_string(rank));
  env.push_back("WEFT_UCX_TEST_NRANKS=" + std::to_string(nranks));
  env.push_back("WEFT_UCX_TEST_ID=" + IdToHex(id));
  for (const std::string& e : extra) env.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(&e[0]);
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  return pid;
}

// Child scenario "echo": receive 8 bytes from rank 0, send them back, then wait to be killed.
int ChildEcho(Rank& rank) {
  uint64_t v = 0;
  TransportRequest q, s;
  if (!rank.ucx->PostRecv(0, 1, 1, &v, 8, &q).ok()) return 3;
  if (!WaitAll(rank.ucx.get(), {&q}).ok()) return 4;
  if (!rank.ucx->PostSend(0, 1, 2, &v, 8, &s).ok()) return 5;
  if (!WaitAll(rank.ucx.get(), {&s}).ok()) return 6;
  // Stay responsive (keepalive) until killed, for at most a minute. Progress returns at once
  // when nothing is pending, so the pause is ours: without it this loop ended in microseconds
  // and the child's exit raced rank 0's Progress before the kill (a CI failure, 2026-12-02).
  for (int i = 0; i < 600; ++i) {
    (void)rank.ucx->Progress(0);
    usleep(100000);
  }
  return 0;
}

int RunBenchChild(int rank, int nranks, const BootstrapId& id);  // below, with the benchmark

// Runs before gtest's main when this process is a spawned child rank.
int MaybeRunChild() {
  const char* scenario = std::getenv("WEFT_UCX_TEST_CHILD");
  if (scenario == nullptr) return 0;
  int rank = std::atoi(std::getenv("WEFT_UCX_TEST_RANK"));
  int nranks = std::atoi(std::getenv("WEFT_UCX_TEST_NRANKS"));
  StatusOr<BootstrapId> id = IdFromHex(std::getenv("WEFT_UCX_TEST_ID"));
  if (!id.ok()) _exit(2);
  int code = 0;
  if (strcmp(scenario, "bench") == 0) {
    code = RunBenchChild(rank, nranks, *id);
  } else {
    StatusOr<Rank> r = MakeRank(*id, rank, nranks, UcxOptionsFromEnv());
    if (!r.ok()) {
      fprintf(stderr, "child rank %d: %s\n", rank, r.status().message().c_str());
      _exit(2);
    }
    code = ChildEcho(*r);
  }
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}
const int kChildHook = MaybeRunChild();

// ---- options, lanes, discovery ----

TEST(UcxOptionsTest, FromEnv) {
  setenv("WEFT_UCX_TLS", "tcp", 1);
  setenv("WEFT_UCX_SPIN_US", "17", 1);
  UcxOptions o = UcxOptionsFromEnv();
  EXPECT_EQ(o.tls, "tcp");
  EXPECT_EQ(o.spin_us, 17);
  setenv("WEFT_UCX_SPIN_US", "-3", 1);  // invalid: default kept
  EXPECT_EQ(UcxOptionsFromEnv().spin_us, UcxOptions().spin_us);
  unsetenv("WEFT_UCX_TLS");
  unsetenv("WEFT_UCX_SPIN_US");
}

// The waiting policy, as tcp's: the host's by default (no spin when the machine's ranks
// outnumber its cores), WEFT_UCX_SPIN_US fixes it.
TEST(UcxOptionsTest, WaitingPolicyFollowsTheHostUnlessSet) {
  unsetenv("WEFT_SPIN_US");
  unsetenv("WEFT_UCX_SPIN_US");
  EXPECT_EQ(UcxOptionsFromEnv().spin_us, -1) << "the policy by default";
  const int cpus = UsableCpuCountOfHost();
  for (int ranks : {1, cpus + 1}) {
    UcxOptions o;
    o.tls = "tcp";
    o.ranks_on_machine = ranks;
    RunThreads(1, o, [&](int, Rank& rank) {
      EXPECT_EQ(rank.ucx->waiting_policy().spin_us, ranks > cpus ? 0 : BackoffPolicy().spin_us)
          << ranks << " ranks on " << cpus << " CPUs";
    });
  }
  UcxOptions fixed;
  fixed.tls = "tcp";
  fixed.spin_us = 7;
  RunThreads(1, fixed, [&](int, Rank& rank) { EXPECT_EQ(rank.ucx->waiting_policy().spin_us, 7); });
}

TEST(UcxSelectionTest, ParsesWeftTransport) {
  EXPECT_EQ(*ParseTransportSetting(""), NetworkTransportChoice::kAuto);
  EXPECT_EQ(*ParseTransportSetting("ucx"), NetworkTransportChoice::kUcx);
  EXPECT_EQ(*ParseTransportSetting("tcp"), NetworkTransportChoice::kTcp);
  EXPECT_EQ(*ParseTransportSetting("^ucx"), NetworkTransportChoice::kTcp);
  StatusOr<NetworkTransportChoice> bad = ParseTransportSetting("infiniband");
  EXPECT_EQ(bad.status().code(), weftInvalidArgument);
  EXPECT_NE(bad.status().message().find("WEFT_TRANSPORT=infiniband"), std::string::npos)
      << bad.status().message();
  // No RDMA lane on this VM (see below): auto means tcp here.
  if (access("/sys/class/infiniband", F_OK) != 0) EXPECT_FALSE(UcxWantedByDefault());
}

// This VM: UCX offers tcp and shared memory, and no RDMA lane (so tcp stays the default).
TEST(UcxLanesTest, ListsTcpAndSharedMemoryButNoRdmaHere) {
  StatusOr<std::vector<UcxLane>> lanes = ListUcxLanes();
  ASSERT_TRUE(lanes.ok()) << lanes.status().message();
  bool tcp = false, shm = false;
  std::string all;
  for (const UcxLane& l : *lanes) {
    all += l.transport + "/" + l.device + (l.rdma ? "(rdma) " : " ");
    tcp = tcp || l.transport == "tcp";
    shm = shm || l.transport == "posix" || l.transport == "sysv";
  }
  EXPECT_TRUE(tcp) << all;
  EXPECT_TRUE(shm) << all;
  StatusOr<IbDiscovery> ib = DiscoverIbDevices();
  ASSERT_TRUE(ib.ok());
  if (ib->ports.empty()) {
    EXPECT_FALSE(UcxHasRdmaLane()) << all;
  }
  std::printf("UCX lanes here: %s\n", all.c_str());
}

TEST(IbDiscoveryTest, ParsesHdrPort) {
  IbPortAttributes a;  // recorded from a ConnectX-6 HDR port (ibv_devinfo -v): ACTIVE, 4X, HDR
  a.device = "mlx5_0";
  a.port = 1;
  a.state = 4;
  a.link_layer = 1;
  a.active_speed = 64;
  a.active_width = 2;
  StatusOr<IbPort> p = ParseIbPort(a);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->active);
  EXPECT_EQ(p->link_layer, "InfiniBand");
  EXPECT_EQ(p->speed_name, "HDR");
  EXPECT_EQ(p->lanes, 4);
  EXPECT_DOUBLE_EQ(p->lane_gbps, 50);
  EXPECT_DOUBLE_EQ(p->gbps, 200);
  EXPECT_NE(p->Describe().find("HDR 4x = 200 Gbit/s"), std::string::npos) << p->Describe();
}

TEST(IbDiscoveryTest, ParsesNdrPortAndRoce) {
  IbPortAttributes a;  // ConnectX-7 NDR: ACTIVE, 4X, NDR
  a.device = "mlx5_1";
  a.state = 4;
  a.link_layer = 1;
  a.active_speed = 128;
  a.active_width = 2;
  StatusOr<IbPort> p = ParseIbPort(a);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->speed_name, "NDR");
  EXPECT_DOUBLE_EQ(p->gbps, 400);
  // A RoCE port (Ethernet link layer) at 4x EDR = 100 GbE; a down port moves nothing.
  a.link_layer = 2;
  a.active_speed = 32;
  a.state = 1;
  p = ParseIbPort(a);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->link_layer, "Ethernet");
  EXPECT_FALSE(p->active);
  EXPECT_DOUBLE_EQ(p->gbps, 0);
}

TEST(IbDiscoveryTest, UnknownCodesAreErrorsNamingThem) {
  IbPortAttributes a;
  a.device = "mlx5_2";
  a.state = 4;
  a.active_speed = 3;
  a.active_width = 2;
  StatusOr<IbPort> p = ParseIbPort(a);
  ASSERT_EQ(p.status().code(), weftInvalidArgument);
  EXPECT_NE(p.status().message().find("mlx5_2:1"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("active_speed=3"), std::string::npos) << p.status().message();
  a.active_speed = 64;
  a.active_width = 3;
  p = ParseIbPort(a);
  EXPECT_NE(p.status().message().find("active_width=3"), std::string::npos) << p.status().message();
}

// This machine has no RDMA device: discovery succeeds and says so.
TEST(IbDiscoveryTest, NoDevicesOnThisMachine) {
  if (access("/sys/class/infiniband", F_OK) == 0) {
    GTEST_SKIP() << "this host has /sys/class/infiniband: the no-device case cannot be checked";
  }
  StatusOr<IbDiscovery> d = DiscoverIbDevices();
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->ports.empty());
  EXPECT_EQ(d->BestActiveGbps(), 0);
  EXPECT_EQ(d->summary.rfind("no RDMA devices", 0), 0u) << d->summary;
  std::printf("ib discovery: %s\n", d->summary.c_str());
}

// ---- send/recv ----

// (UCX transports, ranks)
class UcxAllPairsTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Every ordered pair exchanges messages of sizes 0..1 MiB+ on rotating channels; then a 16 MiB
// ring (each rank to the next). Every byte is checked.
TEST_P(UcxAllPairsTest, EveryPairExact) {
  const std::string tls = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const std::vector<size_t> sizes = {0, 1, 8, 4097, 65537, (1 << 20) + 3};
  RunThreads(n, WithTls(tls), [&](int r, Rank& rank) {
    if (r == 0) std::printf("%s: rank 0 -> 1 over %s\n", tls.c_str(), rank.ucx->PeerLanes(1).c_str());
    // UCX 1.13: shared memory has no peer-failure handler, tcp does (see UcxOptions::err_mode).
    EXPECT_EQ(rank.ucx->DetectsPeerFailure((r + 1) % n), tls != "sm") << rank.ucx->PeerLanes((r + 1) % n);
    if (tls == "sm") EXPECT_EQ(rank.ucx->PeerLanes((r + 1) % n).find("tcp"), std::string::npos);
    for (size_t k = 0; k < sizes.size(); ++k) {
      size_t bytes = sizes[k];
      int channel = static_cast<int>(k % 3);
      std::vector<std::vector<uint8_t>> out(n), in(n);
      std::vector<TransportRequest> reqs(2 * n);
      std::vector<TransportRequest*> ptrs;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        out[p].resize(bytes);
        in[p].assign(bytes, 0xEE);
        for (size_t i = 0; i < bytes; ++i) out[p][i] = Pattern(r, p, channel, k, i);
        ASSERT_TRUE(rank.ucx->PostRecv(p, channel, 100 + k, in[p].data(), bytes, &reqs[2 * p]).ok());
        ASSERT_TRUE(rank.ucx->PostSend(p, channel, 100 + k, out[p].data(), bytes, &reqs[2 * p + 1]).ok());
        ptrs.push_back(&reqs[2 * p]);
        ptrs.push_back(&reqs[2 * p + 1]);
      }
      Status st = WaitAll(rank.ucx.get(), ptrs);
      ASSERT_TRUE(st.ok()) << "rank " << r << " size " << bytes << ": " << st.message();
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; p != r && i < bytes; ++i) {
          ASSERT_EQ(in[p][i], Pattern(p, r, channel, k, i)) << "from " << p << " size " << bytes << " byte " << i;
        }
      }
    }
    // 16 MiB around the ring.
    const size_t big = 16u << 20;
    std::vector<uint8_t> out(big), in(big, 0);
    for (size_t i = 0; i < big; ++i) out[i] = Pattern(r, 0, 5, 99, i);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    TransportRequest s, q;
    ASSERT_TRUE(rank.ucx->PostRecv(prev, 5, 7, in.data(), big, &q).ok());
    ASSERT_TRUE(rank.ucx->PostSend(next, 5, 7, out.data(), big, &s).ok());
    Status st = WaitAll(rank.ucx.get(), {&s, &q});
    ASSERT_TRUE(st.ok()) << st.message();
    for (size_t i = 0; i < big; ++i) ASSERT_EQ(in[i], Pattern(prev, 0, 5, 99, i)) << "byte " << i;
    EXPECT_FALSE(rank.ucx->HasPending());
  });
}

INSTANTIATE_TEST_SUITE_P(TlsRanks, UcxAllPairsTest,
                         ::testing::Combine(::testing::Values("tcp", "sm,tcp", "sm"), ::testing::Values(2, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           const std::string& p = std::get<0>(info.param);
                           std::string tls = p == "tcp" ? "Tcp" : p == "sm" ? "Sm" : "SmTcp";
                           return tls + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

TEST(UcxTransportTest, TagAndSizeMismatchNameBoth) {
  RunThreads(2, WithTls("tcp"), [&](int r, Rank& rank) {
    uint64_t a = 1, b = 0;
    TransportRequest s1, s2, s3, q1, q2, q3;
    if (r == 0) {
      ASSERT_TRUE(rank.ucx->PostSend(1, 3, 42, &a, 8, &s1).ok());
      ASSERT_TRUE(rank.ucx->PostSend(1, 3, 43, &a, 8, &s2).ok());
      ASSERT_TRUE(rank.ucx->PostSend(1, 3, 44, &a, 4, &s3).ok());
      ASSERT_TRUE(WaitAll(rank.ucx.get(), {&s1, &s2, &s3}).ok());
    } else {
      ASSERT_TRUE(rank.ucx->PostRecv(0, 3, 41, &b, 8, &q1).ok());
      Status st = WaitAll(rank.ucx.get(), {&q1});
      ASSERT_EQ(st.code(), weftInternalError) << st.message();
      EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("channel 3"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("expected tag 41"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("received tag 42"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("mismatched call"), std::string::npos) << st.message();
      // Longer than the recv: UCX truncates.
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(rank.ucx->Progress(1000).ok());
      ASSERT_TRUE(rank.ucx->PostRecv(0, 3, 43, &b, 4, &q2).ok());
      st = WaitAll(rank.ucx.get(), {&q2});
      ASSERT_EQ(st.code(), weftInternalError) << st.message();
      EXPECT_NE(st.message().find("expected tag 43 (4 bytes), received tag 43 ("), std::string::npos)
          << st.message();
      std::printf("truncated: %s\n", st.message().c_str());
      // Shorter than the recv.
      ASSERT_TRUE(rank.ucx->PostRecv(0, 3, 44, &b, 8, &q3).ok());
      st = WaitAll(rank.ucx.get(), {&q3});
      ASSERT_EQ(st.code(), weftInternalError) << st.message();
      EXPECT_NE(st.message().find("expected tag 44 (8 bytes), received tag 44 (4 bytes"),
                std::string::npos) << st.message();
    }
  });
}

TEST(UcxTransportTest, BadTlsIsAnError) {
  BootstrapId id = StartRoot();
  StatusOr<Rank> r = MakeRank(id, 0, 1, WithTls("no_such_transport"));
  // UCX either rejects the name or finds no usable transport: both must be errors, not a hang.
  ASSERT_FALSE(r.ok());
  std::printf("tls=no_such_transport: %s\n", r.status().message().c_str());
}

// A peer that finished and destroyed its transport with nothing pending is not an error;
// asking it for more is.
TEST(UcxTransportTest, NormalShutdownIsNotAnError) {
  BootstrapId id = StartRoot();
  std::thread t1([&] {
    StatusOr<Rank> rank = MakeRank(id, 1, 2, WithTls("tcp"));
    ASSERT_TRUE(rank.ok()) << rank.status().message();
    uint32_t v = 5;
    TransportRequest s;
    ASSERT_TRUE(rank->ucx->PostSend(0, 0, 1, &v, 4, &s).ok());
    ASSERT_TRUE(WaitAll(rank->ucx.get(), {&s}).ok());
    ASSERT_TRUE(rank->bootstrap->Barrier().ok());
    rank->ucx.reset();
    ASSERT_TRUE(rank->bootstrap->Barrier().ok());
  });
  StatusOr<Rank> rank = MakeRank(id, 0, 2, WithTls("tcp"));
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  uint32_t got = 0;
  TransportRequest q;
  ASSERT_TRUE(rank->ucx->PostRecv(1, 0, 1, &got, 4, &q).ok());
  ASSERT_TRUE(WaitAll(rank->ucx.get(), {&q}).ok());
  EXPECT_EQ(got, 5u);
  ASSERT_TRUE(rank->bootstrap->Barrier().ok());
  ASSERT_TRUE(rank->bootstrap->Barrier().ok());  // rank 1 has destroyed its transport
  t1.join();
  for (int i = 0; i < 50; ++i) {
    Status st = rank->ucx->Progress(10000);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  EXPECT_FALSE(rank->ucx->HasPending());
}

// ---- one-sided: tests/ucx_one_sided_test.cc (through the Transport interface) ----

// ---- a killed peer (processes) ----

class UcxKilledPeerTest : public ::testing::TestWithParam<std::string> {};

// Rank 1 is this binary re-executed with UCX_TLS=<param>; rank 0 (this process) exchanges a
// message with it, posts a recv that will never be matched, and kills it with SIGKILL: the
// recv and Progress fail with RemoteError naming rank 1 within seconds.
TEST_P(UcxKilledPeerTest, FailsPendingRecvNamingPeer) {
  const std::string tls = GetParam();
  BootstrapId id = StartRoot();
  pid_t child = SpawnChild("echo", id, 1, 2, {"UCX_TLS=" + tls});
  ASSERT_GT(child, 0);
  StatusOr<Rank> rank = MakeRank(id, 0, 2, WithTls(tls));
  if (!rank.ok()) kill(child, SIGKILL);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  std::printf("%s: rank 0 -> 1 over %s\n", tls.c_str(), rank->ucx->PeerLanes(1).c_str());
  uint64_t v = 11, back = 0;
  TransportRequest s, q;
  ASSERT_TRUE(rank->ucx->PostSend(1, 1, 1, &v, 8, &s).ok());
  ASSERT_TRUE(rank->ucx->PostRecv(1, 1, 2, &back, 8, &q).ok());
  ASSERT_TRUE(WaitAll(rank->ucx.get(), {&s, &q}).ok());
  EXPECT_EQ(back, 11u);

  TransportRequest pending;
  uint64_t never = 0;
  ASSERT_TRUE(rank->ucx->PostRecv(1, 0, 3, &never, 8, &pending).ok());
  ASSERT_TRUE(rank->ucx->Progress(1000).ok());
  Clock::time_point t0 = Clock::now();
  kill(child, SIGKILL);
  Status st = WaitAll(rank->ucx.get(), {&pending}, 15);
  double took = Since(t0);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  std::printf("%s: killed peer reported after %.2f s: %s\n", tls.c_str(), took, st.message().c_str());
  ASSERT_EQ(st.code(), weftRemoteError) << st.message();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_TRUE(pending.done.load());
  EXPECT_EQ(pending.status.code(), weftRemoteError);
  EXPECT_LT(took, 5.0);
  EXPECT_FALSE(rank->ucx->HasPending());
  TransportRequest again;
  EXPECT_EQ(rank->ucx->PostSend(1, 0, 4, &v, 8, &again).code(), weftRemoteError);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxKilledPeerTest, ::testing::Values("tcp", "sm,tcp"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "tcp" ? std::string("Tcp") : std::string("SmTcp");
                         });

// ---- benchmark (not a test: prints figures) ----

// Ping-pong round trip for small sizes and one-way bandwidth (rank 0 sends `iters` messages,
// rank 1 acknowledges the last with 8 bytes) over `t`, as rank `rank` of 2.
void BenchTransport(Transport* t, int rank, const char* label) {
  const int rounds = 2000;
  uint64_t x = 0;
  for (int warm = 0; warm < 2; ++warm) {
    Clock::time_point t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      TransportRequest s, q;
      if (rank == 0) {
        (void)t->PostSend(1, 0, i, &x, 8, &s);
        (void)t->PostRecv(1, 0, i, &x, 8, &q);
      } else {
        (void)t->PostRecv(0, 0, i, &x, 8, &q);
        (void)WaitAll(t, {&q});
        (void)t->PostSend(0, 0, i, &x, 8, &s);
      }
      (void)WaitAll(t, {&s, &q});
    }
    if (warm == 1 && rank == 0) {
      std::printf("%-10s 8 B round trip %8.2f us\n", label, 1e6 * Since(t0) / rounds);
    }
  }
  for (size_t bytes : {size_t(1) << 20, size_t(64) << 20}) {
    const int iters = bytes > (1u << 20) ? 8 : 200;
    std::vector<char> buf(bytes, 1);
    for (int warm = 0; warm < 2; ++warm) {
      Clock::time_point t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        TransportRequest r;
        if (rank == 0) (void)t->PostSend(1, 1, i, buf.data(), bytes, &r);
        else (void)t->PostRecv(0, 1, i, buf.data(), bytes, &r);
        (void)WaitAll(t, {&r}, 120);
      }
      TransportRequest ack;
      if (rank == 0) (void)t->PostRecv(1, 2, 0, &x, 8, &ack);
      else (void)t->PostSend(0, 2, 0, &x, 8, &ack);
      (void)WaitAll(t, {&ack});
      if (warm == 1 && rank == 0) {
        double s = Since(t0);
        std::printf("%-10s %5zu MiB one-way %8.3f GB/s (%.1f us per message)\n", label,
                    bytes >> 20, bytes * double(iters) / s / 1e9, 1e6 * s / iters);
      }
    }
  }
  std::fflush(stdout);
}

int RunBenchChild(int rank, int nranks, const BootstrapId& id) {
  StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(id, rank, nranks, 30);
  if (!bs.ok()) return 2;
  BootstrapAdapter adapter(bs->get());
  const char* tls = std::getenv("UCX_TLS");
  {
    StatusOr<std::unique_ptr<UcxTransport>> ucx = UcxTransport::Create(&adapter, UcxOptionsFromEnv());
    if (!ucx.ok()) {
      fprintf(stderr, "%s\n", ucx.status().message().c_str());
      return 3;
    }
    if (rank == 0) std::printf("ucx lanes to rank 1: %s\n", (*ucx)->PeerLanes(1).c_str());
    std::string label = std::string("ucx/") + (tls ? tls : "default");
    BenchTransport(ucx->get(), rank, label.c_str());
    if (!(*bs)->Barrier().ok()) return 4;
  }
  TcpOptions topts = TcpOptionsFromEnv();
  topts.listen_addr = net::SockAddr::Loopback(AF_INET, 0);
  StatusOr<std::unique_ptr<TcpTransport>> tcp = TcpTransport::Create(bs->get(), topts);
  if (!tcp.ok()) return 5;
  BenchTransport(tcp->get(), rank, "weft-tcp");
  return (*bs)->Barrier().ok() ? 0 : 6;
}

// WEFT_BENCH_TLS=tcp,sm (default) bin/ucx_transport_test --gtest_also_run_disabled_tests
//   --gtest_filter='*Bench*'
TEST(UcxBenchmark, DISABLED_TwoProcesses) {
  const char* list = std::getenv("WEFT_BENCH_TLS");
  std::string tls_list = list ? list : "tcp;sm";
  size_t pos = 0;
  while (pos <= tls_list.size()) {
    size_t end = tls_list.find(';', pos);
    if (end == std::string::npos) end = tls_list.size();
    std::string tls = tls_list.substr(pos, end - pos);
    pos = end + 1;
    BootstrapId id = StartRoot();
    pid_t a = SpawnChild("bench", id, 0, 2, {"UCX_TLS=" + tls});
    pid_t b = SpawnChild("bench", id, 1, 2, {"UCX_TLS=" + tls});
    int sa = 0, sb = 0;
    waitpid(a, &sa, 0);
    waitpid(b, &sb, 0);
    EXPECT_TRUE(WIFEXITED(sa) && WEXITSTATUS(sa) == 0) << tls << " rank 0 status " << sa;
    EXPECT_TRUE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0) << tls << " rank 1 status " << sb;
  }
}

}  // namespace
}  // namespace weft

#endif  // WEFT_HAVE_UCX
