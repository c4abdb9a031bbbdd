// The contract every transport keeps (transports/transport.h), run on each: inproc, shm, tcp
// and ucx (where built). Ranks are threads, each with its own bootstrap (a loopback rendezvous)
// and its own transport instance as in a real job (inproc: one hub shared by the instances).
// Transport-specific behaviour (wire formats, handshakes, forged headers, kills of whole
// processes) stays in each transport's own test; what is common lives here once (issue 34:
// tcp's and ucx's tests were copies of each other; the receive-up-to-N suite joined them).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "transports/inproc/inproc_transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#ifdef WEFT_HAVE_UCX
#include "transports/ucx/ucx_transport.h"
#endif

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

// Drives `t` until every request is done (or 60 s pass: generous for a loaded machine);
// returns the first failure of the transport itself (requests carry their own status).
Status WaitAll(Transport* t, const std::vector<TransportRequest*>& reqs) {
  const Clock::time_point start = Clock::now();
  while (true) {
    bool all = true;
    for (TransportRequest* r : reqs) all = all && r->done.load(std::memory_order_acquire);
    if (all) return OkStatus();
    if (Clock::now() - start > std::chrono::seconds(60)) return TimeoutError("test: requests not done");
    WEFT_RETURN_IF_ERROR(t->Progress(1000));
  }
}

uint8_t Pattern(int from, int to, int channel, int msg, size_t i) {
  return static_cast<uint8_t>(from * 37 + to * 11 + channel * 5 + msg * 3 + i * 7 + (i >> 10));
}

// One rank's transport for `kind`; `hub` is shared by inproc's ranks.
StatusOr<std::unique_ptr<Transport>> Make(const std::string& kind, int nranks, Bootstrap* bs,
                                          const std::shared_ptr<InprocHub>& hub) {
  if (kind == "inproc") return std::unique_ptr<Transport>(new InprocTransport(hub, bs->rank()));
  if (kind == "shm") {
    std::vector<int> local;
    for (int r = 0; r < nranks; ++r) local.push_back(r);
    ShmOptions o;
    o.ring_bytes_per_peer = 64 << 10;      // large messages wrap the ring several times
    o.single_copy_min_bytes = 128 << 10;  // and the largest take the single-copy path
    WEFT_ASSIGN_OR_RETURN(std::unique_ptr<ShmTransport> t, ShmTransport::Create(bs, local, o));
    return std::unique_ptr<Transport>(std::move(t));
  }
  if (kind == "tcp") {
    TcpOptions o;
    o.listen_addr = net::SockAddr::Loopback(AF_INET, 0);
    WEFT_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> t, TcpTransport::Create(bs, o));
    return std::unique_ptr<Transport>(std::move(t));
  }
#ifdef WEFT_HAVE_UCX
  if (kind == "ucx") {
    UcxOptions o;
    o.tls = "tcp";
    WEFT_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> t, UcxTransport::Create(bs, o));
    return std::unique_ptr<Transport>(std::move(t));
  }
#endif
  return InvalidArgument("test: no transport '" + kind + "'");
}

std::vector<unsigned char> Bytes(size_t n, int seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(seed * 31 + i * 7 + (i >> 9));
  return v;
}

// Receives of up to N bytes (Transport::PostRecvUpTo): a message shorter than the posted
// receive arrives and TransportRequest::bytes reports its size; exact-size receives (PostRecv)
// keep failing on any other size; a message longer than the receive fails that receive as a
// mismatch and the stream stays usable for the next message. Both the "receive posted first"
// and the "message arrived first" (buffered) paths are covered.
constexpr uint64_t kTag = 0x1234000000000005ULL;
// Message sizes the sender sends, in order, and what rank 1 posts for each.
struct Expectation {
  size_t sent;
  size_t posted;
  bool up_to;
  bool fits;
};
const std::vector<Expectation>& Script() {
  static const std::vector<Expectation> s = {
      {100, 1000, true, true},         // short message, receive posted first
      {0, 64, true, true},             // empty message into a non-empty receive
      {300000, 1 << 20, true, true},   // large (single-copy / rendezvous paths)
      {200, 200, false, true},         // exact size still works and reports its size
      {2000, 1000, true, false},       // longer than the receive: a mismatch
      {150, 100, false, false},        // exact-size receive of another size: a mismatch
      {50, 4096, true, true},          // the stream is still in sync afterwards
      {77, 4096, true, true},          // arrives before its receive is posted (buffered)
  };
  return s;
}

