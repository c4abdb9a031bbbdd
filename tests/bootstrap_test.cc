// Tests for src/core/bootstrap.*: unique id packing, rendezvous with threads as ranks
// (n = 1, 2, 3, 5, 8), exact allgather/broadcast/barrier results, and the failure cases:
// wrong nranks, duplicate rank, a rank that never comes (named in the error), a client with
// the wrong secret (dropped, the others still join), mismatched collectives, Abort, a
// cancelled root, and the pure decoders of bootstrap_wire.h.
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

#include <gtest/gtest.h>

#include "test_util.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace weft {
namespace {

BootstrapId StartRoot(double timeout_s) {
  StatusOr<BootstrapId> id =
      StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), net::Secret::Random(), timeout_s);
  EXPECT_TRUE(id.ok()) << id.status().message();
  return *id;
}

// Runs fn(rank, bootstrap) on nranks threads after joining; returns per-rank statuses of Join.
template <typename Fn>
std::vector<Status> RunRanks(const BootstrapId& id, int nranks, double timeout_s, Fn fn) {
  std::vector<Status> join_status(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(id, r, nranks, timeout_s);
      join_status[r] = bs.status();
      if (bs.ok()) fn(r, bs->get());
    });
  }
  for (auto& t : threads) t.join();
  return join_status;
}

TEST(UniqueIdTest, PackUnpackRoundTrip) {
  for (const char* s : {"127.0.0.1:29500", "[::1]:1", "[fd00::2]:65535"}) {
    BootstrapId id;
    id.root = *net::ParseHostPort(s);
    id.secret = net::Secret::Random();
    weftUniqueId uid;
    ASSERT_TRUE(PackUniqueId(id, &uid).ok());
    StatusOr<BootstrapId> back = UnpackUniqueId(uid);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->root.ToString(), s);
    EXPECT_TRUE(back->secret == id.secret);
  }
}

TEST(UniqueIdTest, BadMagicIsInvalidArgument) {
  weftUniqueId uid;
  std::memset(&uid, 0, sizeof(uid));
  StatusOr<BootstrapId> id = UnpackUniqueId(uid);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), weftInvalidArgument);
  EXPECT_NE(id.status().message().find("magic"), std::string::npos);
}

class BootstrapRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapRanksTest, AllGatherBroadcastBarrierExact) {
  const int n = GetParam();
  BootstrapId id = StartRoot(30);
  std::vector<std::vector<uint64_t>> gathered(n);
  std::vector<std::vector<uint32_t>> bcast(n);
  std::vector<std::vector<char>> big(n);
  std::vector<int> after_barrier(n, -1);
  std::atomic<int> entered{0};
  std::vector<Status> errors(n);
  std::vector<Status> joins = RunRanks(id, n, 30, [&](int r, Bootstrap* bs) {
    EXPECT_EQ(bs->rank(), r);
    EXPECT_EQ(bs->nranks(), n);
    // 3 words per rank, distinct per (rank, word).
    uint64_t mine[3] = {uint64_t(r) * 1000 + 1, uint64_t(r) * 1000 + 2, ~uint64_t(r)};
    gathered[r].resize(3 * n);
    Status st = bs->AllGather(mine, sizeof(mine), gathered[r].data());
    // Broadcast from each root in turn (odd size: 7 words).
    for (int root = 0; root < n && st.ok(); ++root) {
      std::vector<uint32_t> buf(7, 0xdead);
      if (r == root) for (int i = 0; i < 7; ++i) buf[i] = root * 100 + i;
      st = bs->Broadcast(buf.data(), buf.size() * 4, root);
      if (st.ok()) bcast[r].insert(bcast[r].end(), buf.begin(), buf.end());
    }
    // Larger than socket buffers: 3 MiB per rank through the ring must not deadlock.
    if (st.ok()) {
      const size_t kBig = 3u << 20;
      std::vector<char> all(kBig * n);
      std::memset(all.data() + kBig * r, 'a' + r, kBig);
      st = bs->AllGather(all.data() + kBig * r, kBig, all.data());  // in place
      big[r] = std::move(all);
    }
    if (st.ok()) {
      entered.fetch_add(1);
      st = bs->Barrier();
      after_barrier[r] = entered.load();
    }
    errors[r] = st;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(joins[r].ok()) << "rank " << r << ": " << joins[r].message();
    ASSERT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r].message();
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(gathered[r][3 * p + 0], uint64_t(p) * 1000 + 1);
      EXPECT_EQ(gathered[r][3 * p + 1], uint64_t(p) * 1000 + 2);
      EXPECT_EQ(gathered[r][3 * p + 2], ~uint64_t(p));
    }
    ASSERT_EQ(bcast[r].size(), size_t(7 * n));
    for (int root = 0; root < n; ++root) {
      for (int i = 0; i < 7; ++i) EXPECT_EQ(bcast[r][root * 7 + i], uint32_t(root * 100 + i));
    }
    const size_t kBig = 3u << 20;
    for (int p = 0; p < n; ++p) {
      const char* blk = big[r].data() + kBig * p;
      EXPECT_EQ(blk[0], 'a' + p);
      EXPECT_EQ(blk[kBig - 1], 'a' + p);
      EXPECT_EQ(std::count(blk, blk + kBig, char('a' + p)), ptrdiff_t(kBig));
    }
    // Every rank saw all n enter before leaving the barrier.
    EXPECT_EQ(after_barrier[r], n);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapRanksTest, ::testing::Values(1, 2, 3, 5, 8));

