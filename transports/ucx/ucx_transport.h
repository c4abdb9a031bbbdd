// UcxTransport: weft::Transport over UCX's UCP API, for ranks on different hosts. On a cluster
// UCX picks RC/DC verbs (InfiniBand, RoCE), on one host shared memory, and falls back to its
// tcp lane where nothing else exists (this build VM: tcp, posix/sysv shared memory, cma).
//
// Setup (Create, collective over the bootstrap's ranks): one UCP context and one worker per
// transport instance (= per communicator); the worker addresses (plus host names, for error
// messages) are allgathered through the UcxBootstrap; an endpoint per peer is created with
// UCP_ERR_HANDLING_MODE_PEER; then every rank sends a zero-byte hello to every peer and
// receives one from each, which forces UCX's wireup now (so a dead peer is noticed even by a
// rank that only receives from it) and proves the pair works before the first collective.
//
// Data: two-sided tagged messages. The 64-bit UCP tag (ucx_wire.h) is
//     [63..44] source rank (20 bits) | [43..32] channel (12 bits) | [31..0] operation tag
//     folded to 32 bits (low word XOR high word).
// A receive matches on source and channel only, so - with UCP's in-order matching per
// sender - the k-th recv posted for (peer, channel) takes the k-th message sent there,
// whatever its tag, exactly as tcp. On completion the sender's folded tag and the message
// length are compared with the posted recv; a mismatch fails that recv with InternalError
// ("mismatched call", transport.h's marker) naming peer, channel, expected and received tag
// and size. Sequence numbers under one call descriptor (the tag's high word) are compared
// exactly; tags whose high words differ are caught except with probability 2^-32, and the
// received tag is then only known by its fold (the message says so). The full 64 bits would
// need a header beside the payload (see README.md). A too-long message arrives truncated.
// Channel 4095 is reserved for the setup hello.
//
// Waiting: Progress(0) drives the worker once (ucp_worker_progress until idle) and yields the
// core when nothing moved while requests are pending (same reason as tcp: the peer we wait for
// may be runnable on this core). Progress(timeout_us > 0) spins as the waiting policy says
// (UcxOptions::spin_us), then arms the
// worker (ucp_worker_arm) and sleeps in ppoll() on the worker's event fd and an eventfd that
// Abort() writes, for at most the rest of the timeout.
//
// Failures: UCX calls the endpoint's error callback when a peer dies (tcp lane: the socket
// breaks; RDMA lanes: UCX's keepalive, which Create sets to keepalive_s unless
// UCX_KEEPALIVE_INTERVAL is set). UCX 1.13's shared-memory lanes have no failure handler:
// see UcxOptions::err_mode. Requests to and from that peer then fail with RemoteError
// naming its rank and host, and so does Progress. A peer that disconnects with nothing pending
// is a normal shutdown; later requests to it fail (a recv still succeeds when the message had
// already arrived).
//
// Threading: one thread at a time calls Post*/Progress (the worker is UCS_THREAD_MODE_SERIALIZED
// and a mutex serializes us); Abort() may come from any thread: it wakes a sleeping Progress
// through the eventfd, then fails every pending request under the mutex. After Abort returns,
// UCX writes into no user buffer: pending receives are cancelled and the endpoints closed, and
// the worker is not progressed again until the destructor (which waits for UCX to let go).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_options.h"
#include "transports/ucx/ucx_bootstrap.h"

