// Registered memory and one-sided operations (transport.h: Register, PackRemoteKey,
// ImportRemoteKey, PostPut, PostGet, Signal, PostWait): two processes with shm transports
// register a private host buffer and a range of their shm window, exchange packed keys
// through the bootstrap, and move data with Put/Get ordered by Signal/Wait. Plus the
// registration cache (same range -> same handle, references) and argument errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

Status Wait(Transport* t, TransportRequest* req) {
  Clock::time_point start = Clock::now();
  while (!req->done.load(std::memory_order_acquire)) {
    if (Clock::now() - start > std::chrono::seconds(20)) return TimeoutError("test: request not done");
    WEFT_RETURN_IF_ERROR(t->Progress(1000));
  }
  return req->status;
}

unsigned char Pattern(int seed, size_t i) { return static_cast<unsigned char>(seed * 37 + i * 11 + (i >> 10)); }

#define CHECK_OK(expr, what)                                          \
  do {                                                                \
    Status s_ = (expr);                                               \
    if (!s_.ok()) return std::string(what) + ": " + s_.message();     \
  } while (0)

// One rank's part. Buffers: `host` (private memory, reached by cross-memory attach) and a
// range of the window (shared memory, reached through the peer's mapping).
std::string RankMain(const BootstrapId& id, int rank) {
  StatusOr<std::unique_ptr<Bootstrap>> bs = Bootstrap::Join(id, rank, 2, 30);
  if (!bs.ok()) return "bootstrap: " + bs.status().message();
  auto shm = ShmTransport::Create(bs->get(), {0, 1}, ShmOptions());
  if (!shm.ok()) return "create: " + shm.status().message();
  ShmTransport* t = shm->get();
  const int peer = 1 - rank;
  const size_t n = 300000, window_bytes = 65536;
  std::vector<unsigned char> host(n + 8192, 0);
  CHECK_OK(t->PrepareWindow(window_bytes), "prepare window");
  std::memset(t->LocalWindow().ptr, 0, window_bytes);
  StatusOr<RegHandle> h_host = t->Register(MemRef::Host(host.data(), host.size()));
  StatusOr<RegHandle> h_win = t->Register(t->LocalWindow().Slice(0, window_bytes));
  if (!h_host.ok() || !h_win.ok()) return "register failed";
  std::vector<std::string> all_host, all_win;
  StatusOr<std::string> k1 = t->PackRemoteKey(*h_host), k2 = t->PackRemoteKey(*h_win);
  if (!k1.ok() || !k2.ok()) return "pack failed";
  CHECK_OK((*bs)->AllGatherBlobs(*k1, &all_host), "exchange host keys");
  CHECK_OK((*bs)->AllGatherBlobs(*k2, &all_win), "exchange window keys");
  StatusOr<Transport::RemoteKey> peer_host = t->ImportRemoteKey(peer, all_host[peer]);
  StatusOr<Transport::RemoteKey> peer_win = t->ImportRemoteKey(peer, all_win[peer]);
  if (!peer_host.ok()) return "import host key: " + peer_host.status().message();
  if (!peer_win.ok()) return "import window key: " + peer_win.status().message();
  TransportRequest req;
  if (rank == 0) {
    // Put n bytes into the peer's private buffer at 4096 and 1000 bytes into its window at
    // 500, then one signal: the peer checks both after its wait.
    std::vector<unsigned char> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = Pattern(1, i);
    CHECK_OK(t->PostPut(peer, MemRef::Host(src.data(), n), *peer_host, 4096, &req), "put host");
    CHECK_OK(Wait(t, &req), "put host completion");
    if (req.bytes != n) return "put reported " + std::to_string(req.bytes) + " bytes";
    CHECK_OK(t->PostPut(peer, MemRef::Host(src.data(), 1000), *peer_win, 500, &req), "put window");
    CHECK_OK(Wait(t, &req), "put window completion");
    CHECK_OK(t->Signal(peer, 0), "signal");
    // Then get what the peer prepared in its buffer (after its signal).
    CHECK_OK(t->PostWait(peer, &req, 0), "wait");
    CHECK_OK(Wait(t, &req), "wait completion");
    std::vector<unsigned char> got(n, 0);
    CHECK_OK(t->PostGet(peer, MemRef::Host(got.data(), n), *peer_host, 0, &req), "get");
    CHECK_OK(Wait(t, &req), "get completion");
    for (size_t i = 0; i < n; ++i)
      if (got[i] != Pattern(2, i)) return "get: byte " + std::to_string(i) + " wrong";
    // Out of range: named, not performed.
    Status bad = t->PostPut(peer, MemRef::Host(src.data(), 100), *peer_win, window_bytes - 50, &req);
    if (bad.code() != weftInvalidArgument || bad.message().find("outside") == std::string::npos)
      return "out-of-range put: " + bad.message();
  } else {
    CHECK_OK(t->PostWait(peer, &req, 0), "wait");
    CHECK_OK(Wait(t, &req), "wait completion");
    for (size_t i = 0; i < 4096; ++i)
      if (host[i] != 0) return "put wrote before its offset";
    for (size_t i = 0; i < n; ++i)
      if (host[4096 + i] != Pattern(1, i)) return "put: byte " + std::to_string(i) + " wrong";
    const unsigned char* w = static_cast<const unsigned char*>(t->LocalWindow().ptr);
    for (size_t i = 0; i < 1000; ++i)
      if (w[500 + i] != Pattern(1, i)) return "window put: byte " + std::to_string(i) + " wrong";
    if (w[499] != 0 || w[1500] != 0) return "window put wrote outside its range";
    for (size_t i = 0; i < n; ++i) host[i] = Pattern(2, i);
    CHECK_OK(t->Signal(peer, 0), "signal");
  }
  CHECK_OK((*bs)->Barrier(), "final barrier");  // the peer is done reading our memory
  return "";
}

