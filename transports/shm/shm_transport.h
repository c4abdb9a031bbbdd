// ShmTransport: the same-host fast path. Two-sided messages through shared-memory rings and
// one-sided windows (DirectTransport) for direct algorithms, between ranks of one host.
//
// Segments. Each rank creates, in /dev/shm:
//   weft-<random id>-r<rank>-c      control: its header (pid, doorbell, window generation) and,
//                                   per local rank s, the ring s -> this rank with its cache-line
//                                   counters (tail, head, signals);
//   weft-<random id>-r<rank>-w<g>   its window, generation g (grown on demand).
// Create() exchanges the names with bootstrap->AllGather, every rank maps its peers' segments,
// an AllGather of "mapped ok" flags acts as the barrier, then every rank unlinks its own names:
// from then on nothing of the communicator is visible in /dev/shm, so even kill -9 leaves no
// leftovers. A window grown later is unlinked by the last peer that maps it (a counter in the
// window's header), by the owner when it grows again or closes, or by a survivor that finds the
// owner dead.
//
// Two-sided protocol (receiver-owned SPSC ring per ordered pair, FIFO over all channels):
// a message is a 64-byte header {magic, channel, tag, bytes} at a 64-byte aligned position,
// then the payload. The sender copies slices (WEFT_SHM_SLICE_BYTES) and publishes `tail` after
// each one, so the receiver drains slice k while the sender fills slice k+1 (pipelined; the
// ring never needs to hold a whole message). Head and tail live on separate cache lines and
// each side caches the other's counter, re-reading it only when it runs out of room/data.
// The receiver demultiplexes channels: the k-th message of (peer, channel) goes to the k-th
// recv posted for it; a message whose channel has no recv posted while another channel is
// waiting behind it is moved to a heap stash, so channels never block each other. A header
// whose tag or size differs from the recv's fails that recv with InternalError naming the peer,
// channel, expected and received tag/size (ranks calling collectives in different orders).
//
// Large messages (>= WEFT_SHM_CMA_MIN_BYTES, 256K) take a single-copy path when the receiver
// can read the sender's memory (Linux CMA, process_vm_readv; probed at creation because
// ptrace restrictions or a container's seccomp profile may forbid it): the ring carries only
// the header with the payload's address, the receiver copies straight from the sender's buffer
// into its own and acks through a counter; the send completes on the ack. Half the memory
// traffic of the two-copy ring; FIFO order is kept because the header still goes through the
// ring. WEFT_SHM_CMA=0 forces the ring for everything. The receiver pins the sender's pages
// to copy them, at a third of the rate from 4 KiB pages as from 2 MiB ones, so the sender
// folds a reused source into huge pages on its second use (HugePageCollapser,
// common/huge_pages.h; WEFT_HUGE_PAGES=0 leaves the caller's memory as it is).
//
// One-sided: PrepareWindow/LocalWindow/PeerWindow map windows; Signal(p) increments a counter
// in p's control segment (release), PostWait consumes one (acquire).
//
// Waiting (Progress with a timeout) follows common/backoff.h: spin, then sched_yield, then a
// futex on this rank's doorbell word in its control segment. A waiting rank publishes the CPU
// it runs on; one that finds a peer's published CPU equal to its own yields instead of
// spinning (two ranks the scheduler put on one core would otherwise each spin away the
// slice the other needs). Any peer that publishes something
// for us (ring tail, ring head when we wait for room, a signal) checks our `sleeping` flag and
// bumps + wakes the doorbell. What each stage costs (ShmPerf.* in tests/shm_transport_test.cc)
// and the bulk rates are in perf/RESULTS.md, "Transport microbenchmarks": on an idle
// many-core host the spin stage is what keeps small-message latency near the hardware's
// cache-line round trip (~0.2-0.5 us); a yield costs a scheduler slice to a competing process.
// Dead peers. Each rank holds an OFD write lock on its control segment for its lifetime; the
// kernel drops it when the process dies (even while it is an unreaped zombie, which kill(pid, 0)
// would still report alive). A waiting rank checks, every WEFT_SHM_LIVENESS_MS (100 ms), the
// lock, kill(pid, 0) and the peer's `closed` flag; a dead peer fails every request involving it
// with RemoteError naming its rank and pid, within ~0.1 s. (One blind spot: a child forked
// after creation that outlives a rank inherits the lock; then only kill(pid, 0) notices, once
// the dead rank has been reaped.)
//
// Threading: as transport.h says, one thread at a time posts and progresses; Abort() may come
// from any thread: it fails every pending request, marks this rank closed for its peers, and
// wakes the owner thread if it sleeps in Progress.
//
// Knobs (ShmOptionsFromEnv; sizes accept K/M/G suffixes):
//   WEFT_SHM_DISABLE=1        the communicator does not use shm (ShmOptions::disabled)
//   WEFT_SHM_RING_BYTES       ring per ordered pair of local ranks        (default 1M)
//   WEFT_SHM_SLICE_BYTES      pipelining slice of the ring protocol       (default 64K)
//   WEFT_SHM_WINDOW_BYTES     initial window per rank, mapped at creation (default 4M; the
//                             direct algorithms keep their scratch below it for 8-byte types)
//   WEFT_SHM_MAX_BYTES        cap on /dev/shm bytes one rank may create   (default 0 = no cap)
//   WEFT_SHM_LIVENESS_MS      dead-peer check period while waiting        (default 100)
//   WEFT_SHM_CMA=0            no single-copy path (default: on where the probe succeeds)
//   WEFT_SHM_CMA_MIN_BYTES    smallest message sent single-copy           (default 256K)
//   WEFT_SPIN_US, WEFT_YIELD_US   backoff stages (common/backoff.h)
// /dev/shm use per rank: nlocal * ring + window (+ 8 KiB). 8 ranks with defaults: 12 MiB each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/huge_pages.h"
#include "common/status.h"
#include "transports/shm/shm_options.h"
#include "transports/shm/shm_segment.h"
#include "transports/transport.h"

