// core/elastic.cc: revoke, shrink, grow and failed ranks (core/elastic.h: how survivors meet).
//
// Shrink's wire, on a recovery connection (native byte order: the ranks of a job share it, as
// the bootstrap's blobs assume):
//   survivor -> coordinator: net::Hello {kRecovery, secret, old rank, old size, index = n},
//                            then its n excluded ranks (int32 each);
//   coordinator -> survivor: verdict (int32: kJoin, kExcluded, kCoordinatorExcluded), the
//                            member count m (int32), the m members' old ranks (int32 each),
//                            the new communicator's weftUniqueId.
#include "core/elastic.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/init.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

enum Verdict : int32_t { kJoin = 0, kExcluded = 1, kCoordinatorExcluded = 2 };

// How long a survivor waits to connect to a candidate coordinator before counting it dead,
// and how long the coordinator's probe of a missing rank waits. A live process's listener is
// accepted by its kernel at once, whatever the process does; only a dead one refuses.
constexpr double kConnectS = 1.0;
constexpr double kProbeS = 0.2;
constexpr auto kProbeEvery = std::chrono::milliseconds(300);

std::string RankList(const std::set<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s.empty() ? "none" : s;
}

net::Deadline ShrinkDeadline(const weftComm* comm) {
  return comm->timeout_s > 0 ? net::Deadline::After(comm->timeout_s) : net::Deadline::Never();
}

// What the meeting decided, as the coordinator sends it.
struct Meeting {
  int32_t verdict = kJoin;
  std::vector<int32_t> members;  // old ranks, increasing
  weftUniqueId id;
};

Status SendMeeting(net::Socket& sock, const Meeting& m, const net::Deadline& deadline) {
  std::vector<int32_t> words = {m.verdict, static_cast<int32_t>(m.members.size())};
  words.insert(words.end(), m.members.begin(), m.members.end());
  WEFT_RETURN_IF_ERROR(net::SendAll(sock, words.data(), words.size() * sizeof(int32_t), deadline));
  return net::SendAll(sock, &m.id, sizeof(m.id), deadline);
}

Status RecvMeeting(net::Socket& sock, int nranks, const net::Deadline& deadline, Meeting* m) {
  int32_t head[2];
  WEFT_RETURN_IF_ERROR(net::RecvAll(sock, head, sizeof(head), deadline));
  if (head[1] < 0 || head[1] > nranks)
    return InternalError("weftCommShrink: the coordinator sent " + std::to_string(head[1]) + " members");
  m->verdict = head[0];
  m->members.resize(head[1]);
  WEFT_RETURN_IF_ERROR(net::RecvAll(sock, m->members.data(), m->members.size() * sizeof(int32_t), deadline));
  return net::RecvAll(sock, &m->id, sizeof(m->id), deadline);
}

// A survivor's side of step 1: sends `exclude` to `coordinator`. Unavailable: the coordinator
// is dead (refused, or closed before answering): the caller excludes it and walks on.
Status AskCoordinator(weftComm* comm, int coordinator, const std::set<int>& exclude,
                      const net::Deadline& deadline, Meeting* m) {
  StatusOr<net::Socket> sock = net::Connect(comm->elastic->recovery_addr[coordinator], kConnectS);
  if (!sock.ok()) return Status(weftInProgress, sock.status().message());
  net::Hello hello;
  hello.kind = net::ConnKind::kRecovery;
  hello.secret = comm->bootstrap->secret();
  hello.rank = comm->rank;
  hello.nranks = comm->nranks;
  hello.index = static_cast<int32_t>(exclude.size());
  std::vector<int32_t> list(exclude.begin(), exclude.end());
  Status st = net::SendHello(*sock, hello, deadline);
  if (st.ok()) st = net::SendAll(*sock, list.data(), list.size() * sizeof(int32_t), deadline);
  if (st.ok()) st = RecvMeeting(*sock, comm->nranks, deadline, m);
  if (st.ok() || st.code() == weftTimeout) return st;
  return Status(weftInProgress, st.message());  // it died while we waited
}

