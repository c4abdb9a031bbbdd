// core/bootstrap.cc: unique id packing, the root rendezvous service and the ring of setup
// collectives (see bootstrap.h for the phases).
//
// Wire formats (all integers big-endian):
//   rank -> root:  Hello{kBootstrapRoot, secret, rank, nranks} + listener address (28 bytes)
//   root -> rank:  u32 result code, u32 message length, message; when the code is success,
//                  nranks listener addresses follow.
//   ring:          Hello{kBootstrapRing, secret, rank} once, then per collective a 16-byte
//                  call header {op, sequence, bytes, root} to next, then the data.
#include "core/bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "core/bootstrap_wire.h"

namespace weft {

namespace {

constexpr uint32_t kUniqueIdMagic = 0x57465455;  // "WFTU"
constexpr uint16_t kUniqueIdVersion = 1;
// After its own deadline a rank still listens this long for the root's verdict, which names
// the missing ranks (the root's deadline usually expires first: it started earlier).
constexpr double kVerdictGraceS = 1.0;
// Replies to ranks and reading a rank's address right after its hello are bounded by this.
constexpr double kRootIoTimeoutS = 5.0;
// The largest job the rendezvous accepts (16M ranks, far beyond any machine built).
constexpr int kMaxBootstrapRanks = 1 << 24;

using bootstrap_wire::Get32;
using bootstrap_wire::Put32;

// How a root is stopped early (CancelBootstrapRoot, exit): the flag, and an eventfd that wakes
// its poll at once. The thread closes the eventfd when it ends (under `mu`, so a cancel never
// writes to a descriptor number that was reused), so a finished root holds no descriptor.
struct RootControl {
  std::atomic<bool> cancel{false};
  std::mutex mu;
  int wake_fd = -1;

  void Cancel() {
    cancel.store(true, std::memory_order_release);
    std::lock_guard<std::mutex> lock(mu);
    if (wake_fd >= 0) {
      uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof(one));  // a full counter wakes the poll just as well
    }
  }
  void CloseWakeFd() {
    std::lock_guard<std::mutex> lock(mu);
    if (wake_fd >= 0) close(wake_fd);
    wake_fd = -1;
  }
};

// HandshakeServer::WaitStep that also returns (with nothing accepted) when the root is
// cancelled.
Status WaitStepOrCancel(net::HandshakeServer& server, const net::Deadline& deadline, RootControl* control,
                        std::vector<net::HandshakeServer::Accepted>* out) {
  const size_t before = out->size();
  while (!control->cancel.load(std::memory_order_acquire)) {
    WEFT_RETURN_IF_ERROR(server.Step(out));
    if (out->size() > before || deadline.expired()) return OkStatus();
    std::vector<pollfd> fds;
    server.AppendPollFds(&fds);
    fds.push_back({control->wake_fd, POLLIN, 0});
    // Wakes at least every 100 ms so that handshake timeouts of silent clients are enforced.
    if (poll(fds.data(), fds.size(), deadline.RemainingMs(100)) < 0 && errno != EINTR) {
      return SystemError("poll on " + server.address().ToString() + ": " + net::ErrnoString(errno));
    }
  }
  return OkStatus();
}

// "rank(s) 2, 5, 6 (3 of 8 joined)", or "any rank" before the first one: at most 16 listed (with
// thousands of ranks the message must stay readable), found without a per-rank table.
template <typename ArrivedMap>
std::string MissingRanks(const ArrivedMap& arrived, int nranks) {
  if (nranks < 0) return "any rank";
  const int missing = nranks - static_cast<int>(arrived.size());
  std::string s = "rank(s) ";
  int listed = 0;
  for (int r = 0; r < nranks && listed < 16; ++r) {
    if (arrived.count(r)) continue;
    s += (listed++ ? ", " : "") + std::to_string(r);
  }
  if (missing > 16) s += ", ... (" + std::to_string(missing) + " in all)";
  return s + " (" + std::to_string(arrived.size()) + " of " + std::to_string(nranks) + " joined)";
}

// Sends {code, message, [table]} to one rank; failures are ignored (the rank may be gone, and
// it will time out on its own).
void SendVerdict(net::Socket& sock, const Status& status, const std::vector<uint8_t>& table) {
  std::string text = status.message().substr(0, bootstrap_wire::kMaxVerdictMessageBytes);
  std::vector<uint8_t> msg(bootstrap_wire::kVerdictHeadBytes + text.size());
  bootstrap_wire::EncodeRootVerdictHead(status.code(), static_cast<uint32_t>(text.size()), msg.data());
  std::memcpy(msg.data() + bootstrap_wire::kVerdictHeadBytes, text.data(), text.size());
  if (status.ok()) msg.insert(msg.end(), table.begin(), table.end());
  (void)net::SendAll(sock, msg.data(), msg.size(), net::Deadline::After(kRootIoTimeoutS));
}

// What the root has gathered: the job's size (from the first valid hello) and the ranks in.
struct RootGathering {
  struct Arrival {
    net::Socket sock;
    std::string from;  // peer address (for duplicate messages)
    uint8_t address[net::kSockAddrWireBytes];
  };
  std::string where;
  int nranks = -1;
  int first_rank = -1;
  std::map<int, Arrival> arrived;  // by rank

