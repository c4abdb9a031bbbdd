// Tests of the shared-memory transport (transports/shm): two-sided rings over threads and
// fork()ed processes, one-sided windows and signals, dead peers, /dev/shm exhaustion, and
// oversubscription. ShmPerf.* print raw figures (latency, GB/s) and assert only correctness.
//
// A small FakeBootstrap (AllGather over a MAP_SHARED page with a timeout) stands in for
// src/core/bootstrap.h so that the same code runs for threads and for forked processes.
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_wire.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// ---- fake bootstrap: AllGather through shared memory (threads or processes) ----
struct Hub {
  static constexpr int kMaxRanks = 16;
  static constexpr size_t kSlot = 256;
  std::atomic<uint64_t> arrived;
  int nranks;
  unsigned char data[2][kMaxRanks][kSlot];
};

Hub* NewHub(int nranks) {
  void* p = mmap(nullptr, sizeof(Hub), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  Hub* h = new (p) Hub();
  h->arrived.store(0);
  h->nranks = nranks;
  return h;
}
void FreeHub(Hub* h) { munmap(h, sizeof(Hub)); }

class FakeBootstrap {
 public:
  FakeBootstrap(Hub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const { return rank_; }
  int nranks() const { return hub_->nranks; }
  Status AllGather(const void* mine, size_t bytes, void* all) {
    if (bytes > Hub::kSlot) return InvalidArgument("fake bootstrap: slot too small");
    std::memcpy(hub_->data[round_ % 2][rank_], mine, bytes);
    hub_->arrived.fetch_add(1);
    uint64_t target = (round_ + 1) * static_cast<uint64_t>(hub_->nranks);
    Clock::time_point start = Clock::now();
    while (hub_->arrived.load() < target) {
      if (Seconds(start) > 30) return TimeoutError("fake bootstrap: allgather timed out");
      usleep(50);
    }
    for (int r = 0; r < hub_->nranks; ++r)
      std::memcpy(static_cast<unsigned char*>(all) + r * bytes, hub_->data[round_ % 2][r], bytes);
    ++round_;
    return OkStatus();
  }

 private:
  Hub* hub_;
  int rank_;
  uint64_t round_ = 0;
};

ShmOptions TestOptions() {
  ShmOptions o;
  o.ring_bytes_per_peer = 64 << 10;  // small rings: messages wrap and pipeline
  o.slice_bytes = 8 << 10;
  o.initial_window_bytes = 64 << 10;
  return o;
}

std::vector<int> Iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// Drives `t` until every request in `reqs` is done or `limit_s` passes.
Status WaitAll(Transport* t, const std::vector<TransportRequest*>& reqs, double limit_s = 30) {
  Clock::time_point start = Clock::now();
  while (true) {
    bool all = true;
    for (TransportRequest* r : reqs) all &= r->done.load();
    if (all) break;
    Status st = t->Progress(2000);
    if (!st.ok()) return st;
    if (Seconds(start) > limit_s) return TimeoutError("test: requests not done in time");
  }
  for (TransportRequest* r : reqs)
    if (!r->status.ok()) return r->status;
  return OkStatus();
}

unsigned char Pattern(int src, int dst, size_t i) {
  return static_cast<unsigned char>(src * 31 + dst * 7 + i * 13 + (i >> 8));
}

// Runs body(rank, transport) on n threads, each with its own transport of one communicator.
void RunThreads(int n, const ShmOptions& opt,
                const std::function<void(int, ShmTransport&)>& body) {
  Hub* hub = NewHub(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      FakeBootstrap boot(hub, r);
      auto t = ShmTransport::Create(&boot, Iota(n), opt);
      ASSERT_TRUE(t.ok()) << t.status().message();
      body(r, **t);
    });
  }
  for (auto& t : threads) t.join();
  FreeHub(hub);
}

// Runs body in n forked processes; returns their exit codes (0 = success).
std::vector<int> RunProcesses(int n, const std::function<int(int, Hub*)>& body) {
  Hub* hub = NewHub(n);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 99;
      rc = body(r, hub);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  FreeHub(hub);
  return codes;
}

std::vector<std::string> ShmEntriesWithPrefix(const std::vector<std::string>& prefixes) {
  std::vector<std::string> found;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return found;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    for (const std::string& p : prefixes)
      if (!p.empty() && name.rfind(p, 0) == 0) found.push_back(name);
  }
  closedir(d);
  return found;
}

// ---- all pairs exchange, parametrized over ranks x bytes ----
class ShmExchange : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(ShmExchange, EveryPairIncludingSelf) {
  const int n = std::get<0>(GetParam());
  const size_t bytes = std::get<1>(GetParam());
  std::atomic<int> failures{0};
  std::vector<std::vector<std::string>> prefixes(n);
  RunThreads(n, TestOptions(), [&](int r, ShmTransport& t) {
    prefixes[r] = t.segment_prefixes();
    std::vector<std::vector<unsigned char>> out(n), in(n);
    std::vector<TransportRequest> sreq(n), rreq(n);
    std::vector<TransportRequest*> all;
    for (int p = 0; p < n; ++p) {
      out[p].resize(bytes);
      for (size_t i = 0; i < bytes; ++i) out[p][i] = Pattern(r, p, i);
      in[p].assign(bytes, 0xee);
      ASSERT_TRUE(t.PostRecv(p, 0, 42, in[p].data(), bytes, &rreq[p]).ok());
      ASSERT_TRUE(t.PostSend(p, 0, 42, out[p].data(), bytes, &sreq[p]).ok());
      all.push_back(&sreq[p]);
      all.push_back(&rreq[p]);
    }
    Status st = WaitAll(&t, all);
    if (!st.ok()) {
      ADD_FAILURE() << "rank " << r << ": " << st.message();
      ++failures;
      return;
    }
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < bytes; ++i)
        if (in[p][i] != Pattern(p, r, i)) {
          ADD_FAILURE() << "rank " << r << " from " << p << " byte " << i;
          ++failures;
          return;
        }
    EXPECT_FALSE(t.HasPending());
  });
  EXPECT_EQ(failures.load(), 0);
  // Every name was unlinked after the creation barrier.
  for (auto& pr : prefixes) EXPECT_TRUE(ShmEntriesWithPrefix(pr).empty());
}