TEST(OneSidedShm, ProcessesPutGetAndSignalThroughRegisteredMemory) {
  StatusOr<BootstrapId> id =
      StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), net::Secret::Random(), 60);
  ASSERT_TRUE(id.ok()) << id.status().message();
  std::vector<pid_t> pids;
  std::vector<std::string> files;
  for (int r = 0; r < 2; ++r) {
    files.push_back("/tmp/weft_one_sided_" + std::to_string(getpid()) + "_" + std::to_string(r));
    pid_t pid = fork();
    if (pid == 0) {
      std::string report = RankMain(*id, r);
      std::ofstream(files[r]) << report;
      _exit(report.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  Clock::time_point start = Clock::now();
  std::vector<int> status(2, -1);
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (Clock::now() - start > std::chrono::seconds(60)) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        break;
      }
      usleep(10000);
    }
    status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(files[r]);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(status[r], 0) << "rank " << r << ": " << ss.str();
    unlink(files[r].c_str());
  }
}

TEST(Registration, CacheReturnsTheCoveringRegistrationAndCountsReferences) {
  StatusOr<BootstrapId> id =
      StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), net::Secret::Random(), 60);
  ASSERT_TRUE(id.ok());
  auto bs = Bootstrap::Join(*id, 0, 1, 10);
  ASSERT_TRUE(bs.ok()) << bs.status().message();
  TcpOptions o;
  o.listen_addr = net::SockAddr::Loopback(AF_INET, 0);
  auto tcp = TcpTransport::Create(bs->get(), o);
  ASSERT_TRUE(tcp.ok()) << tcp.status().message();
  std::vector<char> buf(4096);
  StatusOr<RegHandle> a = (*tcp)->Register(MemRef::Host(buf.data(), buf.size()));
  StatusOr<RegHandle> b = (*tcp)->Register(MemRef::Host(buf.data() + 100, 200));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, 0u);
  EXPECT_EQ(*a, *b) << "a range inside a registration must reuse it";
  EXPECT_TRUE((*tcp)->Deregister(*a).ok());
  EXPECT_TRUE((*tcp)->Deregister(*a).ok());
  Status third = (*tcp)->Deregister(*a);
  EXPECT_EQ(third.code(), weftInvalidArgument) << third.message();
  StatusOr<RegHandle> c = (*tcp)->Register(MemRef::Host(buf.data(), buf.size()));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a) << "handles are never reused";
  StatusOr<RegHandle> null_ptr = (*tcp)->Register(MemRef::Host(static_cast<void*>(nullptr), 10));
  EXPECT_EQ(null_ptr.status().code(), weftInvalidArgument);
  StatusOr<RegHandle> device = (*tcp)->Register(MemRef{buf.data(), 16, MemKind::kCudaDevice, 0, 0});
  EXPECT_EQ(device.status().code(), weftInvalidArgument);
  EXPECT_NE(device.status().message().find("cuda-device"), std::string::npos) << device.status().message();
  // tcp has no one-sided path: it says so by name.
  TransportRequest req;
  Status put = (*tcp)->PostPut(0, MemRef::Host(buf.data(), 16), 1, 0, &req);
  EXPECT_EQ(put.code(), weftInvalidUsage);
  EXPECT_NE(put.message().find("tcp transport: one-sided put"), std::string::npos) << put.message();
}

}  // namespace
}  // namespace weft