  bool complete() const { return nranks >= 0 && static_cast<int>(arrived.size()) >= nranks; }
  // Tells every arrived rank (and `extra`, a connection not admitted) that the rendezvous failed.
  void FailAll(const Status& s, net::Socket* extra) {
    const std::vector<uint8_t> no_table;
    for (auto& [rank, a] : arrived)
      if (a.sock.valid()) SendVerdict(a.sock, s, no_table);
    if (extra) SendVerdict(*extra, s, no_table);
  }
  Status Admit(net::HandshakeServer::Accepted* a);
};

// One accepted connection: a hello that is not a valid rank is refused alone; one that
// contradicts the others (another nranks, a rank twice) fails the rendezvous (the error).
Status RootGathering::Admit(net::HandshakeServer::Accepted* a) {
  uint8_t wire[net::kSockAddrWireBytes];
  if (!net::RecvAll(a->sock, wire, sizeof(wire), net::Deadline::After(kRootIoTimeoutS)).ok())
    return OkStatus();  // a rank that dies mid-hello will be reported missing
  StatusOr<net::SockAddr> addr = net::DecodeSockAddr(wire);
  const int r = a->hello.rank, n = a->hello.nranks;
  if (!addr.ok() || n <= 0 || n > kMaxBootstrapRanks || r < 0 || r >= n) {
    SendVerdict(a->sock, InvalidArgument(where + ": connection from " + a->sock.peer().ToString() +
                                         " says rank " + std::to_string(r) + " of nranks " +
                                         std::to_string(n) + ", which is not a valid rank (nranks <= " +
                                         std::to_string(kMaxBootstrapRanks) + ")"),
                std::vector<uint8_t>());
    return OkStatus();
  }
  if (nranks < 0) {
    nranks = n;
    first_rank = r;
  } else if (n != nranks) {
    return InvalidArgument(where + ": rank " + std::to_string(r) + " (from " + a->sock.peer().ToString() +
                           ") says nranks=" + std::to_string(n) + " but rank " +
                           std::to_string(first_rank) + " said nranks=" + std::to_string(nranks));
  }
  auto found = arrived.find(r);
  if (found != arrived.end())
    return InvalidArgument(where + ": rank " + std::to_string(r) + " joined twice (from " +
                           found->second.from + " and from " + a->sock.peer().ToString() + ")");
  Arrival& in = arrived[r];
  std::memcpy(in.address, wire, sizeof(wire));
  in.from = a->sock.peer().ToString();
  in.sock = std::move(a->sock);
  return OkStatus();
}

// The root service: one rendezvous, then return (also when `control` cancels it: it then
// tells the ranks that arrived why, so they fail at once instead of at their timeout).
//
// What it keeps grows with the ranks that actually connected, never with the nranks a hello
// claims: a hello with the right secret and nranks = 2^24 once made it allocate 3.4 GB of
// per-rank tables up front (found by fuzz/targets/bootstrap; nranks itself is capped at 2^24).
void RunRoot(net::HandshakeServer server, double timeout_s, RootControl* control) {
  RootGathering g;
  g.where = "bootstrap root " + server.address().ToString();
  net::Deadline deadline = net::Deadline::After(timeout_s);
  while (!g.complete()) {
    if (control->cancel.load(std::memory_order_acquire)) {
      g.FailAll(RemoteError(g.where + ": cancelled by the process that started it (its own join failed, "
                                      "or it is exiting) with " + std::to_string(g.arrived.size()) +
                            " rank(s) joined"),
                nullptr);
      return;
    }
    std::vector<net::HandshakeServer::Accepted> accepted;
    Status st = WaitStepOrCancel(server, deadline, control, &accepted);
    if (!st.ok()) {
      g.FailAll(st.WithContext(g.where), nullptr);
      return;
    }
    for (auto& a : accepted) {
      Status bad = g.Admit(&a);
      if (!bad.ok()) {
        g.FailAll(bad, &a.sock);
        return;
      }
    }
    if (!g.complete() && deadline.expired()) {
      g.FailAll(TimeoutError(g.where + ": timed out after " + net::SecondsString(timeout_s) +
                             " waiting for " + MissingRanks(g.arrived, g.nranks)),
                nullptr);
      return;
    }
  }
  // Success: every rank arrived, so the table is as large as the connections already held.
  std::vector<uint8_t> table(static_cast<size_t>(g.nranks) * net::kSockAddrWireBytes);
  for (auto& [rank, a] : g.arrived)
    std::memcpy(table.data() + static_cast<size_t>(rank) * net::kSockAddrWireBytes, a.address,
                sizeof(a.address));
  for (auto& [rank, a] : g.arrived) SendVerdict(a.sock, OkStatus(), table);
}

// Every root thread this process started, so that none outlives the process's state: a root
// is joined when it is cancelled (CancelBootstrapRoot), when a later StartBootstrapRoot finds it
// finished, and at exit (cancelled first, so exit waits only for a root's last
// verdicts' sends). Roots used to be detached threads: one still waiting at exit owned
// sockets and heap that LeakSanitizer reported (fuzz/README.md, the bootstrap finding), and a
// failed split could not close the root its leader had started (issue 11, minor).
class RootRegistry {
 public:
  static RootRegistry& Get() {
    static RootRegistry registry;
    return registry;
  }

