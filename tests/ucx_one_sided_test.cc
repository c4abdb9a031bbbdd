// One-sided operations over UCX through the common Transport interface (transport.h:
// Register, PackRemoteKey, ImportRemoteKey, PostPut, PostGet, Signal, PostWait), between
// processes that are ranks of a real communicator (weftCommInitFromEnv with
// WEFT_TRANSPORT=ucx): each rank takes the transport that serves a peer from the communicator
// and does nothing ucx-specific, so the same body checks shm where shm serves a pair.
//
// The rank body (OneSidedRank) runs in this binary re-executed as a child
// (ONE_SIDED_TEST_CHILD=1, run by a global test environment). Ranks form a ring: each puts 1 MiB
// (two puts, not waited for before the signal: the signal must still follow their data) into
// the next rank's registered window and signals it with a tag; each waits for the previous
// rank's signal, checks every byte (and that nothing outside the range was written), tells
// the next rank its window is complete, gets the previous rank's window and checks it. Then:
// out-of-range put, a key imported for the wrong peer, a zero-byte put, a signal whose tag
// differs from the wait's (kTagMismatchMarker), the registration cache (same range -> same
// handle, references). Prints "OK one-sided" or "FAIL <what>".
//
// Harnesses: processes on this host with UCX_TLS=tcp, sm,tcp (both end up on tcp/lo: UCX 1.13
// refuses its shared-memory lanes in peer-failure mode) and sm (shared memory and cma for
// RMA, endpoints without failure detection; README.md) (WEFT_SHM_DISABLE=1: every pair ucx); and the 2x2 network-namespace harness (tests/netns.cmake runs this binary as
// the program of perf/netns/run.sh: ucx between namespaces, shm inside each).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPutBytes = 1 << 20;  // past every lane's eager size: zero-copy/rendezvous
constexpr size_t kOffset = 4096;
constexpr size_t kWindowBytes = kOffset + kPutBytes + 4096;
const uint64_t kDataTag = MakeCallTag(0x0ace5ed1, 1);
const uint64_t kDoneTag = MakeCallTag(0x0ace5ed1, 2);

// Drives every transport of the communicator (as the executor does: a signal to one peer
// may need its transport's progress while this rank waits on another transport) until `req`
// is done.
weftComm_t g_comm = nullptr;
Status WaitFor(Transport*, TransportRequest* req) {
  Clock::time_point start = Clock::now();
  while (!req->done.load(std::memory_order_acquire)) {
    if (Clock::now() - start > std::chrono::seconds(30)) return TimeoutError("test: request not done in 30 s");
    for (const std::unique_ptr<Transport>& t : g_comm->transports) {
      Status st = t->Progress(t->HasPending() ? 200 : 0);
      if (!st.ok()) return st;
    }
  }
  return req->status;
}

unsigned char Pattern(int seed, size_t i) { return static_cast<unsigned char>(seed * 37 + i * 11 + (i >> 10)); }

#define CHECK_OK(expr, what)                                      \
  do {                                                            \
    Status s_ = (expr);                                           \
    if (!s_.ok()) return std::string(what) + ": " + s_.message(); \
  } while (0)

// Every peer's transport must be ucx, or with ONE_SIDED_TEST_UCX_ACROSS=<ranks per host> only
// the peers on other hosts (the namespace harness: shm inside a namespace).
std::string CheckTransports(weftComm_t comm) {
  const char* across = std::getenv("ONE_SIDED_TEST_UCX_ACROSS");
  int per_host = across != nullptr ? std::atoi(across) : 0;
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    Transport* t = comm->peer_transport[p];
    bool must_be_ucx = per_host <= 0 || p / per_host != comm->rank / per_host;
    if (t == nullptr) return "no transport to rank " + std::to_string(p);
    if (must_be_ucx && std::string(t->name()) != "ucx")
      return "rank " + std::to_string(p) + " is served by " + t->name() + ", not ucx";
  }
  return "";
}

