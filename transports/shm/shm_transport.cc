// ShmTransport implementation: segments, rings, windows, signals, waiting, dead peers.
// The protocol and its reasons are described in shm_transport.h.
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_wire.h"
#include "transports/shm/shm_layout.h"
#include "kernels/reduce.h"
#include "common/settings.h"

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace weft {

using shm_detail::kLine;
using shm_detail::MsgHeader;
using shm_detail::RankHeader;
using shm_detail::RingControl;
using shm_detail::WindowHeader;

namespace {

using Clock = std::chrono::steady_clock;

size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

// A window segment's data (after its header page) and its size: for our window and the peers'.
unsigned char* WindowData(const ShmSegment& w) {
  return static_cast<unsigned char*>(w.data()) + shm_detail::kWindowHeaderBytes;
}
size_t WindowDataBytes(const ShmSegment& w) { return w.size() - shm_detail::kWindowHeaderBytes; }

size_t ControlHeaderBytes(size_t nlocal) {
  return RoundUp(sizeof(RankHeader) + nlocal * sizeof(RingControl), 4096);
}

// Record each rank contributes to the AllGather in Create.
struct NameRecord {
  char prefix[56];
  uint32_t local;  // 1 when this rank created segments (has local peers or is alone)
  uint32_t ok;     // second round: 1 when mapping every peer succeeded
};

// This process's CPU affinity as a bit mask of the first kAffinityWords * 64 CPUs (all ones
// when it cannot be read: then nothing is concluded from it).
void StoreAffinity(uint64_t* words) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool known = sched_getaffinity(0, sizeof(set), &set) == 0;
  for (size_t w = 0; w < shm_detail::kAffinityWords; ++w) {
    uint64_t bits = 0;
    for (size_t b = 0; b < 64; ++b) {
      const size_t cpu = w * 64 + b;
      if (!known || (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set))) bits |= uint64_t{1} << b;
    }
    words[w] = bits;
  }
}

}  // namespace

int ShmTransport::CpusOfLocalRanks() const {
  uint64_t all[shm_detail::kAffinityWords] = {};
  for (const Peer& p : peers_)
    for (size_t w = 0; w < shm_detail::kAffinityWords; ++w) all[w] |= p.header->affinity[w];
  int n = 0;
  for (uint64_t w : all) n += __builtin_popcountll(w);
  return std::max(1, std::min(n, UsableCpuCountOfHost()));
}

// ---------------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------------

// The liveness lock: a write lock on the first byte of a rank's control segment, held by the
// rank (F_OFD_SETLK) until its process closes the fd, exit included; a peer probes it with
// F_OFD_GETLK and finds it released when the rank died.
static struct flock LivenessLock() {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  return fl;
}

// Fills local_of_rank_ from local_ranks_; the error when they are not a valid set holding
// this rank.
Status ShmTransport::IndexLocalRanks() {
  local_of_rank_.assign(std::max(nranks_, 0), -1);
  for (size_t i = 0; i < local_ranks_.size(); ++i) {
    const int r = local_ranks_[i];
    if (r < 0 || r >= nranks_)
      return InvalidArgument("shm: local_ranks holds rank " + std::to_string(r) + ", outside [0, " +
                             std::to_string(nranks_) + ")");
    if (local_of_rank_[r] != -1)
      return InvalidArgument("shm: local_ranks lists rank " + std::to_string(r) + " twice");
    local_of_rank_[r] = static_cast<int>(i);
  }
  if (rank_ < 0 || rank_ >= nranks_ || local_of_rank_[rank_] < 0)
    return InvalidArgument("shm: local_ranks does not contain this rank " + std::to_string(rank_));
  return OkStatus();
}

// The header and ring controls of our control segment, in their initial state.
void ShmTransport::InitControlSegment(size_t nlocal, size_t ring, size_t ring_offset) {
  RankHeader* h = new (control_->data()) RankHeader();
  h->magic = shm_detail::kHeaderMagic;
  h->rank = rank_;
  h->pid = static_cast<int32_t>(getpid());
  h->nlocal = static_cast<uint32_t>(nlocal);
  h->ring_bytes = ring;
  h->ring_offset = ring_offset;
  h->doorbell.store(0);
  h->waiting_cpu.store(-1);
  StoreAffinity(h->affinity);
  h->sleeping.store(0);
  h->window_gen.store(0);
  h->window_bytes.store(0);
  h->closed.store(0);
  h->cma_probe = 0x5eed0000cafe0000ULL ^ static_cast<uint64_t>(getpid());
  h->cma_probe_addr = reinterpret_cast<uint64_t>(&h->cma_probe);
  h->cma_from_mask.store(0);
  for (size_t i = 0; i < nlocal; ++i) {
    auto* rc = new (static_cast<unsigned char*>(control_->data()) + sizeof(RankHeader) +
                    i * sizeof(RingControl)) RingControl();
    rc->tail.store(0);
    rc->head.store(0);
    rc->signals.store(0);
    rc->latest_tagged.index.store(0);
    rc->latest_tagged.tag.store(0);
    rc->cma_acks.store(0);
  }
  header_ = h;
}

// Our control segment (header, ring controls, then one ring per local sender) under a fresh
// random name prefix_, locked for liveness when shared, and the initial window.
Status ShmTransport::CreateOwnSegments(size_t nlocal, bool shared) {
  local_index_ = local_of_rank_[rank_];
  uint64_t id = 0;
  if (getrandom(&id, sizeof(id), 0) != sizeof(id))
    id = (static_cast<uint64_t>(getpid()) << 32) ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  char prefix[56];
  std::snprintf(prefix, sizeof(prefix), "weft-%016llx-r%d", static_cast<unsigned long long>(id), rank_);
  prefix_ = prefix;
  const size_t ring = options_.ring_bytes_per_peer;
  const size_t ring_offset = ControlHeaderBytes(nlocal);
  const size_t control_bytes = ring_offset + nlocal * ring;
  StatusOr<std::unique_ptr<ShmSegment>> seg =
      shared ? ShmSegment::Create(prefix_ + "-c", control_bytes, budget_left_)
             : ShmSegment::Anonymous(control_bytes);
  if (!seg.ok()) return seg.status();
  control_ = std::move(*seg);
  if (shared && options_.max_bytes != 0) budget_left_ -= control_bytes;
  InitControlSegment(nlocal, ring, ring_offset);
  if (shared) {
    // Liveness lock: held until this process closes the fd (exit included).
    struct flock fl = LivenessLock();
    if (fcntl(control_->fd(), F_OFD_SETLK, &fl) != 0)
      return SystemError("shm: cannot lock " + control_->name() + ": " + std::strerror(errno));
  }
  return PrepareWindowLocked(options_.initial_window_bytes);
}