  Status Start(const BootstrapId& id, net::HandshakeServer server, double timeout_s) {
    auto root = std::make_unique<Root>();
    root->id = id;
    root->pid = getpid();
    root->control.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (root->control.wake_fd < 0) {
      return SystemError("bootstrap root: eventfd: " + net::ErrnoString(errno));
    }
    Root* r = root.get();
    root->thread = std::thread([r, timeout_s, server = std::move(server)]() mutable {
      RunRoot(std::move(server), timeout_s, &r->control);
      r->control.CloseWakeFd();
      r->done.store(true, std::memory_order_release);
    });
    std::lock_guard<std::mutex> lock(mu_);
    ReapFinishedLocked();
    roots_.push_back(std::move(root));
    return OkStatus();
  }

  bool Cancel(const BootstrapId& id) {
    std::unique_ptr<Root> root;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = roots_.begin(); it != roots_.end(); ++it) {
        if ((*it)->id.root.ToString() == id.root.ToString() &&
            std::memcmp((*it)->id.secret.bytes, id.secret.bytes, sizeof(id.secret.bytes)) == 0) {
          root = std::move(*it);
          roots_.erase(it);
          break;
        }
      }
    }
    if (!root) return false;
    const bool was_running = !root->done.load(std::memory_order_acquire);
    root->control.Cancel();
    Finish(*root);  // joined outside the lock: the root may take a moment to tell its ranks
    return was_running;
  }

  ~RootRegistry() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& root : roots_) root->control.Cancel();
    for (auto& root : roots_) Finish(*root);
  }

 private:
  struct Root {
    BootstrapId id;
    pid_t pid = 0;
    RootControl control;
    std::atomic<bool> done{false};
    std::thread thread;
    ~Root() { control.CloseWakeFd(); }  // a fork()ed child's copy, whose thread never ran here
  };

  // Joins the thread — unless this is a fork()ed child, where the thread does not exist (a
  // join would wait forever): the handle is then only let go.
  static void Finish(Root& root) {
    if (!root.thread.joinable()) return;
    if (root.pid == getpid()) root.thread.join();
    else root.thread.detach();
  }

  void ReapFinishedLocked() {
    for (auto it = roots_.begin(); it != roots_.end();) {
      if ((*it)->done.load(std::memory_order_acquire)) {
        Finish(**it);
        it = roots_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<Root>> roots_;
};

}  // namespace

Status PackUniqueId(const BootstrapId& id, weftUniqueId* out) {
  if (out == nullptr) return InvalidArgument("PackUniqueId: out is NULL");
  if (id.root.family() != AF_INET && id.root.family() != AF_INET6) {
    return InvalidArgument("PackUniqueId: root address " + id.root.ToString() + " is not IPv4/IPv6");
  }
  std::memset(out->internal, 0, sizeof(out->internal));
  uint8_t* p = reinterpret_cast<uint8_t*>(out->internal);
  Put32(p, kUniqueIdMagic);
  p[4] = kUniqueIdVersion >> 8;
  p[5] = kUniqueIdVersion & 0xff;
  net::EncodeSockAddr(id.root, p + 8);
  std::memcpy(p + 8 + net::kSockAddrWireBytes, id.secret.bytes, sizeof(id.secret.bytes));
  return OkStatus();
}

StatusOr<BootstrapId> UnpackUniqueId(const weftUniqueId& uid) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(uid.internal);
  uint32_t magic = Get32(p);
  if (magic != kUniqueIdMagic) {
    return InvalidArgument("unique id: magic 0x" + [&] {
      char b[16];
      snprintf(b, sizeof(b), "%08x", magic);
      return std::string(b);
    }() + " is not a weft unique id (was it made by weftGetUniqueId?)");
  }
  int version = p[4] << 8 | p[5];
  if (version != kUniqueIdVersion) {
    return InvalidArgument("unique id: version " + std::to_string(version) +
                           ", this library reads version " + std::to_string(kUniqueIdVersion));
  }
  BootstrapId id;
  StatusOr<net::SockAddr> addr = net::DecodeSockAddr(p + 8);
  if (!addr.ok()) return addr.status().WithContext("unique id");
  id.root = *addr;
  std::memcpy(id.secret.bytes, p + 8 + net::kSockAddrWireBytes, sizeof(id.secret.bytes));
  return id;
}