// Registers `window` on the transports of the ring neighbours and exchanges the keys: key[p]
// is peer p's window imported on the transport that serves p.
std::string ExchangeKeys(weftComm_t comm, std::vector<unsigned char>& window, std::vector<Transport::RemoteKey>* key,
                         std::vector<RegHandle>* handles) {
  const int n = comm->nranks, r = comm->rank;
  std::string record;  // per peer: u32 length + the key packed on the transport serving it
  handles->assign(n, 0);
  for (int p = 0; p < n; ++p) {
    std::string packed;
    if (p != r) {
      Transport* t = comm->peer_transport[p];
      StatusOr<RegHandle> h = t->Register(MemRef::Host(window.data(), window.size()));
      if (!h.ok()) return "register on " + std::string(t->name()) + ": " + h.status().message();
      (*handles)[p] = *h;
      StatusOr<std::string> k = t->PackRemoteKey(*h);
      if (!k.ok()) return "pack key: " + k.status().message();
      packed = *k;
    }
    uint32_t len = static_cast<uint32_t>(packed.size());
    record.append(reinterpret_cast<const char*>(&len), 4).append(packed);
  }
  std::vector<std::string> all;
  CHECK_OK(comm->bootstrap->AllGatherBlobs(record, &all), "exchange keys");
  key->assign(n, 0);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    size_t pos = 0;  // find the entry rank p packed for us
    std::string mine;
    for (int q = 0; q <= r; ++q) {
      uint32_t len = 0;
      std::memcpy(&len, all[p].data() + pos, 4);
      if (q == r) mine = all[p].substr(pos + 4, len);
      pos += 4 + len;
    }
    StatusOr<Transport::RemoteKey> k = comm->peer_transport[p]->ImportRemoteKey(p, mine);
    if (!k.ok()) return "import rank " + std::to_string(p) + "'s key: " + k.status().message();
    (*key)[p] = *k;
  }
  return "";
}

// Puts into next's window, signals; waits for prev, checks; then the get round.
std::string RingPutGet(weftComm_t comm, std::vector<unsigned char>& window, const std::vector<Transport::RemoteKey>& key) {
  const int n = comm->nranks, r = comm->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  Transport* tn = comm->peer_transport[next];
  Transport* tp = comm->peer_transport[prev];
  std::vector<unsigned char> src(kPutBytes);
  for (size_t i = 0; i < kPutBytes; ++i) src[i] = Pattern(r, i);
  const size_t half = kPutBytes / 2;
  // Static: a request a failed check leaves posted must outlive the communicator's Abort.
  static TransportRequest put1, put2, wait, get;
  CHECK_OK(tn->PostPut(next, MemRef::Host(src.data(), half), key[next], kOffset, &put1), "put 1");
  CHECK_OK(tn->PostPut(next, MemRef::Host(src.data() + half, half), key[next], kOffset + half, &put2), "put 2");
  CHECK_OK(tn->Signal(next, kDataTag), "signal after the puts");  // before they complete here
  CHECK_OK(WaitFor(tn, &put1), "put 1 completion");
  CHECK_OK(WaitFor(tn, &put2), "put 2 completion");
  if (put1.bytes != half) return "put reported " + std::to_string(put1.bytes) + " bytes, expected " + std::to_string(half);
  CHECK_OK(tp->PostWait(prev, &wait, kDataTag), "wait");
  CHECK_OK(WaitFor(tp, &wait), "wait for the data signal");
  for (size_t i = 0; i < kPutBytes; ++i)
    if (window[kOffset + i] != Pattern(prev, i))
      return "after the signal, put byte " + std::to_string(i) + " from rank " + std::to_string(prev) + " is wrong";
  for (size_t i = 0; i < kOffset; ++i)
    if (window[i] != 0 || window[kOffset + kPutBytes + i] != 0) return "a put wrote outside its range";
  // Our window is complete: next may read it. Then read prev's (filled by prev - 1).
  CHECK_OK(tn->Signal(next, kDoneTag), "signal done");
  CHECK_OK(tp->PostWait(prev, &wait, kDoneTag), "wait done");
  CHECK_OK(WaitFor(tp, &wait), "wait for the done signal");
  std::vector<unsigned char> got(kPutBytes, 0);
  CHECK_OK(tp->PostGet(prev, MemRef::Host(got.data(), kPutBytes), key[prev], kOffset, &get), "get");
  CHECK_OK(WaitFor(tp, &get), "get completion");
  if (get.bytes != kPutBytes) return "get reported " + std::to_string(get.bytes) + " bytes";
  const int prev2 = (prev + n - 1) % n;
  for (size_t i = 0; i < kPutBytes; ++i)
    if (got[i] != Pattern(prev2, i)) return "get byte " + std::to_string(i) + " from rank " + std::to_string(prev) + " is wrong";
  return "";
}