// Maps local peer i (its control segment and current window) and wires its two rings: me ->
// p is slot `my local index` in p's segment, p -> me slot i in ours.
Status ShmTransport::MapPeer(size_t i, const std::string& peer_prefix, bool peer_ready) {
  const size_t nlocal = local_ranks_.size();
  Peer& p = peers_[i];
  p.rank = local_ranks_[i];
  p.prefix = peer_prefix;
  RankHeader* ph = header_;
  unsigned char* pbase = static_cast<unsigned char*>(control_->data());
  if (p.rank != rank_) {
    if (!peer_ready)
      return RemoteError("shm: rank " + std::to_string(p.rank) +
                         " failed to create its shared-memory segments (see its error)");
    WEFT_ASSIGN_OR_RETURN(p.control, ShmSegment::Open(p.prefix + "-c", ControlHeaderBytes(nlocal)));
    pbase = static_cast<unsigned char*>(p.control->data());
    ph = reinterpret_cast<RankHeader*>(pbase);
    if (ph->magic != shm_detail::kHeaderMagic || ph->rank != p.rank || ph->nlocal != nlocal ||
        ph->ring_bytes != options_.ring_bytes_per_peer)
      return InvalidArgument(
          "shm: rank " + std::to_string(p.rank) + "'s segment disagrees with ours (rank " +
          std::to_string(ph->rank) + ", " + std::to_string(ph->nlocal) + " local ranks, ring " +
          std::to_string(ph->ring_bytes) + " bytes vs ours " + std::to_string(options_.ring_bytes_per_peer) +
          "): every rank of a host needs the same local_ranks and WEFT_SHM_RING_BYTES");
    if (p.control->size() < ph->ring_offset + nlocal * ph->ring_bytes)
      return InternalError("shm: rank " + std::to_string(p.rank) + "'s segment is truncated");
  }
  p.header = ph;
  unsigned char* mybase = static_cast<unsigned char*>(control_->data());
  const size_t ring = options_.ring_bytes_per_peer;
  p.out = reinterpret_cast<RingControl*>(pbase + sizeof(RankHeader) + local_index_ * sizeof(RingControl));
  p.out_data = pbase + ph->ring_offset + local_index_ * ring;
  p.in = reinterpret_cast<RingControl*>(mybase + sizeof(RankHeader) + i * sizeof(RingControl));
  p.in_data = mybase + header_->ring_offset + i * ring;
  // The rings this rank writes (in p's segment) and reads (in ours), mapped now rather than
  // one fault per page on their first pass.
  PrefaultRange(p.out_data, ring, /*write=*/true);
  PrefaultRange(p.in_data, ring, /*write=*/false);
  if (p.rank == rank_) return OkStatus();
  // Map the initial window now so that it can be unlinked right after the exchange.
  const uint64_t gen = ph->window_gen.load(std::memory_order_acquire);
  if (gen == 0) return OkStatus();
  WEFT_ASSIGN_OR_RETURN(p.window, ShmSegment::Open(WindowName(p.prefix, gen), shm_detail::kWindowHeaderBytes));
  p.window_gen = gen;
  return OkStatus();
}

// Single-copy probe: can we read each local sender's memory with process_vm_readv (same user,
// no ptrace restriction / seccomp filter in the way)? Published before the creation's second
// barrier, so every sender knows before its first message whether we can take single-copy.
void ShmTransport::ProbeSingleCopy() {
  uint64_t mask = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    uint64_t got = 0;
    struct iovec local_iov = {&got, sizeof(got)};
    struct iovec remote_iov = {reinterpret_cast<void*>(p.header->cma_probe_addr), sizeof(got)};
    if (process_vm_readv(p.header->pid, &local_iov, 1, &remote_iov, 1, 0) == sizeof(got) &&
        got == p.header->cma_probe)
      mask |= uint64_t{1} << i;
  }
  header_->cma_from_mask.store(mask, std::memory_order_release);
}

// After both barriers: single-copy per peer, and the backoff for this host's load.
void ShmTransport::FinishSetup() {
  for (Peer& p : peers_) {
    uint64_t mask = p.header->cma_from_mask.load(std::memory_order_acquire);
    p.single_copy = options_.single_copy && ((mask >> local_index_) & 1) != 0;
  }
  const int nlocal = static_cast<int>(local_ranks_.size());
  BackoffPolicy policy = options_.ranks_on_machine > nlocal
                             ? BackoffPolicy::FromEnv(options_.ranks_on_machine, UsableCpuCountOfHost())
                             : BackoffPolicy::FromEnv(nlocal, CpusOfLocalRanks());
  if (options_.spin_us >= 0) policy.spin_us = options_.spin_us;
  if (options_.yield_us >= 0) policy.yield_us = std::max(options_.yield_us, policy.spin_us);
  backoff_ = Backoff(policy);
  last_liveness_check_ = Clock::now();
}

// Two all-gathers over the bootstrap: segment names, then "mapped ok" (the barrier after
// which the names are unlinked). A rank that failed still takes part in both, so that the
// others fail with its message instead of waiting for it.
StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::CreateWithOps(
    const ShmBootstrapOps& ops, const std::vector<int>& local_ranks, const ShmOptions& options) {
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->rank_ = ops.rank;
  t->nranks_ = ops.nranks;
  t->options_ = options;
  t->options_.ring_bytes_per_peer = RoundUp(std::max<size_t>(options.ring_bytes_per_peer, 4096), 4096);
  t->options_.slice_bytes = RoundUp(std::max<size_t>(options.slice_bytes, kLine), kLine);
  t->budget_left_ = options.max_bytes == 0 ? SIZE_MAX : options.max_bytes;
  t->local_ranks_ = local_ranks;
  std::sort(t->local_ranks_.begin(), t->local_ranks_.end());
  t->light_signals_ = RegisterAsymmetricFence();
  const Status invalid = t->IndexLocalRanks();
  const size_t nlocal = t->local_ranks_.size();
  const bool shared = invalid.ok() && nlocal > 1;  // alone: anonymous memory, no names
  NameRecord mine;
  std::memset(&mine, 0, sizeof(mine));
  Status st = invalid.ok() ? t->CreateOwnSegments(nlocal, shared) : invalid;
  if (st.ok()) {
    std::memcpy(mine.prefix, t->prefix_.c_str(), t->prefix_.size() + 1);
    mine.local = shared ? 1 : 0;
  }  // else an empty prefix tells peers we failed

  // Round 1: exchange names (every rank of the communicator, also those without peers).
  std::vector<NameRecord> all(std::max(ops.nranks, 1));
  Status ag = ops.all_gather(&mine, sizeof(mine), all.data());
  if (!ag.ok()) {
    if (t->control_) t->control_->Unlink();
    if (t->window_) t->window_->Unlink();
    return ag.WithContext("shm: exchanging segment names");
  }
  if (st.ok()) {
    t->peers_.resize(nlocal);
    for (size_t i = 0; i < nlocal && st.ok(); ++i) {
      const NameRecord& peer = all[t->local_ranks_[i]];
      st = t->MapPeer(i, peer.prefix, peer.prefix[0] != '\0' && peer.local == 1);
    }
  }
  if (st.ok() && options.single_copy && nlocal > 1 && nlocal <= 64) t->ProbeSingleCopy();

  // Round 2: "mapped ok" flags. Doubles as the barrier after which names can go.
  NameRecord done = mine;
  done.ok = st.ok() ? 1 : 0;
  std::vector<NameRecord> oks(std::max(ops.nranks, 1));
  Status ag2 = ops.all_gather(&done, sizeof(done), oks.data());
  if (t->control_) t->control_->Unlink();
  if (t->window_) t->window_->Unlink();
  if (!ag2.ok()) return ag2.WithContext("shm: confirming segment mappings");
  if (!st.ok()) return st;
  for (int r : t->local_ranks_)
    if (oks[r].ok != 1)
      return RemoteError("shm: rank " + std::to_string(r) +
                         " could not map the shared-memory segments of its host (see its error)");
  t->FinishSetup();
  return t;
}