StatusOr<BootstrapId> StartBootstrapRoot(const net::SockAddr& listen_addr,
                                         const net::Secret& secret, double timeout_s) {
  StatusOr<net::Socket> listener = net::Listen(listen_addr);
  BootstrapId id;
  id.secret = secret;
  if (!listener.ok()) {
    if (listen_addr.is_wildcard()) return listener.status().WithContext("bootstrap root");
    // Not an address of this host (a NAT or a name resolving elsewhere): listen on all
    // addresses with the same port; ranks still use the address they were given.
    StatusOr<net::Socket> any = net::Listen(net::SockAddr::Any(listen_addr.family(), listen_addr.port()));
    if (!any.ok()) return listener.status().WithContext("bootstrap root");
    listener = std::move(any);
    id.root = listen_addr;
    if (id.root.port() == 0) id.root.set_port(listener->peer().port());
  } else {
    id.root = listener->peer();
  }
  if (id.root.is_wildcard()) {
    int port = id.root.port();
    StatusOr<net::SockAddr> local = net::ChooseLocalAddress();
    id.root = local.ok() && local->family() == listen_addr.family()
                  ? *local : net::SockAddr::Loopback(listen_addr.family(), 0);
    id.root.set_port(port);
  }
  net::HandshakeServer server(std::move(*listener), secret, net::ConnKind::kBootstrapRoot,
                              kRootIoTimeoutS);
  // The root serves one rendezvous and ends by itself (success, error, timeout or cancel); it
  // owns everything it uses, so the caller may return first. The registry joins it.
  WEFT_RETURN_IF_ERROR(RootRegistry::Get().Start(id, std::move(server), timeout_s));
  return id;
}

bool CancelBootstrapRoot(const BootstrapId& id) { return RootRegistry::Get().Cancel(id); }

// ---- Bootstrap ----