std::string Sender(Transport* t) {
  const auto& script = Script();
  std::vector<std::vector<unsigned char>> data;
  std::vector<TransportRequest> reqs(script.size());
  std::vector<TransportRequest*> ptrs;
  for (size_t k = 0; k < script.size(); ++k) data.push_back(Bytes(script[k].sent, static_cast<int>(k)));
  for (size_t k = 0; k < script.size(); ++k) {
    Status st = t->PostSend(1, 0, kTag, data[k].data(), data[k].size(), &reqs[k]);
    if (!st.ok()) return "send " + std::to_string(k) + ": " + st.message();
    ptrs.push_back(&reqs[k]);
  }
  Status st = WaitAll(t, ptrs);
  return st.ok() ? "" : "sends: " + st.message();
}

std::string Receiver(Transport* t) {
  const auto& script = Script();
  std::string fails;
  for (size_t k = 0; k < script.size(); ++k) {
    const Expectation& e = script[k];
    // The last message is left to arrive first: let it land in the transport's buffer.
    if (k + 1 == script.size()) {
      for (int i = 0; i < 50; ++i) (void)t->Progress(1000);
    }
    std::vector<unsigned char> buf(e.posted + 16, 0xEE);
    TransportRequest req;
    Status st = e.up_to ? t->PostRecvUpTo(0, 0, kTag, buf.data(), e.posted, &req)
                        : t->PostRecv(0, 0, kTag, buf.data(), e.posted, &req);
    if (st.ok()) st = WaitAll(t, {&req});
    if (!st.ok()) return "message " + std::to_string(k) + ": post/progress failed: " + st.message();
    std::string where = "message " + std::to_string(k) + " (" + std::to_string(e.sent) + " bytes into " +
                        (e.up_to ? "at most " : "exactly ") + std::to_string(e.posted) + "): ";
    if (!e.fits) {
      if (req.status.ok()) fails += where + "succeeded, expected a mismatch\n";
      else if (req.status.message().find(kTagMismatchMarker) == std::string::npos)
        fails += where + "failed without the mismatch marker: " + req.status.message() + "\n";
      continue;
    }
    if (!req.status.ok()) {
      fails += where + req.status.message() + "\n";
      continue;
    }
    if (req.bytes != e.sent) fails += where + "reported " + std::to_string(req.bytes) + " bytes\n";
    std::vector<unsigned char> want = Bytes(e.sent, static_cast<int>(k));
    if (e.sent > 0 && std::memcmp(buf.data(), want.data(), e.sent) != 0) fails += where + "wrong data\n";
    if (buf[e.posted] != 0xEE) fails += where + "wrote past the posted size\n";
  }
  return fails;
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
#ifndef WEFT_HAVE_UCX
    if (GetParam() == "ucx") GTEST_SKIP() << "weft was built without UCX (libucx-dev not found or WEFT_UCX=OFF)";
#endif
  }
  // Runs body(rank, transport) on n ranks as threads; both (all) finish before any transport
  // goes away.
  void RunRanks(int n, const std::function<void(int, Transport*)>& body) {
    StatusOr<BootstrapId> id = StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), net::Secret::Random(), 60);
    ASSERT_TRUE(id.ok()) << id.status().message();
    auto hub = std::make_shared<InprocHub>(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(*id, r, n, 60);
        ASSERT_TRUE(bs.ok()) << bs.status().message();
        StatusOr<std::unique_ptr<Transport>> t = Make(GetParam(), n, bs->get(), hub);
        ASSERT_TRUE(t.ok()) << "rank " << r << ": " << t.status().message();
        body(r, t->get());
        (void)(*bs)->Barrier();
      });
    }
    for (auto& t : threads) t.join();
  }
};

