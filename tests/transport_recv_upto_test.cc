// Receives of up to N bytes (Transport::PostRecvUpTo), on every transport: a message shorter
// than the posted receive arrives and TransportRequest::bytes reports its size; exact-size
// receives (PostRecv) keep failing on any other size; a message longer than the receive fails
// that receive as a mismatch and the stream stays usable for the next message. Both the
// "receive posted first" and the "message arrived first" (buffered) paths are covered.
//
// Two ranks are two threads, each with its own bootstrap (a loopback rendezvous) and its own
// transport instance, as in a real job (inproc: one hub shared by two transports).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
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

// Drives `t` until every request is done (or 20 s pass); returns the first failure.
Status Wait(Transport* t, const std::vector<TransportRequest*>& reqs) {
  Clock::time_point start = Clock::now();
  while (true) {
    bool all = true;
    for (TransportRequest* r : reqs) all &= r->done.load(std::memory_order_acquire);
    if (all) return OkStatus();
    if (Clock::now() - start > std::chrono::seconds(20)) return TimeoutError("test: requests not done");
    Status st = t->Progress(1000);
    if (!st.ok()) return st;
  }
}

std::vector<unsigned char> Bytes(size_t n, int seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(seed * 31 + i * 7 + (i >> 9));
  return v;
}

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
  Status st = Wait(t, ptrs);
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
    if (st.ok()) st = Wait(t, {&req});
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

// Runs Sender on rank 0 and Receiver on rank 1 over transports made by make(rank, bootstrap).
void RunPair(const std::function<StatusOr<std::unique_ptr<Transport>>(int, Bootstrap*)>& make) {
  StatusOr<BootstrapId> id =
      StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), net::Secret::Random(), 60);
  ASSERT_TRUE(id.ok()) << id.status().message();
  std::string result[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(*id, r, 2, 30);
      if (!bs.ok()) {
        result[r] = "bootstrap: " + bs.status().message();
        return;
      }
      StatusOr<std::unique_ptr<Transport>> t = make(r, bs->get());
      if (!t.ok()) {
        result[r] = "create: " + t.status().message();
        return;
      }
      result[r] = r == 0 ? Sender(t->get()) : Receiver(t->get());
      (void)(*bs)->Barrier();  // both done before either transport goes away
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(result[0], "") << "sender";
  EXPECT_EQ(result[1], "") << "receiver";
}

TEST(RecvUpTo, Tcp) {
  RunPair([](int, Bootstrap* bs) -> StatusOr<std::unique_ptr<Transport>> {
    TcpOptions o;
    o.listen_addr = net::SockAddr::Loopback(AF_INET, 0);
    auto t = TcpTransport::Create(bs, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  });
}

TEST(RecvUpTo, Shm) {
  RunPair([](int, Bootstrap* bs) -> StatusOr<std::unique_ptr<Transport>> {
    ShmOptions o;
    o.ring_bytes_per_peer = 64 << 10;  // the large message wraps the ring several times
    o.single_copy_min_bytes = 128 << 10;
    auto t = ShmTransport::Create(bs, {0, 1}, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  });
}

#ifdef WEFT_HAVE_UCX
TEST(RecvUpTo, Ucx) {
  RunPair([](int, Bootstrap* bs) -> StatusOr<std::unique_ptr<Transport>> {
    UcxOptions o;
    o.tls = "tcp";
    auto t = UcxTransport::Create(bs, o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(*t));
  });
}
#else
TEST(RecvUpTo, Ucx) { GTEST_SKIP() << "weft was built without UCX"; }
#endif

TEST(RecvUpTo, Inproc) {
  auto hub = std::make_shared<InprocHub>(2);
  InprocTransport t0(hub, 0), t1(hub, 1);
  std::string r0, r1;
  std::thread a([&] { r0 = Sender(&t0); });
  std::thread b([&] { r1 = Receiver(&t1); });
  a.join();
  b.join();
  EXPECT_EQ(r0, "") << "sender";
  EXPECT_EQ(r1, "") << "receiver";
}

}  // namespace
}  // namespace weft