ShmTransport::~ShmTransport() {
  if (header_ != nullptr) {
    header_->closed.store(1, std::memory_order_seq_cst);
    for (Peer& p : peers_)
      if (p.rank != rank_ && p.header != nullptr) Wake(p);
  }
  if (window_) window_->Unlink();
  // Segments unmap and the liveness lock drops when control_ closes.
}

std::string ShmTransport::WindowName(const std::string& prefix, uint64_t gen) const {
  return prefix + "-w" + std::to_string(gen);
}

// ---------------------------------------------------------------------------------------
// Posting
// ---------------------------------------------------------------------------------------

ShmTransport::Peer* ShmTransport::Find(int rank, Status* st) {
  if (!aborted_.ok()) {
    *st = aborted_;
    return nullptr;
  }
  if (rank < 0 || rank >= nranks_ || local_of_rank_[rank] < 0) {
    *st = InvalidArgument("shm: rank " + std::to_string(rank) +
                          " is not on this host (local ranks of rank " + std::to_string(rank_) +
                          ": " + std::to_string(local_ranks_.size()) + ")");
    return nullptr;
  }
  Peer* p = &peers_[local_of_rank_[rank]];
  if (!p->failed.ok()) {
    *st = p->failed;
    return nullptr;
  }
  return p;
}

void ShmTransport::Complete(TransportRequest* req, Status st) {
  --pending_;
  req->Complete(std::move(st));
}

Status ShmTransport::PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                              TransportRequest* req) {
  // shm sends to itself too (a rank's own ring): self_ok.
  WEFT_RETURN_IF_ERROR(CheckPostArgs("shm", "send", rank_, nranks_, peer, channel, 0xffff, src,
                                     req, /*self_ok=*/true));
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  Peer* p = Find(peer, &st);
  if (p == nullptr) return st;
  req->Reset();
  ++pending_;
  p->sends.push_back(SendOp{static_cast<const unsigned char*>(src.ptr), src.bytes, tag,
                            static_cast<uint16_t>(channel), req});
  if (ProgressSends(*p)) backoff_.Reset();  // start copying right away: hides latency
  return OkStatus();
}

Status ShmTransport::PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                              TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("shm", "recv", rank_, nranks_, peer, channel, 0xffff, dst,
                                     req, /*self_ok=*/true));
  return PostRecvOp(peer, channel, RecvOp{static_cast<unsigned char*>(dst.ptr), dst.bytes, tag, req, false});
}

Status ShmTransport::PostRecvToSink(int peer, int channel, uint64_t tag, size_t bytes,
                                    RecvSink* sink, TransportRequest* req) {
  if (sink == nullptr) return InvalidArgument("shm recv from rank " + std::to_string(peer) + ": sink is NULL");
  WEFT_RETURN_IF_ERROR(CheckPostArgs("shm", "recv", rank_, nranks_, peer, channel, 0xffff,
                                     MemRef::Host(static_cast<void*>(nullptr), 0), req, /*self_ok=*/true));
  RecvOp op{nullptr, bytes, tag, req, false};
  op.sink = sink;
  return PostRecvOp(peer, channel, op);
}

Status ShmTransport::PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                                  TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("shm", "recv", rank_, nranks_, peer, channel, 0xffff, dst,
                                     req, /*self_ok=*/true));
  return PostRecvOp(peer, channel, RecvOp{static_cast<unsigned char*>(dst.ptr), dst.bytes, tag, req, true});
}

Status ShmTransport::RecvMismatch(const Peer& p, uint16_t channel, const RecvOp& r, uint64_t got_tag,
                                  uint64_t got_bytes) const {
  return TagMismatch("shm: message from rank " + std::to_string(p.rank) + " on channel " +
                         std::to_string(channel) + ": expected tag " + std::to_string(r.tag) + " and " +
                         (r.up_to ? "at most " : "") + std::to_string(r.bytes) + " bytes, got tag " +
                         std::to_string(got_tag) + " and " + std::to_string(got_bytes) + " bytes",
                     r.tag, got_tag);
}

// Arguments checked by the caller (PostRecv, PostRecvUpTo).
Status ShmTransport::PostRecvOp(int peer, int channel, const RecvOp& op) {
  TransportRequest* req = op.req;
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  Peer* p = Find(peer, &st);
  if (p == nullptr) return st;
  req->Reset();
  ++pending_;
  uint16_t ch = static_cast<uint16_t>(channel);
  p->recvs[ch].push_back(op);
  ++p->posted_recvs;
  MatchStash(*p, ch);
  return OkStatus();
}

// Owner thread only (transport.h), so no lock: signals are the tiny collective's hot path,
// and a locked instruction (the mutex, a fetch_add) after the data stores it publishes waits
// for those stores to take their lines from the peers that read them: a cross-core round trip
// per signal. Plain stores keep TSO order (data, tag, counter), and the wake-up handshake is
// asymmetric (common/backoff.h): a sleeper runs membarrier instead of us running a fence.
// Abort (any thread) only raises aborted_flag_ and marks us closed; a signal racing with it
// is harmless (the peers see `closed`).
Status ShmTransport::Signal(int peer, uint64_t tag) {
  Peer* p = OwnerFind(peer);
  if (p == nullptr) {  // aborted, unknown or failed peer: the locked lookup says which
    std::lock_guard<std::mutex> lock(mu_);
    Status st;
    if (Find(peer, &st) == nullptr) return st;
    return InternalError("shm: signal to rank " + std::to_string(peer) + " refused");
  }
  if (tag != 0) {
    // Only this rank increments this counter: its count of signals sent is this one's number
    // (kept here, so the counter's line is not read before it is written).
    const uint64_t number = p->signals_sent;
    shm_detail::SignalTagSlot& slot = p->out->signal_tags[number % shm_detail::kSignalTagSlots];
    slot.tag.store(tag, std::memory_order_relaxed);
    slot.index.store(number + 1, std::memory_order_release);
    p->out->latest_tagged.tag.store(tag, std::memory_order_relaxed);
    p->out->latest_tagged.index.store(number + 1, std::memory_order_release);
  }
  // Release: every write the executor finished before this step is visible with the count
  // (the fence rule).
  p->out->signals.store(++p->signals_sent, std::memory_order_release);
  if (p->rank != rank_) Wake(*p);
  return OkStatus();
}