INSTANTIATE_TEST_SUITE_P(RanksBytes, ShmExchange,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{7},
                                                              size_t{1000}, size_t{200003})));

// ---- FIFO per channel; channels do not block each other ----
TEST(ShmTransport, FifoPerChannelAndChannelsIndependent) {
  RunThreads(2, TestOptions(), [&](int r, ShmTransport& t) {
    constexpr int kMsgs = 5;
    const size_t big = 150000;  // > ring: must be stashed while channel 1 is served
    if (r == 0) {
      std::vector<std::vector<unsigned char>> bufs;
      std::vector<TransportRequest> reqs(2 * kMsgs);
      std::vector<TransportRequest*> all;
      for (int k = 0; k < kMsgs; ++k)
        for (int ch = 0; ch < 2; ++ch) {
          bufs.emplace_back(ch == 0 ? big : 100, static_cast<unsigned char>(ch * 100 + k));
        }
      for (int k = 0; k < kMsgs; ++k)
        for (int ch = 0; ch < 2; ++ch) {
          int i = 2 * k + ch;
          ASSERT_TRUE(t.PostSend(1, ch, 7, bufs[i].data(), bufs[i].size(), &reqs[i]).ok());
          all.push_back(&reqs[i]);
        }
      ASSERT_TRUE(WaitAll(&t, all).ok());
    } else {
      // Receive all of channel 1 first: channel 0's messages sit ahead of them in the ring.
      std::vector<unsigned char> b(100);
      for (int k = 0; k < kMsgs; ++k) {
        TransportRequest q;
        ASSERT_TRUE(t.PostRecv(0, 1, 7, b.data(), b.size(), &q).ok());
        Status st = WaitAll(&t, {&q});
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_EQ(b[0], 100 + k) << "channel 1 message " << k << " out of order";
        EXPECT_EQ(b[99], 100 + k);
      }
      std::vector<unsigned char> c(big);
      for (int k = 0; k < kMsgs; ++k) {
        TransportRequest q;
        ASSERT_TRUE(t.PostRecv(0, 0, 7, c.data(), c.size(), &q).ok());
        ASSERT_TRUE(WaitAll(&t, {&q}).ok());
        EXPECT_EQ(c[0], k);
        EXPECT_EQ(c[big - 1], k);
      }
    }
  });
}

// The rings are mapped into the page tables at creation (PrefaultRange): a first pass of
// messages through a 1 MiB ring takes almost no page faults, where before each of its 256
// pages faulted in on first use (a 2-rank all-to-all of 8 KiB ran at 6-7 us for its first
// ~250 calls against 1.5-2.2 us after).
TEST(ShmTransport, RingPagesAreMappedAtCreation) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory faults in as the ring is used (152 faults under "
                  "ASan against 2 in a normal build and 471 without the mapping): counted "
                  "in normal builds only";
#endif
  std::vector<unsigned char> probe_page(2 * 4096);
  if (!PrefaultRange(probe_page.data() + 4096, 4096, true))
    GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14): rings fault in on "
                    "first use, as before";
  ShmOptions o = TestOptions();
  o.ring_bytes_per_peer = 1 << 20;
  o.single_copy = false;  // every byte through the ring
  std::atomic<int> ready{0};
  std::atomic<long> faults{-1};
  RunThreads(2, o, [&](int r, ShmTransport& t) {
    constexpr size_t kMsg = 4000;
    constexpr int kMsgs = 240;  // ~960 KB: one pass over the ring
    std::vector<unsigned char> b(kMsg, 1);
    TransportRequest q;
    // Both transports exist; count the process's faults over one pass, buffers touched.
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::yield();
    struct rusage before;
    getrusage(RUSAGE_SELF, &before);
    for (int k = 0; k < kMsgs; ++k) {
      if (r == 0) ASSERT_TRUE(t.PostSend(1, 0, k, b.data(), kMsg, &q).ok());
      else ASSERT_TRUE(t.PostRecv(0, 0, k, b.data(), kMsg, &q).ok());
      ASSERT_TRUE(WaitAll(&t, {&q}).ok());
    }
    ready.fetch_add(1);
    while (ready.load() < 4) std::this_thread::yield();
    struct rusage after;
    getrusage(RUSAGE_SELF, &after);
    if (r == 1) faults = after.ru_minflt - before.ru_minflt;
  });
  EXPECT_GE(faults.load(), 0);
  EXPECT_LT(faults.load(), 64) << "page faults over a first pass of a 1 MiB ring (256 pages)";
}

class ShmSingleCopy : public ::testing::TestWithParam<bool> {};

TEST_P(ShmSingleCopy, MixedSizesKeepFifoAcrossBothPaths) {
  // Sizes straddle the single-copy threshold (4096 here); channel 1 is received first so the
  // channel-0 messages ahead of it (single-copy ones included) go through the stash.
  const bool single_copy = GetParam();
  ShmOptions o = TestOptions();
  o.single_copy = single_copy;
  o.single_copy_min_bytes = 4096;
  const std::vector<size_t> sizes = {0, 100, 5000, 300000, 7, 4096, 4095, 70000};
  RunThreads(2, o, [&](int r, ShmTransport& t) {
    if (single_copy && !t.SingleCopyTo(1 - r))
      fprintf(stderr, "[shm] process_vm_readv not permitted here: ring path only\n");
    if (!single_copy) {
      EXPECT_FALSE(t.SingleCopyTo(1 - r));
    }
    if (r == 0) {
      std::vector<std::vector<unsigned char>> bufs;
      for (size_t i = 0; i < sizes.size(); ++i)
        bufs.emplace_back(sizes[i], static_cast<unsigned char>(i + 1));
      std::vector<TransportRequest> reqs(2 * sizes.size());
      std::vector<TransportRequest*> all;
      for (size_t i = 0; i < sizes.size(); ++i)
        for (int ch = 0; ch < 2; ++ch) {
          TransportRequest* q = &reqs[2 * i + ch];
          ASSERT_TRUE(t.PostSend(1, ch, 100 + i, bufs[i].data(), sizes[i], q).ok());
          all.push_back(q);
        }
      Status st = WaitAll(&t, all);
      ASSERT_TRUE(st.ok()) << st.message();
    } else {
      for (int ch : {1, 0})
        for (size_t i = 0; i < sizes.size(); ++i) {
          std::vector<unsigned char> b(sizes[i] + 1, 0xee);
          TransportRequest q;
          ASSERT_TRUE(t.PostRecv(0, ch, 100 + i, b.data(), sizes[i], &q).ok());
          Status st = WaitAll(&t, {&q});
          ASSERT_TRUE(st.ok()) << "channel " << ch << " message " << i << ": " << st.message();
          for (size_t k = 0; k < sizes[i]; ++k)
            ASSERT_EQ(b[k], i + 1) << "channel " << ch << " message " << i << " byte " << k;
          ASSERT_EQ(b[sizes[i]], 0xee) << "wrote past the end";
        }
    }
  });
}
INSTANTIATE_TEST_SUITE_P(OnOff, ShmSingleCopy, ::testing::Bool());