// Every ordered pair exchanges one message at once, sizes from empty to a ring's many wraps.
TEST_P(Conformance, EveryPairExact) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{4097}, size_t{(1 << 20) + 3}}) {
    RunRanks(3, [&](int r, Transport* t) {
      const int n = 3;
      std::vector<std::vector<uint8_t>> out(n), in(n);
      std::vector<TransportRequest> reqs(2 * n);
      std::vector<TransportRequest*> ptrs;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        const int channel = (r + p) % 3;  // the same on both sides of the pair
        out[p].resize(count);
        in[p].assign(count, 0xEE);
        for (size_t i = 0; i < count; ++i) out[p][i] = Pattern(r, p, channel, 0, i);
        ASSERT_TRUE(t->PostRecv(p, channel, 7, in[p].data(), count, &reqs[2 * p]).ok());
        ASSERT_TRUE(t->PostSend(p, channel, 7, out[p].data(), count, &reqs[2 * p + 1]).ok());
        ptrs.push_back(&reqs[2 * p]);
        ptrs.push_back(&reqs[2 * p + 1]);
      }
      Status st = WaitAll(t, ptrs);
      ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.message();
      for (TransportRequest* q : ptrs) ASSERT_TRUE(q->status.ok()) << q->status.message();
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        const int channel = (r + p) % 3;
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(in[p][i], Pattern(p, r, channel, 0, i)) << count << " bytes from " << p << " at " << i;
      }
    });
  }
}

// Messages on 4 channels, interleaved by the sender; the receiver posts channel by channel in
// the reverse order, some after the data arrived: per-channel order holds.
TEST_P(Conformance, PerChannelOrder) {
  constexpr int kChannels = 4, kPerChannel = 5;
  constexpr size_t kBytes = 3000;
  RunRanks(2, [&](int r, Transport* t) {
    std::vector<std::vector<uint8_t>> bufs(kChannels * kPerChannel, std::vector<uint8_t>(kBytes));
    std::vector<TransportRequest> reqs(kChannels * kPerChannel);
    std::vector<TransportRequest*> ptrs;
    for (auto& q : reqs) ptrs.push_back(&q);
    if (r == 0) {
      for (int m = 0; m < kPerChannel; ++m)
        for (int c = 0; c < kChannels; ++c) {
          auto& b = bufs[c * kPerChannel + m];
          for (size_t i = 0; i < kBytes; ++i) b[i] = Pattern(0, 1, c, m, i);
          ASSERT_TRUE(t->PostSend(1, c, 100 + m, b.data(), kBytes, &reqs[c * kPerChannel + m]).ok());
        }
    } else {
      for (int c = kChannels - 1; c >= 0; --c) {
        if (c == 1) (void)t->Progress(100000);  // let later channels' data arrive unexpected
        for (int m = 0; m < kPerChannel; ++m)
          ASSERT_TRUE(t->PostRecv(0, c, 100 + m, bufs[c * kPerChannel + m].data(), kBytes,
                                  &reqs[c * kPerChannel + m]).ok());
      }
    }
    Status st = WaitAll(t, ptrs);
    ASSERT_TRUE(st.ok()) << st.message();
    for (TransportRequest* q : ptrs) ASSERT_TRUE(q->status.ok()) << q->status.message();
    if (r == 1)
      for (int c = 0; c < kChannels; ++c)
        for (int m = 0; m < kPerChannel; ++m)
          for (size_t i = 0; i < kBytes; ++i)
            ASSERT_EQ(bufs[c * kPerChannel + m][i], Pattern(0, 1, c, m, i)) << "channel " << c << " message " << m;
  });
}

// A receive whose tag or size disagrees with the message fails naming the mismatch; the
// stream stays in sync, so the next message on the channel still arrives.
TEST_P(Conformance, MismatchFailsThatReceiveOnly) {
  RunRanks(2, [&](int r, Transport* t) {
    uint8_t a[64] = {}, b[64] = {}, c[64] = {};
    TransportRequest q1, q2, q3;
    if (r == 0) {
      for (size_t i = 0; i < 64; ++i) a[i] = b[i] = c[i] = static_cast<uint8_t>(i);
      ASSERT_TRUE(t->PostSend(1, 0, 11, a, 64, &q1).ok());
      ASSERT_TRUE(t->PostSend(1, 0, 12, b, 64, &q2).ok());
      ASSERT_TRUE(t->PostSend(1, 0, 13, c, 64, &q3).ok());
      ASSERT_TRUE(WaitAll(t, {&q1, &q2, &q3}).ok());
      return;
    }
    ASSERT_TRUE(t->PostRecv(0, 0, 99, a, 64, &q1).ok());  // wrong tag
    ASSERT_TRUE(t->PostRecv(0, 0, 12, b, 32, &q2).ok());  // wrong size
    ASSERT_TRUE(t->PostRecv(0, 0, 13, c, 64, &q3).ok());
    ASSERT_TRUE(WaitAll(t, {&q1, &q2, &q3}).ok());
    EXPECT_NE(q1.status.message().find(kTagMismatchMarker), std::string::npos) << q1.status.message();
    EXPECT_NE(q2.status.message().find(kTagMismatchMarker), std::string::npos) << q2.status.message();
    ASSERT_TRUE(q3.status.ok()) << q3.status.message();
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(c[i], i);
  });
}