// With a core per rank (the policy spins), a short spin here first: the peer of a tiny
// collective signals within a cache-line round trip or two, and seeing it here keeps the whole
// call lock-free. Oversubscribed (no spin stage), one look only.
bool ShmTransport::TryWait(int peer, uint64_t expect_tag, Status* st) {
  Peer* p = OwnerFind(peer);
  if (p == nullptr) return false;  // the posted wait reports why
  constexpr int kSpinPolls = 256;  // ~5-15 us at most: well inside the spin stage
  // Not when the peer last waited on the CPU we last waited on (both words as Progress last
  // published them: two loads, no syscall): it is likely queued behind us there, and spinning
  // would only delay it (Progress then yields or moves us off that CPU).
  const int mine = header_->waiting_cpu.load(std::memory_order_relaxed);
  const bool same_cpu = mine >= 0 && p->header->waiting_cpu.load(std::memory_order_relaxed) == mine;
  const int polls = backoff_.policy().spin_us > 0 && !same_cpu ? kSpinPolls : 1;
  for (int i = 0;; ++i) {
    if (p->in->signals.load(std::memory_order_acquire) > p->signals_consumed) break;
    if (i + 1 >= polls) return false;
    CpuRelax();
  }
  *st = ConsumeSignal(*p, expect_tag);
  return true;
}

ShmTransport::Peer* ShmTransport::OwnerFind(int rank) {
  if (aborted_flag_.load(std::memory_order_acquire)) return nullptr;
  if (rank < 0 || rank >= nranks_ || local_of_rank_[rank] < 0) return nullptr;
  Peer* p = &peers_[local_of_rank_[rank]];
  return p->failed.ok() ? p : nullptr;  // `failed` is written by the owner thread only
}

Status ShmTransport::PostWait(int peer, TransportRequest* req, uint64_t expect_tag) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  Peer* p = Find(peer, &st);
  if (p == nullptr) return st;
  req->Reset();
  ++pending_;
  p->waits.push_back(WaitOp{req, expect_tag});
  ProgressWaits(*p);
  return OkStatus();
}

// ---------------------------------------------------------------------------------------
// Windows
// ---------------------------------------------------------------------------------------

size_t ShmTransport::window_bytes() const {
  return window_ ? WindowDataBytes(*window_) : 0;
}

Status ShmTransport::PrepareWindow(size_t bytes) {
  // The window is the owner thread's (Abort never touches it): no lock when it is big enough.
  if (window_ && bytes <= window_bytes() && !aborted_flag_.load(std::memory_order_acquire))
    return OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return PrepareWindowLocked(bytes);
}

Status ShmTransport::PrepareWindowLocked(size_t bytes) {
  if (!aborted_.ok()) return aborted_;
  if (bytes <= window_bytes() && (window_ || bytes == 0)) return OkStatus();
  if (bytes == 0 && !window_) return OkStatus();
  // Grow: a new generation (peers remap in PeerWindow). Round to 1 MiB to grow rarely.
  const bool shared = local_ranks_.size() > 1;
  size_t data = RoundUp(bytes, size_t{1} << 20);
  size_t total = shm_detail::kWindowHeaderBytes + data;
  uint64_t gen = window_gen_ + 1;
  std::string name = WindowName(prefix_, gen);
  StatusOr<std::unique_ptr<ShmSegment>> seg =
      shared ? ShmSegment::Create(name, total, budget_left_) : ShmSegment::Anonymous(total);
  if (!seg.ok()) return seg.status().WithContext("shm: growing rank " + std::to_string(rank_) +
                                                 "'s window to " + std::to_string(bytes) + " bytes");
  // The old generation's pages stay charged: peers may keep them mapped until they remap.
  if (shared && options_.max_bytes != 0) budget_left_ -= total;
  if (window_) window_->Unlink();  // peers that never mapped the old generation need it no more
  window_ = std::move(*seg);
  auto* wh = new (window_->data()) WindowHeader();
  wh->magic = shm_detail::kWindowMagic;
  wh->owner = rank_;
  wh->gen = gen;
  wh->bytes = data;
  wh->mapped_by.store(0);
  window_gen_ = gen;
  header_->window_bytes.store(data, std::memory_order_relaxed);
  header_->window_gen.store(gen, std::memory_order_release);
  return OkStatus();
}

void* ShmTransport::WindowBase() {
  if (!window_) return nullptr;
  return WindowData(*window_);
}

MemRef ShmTransport::LocalWindow() {
  return MemRef{WindowBase(), window_ ? window_bytes() : 0, MemKind::kHostShared, -1, 0};
}

StatusOr<MemRef> ShmTransport::PeerWindow(int peer, size_t min_bytes) {
  // The mapping is the owner thread's: no lock when it is current and big enough.
  if (Peer* p = OwnerFind(peer); p != nullptr && p->rank != rank_ && p->window &&
                                 p->header->window_gen.load(std::memory_order_acquire) == p->window_gen &&
                                 min_bytes <= WindowDataBytes(*p->window))
    return MemRef{WindowData(*p->window), WindowDataBytes(*p->window), MemKind::kHostShared, -1, 0};
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<const void*> w = PeerWindowLocked(peer, min_bytes);
  if (!w.ok()) return w.status();
  // Locked mapping: at least min_bytes (checked there); the exact size is the owner's business.
  return MemRef{const_cast<void*>(*w), min_bytes, MemKind::kHostShared, -1, 0};
}

StatusOr<const void*> ShmTransport::PeerWindowLocked(int peer, size_t min_bytes) {
  Status st;
  Peer* p = Find(peer, &st);
  if (p == nullptr) return st;
  if (p->rank == rank_) {
    if (min_bytes > window_bytes())
      return InternalError("shm: own window holds " + std::to_string(window_bytes()) +
                           " bytes, a step reads " + std::to_string(min_bytes));
    return static_cast<const void*>(WindowBase());
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    uint64_t gen = p->header->window_gen.load(std::memory_order_acquire);
    if (gen == 0)
      return InternalError("shm: rank " + std::to_string(p->rank) + " has no window yet");
    if (gen != p->window_gen || !p->window) {
      std::string name = WindowName(p->prefix, gen);
      StatusOr<std::unique_ptr<ShmSegment>> w =
          ShmSegment::Open(name, shm_detail::kWindowHeaderBytes);
      if (!w.ok()) continue;  // the owner moved on to a newer generation meanwhile: reload
      auto* wh = static_cast<WindowHeader*>((*w)->data());
      if (wh->magic != shm_detail::kWindowMagic || wh->gen != gen)
        return InternalError("shm: rank " + std::to_string(p->rank) + "'s window " + name +
                             " has a bad header");
      // The last peer to map a generation removes its name (it is only needed for mapping).
      if (wh->mapped_by.fetch_add(1) + 2 == local_ranks_.size()) ShmUnlinkName(name);
      p->window = std::move(*w);
      p->window_gen = gen;
    }
    size_t have = WindowDataBytes(*p->window);
    if (min_bytes > have)
      return InternalError("shm: rank " + std::to_string(p->rank) + "'s window holds " +
                           std::to_string(have) + " bytes, a step reads " +
                           std::to_string(min_bytes) +
                           " (peers prepared different window sizes for one operation?)");
    return WindowData(*p->window);
  }
  return SystemError("shm: cannot map rank " + std::to_string(p->rank) + "'s window");
}

// ---------------------------------------------------------------------------------------
// Progress: rings
// ---------------------------------------------------------------------------------------