// The coordinator's bookkeeping (steps 2 and 3).
struct Gathering {
  std::set<int> excluded;               // the union so far, plus ranks found dead
  std::set<int> dead;                   // found dead by a probe
  std::set<int> here;                   // arrived, this rank included
  std::vector<std::pair<int, net::Socket>> arrivals;
  std::vector<Clock::time_point> next_probe;
};

// Takes in the survivors that arrived on the listener (with their lists).
Status Admit(weftComm* comm, Gathering* g, const net::Deadline& deadline) {
  std::vector<net::HandshakeServer::Accepted> accepted;
  WEFT_RETURN_IF_ERROR(comm->elastic->recovery.WaitStep(
      net::Deadline::After(std::min(0.05, deadline.RemainingSeconds())), &accepted));
  for (net::HandshakeServer::Accepted& a : accepted) {
    const net::Hello& h = a.hello;
    if (h.nranks != comm->nranks || h.rank < 0 || h.rank >= comm->nranks || h.index < 0 ||
        h.index > comm->nranks || g->here.count(h.rank))
      continue;  // not a survivor of this communicator: dropped
    std::vector<int32_t> list(h.index);
    if (!net::RecvAll(a.sock, list.data(), list.size() * sizeof(int32_t), net::Deadline::After(5)).ok())
      continue;  // it died on the way: the probes will find it
    for (int32_t r : list)
      if (r >= 0 && r < comm->nranks) g->excluded.insert(r);
    g->here.insert(h.rank);
    g->arrivals.emplace_back(h.rank, std::move(a.sock));
  }
  return OkStatus();
}

// Probes the ranks neither excluded nor arrived; returns how many are still awaited.
int ProbeMissing(weftComm* comm, Gathering* g) {
  int missing = 0;
  for (int r = 0; r < comm->nranks; ++r) {
    if (g->excluded.count(r) || g->here.count(r)) continue;
    if (Clock::now() >= g->next_probe[r]) {
      g->next_probe[r] = Clock::now() + kProbeEvery;
      if (!net::Connect(comm->elastic->recovery_addr[r], kProbeS).ok()) {
        g->excluded.insert(r);
        g->dead.insert(r);
        continue;
      }
    }
    ++missing;
  }
  return missing;
}

Status Coordinate(weftComm* comm, const std::set<int>& exclude, const net::Deadline& deadline,
                  Meeting* out) {
  Gathering g;
  g.excluded = exclude;
  g.here.insert(comm->rank);
  g.next_probe.assign(comm->nranks, Clock::now());
  for (;;) {
    if (ProbeMissing(comm, &g) == 0) break;  // everyone arrived or is excluded: no wait
    WEFT_RETURN_IF_ERROR(Admit(comm, &g, deadline));
    if (deadline.expired()) {
      std::set<int> missing;
      for (int r = 0; r < comm->nranks; ++r)
        if (!g.excluded.count(r) && !g.here.count(r)) missing.insert(r);
      return TimeoutError("weftCommShrink: rank(s) " + RankList(missing) +
                          " neither arrived nor were found dead in time (WEFT_TIMEOUT)");
    }
  }
  {
    std::lock_guard<std::mutex> lock(comm->elastic->mu);
    comm->elastic->failed.insert(g.dead.begin(), g.dead.end());
  }
  Meeting m;
  for (int r = 0; r < comm->nranks; ++r)
    if (!g.excluded.count(r)) m.members.push_back(r);
  Status st;
  if (g.excluded.count(comm->rank)) {
    m.verdict = kCoordinatorExcluded;
    st = InvalidUsage("weftCommShrink: rank " + std::to_string(comm->rank) +
                      " is alive and the lowest survivor, but another survivor's list excludes it "
                      "(excluded: " + RankList(g.excluded) + ")");
  } else {
    StatusOr<BootstrapId> id = CreateUniqueId();
    st = id.ok() ? PackUniqueId(*id, &m.id) : id.status();
  }
  for (auto& [rank, sock] : g.arrivals) {
    Meeting mine = m;
    if (mine.verdict == kJoin && g.excluded.count(rank)) mine.verdict = kExcluded;
    (void)SendMeeting(sock, mine, deadline);  // one that died meanwhile fails the new init
  }
  *out = std::move(m);
  return st;
}