// Errors that must be named, and a tag mismatch between a signal and its wait.
std::string BadUses(weftComm_t comm, std::vector<unsigned char>& window, const std::vector<Transport::RemoteKey>& key,
                    const std::vector<RegHandle>& handles) {
  const int n = comm->nranks, r = comm->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  Transport* tn = comm->peer_transport[next];
  Transport* tp = comm->peer_transport[prev];
  static TransportRequest req;  // outlives the communicator (see RingPutGet)
  std::vector<unsigned char> small(100);
  Status bad = tn->PostPut(next, MemRef::Host(small.data(), 100), key[next], kWindowBytes - 50, &req);
  if (bad.code() != weftInvalidArgument || bad.message().find("outside") == std::string::npos)
    return "out-of-range put: " + bad.message();
  // Our own key, imported as if next had packed it.
  StatusOr<std::string> own = tn->PackRemoteKey(handles[next]);
  if (!own.ok()) return "pack: " + own.status().message();
  StatusOr<Transport::RemoteKey> wrong = tn->ImportRemoteKey(next, *own);
  if (wrong.ok() || wrong.status().message().find("packed by rank " + std::to_string(r)) == std::string::npos)
    return "a key imported for the wrong peer: " + (wrong.ok() ? std::string("accepted") : wrong.status().message());
  CHECK_OK(tn->PostPut(next, MemRef::Host(small.data(), 0), key[next], 0, &req), "zero-byte put");
  CHECK_OK(WaitFor(tn, &req), "zero-byte put completion");
  // Signal with one tag, wait for another: the wait fails naming both, nothing hangs.
  CHECK_OK(tn->Signal(next, MakeCallTag(0x0ace5ed1, 7)), "signal 7");
  CHECK_OK(tp->PostWait(prev, &req, MakeCallTag(0x0ace5ed1, 8)), "wait 8");
  Status mismatch = WaitFor(tp, &req);
  if (mismatch.ok() || mismatch.message().find(kTagMismatchMarker) == std::string::npos ||
      mismatch.message().find("call #7") == std::string::npos)
    return "a signal with another tag: " + (mismatch.ok() ? std::string("accepted") : mismatch.message());
  // The cache: the same range again is the same handle, with one more reference.
  StatusOr<RegHandle> again = tn->Register(MemRef::Host(window.data() + 10, 100));
  if (!again.ok() || *again != handles[next]) return "registering a range inside a registration made a new one";
  CHECK_OK(tn->Deregister(*again), "deregister once");
  return "";
}