void ShmTransport::Wake(Peer& p) {
  // Pairs with the sleeper's `sleeping = 1; HeavyFence; read doorbell; re-check` (Progress):
  // either it sees what we published, or we see it sleeping and change the doorbell it waits
  // on. The fence orders our store before the load of `sleeping`; with membarrier registered
  // the sleeper's HeavyFence does that for us (common/backoff.h), so no hardware fence here.
  LightFence(light_signals_);
  if (p.header->sleeping.load(std::memory_order_relaxed) != 0) {
    p.header->doorbell.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&p.header->doorbell, 1);
  }
}

bool ShmTransport::ProgressSends(Peer& p) {
  const size_t ring = options_.ring_bytes_per_peer;
  bool progressed = false;
  if (!p.cma_inflight.empty()) {
    uint64_t acks = p.out->cma_acks.load(std::memory_order_acquire);
    while (p.cma_acked < acks && !p.cma_inflight.empty()) {
      ++p.cma_acked;
      TransportRequest* req = p.cma_inflight.front();
      p.cma_inflight.pop_front();
      Complete(req, OkStatus());
      progressed = true;
    }
  }
  while (!p.sends.empty()) {
    SendOp& op = p.sends.front();
    if (!p.send_header_written) {
      uint64_t pos = RoundUp(p.out_tail, kLine);
      if (pos + kLine - p.out_head_seen > ring) {
        p.out_head_seen = p.out->head.load(std::memory_order_acquire);
        if (pos + kLine - p.out_head_seen > ring) break;  // ring full: receiver is behind
      }
      MsgHeader h;
      std::memset(&h, 0, sizeof(h));
      h.magic = shm_detail::kMsgMagic;
      h.channel = op.channel;
      h.tag = op.tag;
      h.bytes = op.bytes;
      const bool single_copy = p.single_copy && op.bytes >= options_.single_copy_min_bytes && op.bytes > 0;
      if (single_copy) {
        h.flags = shm_detail::kMsgSingleCopy;
        h.address = reinterpret_cast<uint64_t>(op.buf);
        collapser_.BeforePeerPins(op.buf, op.bytes);  // the receiver pins them: huge is 3x faster
      }
      std::memcpy(p.out_data + pos % ring, &h, sizeof(h));
      p.out_tail = pos + kLine;
      p.send_header_written = true;
      p.send_done = 0;
      if (single_copy) {
        // The receiver copies straight from our buffer; the send completes on its ack.
        p.out->tail.store(p.out_tail, std::memory_order_release);
        if (p.rank != rank_) Wake(p);
        p.cma_inflight.push_back(op.req);
        p.sends.pop_front();
        p.send_header_written = false;
        progressed = true;
        continue;
      }
      if (op.bytes == 0) {
        p.out->tail.store(p.out_tail, std::memory_order_release);
        if (p.rank != rank_) Wake(p);
      }
      progressed = true;
    }
    while (p.send_done < op.bytes) {
      size_t space = ring - (p.out_tail - p.out_head_seen);
      if (space == 0) {
        p.out_head_seen = p.out->head.load(std::memory_order_acquire);
        space = ring - (p.out_tail - p.out_head_seen);
        if (space == 0) break;
      }
      size_t n = std::min({space, op.bytes - p.send_done, ring - p.out_tail % ring,
                           options_.slice_bytes});
      // A publish into the receiver's ring: streamed while plain copies into lines the other
      // core holds run slowly (kernels::CopyToShared; the release store below orders it).
      kernels::CopyToShared(p.out_data + p.out_tail % ring, op.buf + p.send_done, n);
      p.out_tail += n;
      p.send_done += n;
      // Publish each slice: the receiver drains it while we copy the next.
      p.out->tail.store(p.out_tail, std::memory_order_release);
      if (p.rank != rank_) Wake(p);
      progressed = true;
    }
    if (p.send_done < op.bytes) break;
    TransportRequest* req = op.req;
    p.sends.pop_front();
    p.send_header_written = false;
    Complete(req, OkStatus());
    progressed = true;
  }
  return progressed;
}

namespace {
// A stashed message handed to its sink-receive: in the pieces the sink has room for.
void FeedSink(RecvSink* sink, const unsigned char* data, size_t bytes) {
  for (size_t at = 0; at < bytes;) {
    size_t room = 0;
    unsigned char* to = sink->Space(&room);
    const size_t n = std::min(room, bytes - at);
    std::memcpy(to, data + at, n);
    sink->Landed(n);
    at += n;
  }
}
}  // namespace

void ShmTransport::MatchStash(Peer& p, uint16_t channel) {
  auto rit = p.recvs.find(channel);
  auto sit = p.stash.find(channel);
  if (rit == p.recvs.end() || sit == p.stash.end()) return;
  auto& rq = rit->second;
  auto& sq = sit->second;
  while (!rq.empty() && !sq.empty() && sq.front()->complete) {
    RecvOp r = rq.front();
    rq.pop_front();
    --p.posted_recvs;
    std::unique_ptr<Stashed> s = std::move(sq.front());
    sq.pop_front();
    if (s->tag != r.tag || !r.Fits(s->data.size())) {
      Complete(r.req, RecvMismatch(p, channel, r, s->tag, s->data.size()));
      continue;
    }
    r.req->bytes = s->data.size();
    if (r.sink != nullptr) FeedSink(r.sink, s->data.data(), s->data.size());
    else if (!s->data.empty()) std::memcpy(r.buf, s->data.data(), s->data.size());
    Complete(r.req, OkStatus());
  }
  if (rq.empty()) p.recvs.erase(rit);
  if (sq.empty()) p.stash.erase(sit);
}

Status ShmTransport::ReadSingleCopy(Peer& p, Incoming& c) {
  // One process_vm_readv per slice-sized piece keeps a dead sender from stalling us long, and
  // a partial read (EFAULT past a bad page) reports which byte.
  const size_t piece = size_t{4} << 20;
  while (c.received < c.bytes) {
    if (c.sink != nullptr && c.sink->Later()) break;  // the rest in a later Progress
    size_t n = std::min(piece, c.bytes - c.received);
    if (c.dst == nullptr && c.sink == nullptr) {  // discarding after a mismatch: nothing to read
      c.received = c.bytes;
      break;
    }
    unsigned char* to = c.dst + c.received;
    if (c.sink != nullptr) {  // into the sink's room (in cache), as much as fits
      size_t room = 0;
      to = c.sink->Space(&room);
      n = std::min(n, room);
    }
    struct iovec local_iov = {to, n};
    struct iovec remote_iov = {reinterpret_cast<void*>(c.address + c.received), n};
    ssize_t got = process_vm_readv(p.header->pid, &local_iov, 1, &remote_iov, 1, 0);
    if (got <= 0)
      return RemoteError("shm: single-copy read of " + std::to_string(n) + " bytes from rank " +
                         std::to_string(p.rank) + " (pid " + std::to_string(p.header->pid) +
                         ") failed: " + std::strerror(errno) +
                         " (the sender died, or set WEFT_SHM_CMA=0)");
    c.received += static_cast<size_t>(got);
    if (c.sink != nullptr) c.sink->Landed(static_cast<size_t>(got));
  }
  return OkStatus();
}