namespace weft {


// A transport UCX offers on this host ("tcp/eth0", "posix/memory", "rc_mlx5/mlx5_0:1"), and
// whether it is an RDMA lane (InfiniBand/RoCE verbs: rc, dc, ud). Independent of UCX_TLS.
struct UcxLane {
  std::string transport;
  std::string device;
  bool rdma = false;
};
// Lists UCX's transports through the UCT component/MD query (no context, no worker).
StatusOr<std::vector<UcxLane>> ListUcxLanes();
// True when ListUcxLanes() has an RDMA lane: the default rule for choosing ucx over tcp.
bool UcxHasRdmaLane();

class UcxTransport : public Transport {
 public:
  static StatusOr<std::unique_ptr<UcxTransport>> Create(UcxBootstrap* bootstrap,
                                                        const UcxOptions& options);
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  using Transport::PostRecv;
  using Transport::PostRecvUpTo;
  using Transport::PostSend;
  Status PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                  TransportRequest* req) override;
  Status PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                  TransportRequest* req) override;
  Status PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                      TransportRequest* req) override;
  Status Progress(int timeout_us) override;
  bool HasPending() const override { return pending_.load(std::memory_order_acquire) > 0; }
  void Abort(const Status& why) override;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // How Progress(timeout > 0) waits (UcxOptions::spin_us, ranks_on_machine).
  const BackoffPolicy& waiting_policy() const { return backoff_.policy(); }
  // The lanes UCX chose for the endpoint to `peer`, e.g. "tcp/lo" or "posix/memory,cma/memory"
  // (from ucp_ep_print_info; logged at WEFT_DEBUG=INFO after setup).
  std::string PeerLanes(int peer) const;
  // Whether UCX will report `peer`'s death (false: its lanes have no failure handler).
  bool DetectsPeerFailure(int peer) const;
  // Highest user channel (4092..4095: culprits, abort notes, signals, the setup hello).
  static constexpr int kMaxUserChannel = 4091;
  // Timeout diagnosis (transport.h): a 4-byte message on the reserved culprit channel to every
  // healthy peer; one receive per peer stays posted (not pending) and is re-posted in Progress.
  void AnnounceCulprit(int culprit) override;
  int AnnouncedCulprit(int peer) const override;
  int FailedOrigin() const override;
  void NoteFailedOrigin(int rank) override;

  // ---- registered memory and one-sided operations (ucx_one_sided.cc; transport.h) ----
  // Register: ucp_mem_map (cached: a range inside an earlier registration returns its handle
  // with one more reference) and the rkey packed once; Deregister's last reference unmaps.
  // PackRemoteKey: {magic, owner rank, address, bytes} + UCX's packed rkey; ImportRemoteKey
  // checks the owner is `peer` and unpacks the rkey on the endpoint to it.
  // PostPut/PostGet: ucp_put_nbx/ucp_get_nbx, completed through Progress like sends (req->bytes
  // = bytes moved). Signal(peer, tag): when puts/gets went to the peer since its last signal,
  // ucp_ep_flush_nbx first (every put/get posted before it is complete *at the target*; Signal
  // drives the flush for up to 200 us, Progress does the rest), then an 8-byte tagged message
  // carrying `tag` on the reserved signal channel; signals to one peer leave in posting order.
  // Like a send, a signal may need Progress to leave: HasPending() is true until it has. PostWait: a
  // receive on that channel (counted, never lost: UCX queues early signals), checked against
  // expect_tag (TagMismatch). A dead peer fails them like sends and receives.
  StatusOr<RegHandle> Register(const MemRef& mem) override;
  Status Deregister(RegHandle handle) override;
  StatusOr<std::string> PackRemoteKey(RegHandle handle) override;
  StatusOr<RemoteKey> ImportRemoteKey(int peer, const std::string& packed) override;
  Status PostPut(int peer, const MemRef& src, RemoteKey dst, size_t offset, TransportRequest* req) override;
  Status PostGet(int peer, const MemRef& dst, RemoteKey src, size_t offset, TransportRequest* req) override;
  Status Signal(int peer, uint64_t tag) override;
  Status PostWait(int peer, TransportRequest* req, uint64_t expect_tag) override;
  size_t registered_regions() const;

  // The context and worker, and the endpoint to a peer (for tests and diagnostics). Only for use under the same one-thread-at-a-time rule as Post*/Progress.
  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  ucp_ep_h endpoint(int peer) const { return peers_[peer].ep; }

 private:
  struct Peer;
  // What an Op is. Signals are two-stage: a flush of the endpoint, then the message.
  enum class OpKind : uint8_t { kSend, kRecv, kPut, kGet, kSignal, kWait, kNote, kCulprit };
  // One posted operation, alive until UCX is done with it (even after the user's request
  // was failed by Abort or a peer failure: `req` is then null).
  struct Op {
    UcxTransport* owner = nullptr;
    int peer = -1;
    int channel = 0;
    OpKind kind = OpKind::kSend;
    bool is_recv = false;  // kRecv, kWait and kNote receives (cancelled on failure)
    bool up_to = false;  // recv: `bytes` is a maximum (PostRecvUpTo)
    uint64_t tag = 0;
    size_t bytes = 0;
    TransportRequest* req = nullptr;
    void* ucx_request = nullptr;
    bool ucx_done = false;
    ucs_status_t ucx_status = UCS_OK;
    ucp_tag_recv_info_t info{};
    uint64_t word = 0;          // kSignal/kWait: the signal's 64-bit tag (UCX's buffer)
    bool flush_done = false;    // kSignal: the flush completed; the message may leave
    TransportRequest internal;  // the request of ops no caller waits on (signals, notes)
    std::string note;           // kNote send: the note's text (UCX's buffer)
    std::list<Op>::iterator self;
  };
  struct Peer {
    UcxTransport* owner = nullptr;
    int rank = -1;
    std::string host;
    ucp_ep_h ep = nullptr;
    Status error;         // sticky: failed or closed
    bool closed = false;  // disconnected with nothing pending (normal shutdown)
    int pending = 0;
    std::string lanes;
    bool detects_failure = true;
    std::list<Op*> signals;  // kSignal ops in posting order, waiting for their flush
    uint64_t rma_unflushed = 0;  // puts/gets posted since the last Signal's flush
    int announced_culprit = -1;  // the last AnnounceCulprit from this peer; -1 = none
  };
  // A peer's registered memory, imported (ImportRemoteKey); RemoteKey = index + 1.
  struct ImportedKey {
    int peer = -1;
    uint64_t address = 0;
    uint64_t bytes = 0;
    ucp_rkey_h rkey = nullptr;
  };
  // This rank's registration behind a RegistrationCache handle.
  struct Mapped {
    ucp_mem_h memh = nullptr;
    std::string packed_rkey;
  };

  UcxTransport() = default;
  Status InitUcx(const UcxOptions& options);
  Status ConnectPeers(UcxBootstrap* bootstrap);
  Status CreateEndpoint(Peer& p, const ucp_address_t* address);
  Status ExchangeHellos(double timeout_s);
  Status PostRecvImpl(int peer, int channel, uint64_t tag, const MemRef& dst, bool up_to,
                      TransportRequest* req);
  std::string PeerName(const Peer& p) const;
  // `req` null: the op's own internal request (signals, notes).
  Op* NewOp(int peer, int channel, bool is_recv, uint64_t tag, size_t bytes, TransportRequest* req);
  // The receive half of PostRecv/PostWait/notes, under mu_ (checks done by the caller).
  Status PostTaggedRecv(Op* op, void* buf, size_t bytes);
  // Checks a one-sided call's peer and request; under mu_: not aborted, peer not failed.
  Status CheckOneSided(int peer, const void* req, const char* what);
  Status PostRma(bool put, int peer, const MemRef& local, RemoteKey key, size_t offset,
                 TransportRequest* req);
  // Sends the signals of `p` whose flush is done, in order.
  void PumpSignals(Peer& p);
  void FinishSignal(Op* op);
  Status CheckWait(const Op& op) const;
  void ReleaseMemory();  // rkeys and mappings (destructor)
  // ---- abort notes (ucx_abort_notes.cc) ----
  // After setup every rank keeps one receive posted per peer on kNoteChannel (not counted as
  // pending). Abort with requests pending or after a peer failure sends each healthy peer a
  // note {origin rank, reason} and flushes it (bounded) before the endpoints close; the origin
  // is the rank this transport saw fail, the origin of a note it received, else itself.
  void PostNoteRecvs();
  // Posts `op` (kNote or kCulprit, not pending) as a receive into its own buffer.
  void PostInternalRecv(Op* op);
  Op* NewInternalOp(int peer, OpKind kind, int channel);
  void OnNote(Op* op);  // inside UCX's callback, before the peer's close can be reported
  void NoteOrigin(int origin, const std::string& reason);
  void SendAbortNotes(const Status& why);
  // Finishes an op UCX is done with: checks a recv, completes the user's request, frees it.
  void FinishOp(Op* op);
  Status CheckRecv(const Op& op) const;
  void CompleteUser(Op* op, Status st);
  // ucp_worker_progress until idle, then FinishOp on everything completed; true if anything moved.
  bool Drive();
  void WaitForEvents(int timeout_us);
  void OnPeerError(Peer& p, ucs_status_t status);
  // The error of a post to a peer whose endpoint failed or closed (under mu_).
  Status GonePeer(Peer& p);
  void FailPeerRequests(Peer& p, const Status& st);
  void AbortLocked(const Status& why);
  void CloseEndpoints(bool force_all);
  std::string DescribeLanes(ucp_ep_h ep) const;

  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                         void* user_data);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

  int rank_ = 0;
  int nranks_ = 1;
  UcxOptions options_;
  Backoff backoff_;  // the spin stage of Progress(timeout > 0) (UcxOptions::spin_us)
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;  // ucp_worker_get_efd; owned by UCX
  int wake_fd_ = -1;    // eventfd written by Abort()
  std::vector<Peer> peers_;
  std::list<Op> ops_;
  std::vector<Op*> completed_;  // filled by UCX callbacks during ucp_worker_progress
  std::vector<Op*> culprit_reposts_;  // culprit receives that completed: post again in Drive
  std::atomic<int> pending_{0};
  Status round_error_;
  std::atomic<bool> aborted_{false};
  Status abort_status_;
  FailureOrigin failure_;  // the rank this transport learned failed first (transport.h)
  std::vector<ImportedKey> imported_;  // RemoteKey k -> imported_[k - 1]
  std::map<RegHandle, Mapped> mapped_;  // this rank's registrations (registrations_ holds ranges)
  bool cuda_memory_ = false;            // UCX reports CUDA memory support (cuda lanes)
  mutable std::mutex mu_;
};

}  // namespace weft