// A sink with little room (an odd number of bytes, so pieces end mid-element): it keeps what
// lands, in order.
class RecordingSink final : public RecvSink {
 public:
  explicit RecordingSink(size_t room) : space_(room) {}
  unsigned char* Space(size_t* room) override {
    *room = space_.size();
    return space_.data();
  }
  void Landed(size_t bytes) override {
    EXPECT_LE(bytes, space_.size());
    got.insert(got.end(), space_.begin(), space_.begin() + static_cast<std::ptrdiff_t>(bytes));
    ++pieces;
  }
  std::vector<unsigned char> got;
  size_t pieces = 0;

 private:
  std::vector<unsigned char> space_;
};

// Receives into a sink (PostRecvToSink, which the executor streams into codec chains): the
// ring, the single-copy read and the stash (channel 1 received first) all deliver every byte in
// order in pieces of at most the sink's room; a size mismatch fails and hands the sink nothing.
TEST_P(ShmSingleCopy, SinkReceivesEveryPathInPieces) {
  const bool single_copy = GetParam();
  ShmOptions o = TestOptions();
  o.single_copy = single_copy;
  o.single_copy_min_bytes = 4096;
  const std::vector<size_t> sizes = {0, 100, 5000, 300000, 7, 70000};
  RunThreads(2, o, [&](int r, ShmTransport& t) {
    ASSERT_TRUE(t.TakesSinks());
    if (r == 0) {
      std::vector<std::vector<unsigned char>> bufs;
      for (size_t i = 0; i < sizes.size(); ++i) {
        bufs.emplace_back(sizes[i]);
        for (size_t k = 0; k < sizes[i]; ++k) bufs[i][k] = Pattern(0, static_cast<int>(i), k);
      }
      std::vector<TransportRequest> reqs(2 * sizes.size() + 1);
      std::vector<TransportRequest*> all;
      for (size_t i = 0; i < sizes.size(); ++i)
        for (int ch = 0; ch < 2; ++ch) {
          TransportRequest* q = &reqs[2 * i + ch];
          ASSERT_TRUE(t.PostSend(1, ch, 100 + i, bufs[i].data(), sizes[i], q).ok());
          all.push_back(q);
        }
      ASSERT_TRUE(t.PostSend(1, 2, 7, bufs[3].data(), 64, &reqs.back()).ok());
      all.push_back(&reqs.back());
      Status st = WaitAll(&t, all);
      ASSERT_TRUE(st.ok()) << st.message();
      return;
    }
    for (int ch : {1, 0})
      for (size_t i = 0; i < sizes.size(); ++i) {
        RecordingSink sink(4099);
        TransportRequest q;
        ASSERT_TRUE(t.PostRecvToSink(0, ch, 100 + i, sizes[i], &sink, &q).ok());
        Status st = WaitAll(&t, {&q});
        ASSERT_TRUE(st.ok()) << "channel " << ch << " message " << i << ": " << st.message();
        ASSERT_EQ(sink.got.size(), sizes[i]) << "channel " << ch << " message " << i;
        for (size_t k = 0; k < sizes[i]; ++k)
          ASSERT_EQ(sink.got[k], Pattern(0, static_cast<int>(i), k)) << "channel " << ch << " message " << i << " byte " << k;
        EXPECT_GE(sink.pieces, sizes[i] / 4099) << "pieces larger than the room";
      }
    RecordingSink sink(64);
    TransportRequest q;
    ASSERT_TRUE(t.PostRecvToSink(0, 2, 7, 32, &sink, &q).ok());
    Status st = WaitAll(&t, {&q});
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("32 bytes, got tag 7 and 64 bytes"), std::string::npos) << st.message();
    EXPECT_TRUE(sink.got.empty()) << "a mismatched message reached the sink";
    EXPECT_FALSE(t.PostRecvToSink(0, 2, 7, 32, nullptr, &q).ok()) << "a NULL sink was taken";
  });
}

// A sink that asks for later (RecvSink::Later, a sink fed by several peers whose others lag)
// gets no bytes while it asks, on the single-copy path and the ring's alike, and the whole
// message in order once it stops asking.
class LaterSink final : public RecvSink {
 public:
  unsigned char* Space(size_t* room) override {
    EXPECT_FALSE(later) << "bytes offered while the sink asked for later";
    *room = space_.size();
    return space_.data();
  }
  void Landed(size_t bytes) override { got.insert(got.end(), space_.begin(), space_.begin() + static_cast<std::ptrdiff_t>(bytes)); }
  bool Later() override { ++asked; return later; }
  bool later = true;
  int asked = 0;
  std::vector<unsigned char> got;

 private:
  std::vector<unsigned char> space_ = std::vector<unsigned char>(4096);
};

TEST_P(ShmSingleCopy, SinkThatAsksForLaterGetsItsBytesOnceItStops) {
  ShmOptions o = TestOptions();
  o.single_copy = GetParam();
  o.single_copy_min_bytes = 4096;
  const size_t bytes = 100000;
  RunThreads(2, o, [&](int r, ShmTransport& t) {
    std::vector<unsigned char> b(bytes);
    for (size_t k = 0; k < bytes; ++k) b[k] = Pattern(0, 1, k);
    TransportRequest q;
    if (r == 0) {
      ASSERT_TRUE(t.PostSend(1, 0, 5, b.data(), bytes, &q).ok());
      Status st = WaitAll(&t, {&q});
      ASSERT_TRUE(st.ok()) << st.message();
      return;
    }
    LaterSink sink;
    ASSERT_TRUE(t.PostRecvToSink(0, 0, 5, bytes, &sink, &q).ok());
    for (int i = 0; i < 2000 && sink.asked < 3; ++i) {
      ASSERT_TRUE(t.Progress(200).ok());
    }
    EXPECT_GE(sink.asked, 3) << "the transport never asked the sink";
    EXPECT_TRUE(sink.got.empty());
    EXPECT_FALSE(q.done.load());
    sink.later = false;
    Status st = WaitAll(&t, {&q});
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(sink.got, b);
  });
}