// Gives the message that just started (p.cur) its destination: the first posted recv of its
// channel (failed, and its payload skipped, when tag or size disagree), else a stash buffer
// so the channel that is waiting can get at the messages behind it. False: the peer failed.
bool ShmTransport::AttachIncoming(Peer& p, const shm_wire::ShmMsg& h) {
  Incoming& c = p.cur;
  MatchStash(p, h.channel);
  auto rit = p.recvs.find(h.channel);
  const bool stash_empty = p.stash.find(h.channel) == p.stash.end();
  if (stash_empty && rit != p.recvs.end() && !rit->second.empty()) {
    RecvOp r = rit->second.front();
    rit->second.pop_front();
    if (rit->second.empty()) p.recvs.erase(rit);
    --p.posted_recvs;
    c.req = r.req;
    if (h.tag != r.tag || !r.Fits(h.bytes)) {
      // Fail this recv, skip the payload: the stream stays in sync for what follows.
      Complete(r.req, RecvMismatch(p, h.channel, r, h.tag, h.bytes));
      c.req = nullptr;
      c.dst = nullptr;
    } else {
      c.dst = r.buf;
      c.sink = r.sink;
      r.req->bytes = h.bytes;
    }
    return true;
  }
  auto stashed = std::make_unique<Stashed>();
  stashed->tag = h.tag;
  try {
    stashed->data.resize(h.bytes);
  } catch (const std::bad_alloc&) {  // the size comes from another process's memory
    FailPeer(p, InternalError("shm: from rank " + std::to_string(p.rank) + ": cannot buffer a " +
                              std::to_string(h.bytes) + "-byte message on channel " +
                              std::to_string(h.channel) + " that arrived before its recv"));
    c.active = false;
    return false;
  }
  c.stash = stashed.get();
  c.dst = stashed->data.data();
  p.stash[h.channel].push_back(std::move(stashed));
  return true;
}

// Starts the next message from p's ring, but only when somebody waits for one from this peer
// (otherwise it stays in the ring and the sender waits for room: rendezvous, as schedules
// assume). 1: started, 0: nothing to start, -1: the peer failed.
int ShmTransport::StartIncoming(Peer& p) {
  if (p.posted_recvs == 0) return 0;
  const size_t ring = options_.ring_bytes_per_peer;
  const uint64_t pos = RoundUp(p.in_head, kLine);
  if (p.in_tail_seen < pos + kLine) {
    p.in_tail_seen = p.in->tail.load(std::memory_order_acquire);
    if (p.in_tail_seen < pos + kLine) return 0;
  }
  StatusOr<shm_wire::ShmMsg> decoded = shm_wire::DecodeShmHeader(p.in_data + pos % ring, shm_wire::kMaxMessageBytes);
  p.in_head = pos + kLine;
  if (!decoded.ok()) {
    FailPeer(p, InternalError("shm: from rank " + std::to_string(p.rank) + ": " + decoded.status().message()));
    return -1;
  }
  Incoming& c = p.cur;
  c = Incoming();
  c.active = true;
  c.channel = decoded->channel;
  c.bytes = decoded->bytes;
  c.single_copy = decoded->single_copy;
  c.address = decoded->address;
  return AttachIncoming(p, *decoded) ? 1 : -1;
}

// Copies what the ring holds of the current message's payload, freeing the room at once (a
// sender blocked on a full ring resumes while we copy on). True if any byte moved.
bool ShmTransport::CopyFromRing(Peer& p) {
  const size_t ring = options_.ring_bytes_per_peer;
  Incoming& c = p.cur;
  bool progressed = false;
  while (c.received < c.bytes) {
    size_t avail = p.in_tail_seen - p.in_head;
    if (avail == 0) {
      p.in_tail_seen = p.in->tail.load(std::memory_order_acquire);
      avail = p.in_tail_seen - p.in_head;
      if (avail == 0) break;
    }
    size_t n = std::min({avail, c.bytes - c.received, ring - p.in_head % ring});
    if (c.sink != nullptr && c.sink->Later()) break;  // the rest in a later Progress
    if (c.sink != nullptr) {
      size_t room = 0;
      unsigned char* to = c.sink->Space(&room);
      n = std::min(n, room);
      std::memcpy(to, p.in_data + p.in_head % ring, n);
      c.sink->Landed(n);
    } else if (c.dst != nullptr) {
      std::memcpy(c.dst + c.received, p.in_data + p.in_head % ring, n);
    }
    p.in_head += n;
    c.received += n;
    p.in->head.store(p.in_head, std::memory_order_release);
    if (p.rank != rank_) Wake(p);
    progressed = true;
  }
  return progressed;
}

// The current message is complete (zero-byte ones included: free their header's room too).
void ShmTransport::FinishIncoming(Peer& p) {
  Incoming& c = p.cur;
  p.in->head.store(p.in_head, std::memory_order_release);
  if (c.single_copy) {
    p.in->cma_acks.fetch_add(1, std::memory_order_seq_cst);  // the sender may reuse its buffer
    if (p.rank != rank_) Wake(p);
  }
  if (c.bytes == 0 && p.rank != rank_) Wake(p);
  c.active = false;
  if (c.stash != nullptr) {
    c.stash->complete = true;
    MatchStash(p, c.channel);
  } else if (c.req != nullptr) {
    Complete(c.req, OkStatus());
  }
}

bool ShmTransport::ProgressRecvs(Peer& p) {
  bool progressed = false;
  while (true) {
    if (!p.cur.active) {
      const int started = StartIncoming(p);
      if (started < 0) return true;
      if (started == 0) break;
      progressed = true;
    }
    Incoming& c = p.cur;
    if (c.single_copy && c.received < c.bytes) {
      const size_t before = c.received;
      Status st = ReadSingleCopy(p, c);
      if (!st.ok()) {
        FailPeer(p, st);
        return true;
      }
      if (c.received > before) progressed = true;  // a sink that asked for later read nothing
    }
    if (CopyFromRing(p)) progressed = true;
    if (c.received < c.bytes) break;
    FinishIncoming(p);
    progressed = true;
  }
  return progressed;
}

bool ShmTransport::ProgressWaits(Peer& p) {
  if (p.waits.empty()) return false;
  uint64_t arrived = p.in->signals.load(std::memory_order_acquire);
  bool progressed = false;
  while (!p.waits.empty() && arrived > p.signals_consumed) {
    WaitOp w = p.waits.front();
    p.waits.pop_front();
    Complete(w.req, ConsumeSignal(p, w.expect_tag));
    progressed = true;
  }
  return progressed;
}

// Takes the next arrived signal from `p` (the caller saw it arrive) and checks its tag.
Status ShmTransport::ConsumeSignal(Peer& p, uint64_t expect_tag) {
  const uint64_t number = p.signals_consumed++;
  return expect_tag == 0 ? OkStatus() : CheckSignalTag(p, number, expect_tag);
}