TEST(BootstrapTest, WorksOverIPv6) {
  StatusOr<BootstrapId> id =
      StartBootstrapRoot(net::SockAddr::Loopback(AF_INET6, 0), net::Secret::Random(), 20);
  if (!id.ok()) GTEST_SKIP() << "no IPv6 loopback: " << id.status().message();
  EXPECT_EQ(id->root.family(), AF_INET6);
  const int n = 3;
  std::vector<std::vector<int>> all(n, std::vector<int>(n, -1));
  std::vector<Status> st(n);
  std::vector<Status> joins = RunRanks(*id, n, 20, [&](int r, Bootstrap* bs) {
    EXPECT_EQ(bs->local_address().family(), AF_INET6);
    int mine = 10 * r + 1;
    st[r] = bs->AllGather(&mine, sizeof(mine), all[r].data());
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(joins[r].ok()) << joins[r].message();
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    for (int p = 0; p < n; ++p) EXPECT_EQ(all[r][p], 10 * p + 1);
  }
}

TEST(BootstrapTest, RankJoiningFirstWaitsForLateRoot) {
  // Rank 1 starts before the root listens: Join retries until the root appears.
  net::Secret secret = net::Secret::Random();
  int port;
  {
    StatusOr<net::Socket> tmp = net::Listen(net::SockAddr::Loopback(AF_INET, 0));
    ASSERT_TRUE(tmp.ok());
    port = tmp->peer().port();
  }
  BootstrapId id{net::SockAddr::Loopback(AF_INET, port), secret};
  Status joined1;
  std::thread early([&] {
    auto bs = Bootstrap::Join(id, 1, 2, 20);
    joined1 = bs.status();
    if (bs.ok()) joined1 = (*bs)->Barrier();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StatusOr<BootstrapId> started = StartBootstrapRoot(id.root, secret, 20);
  ASSERT_TRUE(started.ok()) << started.status().message();
  EXPECT_EQ(started->root.port(), port);
  auto bs0 = Bootstrap::Join(*started, 0, 2, 20);
  ASSERT_TRUE(bs0.ok()) << bs0.status().message();
  EXPECT_TRUE((*bs0)->Barrier().ok());
  early.join();
  EXPECT_TRUE(joined1.ok()) << joined1.message();
}

TEST(BootstrapTest, WrongNranksIsNamed) {
  BootstrapId id = StartRoot(10);
  // Rank 0 says 3 ranks; rank 1 then says 4.
  Status s0, s1;
  std::thread t0([&] { s0 = Bootstrap::Join(id, 0, 3, 10).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread t1([&] { s1 = Bootstrap::Join(id, 1, 4, 10).status(); });
  t0.join();
  t1.join();
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.code(), weftInvalidArgument) << s1.message();
  EXPECT_NE(s1.message().find("rank 1"), std::string::npos) << s1.message();
  EXPECT_NE(s1.message().find("nranks=4"), std::string::npos) << s1.message();
  EXPECT_NE(s1.message().find("nranks=3"), std::string::npos) << s1.message();
  ASSERT_FALSE(s0.ok());  // rank 0 is told too, rather than waiting for its timeout
  EXPECT_NE(s0.message().find("nranks=4"), std::string::npos) << s0.message();
}

TEST(BootstrapTest, DuplicateRankIsNamed) {
  BootstrapId id = StartRoot(10);
  Status a, b;
  std::thread t0([&] { a = Bootstrap::Join(id, 1, 3, 10).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread t1([&] { b = Bootstrap::Join(id, 1, 3, 10).status(); });
  t0.join();
  t1.join();
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("rank 1 joined twice"), std::string::npos) << b.message();
}

TEST(BootstrapTest, MissingRankIsNamedOnTimeout) {
  const int n = 4;
  BootstrapId id = StartRoot(1.0);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    if (r == 2) continue;  // rank 2 never comes
    threads.emplace_back([&, r] { st[r] = Bootstrap::Join(id, r, n, 1.0).status(); });
  }
  for (auto& t : threads) t.join();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 10.0);
  for (int r = 0; r < n; ++r) {
    if (r == 2) continue;
    ASSERT_FALSE(st[r].ok());
    EXPECT_EQ(st[r].code(), weftTimeout) << st[r].message();
    EXPECT_NE(st[r].message().find("rank(s) 2 "), std::string::npos) << st[r].message();
    EXPECT_NE(st[r].message().find("3 of 4"), std::string::npos) << st[r].message();
  }
}

TEST(BootstrapTest, RootNeverThereTimesOut) {
  // A port bound but not listening refuses every connection and stays ours for the whole test
  // (a closed listener's port could be taken by a test running beside this one).
  int port = 0;
  const int held = weft_test::HoldRefusingLoopbackPort(&port);
  ASSERT_GE(held, 0) << std::strerror(errno);
  BootstrapId id{net::SockAddr::Loopback(AF_INET, port), net::Secret::Random()};
  StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(id, 0, 2, 0.5);
  ASSERT_FALSE(bs.ok());
  EXPECT_EQ(bs.status().code(), weftTimeout);
  EXPECT_NE(bs.status().message().find(id.root.ToString()), std::string::npos) << bs.status().message();
  close(held);
}

TEST(BootstrapTest, WrongSecretIsDroppedOthersJoin) {
  BootstrapId id = StartRoot(10);
  BootstrapId wrong = id;
  wrong.secret = net::Secret::Random();
  Status intruder;
  std::thread bad([&] { intruder = Bootstrap::Join(wrong, 0, 2, 1.0).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<Status> joins = RunRanks(id, 2, 10, [](int, Bootstrap* bs) {
    EXPECT_TRUE(bs->Barrier().ok());
  });
  bad.join();
  EXPECT_TRUE(joins[0].ok()) << joins[0].message();
  EXPECT_TRUE(joins[1].ok()) << joins[1].message();
  ASSERT_FALSE(intruder.ok());
  EXPECT_EQ(intruder.code(), weftRemoteError) << intruder.message();
}

TEST(BootstrapTest, InvalidRankArguments) {
  BootstrapId id{net::SockAddr::Loopback(AF_INET, 1), net::Secret::Random()};
  EXPECT_EQ(Bootstrap::Join(id, 2, 2, 1).status().code(), weftInvalidArgument);
  EXPECT_EQ(Bootstrap::Join(id, -1, 2, 1).status().code(), weftInvalidArgument);
  EXPECT_EQ(Bootstrap::Join(id, 0, 0, 1).status().code(), weftInvalidArgument);
}

TEST(BootstrapTest, MismatchedCollectivesFailWithMessage) {
  BootstrapId id = StartRoot(10);
  std::vector<Status> st(2);
  RunRanks(id, 2, 5, [&](int r, Bootstrap* bs) {
    uint64_t x = r, all[2];
    if (r == 0) st[r] = bs->AllGather(&x, 8, all);
    else st[r] = bs->AllGather(&x, 4, all);
  });
  ASSERT_FALSE(st[0].ok());
  ASSERT_FALSE(st[1].ok());
  EXPECT_EQ(st[0].code(), weftInvalidUsage) << st[0].message();
  EXPECT_NE(st[0].message().find("4 bytes"), std::string::npos) << st[0].message();
}

TEST(BootstrapTest, AbortUnblocksAWaitingCall) {
  BootstrapId id = StartRoot(10);
  std::vector<Status> st(2);
  std::atomic<Bootstrap*> rank0{nullptr};
  RunRanks(id, 2, 30, [&](int r, Bootstrap* bs) {
    if (r == 1) {
      // Rank 1 never enters the barrier; rank 0 aborts itself after 200 ms.
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    std::thread aborter([bs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      bs->Abort();
    });
    auto t0 = std::chrono::steady_clock::now();
    st[0] = bs->Barrier();
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 5.0);
    aborter.join();
    Status again = bs->Barrier();
    EXPECT_FALSE(again.ok());
  });
  ASSERT_FALSE(st[0].ok());
  EXPECT_NE(st[0].message().find("abort"), std::string::npos) << st[0].message();
}

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// CancelBootstrapRoot: the rank waiting at the root hears "cancelled" at once (not at its
// 30 s timeout), and the root's listener and connection are closed when Cancel returns (a
// failed weftCommSplit's leader relies on it: tests/reliability_split_test.cc).
TEST(BootstrapTest, CancelledRootTellsWaitingRanksAndClosesItsSockets) {
  const int fds_before = OpenFds();
  BootstrapId id = StartRoot(60);
  Status joined;
  std::thread rank0([&] { joined = Bootstrap::Join(id, 0, 2, 30).status(); });
  // Rank 0 has reached the root once its socket, its ring listener and the root's accepted
  // connection are open (the root's listener is the fourth).
  for (int i = 0; i < 500 && OpenFds() < fds_before + 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // and the root read its hello
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(CancelBootstrapRoot(id));
  rank0.join();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(joined.code(), weftRemoteError) << joined.message();
  EXPECT_NE(joined.message().find("cancelled"), std::string::npos) << joined.message();
  EXPECT_LE(OpenFds(), fds_before) << "the cancelled root's sockets are still open";
  EXPECT_FALSE(CancelBootstrapRoot(id)) << "a root is cancelled once";
  // A finished root is not "cancelled" (and its thread was joined by the registry).
  BootstrapId done = StartRoot(10);
  RunRanks(done, 1, 5, [](int, Bootstrap*) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(CancelBootstrapRoot(done));
}

long ResidentMiB() {
  long pages = 0, resident = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE) / (1 << 20);
}

// A hello claiming the largest nranks the root accepts (2^24) must not make the root allocate
// per-rank tables for ranks that never connect: it once sized a socket, address and name per
// claimed rank up front (3.4 GB; fuzz/crashes/bootstrap-root-nranks-2p24-tables-oom). The root
// now keeps what arrives and times out naming the missing ranks.
TEST(BootstrapTest, HugeClaimedNranksCostsOnlyWhatArrives) {
  BootstrapId id = StartRoot(0.5);
  const long before = ResidentMiB();
  StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(id, 0, 1 << 24, 5);
  ASSERT_FALSE(bs.ok());
  EXPECT_EQ(bs.status().code(), weftTimeout) << bs.status().message();
  EXPECT_NE(bs.status().message().find("(16777215 in all) (1 of 16777216 joined)"), std::string::npos)
      << bs.status().message();
  EXPECT_LT(ResidentMiB() - before, 200) << "the root allocated for ranks that never came";
}

// The pure decoders of bootstrap_wire.h (also fuzzed: fuzz/targets/bootstrap_wire_fuzz.cc).
TEST(BootstrapWireTest, VerdictHeadAndCallHeaderNameBadFields) {
  uint8_t head[bootstrap_wire::kVerdictHeadBytes];
  bootstrap_wire::EncodeRootVerdictHead(weftTimeout, 12, head);
  StatusOr<bootstrap_wire::RootVerdictHead> v = bootstrap_wire::DecodeRootVerdictHead(head);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->code, weftTimeout);
  EXPECT_EQ(v->message_bytes, 12u);
  bootstrap_wire::Put32(head, 77);
  v = bootstrap_wire::DecodeRootVerdictHead(head);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("result code 77"), std::string::npos) << v.status().message();
  bootstrap_wire::EncodeRootVerdictHead(weftSuccess, (1u << 20) + 1, head);
  v = bootstrap_wire::DecodeRootVerdictHead(head);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("message length 1048577"), std::string::npos) << v.status().message();

  bootstrap_wire::CallHeader call;
  call.op = bootstrap_wire::CallOp::kBroadcast;
  call.sequence = 9;
  call.bytes = 4096;
  call.root = -1;
  uint8_t wire[bootstrap_wire::kCallHeaderBytes];
  bootstrap_wire::EncodeCallHeader(call, wire);
  StatusOr<bootstrap_wire::CallHeader> c = bootstrap_wire::DecodeCallHeader(wire);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->op, call.op);
  EXPECT_EQ(c->sequence, 9u);
  EXPECT_EQ(c->bytes, 4096u);
  EXPECT_EQ(c->root, -1);
  bootstrap_wire::Put32(wire, 4);
  c = bootstrap_wire::DecodeCallHeader(wire);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("op 4"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace weft