TEST(ShmTransport, TagAndSizeMismatchNamePeerAndBothSides) {
  RunThreads(2, TestOptions(), [&](int r, ShmTransport& t) {
    std::vector<unsigned char> b(64, 1);
    TransportRequest q;
    if (r == 0) {
      ASSERT_TRUE(t.PostSend(1, 3, 5, b.data(), 64, &q).ok());
      TransportRequest q2;
      ASSERT_TRUE(t.PostSend(1, 3, 6, b.data(), 64, &q2).ok());
      ASSERT_TRUE(WaitAll(&t, {&q, &q2}).ok());
    } else {
      ASSERT_TRUE(t.PostRecv(0, 3, 9, b.data(), 64, &q).ok());
      Status st = WaitAll(&t, {&q});
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), weftInternalError);
      EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("expected tag 9"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("got tag 5"), std::string::npos) << st.message();
      // The stream stays in step: the next message is delivered intact... or its size checked.
      TransportRequest q2;
      ASSERT_TRUE(t.PostRecv(0, 3, 6, b.data(), 32, &q2).ok());
      st = WaitAll(&t, {&q2});
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("32 bytes, got tag 6 and 64 bytes"), std::string::npos)
          << st.message();
    }
  });
}

// Ranks that planned the same call differently (PublishCurrentCall: one sequence number, two
// descriptors) where one waits for a direct signal and the other for a message: no tag meets
// the other side, so before the published-call check both waited for the timeout. Now each
// fails within a liveness period, naming the mismatch. A peer at another call (a sequence
// number ahead) is not a mismatch: that wait runs on.
TEST(ShmTransport, PeersInOneCallWithDifferentPlansFailWithinALivenessPeriod) {
  std::atomic<int> finished{0};  // each keeps its transport open until both have seen it
  RunThreads(2, TestOptions(), [&](int r, ShmTransport& t) {
    unsigned char b[8];
    TransportRequest q;
    t.PublishCurrentCall(MakeCallTag(r == 0 ? 0x1111u : 0x2222u, 5));
    if (r == 0) ASSERT_TRUE(t.PostWait(1, &q, MakeCallTag(0x1111u, 5)).ok());
    else ASSERT_TRUE(t.PostRecv(0, 0, MakeCallTag(0x2222u, 5), b, 8, &q).ok());
    Clock::time_point start = Clock::now();
    Status st = WaitAll(&t, {&q}, 20);
    EXPECT_LT(Seconds(start), 5.0);
    finished.fetch_add(1);
    while (finished.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(kTagMismatchMarker), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("rank " + std::to_string(1 - r) + " runs the same call with another plan"),
              std::string::npos) << st.message();
    EXPECT_FALSE(t.HasPending());
  });
  std::atomic<int> timed_out{0};
  RunThreads(2, TestOptions(), [&](int r, ShmTransport& t) {
    unsigned char b[8];
    TransportRequest q;
    t.PublishCurrentCall(MakeCallTag(r == 0 ? 0x1111u : 0x2222u, 5 + r));
    ASSERT_TRUE(t.PostRecv(1 - r, 0, 1, b, 8, &q).ok());  // never sent
    Status st = WaitAll(&t, {&q}, 0.5);
    EXPECT_EQ(st.code(), weftTimeout) << st.message();
    // The abort reaches the peer: it must not end a wait the peer started late (a loaded
    // machine can hold a thread back past the other's 0.5 s).
    timed_out.fetch_add(1);
    while (timed_out.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    t.Abort(InternalError("test over"));
  });
}

// The ring's message header is judged by shm_wire.h before the transport trusts it (memory
// another process writes): each bad field is an InternalError naming it.
TEST(ShmWire, DecodeShmHeaderNamesTheBadField) {
  shm_detail::MsgHeader h;
  std::memset(&h, 0, sizeof(h));
  h.magic = shm_detail::kMsgMagic;
  h.channel = 5;
  h.tag = 77;
  h.bytes = 4096;
  StatusOr<shm_wire::ShmMsg> m = shm_wire::DecodeShmHeader(&h, shm_wire::kMaxMessageBytes);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->channel, 5);
  EXPECT_EQ(m->tag, 77u);
  EXPECT_EQ(m->bytes, 4096u);
  EXPECT_FALSE(m->single_copy);
  struct Bad {
    std::function<void(shm_detail::MsgHeader&)> spoil;
    const char* expect;
  };
  const Bad bad[] = {
      {[](shm_detail::MsgHeader& x) { x.magic = 7; }, "magic 7"},
      {[](shm_detail::MsgHeader& x) { x.flags = 6; }, "flags 6"},
      {[](shm_detail::MsgHeader& x) { x.bytes = 4097; }, "payload of 4097 bytes (at most 4096)"},
      {[](shm_detail::MsgHeader& x) { x.flags = shm_detail::kMsgSingleCopy; }, "at address 0"},
  };
  for (const Bad& b : bad) {
    shm_detail::MsgHeader x = h;
    b.spoil(x);
    m = shm_wire::DecodeShmHeader(&x, 4096);
    ASSERT_FALSE(m.ok()) << b.expect;
    EXPECT_EQ(m.status().code(), weftInternalError);
    EXPECT_NE(m.status().message().find(b.expect), std::string::npos) << m.status().message();
  }
}

TEST(ShmTransport, PostingToARankNotOnThisHostIsInvalidArgument) {
  Hub* hub = NewHub(3);
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      FakeBootstrap boot(hub, r);
      // Ranks 0 and 1 share a host; rank 2 is alone (creates nothing named).
      std::vector<int> local = r == 2 ? std::vector<int>{2} : std::vector<int>{0, 1};
      auto t = ShmTransport::Create(&boot, local, TestOptions());
      ASSERT_TRUE(t.ok()) << t.status().message();
      TransportRequest q;
      unsigned char b = 0;
      int other = r == 2 ? 0 : 2;
      Status st = (*t)->PostSend(other, 0, 1, &b, 1, &q);
      EXPECT_EQ(st.code(), weftInvalidArgument);
      EXPECT_NE(st.message().find("rank " + std::to_string(other)), std::string::npos);
    });
  for (auto& t : th) t.join();
  FreeHub(hub);
}