Status ShmTransport::CheckSignalTag(const Peer& p, uint64_t number, uint64_t expect_tag) const {
  // The latest tagged signal sits on the counter's line (already in our cache): when it is
  // this one and intact, its tag decides; otherwise the slot array below does.
  const shm_detail::SignalTagSlot& latest = p.in->latest_tagged;
  if (latest.index.load(std::memory_order_acquire) == number + 1) {
    const uint64_t tag = latest.tag.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (latest.index.load(std::memory_order_relaxed) == number + 1 && tag == expect_tag)
      return OkStatus();
  }
  const shm_detail::SignalTagSlot& slot = p.in->signal_tags[number % shm_detail::kSignalTagSlots];
  uint64_t index = slot.index.load(std::memory_order_acquire);
  uint64_t tag = slot.tag.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (slot.index.load(std::memory_order_relaxed) != index || index > number + 1)
    return OkStatus();  // reused by a later signal: cannot check (see kSignalTagSlots)
  if (index == number + 1 && tag == expect_tag) return OkStatus();
  std::string where = "shm: signal from rank " + std::to_string(p.rank);
  if (index != number + 1)  // the peer's signal carried no tag: it is inside another operation
    return InternalError(where + ": " + kTagMismatchMarker + ": expected the first signal of " +
                         DescribeTag(expect_tag) +
                         ", the peer's signal belongs to the middle of another operation");
  return TagMismatch(where + ": expected tag " + std::to_string(expect_tag) + ", got tag " +
                         std::to_string(tag),
                     expect_tag, tag);
}

bool ShmTransport::HasWork(const Peer& p) const {
  return !p.sends.empty() || p.posted_recvs > 0 || p.cur.active || !p.waits.empty() ||
         !p.cma_inflight.empty();
}

bool ShmTransport::PollPeer(Peer& p) {
  bool any = false;
  // Loop: for self-messages and full rings, each side's progress unblocks the other.
  for (int i = 0; i < 64; ++i) {
    bool moved = ProgressSends(p);
    moved |= ProgressRecvs(p);
    moved |= ProgressWaits(p);
    if (!moved) break;
    any = true;
  }
  return any;
}

bool ShmTransport::PollAll() {
  bool any = false;
  for (Peer& p : peers_)
    if (p.failed.ok() && HasWork(p)) any |= PollPeer(p);
  return any;
}

// ---------------------------------------------------------------------------------------
// Waiting and dead peers
// ---------------------------------------------------------------------------------------

Status ShmTransport::PeerAlive(const Peer& p, int* blamed) const {
  std::string who = "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.header->pid) + ")";
  *blamed = p.rank;
  if (p.header->closed.load(std::memory_order_acquire) != 0) {
    // A survivor that aborted because another rank failed names that rank in its header
    // before it closes (Abort): blaming the survivor itself was issue 34's flaky blame.
    const int origin = p.header->failed_origin_plus1.load(std::memory_order_acquire) - 1;
    if (p.header->revoked.load(std::memory_order_acquire) != 0) {
      *blamed = -1;  // a revoke is no one's failure
      return RemoteError("shm: " + who + " " + kRevokedMarker + " (weftCommRevoke) while rank " +
                         std::to_string(rank_) + " waits on it");
    }
    if (origin >= 0 && origin != p.rank && origin < nranks_) {
      *blamed = origin;
      return RemoteError("shm: rank " + std::to_string(origin) + " failed (reported by " + who +
                         ", which aborted its communicator because of it) while rank " +
                         std::to_string(rank_) + " waits on rank " + std::to_string(p.rank));
    }
    return RemoteError("shm: " + who + " closed or aborted its communicator while this rank " +
                       std::to_string(rank_) + " still waits on it");
  }
  if (kill(p.header->pid, 0) != 0 && errno == ESRCH)
    return RemoteError("shm: " + who + " died (process gone) while rank " +
                       std::to_string(rank_) + " waits on it");
  if (p.control && p.control->fd() >= 0) {
    struct flock fl = LivenessLock();
    if (fcntl(p.control->fd(), F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK)
      return RemoteError("shm: " + who + " died (its liveness lock was released) while rank " +
                         std::to_string(rank_) + " waits on it");
  }
  *blamed = -1;
  return OkStatus();
}

void ShmTransport::AnnounceCulprit(int culprit) {
  if (header_ != nullptr && culprit >= 0 && culprit < nranks_)
    header_->culprit_plus1.store(culprit + 1, std::memory_order_release);
}

int ShmTransport::AnnouncedCulprit(int peer) const {
  if (peer < 0 || peer >= nranks_ || local_of_rank_[peer] < 0 || peer == rank_) return -1;
  const RankHeader* h = peers_[local_of_rank_[peer]].header;
  return h != nullptr ? h->culprit_plus1.load(std::memory_order_acquire) - 1 : -1;
}

int ShmTransport::FailedOrigin() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_origin_;
}

void ShmTransport::NoteFailedOrigin(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_origin_ < 0 && rank >= 0 && rank < nranks_ && rank != rank_) failed_origin_ = rank;
}

void ShmTransport::PublishCurrentCall(uint64_t tag) {
  if (header_ != nullptr) header_->current_call.store(tag, std::memory_order_relaxed);
}

Status ShmTransport::PeerInSameCall(const Peer& p) const {
  if (header_ == nullptr || p.header == nullptr) return OkStatus();
  const uint64_t mine = header_->current_call.load(std::memory_order_relaxed);
  const uint64_t theirs = p.header->current_call.load(std::memory_order_relaxed);
  const uint64_t seq_mask = 0xffffffffULL;  // MakeCallTag: sequence number in the low half
  if (mine == 0 || theirs == 0 || mine == theirs || (mine & seq_mask) != (theirs & seq_mask))
    return OkStatus();  // not in one call, or in it alike: the steps' own checks apply
  return TagMismatch("shm: rank " + std::to_string(p.rank) + " runs the same call with another "
                     "plan while this rank " + std::to_string(rank_) + " waits on it",
                     mine, theirs);
}

void ShmTransport::FailPeer(Peer& p, const Status& st) {
  if (p.failed.ok()) p.failed = st;
  FailRequests(p, st);
  // A dead owner cannot unlink its grown window any more: do it for it.
  if (p.rank != rank_) {
    uint64_t gen = p.header->window_gen.load(std::memory_order_acquire);
    if (gen > 1) ShmUnlinkName(WindowName(p.prefix, gen));
  }
}

void ShmTransport::FailRequests(Peer& p, const Status& st) {
  for (SendOp& s : p.sends) Complete(s.req, st);
  p.sends.clear();
  for (TransportRequest* r : p.cma_inflight) Complete(r, st);
  p.cma_inflight.clear();
  for (auto& [ch, q] : p.recvs)
    for (RecvOp& r : q) Complete(r.req, st);
  p.recvs.clear();
  p.posted_recvs = 0;
  if (p.cur.active && p.cur.req != nullptr) Complete(p.cur.req, st);
  p.cur = Incoming();
  for (WaitOp& w : p.waits) Complete(w.req, st);
  p.waits.clear();
}

Status ShmTransport::CheckLiveness(bool force) {
  // Reading the clock costs more than a poll of the rings; look at it every 64th call only.
  if (!force && (++liveness_calls_ & 63) != 0) return OkStatus();
  Clock::time_point now = Clock::now();
  if (!force && now - last_liveness_check_ < std::chrono::milliseconds(options_.liveness_ms))
    return OkStatus();
  last_liveness_check_ = now;
  Status first;
  for (Peer& p : peers_) {
    if (p.rank == rank_ || !p.failed.ok() || !HasWork(p)) continue;
    int blamed = -1;
    Status alive = PeerAlive(p, &blamed);
    if (alive.ok()) alive = PeerInSameCall(p);
    if (alive.ok()) continue;
    // What it published before dying/closing is still valid: take it first.
    PollPeer(p);
    if (!HasWork(p)) continue;
    if (failed_origin_ < 0 && blamed >= 0 && blamed != rank_) failed_origin_ = blamed;
    FailPeer(p, alive);
    if (first.ok()) first = alive;
  }
  return first;
}