namespace {

// Step 3 of Join: the root's verdict, the address table or why the rendezvous failed.
StatusOr<std::vector<uint8_t>> AwaitRootVerdict(net::Socket* root, const BootstrapId& id,
                                                const std::string& me, int nranks,
                                                double timeout_s, const net::Deadline& deadline) {
  net::Deadline verdict_deadline =
      timeout_s > 0 ? net::Deadline::After(deadline.RemainingSeconds() + kVerdictGraceS) : deadline;
  uint8_t head[8];
  Status st = net::RecvAll(*root, head, sizeof(head), verdict_deadline);
  if (!st.ok()) {
    if (st.code() == weftTimeout) {
      return TimeoutError(me + ": timed out after " + net::SecondsString(timeout_s) +
                          " waiting for the other ranks at root " + id.root.ToString() +
                          " (the root did not say which are missing)");
    }
    return st.WithContext(me + ": waiting for the root " + id.root.ToString() +
                          " (a root that closes without answering may have a different secret)");
  }
  // The code comes off the wire: one outside weftResult_t is the root's fault, not a value to
  // cast (found by fuzz/targets/bootstrap); bootstrap_wire judges it and the length.
  StatusOr<bootstrap_wire::RootVerdictHead> verdict = bootstrap_wire::DecodeRootVerdictHead(head);
  if (!verdict.ok()) return verdict.status().WithContext(me + ": from root " + id.root.ToString());
  std::string message(verdict->message_bytes, '\0');
  WEFT_RETURN_IF_ERROR_CTX(net::RecvAll(*root, &message[0], message.size(), verdict_deadline),
                           me + ": root verdict");
  if (verdict->code != weftSuccess) return Status(verdict->code, me + ": " + message);
  std::vector<uint8_t> table(static_cast<size_t>(nranks) * net::kSockAddrWireBytes);
  WEFT_RETURN_IF_ERROR_CTX(net::RecvAll(*root, table.data(), table.size(), verdict_deadline),
                           me + ": address table from the root");
  return table;
}

// Step 4 of Join: connect to next, accept prev (in that order: connecting never waits for the
// peer's accept, the kernel completes it from the listen backlog).
Status JoinRing(const std::vector<uint8_t>& table, net::Socket listener, net::Hello hello,
                const std::string& me, double timeout_s, const net::Deadline& deadline,
                net::Socket* next_sock, net::Socket* prev_sock) {
  const int rank = hello.rank, nranks = hello.nranks;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  const net::SockAddr ring_addr = listener.peer();
  WEFT_ASSIGN_OR_RETURN(net::SockAddr next_addr,
                        net::DecodeSockAddr(table.data() + static_cast<size_t>(next) * net::kSockAddrWireBytes));
  StatusOr<net::Socket> to_next = net::Connect(next_addr, timeout_s > 0 ? std::max(deadline.RemainingSeconds(), 0.5) : 1e9);
  if (!to_next.ok()) return to_next.status().WithContext(me + ": connecting to rank " + std::to_string(next));
  hello.kind = net::ConnKind::kBootstrapRing;
  WEFT_RETURN_IF_ERROR_CTX(net::SendHello(*to_next, hello, net::Deadline::After(kRootIoTimeoutS)),
                           me + ": connecting to rank " + std::to_string(next));
  (void)to_next->SetNoDelay();  // latency tuning only: the ring works without it
  *next_sock = std::move(*to_next);

  net::HandshakeServer ring(std::move(listener), hello.secret, net::ConnKind::kBootstrapRing,
                            kRootIoTimeoutS);
  // Everyone is known to be alive (the root heard from all), so a bounded wait suffices even
  // without a user timeout.
  net::Deadline accept_deadline =
      net::Deadline::After(timeout_s > 0 ? std::max(deadline.RemainingSeconds(), 0.0) + kRootIoTimeoutS : 60);
  while (!prev_sock->valid()) {
    std::vector<net::HandshakeServer::Accepted> accepted;
    WEFT_RETURN_IF_ERROR_CTX(ring.WaitStep(accept_deadline, &accepted), me + ": ring listener");
    for (auto& a : accepted) {
      if (a.hello.rank == prev && !prev_sock->valid()) {
        (void)a.sock.SetNoDelay();  // latency tuning only
        *prev_sock = std::move(a.sock);
      }
      // Anything else (right secret, wrong rank) cannot happen in a correct job: drop it.
    }
    if (!prev_sock->valid() && accept_deadline.expired())
      return TimeoutError(me + ": rank " + std::to_string(prev) + " never connected to the ring listener " +
                          ring_addr.ToString());
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Bootstrap>> Bootstrap::Join(const BootstrapId& id, int rank, int nranks,
                                                     double timeout_s) {
  if (nranks <= 0) return InvalidArgument("bootstrap: nranks=" + std::to_string(nranks) + " must be >= 1");
  if (rank < 0 || rank >= nranks) {
    return InvalidArgument("bootstrap: rank=" + std::to_string(rank) + " is outside 0.." +
                           std::to_string(nranks - 1));
  }
  const std::string me = "bootstrap rank " + std::to_string(rank) + "/" + std::to_string(nranks);
  net::Deadline deadline = net::Deadline::After(timeout_s);
  std::unique_ptr<Bootstrap> bs(new Bootstrap());
  bs->rank_ = rank;
  bs->nranks_ = nranks;
  bs->secret_ = id.secret;
  bs->timeout_s_ = timeout_s;

  // 1. Reach the root (retrying: it may not be listening yet).
  WEFT_ASSIGN_OR_RETURN(net::Socket root,
                        [&]() -> StatusOr<net::Socket> {
                          StatusOr<net::Socket> s = net::Connect(id.root, timeout_s > 0 ? deadline.RemainingSeconds() : 1e9);
                          if (!s.ok()) return s.status().WithContext(me + ": reaching the root");
                          return s;
                        }());
  // 2. Our ring listener, on the local address that routes to the root.
  WEFT_ASSIGN_OR_RETURN(net::SockAddr local, root.LocalAddress());
  local.set_port(0);
  bs->local_address_ = local;
  StatusOr<net::Socket> listener = net::Listen(local);
  if (!listener.ok()) return listener.status().WithContext(me + ": ring listener");
  const net::SockAddr ring_addr = listener->peer();

  net::Hello hello;
  hello.kind = net::ConnKind::kBootstrapRoot;
  hello.secret = id.secret;
  hello.rank = rank;
  hello.nranks = nranks;
  uint8_t wire[net::kHelloWireBytes + net::kSockAddrWireBytes];
  net::EncodeHello(hello, wire);
  net::EncodeSockAddr(ring_addr, wire + net::kHelloWireBytes);
  WEFT_RETURN_IF_ERROR_CTX(net::SendAll(root, wire, sizeof(wire), deadline), me + ": sending to the root");

  // 3. The root's verdict: the address table, or why the rendezvous failed.
  WEFT_ASSIGN_OR_RETURN(std::vector<uint8_t> table,
                        AwaitRootVerdict(&root, id, me, nranks, timeout_s, deadline));
  root.Close();
  if (nranks == 1) return bs;

  // 4. The ring.
  WEFT_RETURN_IF_ERROR(JoinRing(table, std::move(*listener), hello, me, timeout_s, deadline,
                                &bs->next_, &bs->prev_));
  return bs;
}

Bootstrap::~Bootstrap() = default;

void Bootstrap::Abort() {
  aborted_.store(true);
  // shutdown (not close): safe while another thread is blocked in poll/recv on these fds;
  // it wakes them with EOF. The fds are closed by the destructor.
  next_.Shutdown();
  prev_.Shutdown();
}

Status Bootstrap::Fail(Status s) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.ok()) error_ = s;
  return s;
}

std::string Bootstrap::Name(const char* op) const {
  return "bootstrap " + std::string(op) + " #" + std::to_string(sequence_) + " on rank " +
         std::to_string(rank_) + "/" + std::to_string(nranks_);
}

Status Bootstrap::CheckCall(Op op, size_t bytes, int root) {
  bootstrap_wire::CallHeader call;
  call.op = static_cast<bootstrap_wire::CallOp>(op);
  call.bytes = static_cast<uint32_t>(bytes);
  call.root = root;
  const char* name = bootstrap_wire::CallOpName(call.op);
  if (aborted_.load()) return SystemError(Name(name) + ": the bootstrap was aborted");
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_.ok()) return error_.WithContext(Name(name) + ": an earlier call failed");
  }
  ++sequence_;
  if (nranks_ == 1) return OkStatus();
  call.sequence = sequence_;
  uint8_t mine[bootstrap_wire::kCallHeaderBytes], theirs[bootstrap_wire::kCallHeaderBytes];
  bootstrap_wire::EncodeCallHeader(call, mine);
  Status st = net::SendRecvAll(next_, mine, sizeof(mine), prev_, theirs, sizeof(theirs),
                               net::Deadline::After(timeout_s_));
  if (!st.ok()) {
    if (aborted_.load()) return Fail(SystemError(Name(name) + ": the bootstrap was aborted"));
    return Fail(st.WithContext(Name(name)));
  }
  if (std::memcmp(mine, theirs, sizeof(mine)) == 0) return OkStatus();
  const int prev = (rank_ + nranks_ - 1) % nranks_;
  StatusOr<bootstrap_wire::CallHeader> other = bootstrap_wire::DecodeCallHeader(theirs);
  if (!other.ok()) {
    return Fail(other.status().WithContext(Name(name) + ": from rank " + std::to_string(prev)));
  }
  return Fail(InvalidUsage(Name(name) + " with " + std::to_string(bytes) + " bytes, root " +
                           std::to_string(root) + ": rank " + std::to_string(prev) + " called " +
                           bootstrap_wire::CallOpName(other->op) + " #" + std::to_string(other->sequence) +
                           " with " + std::to_string(other->bytes) + " bytes, root " +
                           std::to_string(other->root)));
}