// Steps 1-3 from this rank's side: the agreed membership and rendezvous.
Status Meet(weftComm* comm, std::set<int> exclude, Meeting* m) {
  const net::Deadline deadline = ShrinkDeadline(comm);
  for (int c = 0; c < comm->nranks; ++c) {
    if (exclude.count(c)) continue;
    if (c == comm->rank) return Coordinate(comm, exclude, deadline, m);
    Status st = AskCoordinator(comm, c, exclude, deadline, m);
    if (st.code() != weftInProgress) return st.WithContext("weftCommShrink (coordinator: rank " + std::to_string(c) + ")");
    exclude.insert(c);  // dead: the next rank up coordinates
    std::lock_guard<std::mutex> lock(comm->elastic->mu);
    comm->elastic->failed.insert(c);
  }
  return InternalError("weftCommShrink: no coordinator (this rank excluded itself)");
}

}  // namespace

Status StartRecoveryListener(weftComm* comm, Bootstrap* bs) {
  auto state = std::make_shared<ElasticState>();
  net::SockAddr addr = bs->local_address();
  addr.set_port(0);
  StatusOr<net::Socket> listener = net::Listen(addr);
  if (!listener.ok()) return listener.status().WithContext("opening the recovery listener (weftCommShrink)");
  uint8_t mine[net::kSockAddrWireBytes];
  net::EncodeSockAddr(listener->peer(), mine);
  std::vector<uint8_t> all(net::kSockAddrWireBytes * static_cast<size_t>(comm->nranks));
  WEFT_RETURN_IF_ERROR_CTX(bs->AllGather(mine, sizeof(mine), all.data()), "exchanging recovery listeners");
  for (int r = 0; r < comm->nranks; ++r) {
    StatusOr<net::SockAddr> a = net::DecodeSockAddr(&all[r * net::kSockAddrWireBytes]);
    if (!a.ok()) return a.status().WithContext("rank " + std::to_string(r) + "'s recovery listener");
    state->recovery_addr.push_back(*a);
  }
  state->recovery = net::HandshakeServer(std::move(*listener), bs->secret(), net::ConnKind::kRecovery);
  comm->elastic = std::move(state);
  return OkStatus();
}

Status RevokeComm(weftComm* comm) {
  const Status why = RemoteError("rank " + std::to_string(comm->rank) + " " + kRevokedMarker +
                                 " (weftCommRevoke)");
  // Abort is the one transport call any thread may make: the operation in flight fails with
  // `why`, and the peers in reach are told (their transports send or publish a revoke note).
  for (auto& t : comm->transports) t->Abort(why);
  std::lock_guard<std::mutex> lock(comm->exec_mu);  // once the operation in flight returned
  comm->sticky_error.SetIfOk(why);
  return OkStatus();
}

std::vector<int> FailedRanks(weftComm* comm) {
  std::set<int> failed;
  if (comm->elastic) {
    std::lock_guard<std::mutex> lock(comm->elastic->mu);
    failed = comm->elastic->failed;
  }
  for (auto& t : comm->transports) {
    const int r = t->FailedOrigin();
    if (r >= 0 && r < comm->nranks && r != comm->rank) failed.insert(r);
  }
  return std::vector<int>(failed.begin(), failed.end());
}