std::string OneSidedRank() {
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) return std::string("init: ") + weftGetLastError(comm);
  g_comm = comm;
  std::string err = CheckTransports(comm);
  std::vector<unsigned char> window(kWindowBytes, 0);
  std::vector<Transport::RemoteKey> key;
  std::vector<RegHandle> handles;
  if (err.empty()) err = ExchangeKeys(comm, window, &key, &handles);
  if (err.empty()) err = RingPutGet(comm, window, key);
  if (err.empty()) err = BadUses(comm, window, key, handles);
  // Signals may need progress to leave (transport.h: as sends): drive every transport until
  // nothing is pending, as the executor does, before leaving the transports alone.
  for (int p = 0; err.empty() && p < comm->nranks; ++p) {
    Clock::time_point start = Clock::now();
    while (p != comm->rank && comm->peer_transport[p]->HasPending() && err.empty()) {
      Status st = comm->peer_transport[p]->Progress(1000);
      if (!st.ok()) err = "draining: " + st.message();
      if (Clock::now() - start > std::chrono::seconds(10)) err = "a signal to rank " + std::to_string(p) + " never left";
    }
  }
  // Nobody unregisters memory a peer may still read. A barrier over the transports, not the
  // bootstrap's: UCX's tcp lane completes an eager send (our last signal) once it is in its
  // own buffer, and it reaches the socket only while this rank progresses; a rank blocked in
  // the bootstrap barrier would hold back the signal its peer still waits for.
  if (weftBarrier(comm, nullptr) != weftSuccess && err.empty())
    err = std::string("final barrier: ") + weftGetLastError(comm);
  for (int p = 0; err.empty() && p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    Status st = comm->peer_transport[p]->Deregister(handles[p]);
    if (!st.ok()) err = "deregister: " + st.message();
  }
  weftCommDestroy(comm);
  return err;
}

// A child rank runs from a global test environment (after every static initializer of the
// library, which weftCommInitFromEnv needs) and exits before any test.
class ChildRank : public testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("ONE_SIDED_TEST_CHILD") == nullptr) return;
    std::string err = OneSidedRank();
    printf("%s\n", err.empty() ? "OK one-sided" : ("FAIL " + err).c_str());
    fflush(stdout);
    // exit, not _exit: static destructors run, so the bootstrap root thread rank 0 started
    // (src/core/bootstrap.cc, RootRegistry) is joined; _exit left it unjoined (TSan: thread leak).
    exit(err.empty() ? 0 : 1);
  }
};
testing::Environment* const kChildRank = testing::AddGlobalTestEnvironment(new ChildRank);

std::string SelfPath() {
  char buf[4096] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "";
}

struct Param {
  const char* tls;
  int nranks;
};

class UcxOneSidedProcesses : public testing::TestWithParam<Param> {};

TEST_P(UcxOneSidedProcesses, RingPutSignalWaitGetThroughTheTransportInterface) {
#ifndef WEFT_HAVE_UCX
  GTEST_SKIP() << "weft was built without UCX (WEFT_UCX=OFF or libucx-dev missing)";
#else
  const Param& p = GetParam();
  weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      p.nranks, {SelfPath()},
      {{"ONE_SIDED_TEST_CHILD", "1"}, {"WEFT_TRANSPORT", "ucx"}, {"WEFT_SHM_DISABLE", "1"}, {"UCX_TLS", p.tls},
       {"WEFT_INIT_TIMEOUT", "30"}},
      90);
  std::string all;
  for (int r = 0; r < p.nranks; ++r) all += "--- rank " + std::to_string(r) + ":\n" + o.output[r];
  ASSERT_FALSE(o.timed_out) << all;
  for (int r = 0; r < p.nranks; ++r) {
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << all;
    EXPECT_NE(o.output[r].find("OK one-sided"), std::string::npos) << all;
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxOneSidedProcesses,
                         testing::Values(Param{"tcp", 2}, Param{"tcp", 3}, Param{"sm,tcp", 2}, Param{"sm,tcp", 3},
                                         Param{"sm", 2}, Param{"sm", 3}),
                         [](const testing::TestParamInfo<Param>& info) {
                           std::string tls = info.param.tls;
                           return std::string(tls == "sm" ? "Sm_" : tls == "sm,tcp" ? "SmTcp_" : "Tcp_") +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

}  // namespace
}  // namespace weft