namespace weft {
namespace shm_wire {
struct ShmMsg;  // shm_wire.h: a decoded message header
}  // namespace shm_wire


// What Create needs from the bootstrap (adapts src/core/bootstrap.h's Bootstrap and test fakes).
struct ShmBootstrapOps {
  int rank = 0;
  int nranks = 1;
  std::function<Status(const void* mine, size_t bytes, void* all)> all_gather;
};

namespace shm_detail {
struct RankHeader;
struct RingControl;
}  // namespace shm_detail

class ShmTransport : public DirectTransport {
 public:
  // Collective over the communicator: every rank calls it (also ranks with no local peers;
  // they create no named segment). local_ranks: the ranks on this host, this rank included,
  // the same list on every rank of the host. B is any type with rank(), nranks() and
  // Status AllGather(const void*, size_t, void*) (src/core/bootstrap.h's Bootstrap).
  template <typename B>
  static StatusOr<std::unique_ptr<ShmTransport>> Create(B* bootstrap,
                                                        const std::vector<int>& local_ranks,
                                                        const ShmOptions& options) {
    ShmBootstrapOps ops;
    ops.rank = bootstrap->rank();
    ops.nranks = bootstrap->nranks();
    ops.all_gather = [bootstrap](const void* mine, size_t bytes, void* all) {
      return bootstrap->AllGather(mine, bytes, all);
    };
    return CreateWithOps(ops, local_ranks, options);
  }
  static StatusOr<std::unique_ptr<ShmTransport>> CreateWithOps(
      const ShmBootstrapOps& ops, const std::vector<int>& local_ranks, const ShmOptions& options);

  ~ShmTransport() override;
  const char* name() const override { return "shm"; }