Status ShrinkComm(weftComm* comm, const std::vector<int>& exclude, int flags, weftComm* child,
                  bool* member) {
  *member = false;
  if (!comm->elastic || !comm->bootstrap)
    return InvalidUsage("weftCommShrink: thread-per-rank communicators (weftCommInitAll) cannot shrink");
  if (flags & WEFT_SHRINK_ABORT) WEFT_RETURN_IF_ERROR(RevokeComm(comm));
  std::unique_lock<std::mutex> lock(comm->exec_mu, std::try_to_lock);
  if (!lock.owns_lock())
    return InvalidUsage("weftCommShrink: an operation is in flight on comm (WEFT_SHRINK_ABORT stops it)");
  Meeting m;
  WEFT_RETURN_IF_ERROR(Meet(comm, std::set<int>(exclude.begin(), exclude.end()), &m));
  if (m.verdict == kExcluded)
    return InvalidUsage("weftCommShrink: another survivor's list excludes this rank " + std::to_string(comm->rank));
  if (m.verdict != kJoin)
    return InvalidUsage("weftCommShrink: the lowest survivor is excluded by another survivor's list");
  auto it = std::find(m.members.begin(), m.members.end(), comm->rank);
  if (it == m.members.end()) return InternalError("weftCommShrink: this rank is not in the agreed membership");
  StatusOr<BootstrapId> id = UnpackUniqueId(m.id);
  if (!id.ok()) return id.status().WithContext("weftCommShrink");
  *member = true;
  child->timeout_s = comm->timeout_s;
  return JoinAndInit(child, *id, static_cast<int>(m.members.size()),
                     static_cast<int>(it - m.members.begin()));
}

StatusOr<BootstrapId> GrowUniqueId(weftComm* comm) {
  if (!comm->elastic) return InvalidUsage("weftCommGetUniqueId: thread-per-rank communicators cannot grow");
  std::lock_guard<std::mutex> lock(comm->elastic->mu);
  if (!comm->elastic->grow_id) {
    StatusOr<BootstrapId> id = CreateUniqueId();
    if (!id.ok()) return id.status().WithContext("weftCommGetUniqueId");
    comm->elastic->grow_id = std::make_unique<BootstrapId>(*id);
  }
  return *comm->elastic->grow_id;
}

Status GrowComm(weftComm* comm, int nranks, const weftUniqueId* id, int rank, weftComm* child) {
  if (comm == nullptr) {  // a new rank
    StatusOr<BootstrapId> bid = UnpackUniqueId(*id);
    if (!bid.ok()) return bid.status().WithContext("weftCommGrow: uniqueId");
    return JoinAndInit(child, *bid, nranks, rank);
  }
  if (!comm->bootstrap) return InvalidUsage("weftCommGrow: thread-per-rank communicators cannot grow");
  // The existing ranks agree on one id over their bootstrap ring: the lowest rank's that has
  // one (passed, or made by weftCommGetUniqueId).
  struct Offer {
    int32_t has;
    weftUniqueId id;
  } mine{};
  if (id != nullptr) {
    mine.has = 1;
    mine.id = *id;
  } else if (comm->elastic) {
    std::lock_guard<std::mutex> lock(comm->elastic->mu);
    if (comm->elastic->grow_id) mine.has = PackUniqueId(*comm->elastic->grow_id, &mine.id).ok();
  }
  std::vector<Offer> all(comm->nranks);
  WEFT_RETURN_IF_ERROR_CTX(comm->bootstrap->AllGather(&mine, sizeof(mine), all.data()),
                           "weftCommGrow exchanging the unique id");
  auto first = std::find_if(all.begin(), all.end(), [](const Offer& o) { return o.has != 0; });
  if (first == all.end())
    return InvalidUsage("weftCommGrow: no existing rank has the id (call weftCommGetUniqueId on one, or pass it)");
  if (mine.has && std::memcmp(&mine.id, &first->id, sizeof(mine.id)) != 0)
    return InvalidUsage("weftCommGrow: this rank passed another id than rank " +
                        std::to_string(first - all.begin()));
  StatusOr<BootstrapId> bid = UnpackUniqueId(first->id);
  if (!bid.ok()) return bid.status().WithContext("weftCommGrow: uniqueId");
  child->timeout_s = comm->timeout_s;
  return JoinAndInit(child, *bid, nranks, comm->rank);
}

}  // namespace weft