// Out-of-range peers and channels and a NULL buffer are refused, naming the argument, and
// leave nothing pending.
TEST_P(Conformance, BadArgumentsAreRefused) {
  RunRanks(2, [&](int r, Transport* t) {
    TransportRequest req;
    char b = 0;
    EXPECT_EQ(t->PostSend(2, 0, 0, &b, 1, &req).code(), weftInvalidArgument);
    // Only shm carries a rank's messages to itself (its own ring); the others refuse.
    if (GetParam() != "shm") EXPECT_EQ(t->PostSend(r, 0, 0, &b, 1, &req).code(), weftInvalidArgument);
    EXPECT_EQ(t->PostRecv(-1, 0, 0, &b, 1, &req).code(), weftInvalidArgument);
    EXPECT_EQ(t->PostRecv(1 - r, -1, 0, &b, 1, &req).code(), weftInvalidArgument);
    Status null_buf = t->PostRecv(1 - r, 0, 0, nullptr, 1, &req);
    EXPECT_EQ(null_buf.code(), weftInvalidArgument) << null_buf.message();
    // Device memory (MemRef kind): refused by name before any byte is touched, in every
    // direction (the host copy would fault; device buffers are staged).
    const MemRef device{&b, 1, MemKind::kCudaDevice, 3, 0};
    for (Status st : {t->PostSend(1 - r, 0, 0, device, &req), t->PostRecv(1 - r, 0, 0, device, &req),
                      t->PostRecvUpTo(1 - r, 0, 0, device, &req)}) {
      EXPECT_EQ(st.code(), weftInvalidArgument) << st.message();
      EXPECT_NE(st.message().find("cuda-device memory of device 3"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(GetParam()), std::string::npos) << st.message();
    }
    EXPECT_FALSE(t->HasPending());
  });
}

// Abort from another thread completes a pending receive with the abort's status, cuts a
// blocking Progress short, and makes later posts fail; a second Abort is harmless.
TEST_P(Conformance, AbortFromAnotherThread) {
  RunRanks(2, [&](int r, Transport* t) {
    if (r == 1) return;
    uint64_t x = 0;
    TransportRequest q;
    ASSERT_TRUE(t->PostRecv(1, 0, 1, &x, 8, &q).ok());
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      t->Abort(SystemError("test abort"));
    });
    const Clock::time_point t0 = Clock::now();
    while (!q.done.load() && Clock::now() - t0 < std::chrono::seconds(60)) (void)t->Progress(20000000);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    aborter.join();
    ASSERT_TRUE(q.done.load());
    // An uncut Progress returns after 20 s; the abort comes at 0.2 s. The 5 s bound leaves
    // seconds of slack for a loaded 2-core machine and still tells the two apart.
    EXPECT_LT(took, 5.0);
    EXPECT_NE(q.status.message().find("test abort"), std::string::npos) << q.status.message();
    EXPECT_FALSE(t->HasPending());
    TransportRequest s;
    EXPECT_FALSE(t->PostSend(1, 0, 2, &x, 8, &s).ok());
    t->Abort(SystemError("again"));
  });
}

TEST_P(Conformance, ReceiveUpToN) {
  RunRanks(2, [&](int r, Transport* t) {
    EXPECT_EQ(r == 0 ? Sender(t) : Receiver(t), "") << (r == 0 ? "sender" : "receiver");
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance, ::testing::Values("inproc", "shm", "tcp", "ucx"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace weft