TEST(ShmTransport, AbortFromAnotherThreadWakesTheWaiterAndReachesThePeer) {
  RunThreads(2, TestOptions(), [&](int r, ShmTransport& t) {
    unsigned char b[8];
    TransportRequest q;
    ASSERT_TRUE(t.PostRecv(1 - r, 0, 1, b, 8, &q).ok());  // never sent by either side
    std::thread aborter;
    if (r == 0) {
      aborter = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // waiter is asleep by now
        t.Abort(InternalError("test abort"));
      });
    }
    Clock::time_point start = Clock::now();
    Status st = WaitAll(&t, {&q}, 20);
    double s = Seconds(start);
    if (aborter.joinable()) aborter.join();
    ASSERT_FALSE(st.ok());
    if (r == 0) {
      EXPECT_NE(st.message().find("test abort"), std::string::npos) << st.message();
    } else {
      // The peer sees rank 0 closed within a liveness period.
      EXPECT_EQ(st.code(), weftRemoteError) << st.message();
      EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
    }
    EXPECT_LT(s, 5.0);
    EXPECT_FALSE(t.HasPending());
  });
}

// ---- windows and signals ----
class ShmWindows : public ::testing::TestWithParam<int> {};

TEST_P(ShmWindows, SignalWaitOrdersReadsAndGrowthRemaps) {
  const int n = GetParam();
  std::vector<std::vector<std::string>> prefixes(n);
  RunThreads(n, TestOptions(), [&](int r, ShmTransport& t) {
    prefixes[r] = t.segment_prefixes();
    for (size_t bytes : {size_t{4096}, size_t{3} << 20, size_t{100}, size_t{5} << 20}) {
      for (int round = 0; round < 3; ++round) {
        ASSERT_TRUE(t.PrepareWindow(bytes).ok());
        auto* w = static_cast<uint32_t*>(t.LocalWindow().ptr);
        size_t words = bytes / 4;
        for (size_t i = 0; i < words; ++i) w[i] = r * 1000003u + round * 7u + i;
        std::vector<TransportRequest> waits(n);
        std::vector<TransportRequest*> all;
        for (int p = 0; p < n; ++p) ASSERT_TRUE(t.Signal(p).ok());
        for (int p = 0; p < n; ++p) {
          ASSERT_TRUE(t.PostWait(p, &waits[p]).ok());
          all.push_back(&waits[p]);
        }
        ASSERT_TRUE(WaitAll(&t, all).ok());
        for (int p = 0; p < n; ++p) {
          auto pw = t.PeerWindow(p, bytes);
          ASSERT_TRUE(pw.ok()) << pw.status().message();
          auto* v = static_cast<const uint32_t*>(pw->ptr);
          ASSERT_EQ(v[0], p * 1000003u + round * 7u) << "rank " << r << " reads " << p;
          ASSERT_EQ(v[words - 1], p * 1000003u + round * 7u + words - 1);
        }
        // Second round so nobody rewrites a window a peer still reads.
        all.clear();
        for (int p = 0; p < n; ++p) ASSERT_TRUE(t.Signal(p).ok());
        for (int p = 0; p < n; ++p) {
          ASSERT_TRUE(t.PostWait(p, &waits[p]).ok());
          all.push_back(&waits[p]);
        }
        ASSERT_TRUE(WaitAll(&t, all).ok());
      }
    }
  });
  // Grown windows were unlinked by their last mapper.
  for (auto& pr : prefixes) EXPECT_TRUE(ShmEntriesWithPrefix(pr).empty());
}
INSTANTIATE_TEST_SUITE_P(Ranks, ShmWindows, ::testing::Values(1, 2, 3, 5, 8));

// TryWait (the executor's lock-free wait): false and nothing consumed until the signal is
// there; then it consumes exactly one, checks the tag like PostWait, and the counted signals
// that follow are still there for PostWait.
TEST(ShmTransport, TryWaitConsumesOnlyArrivedSignalsAndChecksTheTag) {
  std::atomic<int> stage{0};
  RunThreads(2, TestOptions(), [&](int r, ShmTransport& t) {
    Status st;
    if (r == 1) {
      EXPECT_FALSE(t.TryWait(0, 0, &st));  // nothing sent yet
      stage.store(1);
      while (stage.load() < 2) std::this_thread::yield();
      EXPECT_TRUE(t.TryWait(0, 77, &st));  // first signal, tag 77
      EXPECT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE(t.TryWait(0, 0, &st));   // second (untagged)
      EXPECT_TRUE(st.ok());
      EXPECT_TRUE(t.TryWait(0, 78, &st));  // third carries tag 79: a mismatch, named
      EXPECT_FALSE(st.ok());
      EXPECT_NE(st.message().find("79"), std::string::npos) << st.message();
      TransportRequest w;
      ASSERT_TRUE(t.PostWait(0, &w).ok());  // the fourth is left for the posted wait
      EXPECT_TRUE(WaitAll(&t, {&w}).ok());
      EXPECT_FALSE(t.TryWait(0, 0, &st));  // and nothing more
      stage.store(3);
    } else {
      while (stage.load() < 1) std::this_thread::yield();
      ASSERT_TRUE(t.Signal(1, 77).ok());
      ASSERT_TRUE(t.Signal(1).ok());
      ASSERT_TRUE(t.Signal(1, 79).ok());
      ASSERT_TRUE(t.Signal(1).ok());
      stage.store(2);
      while (stage.load() < 3) std::this_thread::yield();
    }
  });
}