  // Transport
  using Transport::PostRecv;
  using Transport::PostRecvUpTo;
  using Transport::PostSend;
  Status PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                  TransportRequest* req) override;
  Status PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                  TransportRequest* req) override;
  bool TakesSinks() const override { return true; }
  Status PostRecvToSink(int peer, int channel, uint64_t tag, size_t bytes, RecvSink* sink,
                        TransportRequest* req) override;
  Status PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                      TransportRequest* req) override;
  Status Progress(int timeout_us) override;
  bool HasPending() const override { return pending_.load(std::memory_order_acquire) > 0; }
  void Abort(const Status& why) override;

  // DirectTransport
  Status PrepareWindow(size_t bytes) override;
  MemRef LocalWindow() override;  // kHostShared
  StatusOr<MemRef> PeerWindow(int peer, size_t min_bytes) override;
  Status Signal(int peer, uint64_t tag) override;
  Status PostWait(int peer, TransportRequest* req, uint64_t expect_tag) override;
  bool TryWait(int peer, uint64_t expect_tag, Status* st) override;
  using DirectTransport::PostWait;
  using DirectTransport::Signal;

  // Registered memory and one-sided operations (shm_memory.cc; see shm_memory.h).
  StatusOr<RegHandle> Register(const MemRef& mem) override;
  StatusOr<std::string> PackRemoteKey(RegHandle handle) override;
  StatusOr<RemoteKey> ImportRemoteKey(int peer, const std::string& packed) override;
  Status PostPut(int peer, const MemRef& src, RemoteKey dst, size_t offset, TransportRequest* req) override;
  Status PostGet(int peer, const MemRef& dst, RemoteKey src, size_t offset, TransportRequest* req) override;
  Status ReleaseRemoteKey(int peer, RemoteKey key) override;
  Status PublishCallInfo(uint64_t seq, const void* info, size_t bytes) override;
  void PublishCurrentCall(uint64_t tag) override;
  Status PeerCallInfo(int peer, uint64_t seq, void* info, size_t bytes) override;

  // Blame (transport.h): culprits and the failed rank travel in the ranks' control headers.
  void AnnounceCulprit(int culprit) override;
  int AnnouncedCulprit(int peer) const override;
  int FailedOrigin() const override;
  void NoteFailedOrigin(int rank) override;
  StatusOr<MemRef> MappedRemote(int peer, RemoteKey key, size_t offset, size_t bytes) override;

  int rank() const { return rank_; }
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  size_t window_bytes() const;
  const BackoffPolicy& backoff_policy() const { return backoff_.policy(); }
  // Whether large messages to `rank` take the single-copy path (the CMA probe succeeded).
  bool SingleCopyTo(int rank) const {
    return rank >= 0 && rank < nranks_ && local_of_rank_[rank] >= 0 &&
           peers_[local_of_rank_[rank]].single_copy;
  }
  // "weft-<random id>-r<rank>" of every local rank: every segment name of this communicator
  // on this host starts with one of them (tests check that none is left in /dev/shm).
  std::vector<std::string> segment_prefixes() const {
    std::vector<std::string> out;
    for (const Peer& p : peers_) out.push_back(p.prefix);
    return out;
  }

 private:
  struct SendOp {
    const unsigned char* buf;
    size_t bytes;
    uint64_t tag;
    uint16_t channel;
    TransportRequest* req;
  };
  struct RecvOp {
    unsigned char* buf;
    size_t bytes;
    uint64_t tag;
    TransportRequest* req;
    bool up_to = false;  // `bytes` is a maximum (PostRecvUpTo)
    RecvSink* sink = nullptr;  // PostRecvToSink: the bytes go there, not to buf
    bool Fits(uint64_t got) const { return up_to ? got <= bytes : got == bytes; }
  };
  struct WaitOp {
    TransportRequest* req;
    uint64_t expect_tag;  // 0: any signal
  };
  struct Stashed {  // a message that arrived before its recv was posted
    uint64_t tag = 0;
    std::vector<unsigned char> data;
    bool complete = false;
  };
  struct Incoming {  // the message being drained from a ring
    bool active = false;
    uint16_t channel = 0;
    size_t bytes = 0;
    size_t received = 0;
    unsigned char* dst = nullptr;  // nullptr (and no sink): discard (after a tag/size mismatch)
    RecvSink* sink = nullptr;      // the recv's sink: the bytes go there piece by piece
    TransportRequest* req = nullptr;  // the recv, or nullptr for the stash
    Stashed* stash = nullptr;
    bool single_copy = false;  // payload read from the sender's memory at `address`
    uint64_t address = 0;
  };
  struct Peer {
    int rank = -1;
    std::string prefix;                      // segment names: prefix + "-c", prefix + "-w<g>"
    std::unique_ptr<ShmSegment> control;     // peer's control segment (null for self)
    shm_detail::RankHeader* header = nullptr;
    // Ring this rank -> peer (in the peer's segment) and peer -> this rank (in ours).
    shm_detail::RingControl* out = nullptr;
    unsigned char* out_data = nullptr;
    shm_detail::RingControl* in = nullptr;
    unsigned char* in_data = nullptr;
    uint64_t out_tail = 0, out_head_seen = 0;
    uint64_t in_head = 0, in_tail_seen = 0;
    bool send_header_written = false;
    size_t send_done = 0;
    std::deque<SendOp> sends;
    bool single_copy = false;                  // the peer can read our memory (CMA probe)
    std::deque<TransportRequest*> cma_inflight;  // single-copy sends waiting for the ack
    uint64_t cma_acked = 0;
    std::map<uint16_t, std::deque<RecvOp>> recvs;
    size_t posted_recvs = 0;
    std::map<uint16_t, std::deque<std::unique_ptr<Stashed>>> stash;
    Incoming cur;
    uint64_t signals_consumed = 0;
    uint64_t signals_sent = 0;  // to this peer (we are the only writer of its counter)
    std::deque<WaitOp> waits;
    std::unique_ptr<ShmSegment> window;  // peer's window mapping (not for self)
    uint64_t window_gen = 0;
    Status failed;  // set once the peer is known dead/closed
  };

  // A peer's registration, imported from its packed key (shm_memory.cc).
  struct ImportedKey {
    int peer = -1;
    int32_t pid = 0;
    uint64_t address = 0;  // in the owner's address space (cross-memory attach)
    uint64_t bytes = 0;
    bool in_window = false;  // inside the owner's window: reached through our mapping of it
    uint64_t window_offset = 0;
    uint64_t window_gen = 0;
    // Shareable memory (weftMemAlloc): the owner's memory file mapped here; the key's range
    // starts at `mapped`. Null when the memory is not shareable or the key was released.
    std::shared_ptr<void> mapping;
    const char* mapped = nullptr;
  };

  ShmTransport() = default;
  StatusOr<const void*> PeerWindowLocked(int peer, size_t min_bytes);
  void* WindowBase();  // this rank's window data, nullptr before the first PrepareWindow
  Status OneSidedCopy(bool put, int peer, const MemRef& local, RemoteKey key, size_t offset,
                      TransportRequest* req);
  Status PostRecvOp(int peer, int channel, const RecvOp& op);
  Status RecvMismatch(const Peer& p, uint16_t channel, const RecvOp& r, uint64_t got_tag,
                      uint64_t got_bytes) const;
  Status PrepareWindowLocked(size_t bytes);
  // Creation's phases (CreateWithOps).
  Status IndexLocalRanks();
  void InitControlSegment(size_t nlocal, size_t ring, size_t ring_offset);
  Status CreateOwnSegments(size_t nlocal, bool shared);
  Status MapPeer(size_t i, const std::string& peer_prefix, bool peer_ready);
  void ProbeSingleCopy();
  void FinishSetup();
  Peer* Find(int rank, Status* st);
  // The owner thread's lookup without the lock: null when aborted, unknown or failed (the
  // caller then takes the locked path, which says why).
  Peer* OwnerFind(int rank);
  bool HasWork(const Peer& p) const;
  bool PollPeer(Peer& p);
  bool PollAll();
  bool ProgressSends(Peer& p);
  bool ProgressRecvs(Peer& p);
  // ProgressRecvs' phases: start a message, give it a destination, copy it, finish it.
  int StartIncoming(Peer& p);
  bool AttachIncoming(Peer& p, const shm_wire::ShmMsg& h);
  bool CopyFromRing(Peer& p);
  void FinishIncoming(Peer& p);
  bool ProgressWaits(Peer& p);
  Status CheckSignalTag(const Peer& p, uint64_t number, uint64_t expect_tag) const;
  Status ConsumeSignal(Peer& p, uint64_t expect_tag);
  Status ReadSingleCopy(Peer& p, Incoming& c);
  void MatchStash(Peer& p, uint16_t channel);
  void Complete(TransportRequest* req, Status st);
  void Wake(Peer& p);
  Status CheckLiveness(bool force);
  int PublishWaitingCpu();
  // CPUs in the union of the local ranks' affinity masks (how many cores the host's ranks
  // may use between them: fewer than ranks means oversubscribed).
  int CpusOfLocalRanks() const;
  bool PeerWaitsForMyCpu(int my_cpu) const;
  bool MoveOffSharedCpu(int my_cpu);
  // OK while `p` lives and has not closed; else the error to fail it with, and in *blamed the
  // rank that failed: p itself, or the rank p's header names when p aborted because of it.
  Status PeerAlive(const Peer& p, int* blamed) const;
  // A mismatch error when `p` published a call with this rank's sequence number but another
  // descriptor (PublishCurrentCall), else OK.
  Status PeerInSameCall(const Peer& p) const;
  void FailPeer(Peer& p, const Status& st);      // peer dead: fail its requests, mark it
  void FailRequests(Peer& p, const Status& st);  // fail every pending request involving p
  std::string WindowName(const std::string& prefix, uint64_t gen) const;

  HugePageCollapser collapser_;  // our single-copy sources, folded into huge pages on reuse
  int rank_ = 0;
  int nranks_ = 1;
  std::vector<int> local_ranks_;
  int local_index_ = 0;
  ShmOptions options_;
  size_t budget_left_ = 0;
  std::string prefix_;
  std::unique_ptr<ShmSegment> control_;
  shm_detail::RankHeader* header_ = nullptr;
  std::unique_ptr<ShmSegment> window_;
  uint64_t window_gen_ = 0;
  std::vector<ImportedKey> imported_;  // RemoteKey k = imported_[k - 1]
  std::vector<Peer> peers_;        // by local index
  std::vector<int> local_of_rank_; // global rank -> local index or -1
  std::atomic<size_t> pending_{0};
  // Guards all state above against Abort() from another thread (the owner thread's calls
  // never contend with each other; an uncontended lock costs ~20 ns per call).
  mutable std::mutex mu_;
  Status aborted_;
  // Set (with aborted_) by Abort: what the owner thread's lock-free paths look at.
  std::atomic<bool> aborted_flag_{false};
  // The rank to blame (FailedOrigin), under mu_: the first dead or closed peer's, or what
  // NoteFailedOrigin named; -1 while none. Abort publishes it in the header for the peers.
  int failed_origin_ = -1;
  bool light_signals_ = false;  // RegisterAsymmetricFence: Signal needs no hardware fence
  Backoff backoff_;
  std::chrono::steady_clock::time_point last_liveness_check_;
  std::chrono::steady_clock::time_point last_cpu_move_;  // MoveOffSharedCpu's rate limit
  uint64_t liveness_calls_ = 0;
};

}  // namespace weft