int ShmTransport::PublishWaitingCpu() {
  const int cpu = sched_getcpu();  // vDSO / rseq: tens of nanoseconds
  // Store only a change: peers poll this line, and every store would cost them a cache miss.
  if (header_->waiting_cpu.load(std::memory_order_relaxed) != cpu)
    header_->waiting_cpu.store(cpu, std::memory_order_relaxed);
  return cpu;
}

// A local peer that last waited on our CPU is most likely queued behind us on it (the
// scheduler put two ranks of this job on one core, e.g. while the other core runs something
// else): spinning would keep it, and the progress we wait for, off the CPU until the next
// tick. Reads only the peers' published words (no lock needed: peers_ is fixed after Create).
bool ShmTransport::PeerWaitsForMyCpu(int my_cpu) const {
  if (my_cpu < 0) return false;
  for (const Peer& p : peers_)
    if (p.rank != rank_ && p.header->waiting_cpu.load(std::memory_order_relaxed) == my_cpu)
      return true;
  return false;
}

// Two ranks of a host that is not oversubscribed found on one CPU (the scheduler put them
// there, e.g. while the other core ran a build): handing the CPU back and forth costs two
// context switches per message for as long as they stay (measured 3.5-5.5 us per 8-byte
// allreduce against 0.7 us apart), and the load balancer sees no reason to separate two tasks
// that take turns. The rank with the higher local index steps off: it narrows its own
// thread's affinity to the other CPUs it may use, which migrates it at once, then restores
// the mask it had (so the application's affinity is unchanged; only where this thread runs
// now). At most every 50 ms, so a machine that keeps putting them together is not fought.
// Returns whether it moved.
bool ShmTransport::MoveOffSharedCpu(int my_cpu) {
  if (backoff_.policy().spin_us == 0) return false;  // oversubscribed: sharing is expected
  bool higher = true;
  for (const Peer& p : peers_)
    if (p.rank != rank_ && p.header->waiting_cpu.load(std::memory_order_relaxed) == my_cpu &&
        p.rank > rank_)
      higher = false;
  if (!higher) return false;
  const Clock::time_point now = Clock::now();
  if (now - last_cpu_move_ < std::chrono::milliseconds(50)) return false;
  last_cpu_move_ = now;
  cpu_set_t mine, others;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || my_cpu >= CPU_SETSIZE ||
      !CPU_ISSET(my_cpu, &mine) || CPU_COUNT(&mine) < 2)
    return false;
  others = mine;
  CPU_CLR(my_cpu, &others);
  if (sched_setaffinity(0, sizeof(others), &others) != 0) return false;
  sched_setaffinity(0, sizeof(mine), &mine);  // back to the caller's mask, on the new CPU
  return true;
}

Status ShmTransport::Progress(int timeout_us) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  if (PollAll()) {
    backoff_.Reset();
    return OkStatus();
  }
  if (pending_ == 0) return OkStatus();
  WEFT_RETURN_IF_ERROR(CheckLiveness(false));
  if (timeout_us <= 0) return OkStatus();
  // The deadline is fixed at its first use, not here: a wait that the spin stage ends within
  // 16 rounds (the tiny-message case) reads no clock at all. A later first use moves the
  // deadline by those rounds (microseconds) at most.
  Clock::time_point deadline;
  bool deadline_set = false;
  auto deadline_passed = [&] {
    const Clock::time_point now = Clock::now();
    if (!deadline_set) {
      deadline = now + std::chrono::microseconds(timeout_us);
      deadline_set = true;
    }
    return now >= deadline;
  };
  int my_cpu = PublishWaitingCpu();
  for (uint32_t round = 1;; ++round) {
    // The lock is dropped while pausing/sleeping so that Abort() from another thread gets in.
    lock.unlock();
    if ((round & 255) == 0) my_cpu = PublishWaitingCpu();  // the scheduler may move us
    Backoff::Stage stage;
    if (PeerWaitsForMyCpu(my_cpu)) {
      if (MoveOffSharedCpu(my_cpu)) my_cpu = PublishWaitingCpu();
      stage = backoff_.Yield();
    } else {
      stage = backoff_.Pause();
    }
    lock.lock();
    if (!aborted_.ok()) return aborted_;
    if (stage == Backoff::Stage::kSleep) {
      header_->sleeping.store(1, std::memory_order_seq_cst);
      // Wake's pair: peers that publish with only a compiler barrier are fenced from here.
      // If the kernel refused, such a publish may go unseen: sleep 1 ms at most then.
      const bool fenced = HeavyFence();
      uint32_t bell = header_->doorbell.load(std::memory_order_seq_cst);
      if (!PollAll()) {
        if (!deadline_set) deadline_passed();
        auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
        int64_t us = std::min<int64_t>(left.count(), int64_t{options_.liveness_ms} * 1000);
        if (!fenced) us = std::min<int64_t>(us, 1000);
        lock.unlock();
        if (us > 0) FutexWait(&header_->doorbell, bell, us);
        lock.lock();
        header_->sleeping.store(0, std::memory_order_relaxed);
        if (!aborted_.ok()) return aborted_;
      } else {
        header_->sleeping.store(0, std::memory_order_relaxed);
        backoff_.Reset();
        return OkStatus();
      }
    }
    if (PollAll()) {
      backoff_.Reset();
      return OkStatus();
    }
    WEFT_RETURN_IF_ERROR(CheckLiveness(false));
    if (pending_ == 0) return OkStatus();
    // Spinning, the deadline is looked at every 16th round only (a clock read per round
    // lengthened the round, and so the time to see data that lands during it); the caller's
    // 2 ms slice then ends a few microseconds late at most.
    if ((stage != Backoff::Stage::kSpin || (round & 15) == 0) && deadline_passed()) return OkStatus();
  }
}

void ShmTransport::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st = why.ok() ? InternalError("shm: transport aborted") : why;
  for (Peer& p : peers_) FailRequests(p, st);
  if (aborted_.ok()) aborted_ = st;
  aborted_flag_.store(true, std::memory_order_release);
  if (header_ != nullptr) {
    // Whom the peers should blame: the rank whose failure made us abort, none (we closed on
    // our own: they blame us), or a revoke (no one). Published before `closed`.
    if (failed_origin_ >= 0) header_->failed_origin_plus1.store(failed_origin_ + 1, std::memory_order_release);
    else if (st.message().find(kRevokedMarker) != std::string::npos) header_->revoked.store(1, std::memory_order_release);
    // The rings are now out of step with our peers: tell them not to wait for us.
    header_->closed.store(1, std::memory_order_seq_cst);
    for (Peer& p : peers_)
      if (p.rank != rank_ && p.header != nullptr) Wake(p);
    // And wake our own thread if it sleeps in Progress (Abort may come from another thread).
    header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&header_->doorbell, 1);
  }
}

}  // namespace weft