// Signals are plain stores and the wake-up handshake is asymmetric (a sleeper runs membarrier,
// common/backoff.h): a lost wake-up would leave a sleeping rank in its futex until the
// liveness period (set to 3 s here) ends. Two processes that sleep at once on every wait (no
// spin, no yield stage) ping-pong through signals; no round may take a second.
TEST(ShmProcesses, SignalsWakeSleepingPeersWithoutLostWakeups) {
  constexpr int kRounds = 3000;
  std::vector<int> codes = RunProcesses(2, [&](int r, Hub* hub) -> int {
    FakeBootstrap boot(hub, r);
    ShmOptions o;
    o.spin_us = 0;
    o.yield_us = 0;
    o.liveness_ms = 3000;
    auto t = ShmTransport::Create(&boot, Iota(2), o);
    if (!t.ok()) return 1;
    const int peer = 1 - r;
    double worst = 0;
    for (int i = 0; i < kRounds; ++i) {
      const Clock::time_point start = Clock::now();
      TransportRequest w;
      if (r == 0 && !(*t)->Signal(peer).ok()) return 2;
      if (!(*t)->PostWait(peer, &w).ok()) return 3;
      // One long Progress per wait (WaitAll's 2 ms ones would hide a lost wake-up).
      while (!w.done.load()) {
        if (!(*t)->Progress(5000000).ok()) return 4;
        if (Seconds(start) > 30) return 4;
      }
      if (!w.status.ok()) return 4;
      if (r == 1 && !(*t)->Signal(peer).ok()) return 2;
      worst = std::max(worst, Seconds(start));
    }
    if (worst > 1.0) {
      std::fprintf(stderr, "rank %d: slowest round %.3f s: a wake-up was lost\n", r, worst);
      return 5;
    }
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// ---- processes ----
class ShmBig : public ::testing::TestWithParam<bool> {};

TEST_P(ShmBig, SixtyFourMiBExactAndOneWayBandwidth) {
  const size_t bytes = size_t{64} << 20;
  const bool single_copy = GetParam();
  std::vector<int> codes = RunProcesses(2, [&](int r, Hub* hub) -> int {
    FakeBootstrap boot(hub, r);
    ShmOptions o;
    o.single_copy = single_copy;
    auto t = ShmTransport::Create(&boot, Iota(2), o);
    if (!t.ok()) { fprintf(stderr, "%s\n", t.status().message().c_str()); return 1; }
    std::vector<uint64_t> buf(bytes / 8);
    double best = 1e9;
    for (int iter = 0; iter < 4; ++iter) {
      TransportRequest q, ack;
      uint64_t token = 0;
      if (r == 0) {
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9E3779B97F4A7C15ULL + iter;
        Clock::time_point start = Clock::now();
        if (!(*t)->PostSend(1, 0, iter, buf.data(), bytes, &q).ok()) return 2;
        if (!(*t)->PostRecv(1, 0, iter, &token, 8, &ack).ok()) return 2;
        Status st = WaitAll(t->get(), {&q, &ack});
        if (!st.ok()) { fprintf(stderr, "%s\n", st.message().c_str()); return 3; }
        best = std::min(best, Seconds(start));
      } else {
        std::fill(buf.begin(), buf.end(), 0);
        if (!(*t)->PostRecv(0, 0, iter, buf.data(), bytes, &q).ok()) return 2;
        if (!WaitAll(t->get(), {&q}).ok()) return 3;
        for (size_t i = 0; i < buf.size(); ++i)
          if (buf[i] != i * 0x9E3779B97F4A7C15ULL + iter) {
            fprintf(stderr, "word %zu differs\n", i);
            return 4;
          }
        if (!(*t)->PostSend(0, 0, iter, &token, 8, &ack).ok()) return 2;
        if (!WaitAll(t->get(), {&ack}).ok()) return 3;
      }
    }
    if (r == 0)
      fprintf(stderr, "[shm perf] 64 MiB one-way (incl. 8-byte ack), %s: best %.2f ms = %.2f GB/s\n",
              (*t)->SingleCopyTo(1) ? "single-copy (CMA)" : "two-copy ring", best * 1e3,
              bytes / best / 1e9);
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}
INSTANTIATE_TEST_SUITE_P(SingleCopyOnOff, ShmBig, ::testing::Bool());

// 2-process ping-pong; `cpus` pins both to those CPUs (empty: no pinning).
double PingPongMicros(const std::vector<int>& cpus, int spin_us, int yield_us, int iters) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  std::vector<int> codes = RunProcesses(2, [&](int r, Hub* hub) -> int {
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus) CPU_SET(c, &set);
      sched_setaffinity(0, sizeof(set), &set);
    }
    FakeBootstrap boot(hub, r);
    ShmOptions o;
    o.spin_us = spin_us;
    o.yield_us = yield_us;
    auto t = ShmTransport::Create(&boot, Iota(2), o);
    if (!t.ok()) return 1;
    uint64_t v = 0;
    Clock::time_point start;
    for (int i = -100; i < iters; ++i) {
      if (i == 0) start = Clock::now();
      TransportRequest q;
      if (r == 0) {
        if (!(*t)->PostSend(1, 0, 1, &v, 8, &q).ok() || !WaitAll(t->get(), {&q}).ok()) return 2;
        if (!(*t)->PostRecv(1, 0, 1, &v, 8, &q).ok() || !WaitAll(t->get(), {&q}).ok()) return 2;
      } else {
        if (!(*t)->PostRecv(0, 0, 1, &v, 8, &q).ok() || !WaitAll(t->get(), {&q}).ok()) return 2;
        ++v;
        if (!(*t)->PostSend(0, 0, 1, &v, 8, &q).ok() || !WaitAll(t->get(), {&q}).ok()) return 2;
      }
    }
    if (r == 0) {
      double us = Seconds(start) * 1e6 / iters;
      if (v != static_cast<uint64_t>(iters + 100)) return 5;
      if (write(pipefd[1], &us, sizeof(us)) != sizeof(us)) return 6;
    }
    return 0;
  });
  double us = -1;
  if (codes == std::vector<int>{0, 0}) {
    if (read(pipefd[0], &us, sizeof(us)) != sizeof(us)) us = -1;
  }
  close(pipefd[0]);
  close(pipefd[1]);
  return us;
}

// The floor on this machine: two threads bouncing one atomic (no transport at all).
double RawAtomicRoundTripMicros(int iters) {
  std::atomic<long> word{0};
  std::thread peer([&] {
    for (long i = 0; i < iters; ++i) {
      while (word.load() != 2 * i + 1) CpuRelax();
      word.store(2 * i + 2);
    }
  });
  Clock::time_point start = Clock::now();
  for (long i = 0; i < iters; ++i) {
    word.store(2 * i + 1);
    while (word.load() != 2 * i + 2) CpuRelax();
  }
  double us = Seconds(start) * 1e6 / iters;
  peer.join();
  return us;
}

TEST(ShmPerf, PingPongLatencyPerBackoffStage) {
  int ncpu = UsableCpuCount();
  if (ncpu >= 2)
    fprintf(stderr, "[shm perf] raw atomic round trip between 2 threads (machine floor): %.2f us\n",
            RawAtomicRoundTripMicros(20000));
  struct Case { const char* what; std::vector<int> cpus; int spin, yield, iters; };
  std::vector<Case> cases = {
      {"own cores, spin", {}, 1000000, 1000000, 20000},
      {"own cores, yield only", {}, 0, 1000000, 20000},
      {"own cores, futex only", {}, 0, 0, 5000},
      {"one core, spin (bad)", {0}, 1000000, 1000000, 50},
      {"one core, yield", {0}, 0, 1000000, 20000},
      {"one core, default policy", {0}, -1, -1, 20000},
  };
  for (const Case& c : cases) {
    if (c.cpus.empty() && ncpu < 2) continue;
    double us = PingPongMicros(c.cpus, c.spin, c.yield, c.iters);
    EXPECT_GT(us, 0) << c.what;
    fprintf(stderr, "[shm perf] ping-pong round trip, 8 B, %-26s: %8.2f us\n", c.what, us);
  }
}

TEST(ShmPerf, WindowReadBandwidthAndMemcpyReference) {
  // Rank 1 copies rank 0's 4 MiB window into private memory (what kDirectRead does), after a
  // signal; reference: a private 4 MiB memcpy in the same process.
  const size_t bytes = size_t{4} << 20;
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  std::vector<int> codes = RunProcesses(2, [&](int r, Hub* hub) -> int {
    FakeBootstrap boot(hub, r);
    ShmOptions o;
    o.initial_window_bytes = bytes;
    auto t = ShmTransport::Create(&boot, Iota(2), o);
    if (!t.ok()) return 1;
    if (r == 0) {
      std::memset((*t)->LocalWindow().ptr, 7, bytes);
      if (!(*t)->Signal(1).ok()) return 2;
      TransportRequest w;  // wait until the reader is done before closing
      if (!(*t)->PostWait(1, &w).ok() || !WaitAll(t->get(), {&w}).ok()) return 3;
      return 0;
    }
    TransportRequest w;
    if (!(*t)->PostWait(0, &w).ok() || !WaitAll(t->get(), {&w}).ok()) return 3;
    auto pw = (*t)->PeerWindow(0, bytes);
    if (!pw.ok()) return 4;
    std::vector<unsigned char> dst(bytes), src(bytes, 1);
    double best_window = 1e9, best_local = 1e9;
    for (int i = 0; i < 20; ++i) {
      Clock::time_point s = Clock::now();
      std::memcpy(dst.data(), pw->ptr, bytes);
      best_window = std::min(best_window, Seconds(s));
      s = Clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      best_local = std::min(best_local, Seconds(s));
    }
    if (dst[bytes - 1] != 1) return 5;
    fprintf(stderr, "[shm perf] 4 MiB read from a peer's window: %.2f GB/s; private memcpy "
                    "4 MiB: %.2f GB/s\n", bytes / best_window / 1e9, bytes / best_local / 1e9);
    const size_t big = size_t{64} << 20;
    std::vector<unsigned char> a(big, 1), b(big, 2);
    double best_big = 1e9;
    for (int i = 0; i < 4; ++i) {
      Clock::time_point s = Clock::now();
      std::memcpy(b.data(), a.data(), big);
      best_big = std::min(best_big, Seconds(s));
    }
    fprintf(stderr, "[shm perf] private memcpy 64 MiB (memory-bound reference): %.2f GB/s\n",
            big / best_big / 1e9);
    return (*t)->Signal(0).ok() ? 0 : 6;
  });
  close(pipefd[0]);
  close(pipefd[1]);
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(ShmProcesses, EightRanksOnTwoCoresFinishQuickly) {
  const int n = 8;
  Clock::time_point start = Clock::now();
  std::vector<int> codes = RunProcesses(n, [&](int r, Hub* hub) -> int {
    cpu_set_t set;
    CPU_ZERO(&set);
    int ncpu = std::min(UsableCpuCount(), 2);
    for (int c = 0; c < ncpu; ++c) CPU_SET(c, &set);
    sched_setaffinity(0, sizeof(set), &set);
    FakeBootstrap boot(hub, r);
    auto t = ShmTransport::Create(&boot, Iota(n), TestOptions());
    if (!t.ok()) return 1;
    // 200 rounds of a ring exchange + a signal barrier: latency-bound, the worst case for
    // oversubscription.
    std::vector<unsigned char> out(1000, r), in(1000);
    for (int round = 0; round < 200; ++round) {
      TransportRequest s, q;
      int next = (r + 1) % n, prev = (r + n - 1) % n;
      if (!(*t)->PostRecv(prev, 0, round, in.data(), in.size(), &q).ok()) return 2;
      if (!(*t)->PostSend(next, 0, round, out.data(), out.size(), &s).ok()) return 2;
      if (!WaitAll(t->get(), {&s, &q}, 60).ok()) return 3;
      if (in[999] != prev) return 4;
      std::vector<TransportRequest> w(n);
      std::vector<TransportRequest*> all;
      for (int p = 0; p < n; ++p) if (!(*t)->Signal(p).ok()) return 5;
      for (int p = 0; p < n; ++p) {
        if (!(*t)->PostWait(p, &w[p]).ok()) return 5;
        all.push_back(&w[p]);
      }
      if (!WaitAll(t->get(), all, 60).ok()) return 6;
    }
    return 0;
  });
  double s = Seconds(start);
  EXPECT_EQ(codes, std::vector<int>(n, 0));
  fprintf(stderr, "[shm perf] 8 processes on 2 cores, 200 x (ring step + signal barrier): %.3f s"
                  " = %.1f us/round\n", s, s * 1e6 / 200);
  EXPECT_LT(s, 60.0);  // generous: a livelock would take minutes (measured figure printed)
}

TEST(ShmProcesses, KilledPeerFailsTheOthersWithinSecondsAndLeavesNoSegments) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  std::vector<int> codes = RunProcesses(2, [&](int r, Hub* hub) -> int {
    FakeBootstrap boot(hub, r);
    auto t = ShmTransport::Create(&boot, Iota(2), TestOptions());
    if (!t.ok()) return 1;
    if (r == 1) {
      // Grow the window (a named segment rank 0 never maps), then die mid-collective.
      if (!(*t)->PrepareWindow(1 << 20).ok()) return 2;
      unsigned char b[16] = {};
      TransportRequest q;
      if (!(*t)->PostSend(0, 0, 1, b, 16, &q).ok()) return 12;
      if (!WaitAll(t->get(), {&q}).ok()) return 13;
      raise(SIGKILL);
    }
    unsigned char b[16];
    TransportRequest q1, q2, w;
    if (!(*t)->PostRecv(1, 0, 1, b, 16, &q1).ok()) return 3;
    if (!WaitAll(t->get(), {&q1}).ok()) return 4;
    if (!(*t)->PostRecv(1, 0, 2, b, 16, &q2).ok()) return 10;  // never sent
    if (!(*t)->PostWait(1, &w).ok()) return 11;
    Clock::time_point start = Clock::now();
    Status st = WaitAll(t->get(), {&q2, &w}, 20);
    double s = Seconds(start);
    fprintf(stderr, "[shm] dead peer detected after %.3f s: %s\n", s, st.message().c_str());
    if (st.code() != weftRemoteError) return 5;
    if (st.message().find("rank 1") == std::string::npos) return 6;
    if (st.message().find("pid") == std::string::npos) return 6;
    if (s > 5) return 7;
    if (!w.done.load() || w.status.ok()) return 8;
    // Nothing of this communicator left in /dev/shm.
    if (!ShmEntriesWithPrefix((*t)->segment_prefixes()).empty()) return 9;
    return 0;
  });
  close(pipefd[0]);
  close(pipefd[1]);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

// ---- /dev/shm too small ----
void ExpectClearSpaceError(const Status& st) {
  EXPECT_EQ(st.code(), weftSystemError) << st.message();
  EXPECT_NE(st.message().find("bytes free"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("/dev/shm/weft-"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--shm-size"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("WEFT_SHM_DISABLE=1"), std::string::npos) << st.message();
}

TEST(ShmTransport, SizeCapKnobGivesTheClearError) {
  // WEFT_SHM_MAX_BYTES (ShmOptions::max_bytes) below what 2 ranks need: creation fails on
  // every rank, with the message, and leaves nothing behind.
  Hub* hub = NewHub(2);
  std::vector<std::thread> th;
  std::vector<Status> results(2);
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      FakeBootstrap boot(hub, r);
      ShmOptions o = TestOptions();
      o.max_bytes = r == 0 ? 100000 : 0;  // only rank 0 is capped: rank 1 must fail too
      auto t = ShmTransport::Create(&boot, Iota(2), o);
      results[r] = t.status();
    });
  for (auto& t : th) t.join();
  FreeHub(hub);
  ExpectClearSpaceError(results[0]);
  EXPECT_NE(results[0].message().find("needed"), std::string::npos) << results[0].message();
  EXPECT_EQ(results[1].code(), weftRemoteError) << results[1].message();
  EXPECT_NE(results[1].message().find("rank 0"), std::string::npos) << results[1].message();
}

TEST(ShmTransport, SmallTmpfsInPrivateMountNamespaceGivesTheClearError) {
  // A real full /dev/shm: a 1 MiB tmpfs over /dev/shm in a private mount namespace
  // (unshare(CLONE_NEWNS), needs CAP_SYS_ADMIN), inside a child process.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char code = 0;
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      code = 'S';  // cannot: skip
      (void)!write(pipefd[1], &code, 1);
      _exit(0);
    }
    Hub* hub = NewHub(2);
    std::vector<std::thread> th;
    std::vector<Status> results(2);
    for (int r = 0; r < 2; ++r)
      th.emplace_back([&, r] {
        FakeBootstrap boot(hub, r);
        ShmOptions o;  // defaults: 2 x 1 MiB rings + 4 MiB windows do not fit in 1 MiB
        results[r] = ShmTransport::Create(&boot, Iota(2), o).status();
      });
    for (auto& t : th) t.join();
    std::string m0 = results[0].message(), m1 = results[1].message();
    bool ok = (results[0].code() == weftSystemError || results[1].code() == weftSystemError) &&
              (m0 + m1).find("bytes free") != std::string::npos &&
              (m0 + m1).find("WEFT_SHM_DISABLE=1") != std::string::npos;
    code = ok ? 'Y' : 'N';
    fprintf(stderr, "[shm] 1 MiB tmpfs: rank 0: %s\n", m0.c_str());
    // Nothing left in the small /dev/shm either.
    DIR* d = opendir("/dev/shm");
    while (struct dirent* e = d ? readdir(d) : nullptr)
      if (std::strncmp(e->d_name, "weft-", 5) == 0) code = 'L';
    if (d) closedir(d);
    (void)!write(pipefd[1], &code, 1);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  char code = 0;
  ASSERT_EQ(read(pipefd[0], &code, 1), 1);
  close(pipefd[0]);
  close(pipefd[1]);
  if (code == 'S') GTEST_SKIP() << "cannot mount a private tmpfs (needs CAP_SYS_ADMIN / unshare)";
  EXPECT_EQ(code, 'Y') << "L = a weft-* segment was left behind, N = wrong error";
}

TEST(ShmOptions, EnvironmentKnobsParseAndRejectBadValues) {
  setenv("WEFT_SHM_RING_BYTES", "256K", 1);
  setenv("WEFT_SHM_MAX_BYTES", "1G", 1);
  auto o = ShmOptionsFromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->ring_bytes_per_peer, size_t{256} << 10);
  EXPECT_EQ(o->max_bytes, size_t{1} << 30);
  setenv("WEFT_SHM_RING_BYTES", "lots", 1);
  auto bad = ShmOptionsFromEnv();
  EXPECT_EQ(bad.status().code(), weftInvalidArgument);
  EXPECT_NE(bad.status().message().find("WEFT_SHM_RING_BYTES=lots"), std::string::npos);
  unsetenv("WEFT_SHM_RING_BYTES");
  unsetenv("WEFT_SHM_MAX_BYTES");
  setenv("WEFT_SHM_DISABLE", "1", 1);
  EXPECT_TRUE(ShmOptionsFromEnv()->disabled);
  unsetenv("WEFT_SHM_DISABLE");
}

}  // namespace
}  // namespace weft