Status Bootstrap::AllGather(const void* mine, size_t bytes, void* all) {
  if (bytes > 0 && (mine == nullptr || all == nullptr)) {
    return InvalidArgument("bootstrap allgather: NULL buffer for " + std::to_string(bytes) + " bytes");
  }
  WEFT_RETURN_IF_ERROR(CheckCall(Op::kAllGather, bytes, 0));
  char* out = static_cast<char*>(all);
  if (bytes > 0 && out + static_cast<size_t>(rank_) * bytes != mine) {
    std::memmove(out + static_cast<size_t>(rank_) * bytes, mine, bytes);
  }
  // Ring allgather. Step s: send block (rank - s) to next, receive block (rank - s - 1) from
  // prev; after nranks-1 steps every block has travelled around.
  for (int s = 0; s < nranks_ - 1; ++s) {
    int send_block = (rank_ - s + nranks_) % nranks_;
    int recv_block = (rank_ - s - 1 + nranks_) % nranks_;
    Status st = net::SendRecvAll(next_, out + static_cast<size_t>(send_block) * bytes, bytes, prev_,
                                 out + static_cast<size_t>(recv_block) * bytes, bytes,
                                 net::Deadline::After(timeout_s_));
    if (!st.ok()) {
      if (aborted_.load()) return Fail(SystemError(Name("allgather") + ": the bootstrap was aborted"));
      return Fail(st.WithContext(Name("allgather") + " step " + std::to_string(s)));
    }
  }
  return OkStatus();
}

Status Bootstrap::Broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= nranks_) {
    return InvalidArgument("bootstrap broadcast: root=" + std::to_string(root) + " is outside 0.." +
                           std::to_string(nranks_ - 1));
  }
  if (bytes > 0 && buf == nullptr) return InvalidArgument("bootstrap broadcast: buf is NULL");
  WEFT_RETURN_IF_ERROR(CheckCall(Op::kBroadcast, bytes, root));
  if (nranks_ == 1) return OkStatus();
  // Pass along the ring from root: receive from prev (unless root), forward to next (unless
  // next is root).
  int next = (rank_ + 1) % nranks_;
  Status st;
  if (rank_ != root) st = net::RecvAll(prev_, buf, bytes, net::Deadline::After(timeout_s_));
  if (st.ok() && next != root) st = net::SendAll(next_, buf, bytes, net::Deadline::After(timeout_s_));
  if (!st.ok()) {
    if (aborted_.load()) return Fail(SystemError(Name("broadcast") + ": the bootstrap was aborted"));
    return Fail(st.WithContext(Name("broadcast") + " from root " + std::to_string(root)));
  }
  return OkStatus();
}

Status Bootstrap::Barrier() {
  // An allgather of one byte: a rank's gather completes only once every rank contributed,
  // i.e. entered the barrier.
  std::vector<char> all(static_cast<size_t>(nranks_));
  char mine = 1;
  return AllGather(&mine, 1, all.data()).WithContext("barrier");
}

}  // namespace weft
