// Transport: the one interface every transport implements (tcp, inproc, shm, ucx, ...).
//
// Transports move bytes between two ranks and know nothing of collectives. The executor posts
// non-blocking sends and receives and drives them with Progress() from the thread that waits
// (no mandatory progress thread).
//
// Ordering: messages from rank a to rank b on one channel are delivered in the order they were
// posted, and the k-th recv posted for (peer, channel) receives the k-th message sent there.
// Each message carries the sender's 64-bit `tag`: the executor passes the call tag
// (MakeCallTag below: the operation sequence number and a hash of the call's descriptor —
// collective, count, dtype, op, root, algorithm); a receiver whose recv has a different tag or
// size fails with an error containing kTagMismatchMarker and naming both tags (DescribeTag),
// which catches ranks calling collectives in different orders, or the same collective with
// different arguments, instead of corrupting data.
//
// Completion: a request's `done` is set by the transport once the buffer may be reused (send)
// or holds the data (recv). `status` and `bytes` are meaningful once done. Requests must stay
// valid until done or until Abort().
//
// Sizes: PostRecv expects exactly `bytes` (a different size is a mismatch, as a different tag
// is); PostRecvUpTo accepts any message of at most `max_bytes` and reports its size in
// TransportRequest::bytes — for payloads whose size only the sender knows (compressed chunks).
// A message longer than the posted receive is always a mismatch: the receive fails (what the
// buffer then holds is unspecified), it never succeeds with a truncated message.
//
// Threading: one thread at a time calls Post*/Progress on a transport instance; Abort() may be
// called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/memref.h"
#include "common/status.h"
#include "transports/registration_cache.h"

namespace weft {

// Call tags: high 32 bits = descriptor hash of the call, low 32 bits = sequence number.
// The descriptor hash is never 0 for a collective, so a tag of 0 means "no tag" for signals.
inline uint64_t MakeCallTag(uint32_t descriptor, uint64_t seq) {
  return (static_cast<uint64_t>(descriptor) << 32) | (seq & 0xffffffffULL);
}
// Every transport puts this text in a tag/size mismatch error: the communicator recognizes it
// and reports the mismatch as weftInvalidUsage naming this rank's call.
constexpr const char* kTagMismatchMarker = "mismatched call";
// Every transport puts this text in the error of an operation stopped because a rank revoked
// the communicator (weftCommRevoke): the revoking rank did not fail, so it is not blamed.
constexpr const char* kRevokedMarker = "revoked the communicator";
// Whether an abort note naming `origin` reports that the origin itself revoked (weftCommRevoke
// writes "rank R revoked the communicator ..."), as opposed to a failure of the origin that a
// revoking rank knew of and forwards.
inline bool IsRevokeBy(int origin, const std::string& reason) {
  return reason.find("rank " + std::to_string(origin) + " " + kRevokedMarker) != std::string::npos;
}
// The rank a transport learned failed first (a peer that died under pending requests, or the
// origin of an abort note) and the reason to forward in its own abort notes: the bookkeeping of
// the transports that relay abort notes (tcp, ucx). Its owner serializes access.
struct FailureOrigin {
  int rank = -1;           // -1 while none
  std::string reason;
  bool by_revoke = false;  // `rank` revoked the communicator: it did not fail
  // Keeps the first failure: it is the one to report.
  void Note(int origin, const std::string& why) {
    if (rank >= 0) return;
    rank = origin;
    reason = why;
    by_revoke = IsRevokeBy(origin, why);
  }
  bool known() const { return rank >= 0; }
  // The rank to report as failed, -1 when none (a revoking rank did not fail).
  int failed() const { return by_revoke ? -1 : rank; }
  // This rank's own abort note: the learned failure, else this rank (`self`) and `why`.
  int NoteOrigin(int self) const { return rank >= 0 ? rank : self; }
  std::string NoteReason(const std::string& why) const {
    return rank >= 0 && !reason.empty() ? reason : why;
  }
};

// "call #17 (descriptor 1a2b3c4d)" for messages (the point-to-point tag reads "send/recv").
inline std::string DescribeTag(uint64_t tag) {
  if (tag >= 0xfffffffffffffff0ULL) return "send/recv";
  char buf[64];
  snprintf(buf, sizeof(buf), "call #%llu (descriptor %08x)",
           static_cast<unsigned long long>(tag & 0xffffffffULL), static_cast<unsigned>(tag >> 32));
  return buf;
}

// The error every transport reports when a message (or tagged signal) does not match the
// posted recv (wait): `detail` is the transport's own account (peer, channel, both tags and
// sizes); the decoded tags follow. InternalError at this level (a transport cannot tell a bug
// from a user error); the communicator turns it into weftInvalidUsage naming this rank's call.
inline Status TagMismatch(const std::string& detail, uint64_t want_tag, uint64_t got_tag) {
  return InternalError(detail + " [" + kTagMismatchMarker + ": this rank expected " +
                       DescribeTag(want_tag) + ", the peer sent " + DescribeTag(got_tag) +
                       "; ranks called different collectives, or the same one with different "
                       "arguments, or in a different order]");
}

struct TransportRequest {
  std::atomic<bool> done{false};
  Status status;     // valid once done
  size_t bytes = 0;  // a successful recv: bytes that arrived (a send: bytes sent)
  void Complete(Status s = Status()) {
    status = std::move(s);
    done.store(true, std::memory_order_release);
  }
  void Reset() {
    done.store(false, std::memory_order_relaxed);
    status = Status();
    bytes = 0;
  }
};

// Where a receive posted with PostRecvToSink puts its bytes, piece by piece as they land, so
// the receiver consumes them in its cache (a reduction and an encode tile by tile: exec/
// chain_sink.h) instead of through a buffer in memory. The transport asks for room, writes
// at most that many bytes there and reports how many; pieces end anywhere (mid-element too)
// and arrive in order. Landed runs on the thread that drives Progress, under the transport's
// lock: it must not call the transport.
class RecvSink {
 public:
  virtual ~RecvSink() = default;
  virtual unsigned char* Space(size_t* room) = 0;  // room > 0 on return
  virtual void Landed(size_t bytes) = 0;
  // Whether the sink would rather take its next bytes in a later Progress: it has room only
  // by putting them somewhere slower (a sink fed by several peers whose others lag behind,
  // exec/operand_sink.h). A transport that can leave a message half read does so and comes
  // back; one that cannot (bytes that already wait in its own memory) calls Space anyway,
  // which always has room. The sink bounds how long it asks, so a message always finishes.
  virtual bool Later() { return false; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // Two-sided operations take MemRefs: the memory kind travels with the bytes, so a transport
  // refuses what it cannot move (every transport here moves host memory; device buffers reach
  // them staged through pinned host memory, src/core/device_staging.h) instead of faulting.
  // Starts sending src.bytes bytes of `src` to `peer`. Zero-byte messages are delivered too.
  virtual Status PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                          TransportRequest* req) = 0;
  // Starts receiving exactly dst.bytes bytes from `peer` into `dst`.
  virtual Status PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                          TransportRequest* req) = 0;
  // Starts receiving a message of at most dst.bytes bytes from `peer` into `dst`; once done,
  // req->bytes holds its size. Same ordering and tag matching as PostRecv. (Every weft
  // transport implements it; the default refuses, for test doubles that do not need it.)
  virtual Status PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                              TransportRequest* req) {
    return InvalidUsage(std::string(name()) + " transport: receives of variable size are not supported");
  }
  // Starts receiving exactly `bytes` bytes from `peer` into `sink` (same ordering, tag and size
  // matching as PostRecv; on a mismatch the sink gets nothing). Only where TakesSinks().
  virtual bool TakesSinks() const { return false; }
  virtual Status PostRecvToSink(int peer, int channel, uint64_t tag, size_t bytes, RecvSink* sink,
                                TransportRequest* req) {
    (void)peer, (void)channel, (void)tag, (void)bytes, (void)sink, (void)req;
    return InvalidUsage(std::string(name()) + " transport: receives into a sink are not supported");
  }
  // The same on pageable host memory given as pointer and size (tools and tests; the executor
  // passes MemRefs). Derived transports bring these in with `using Transport::PostSend;` etc.
  Status PostSend(int peer, int channel, uint64_t tag, const void* buf, size_t bytes,
                  TransportRequest* req) {
    return PostSend(peer, channel, tag, MemRef::Host(buf, bytes), req);
  }
  Status PostRecv(int peer, int channel, uint64_t tag, void* buf, size_t bytes,
                  TransportRequest* req) {
    return PostRecv(peer, channel, tag, MemRef::Host(buf, bytes), req);
  }
  Status PostRecvUpTo(int peer, int channel, uint64_t tag, void* buf, size_t max_bytes,
                      TransportRequest* req) {
    return PostRecvUpTo(peer, channel, tag, MemRef::Host(buf, max_bytes), req);
  }
  // Moves data. Waits at most `timeout_us` microseconds for something to happen when nothing
  // can be done right away (0 = never wait). Returns an error for failures that are not tied
  // to one request (e.g. a peer's connection dropped while requests to it are pending: those
  // requests also complete with the error).
  virtual Status Progress(int timeout_us) = 0;
  // True while any posted request is not yet done.
  virtual bool HasPending() const = 0;
  // Fails every pending request with `why` and closes connections. Idempotent.
  virtual void Abort(const Status& why) = 0;

  // ---- timeout diagnosis ----
  // A rank whose collective stopped moving tells the peers it is connected to which rank it
  // believes holds the job up (its culprit: at first the rank it waits on), and reads theirs,
  // before it reports the timeout. Only a stopped rank is silent: a survivor two hops away
  // from it waits on a healthy neighbour that waits too, and following the announced culprits
  // along the chain of waits names the stopped rank instead of that neighbour. Best effort:
  // the default (shm, whose peers share one host) announces nothing and knows nothing.
  virtual void AnnounceCulprit(int culprit) { (void)culprit; }
  // The culprit `peer` announced last, or -1 when it announced none.
  virtual int AnnouncedCulprit(int peer) const { (void)peer; return -1; }

  // ---- blame: who failed ----
  // The rank this transport holds responsible for the failure it saw first: a peer whose
  // process or connection died, or the origin a peer's abort note named; -1 while it saw none
  // (and after a revoke, which is no one's failure). weftCommFailedRanks reports it.
  virtual int FailedOrigin() const { return -1; }
  // Names the rank to blame when this transport aborts without a failure of its own (the
  // executor's timeout culprit, or what another transport of this rank saw): its abort notes
  // (shm: its closed header) then name that rank instead of this one, so a survivor two hops
  // away blames the failed rank, not the healthy relay. The first failure seen wins.
  virtual void NoteFailedOrigin(int rank) { (void)rank; }

  // ---- memory registration ----
  // Registers `mem` with this transport, so that it can be named in one-sided operations
  // (PackRemoteKey) and, for RDMA/IPC transports, be pinned once instead of per operation.
  // Cached (registration_cache.h): a range inside an earlier registration of the same kind
  // returns that handle with one more reference. The default keeps only the bookkeeping (tcp,
  // inproc: the CPU copies, nothing to pin) and refuses device memory.
  virtual StatusOr<RegHandle> Register(const MemRef& mem);
  // Drops one reference of Register's handle; the last one releases the registration.
  virtual Status Deregister(RegHandle handle);

  // ---- one-sided operations on registered memory ----
  // A peer's registered memory is named by a RemoteKey: its owner packs the registration
  // (PackRemoteKey), the caller ships the blob (bootstrap allgather or a message), and the
  // accessing rank imports it (ImportRemoteKey). PostPut/PostGet move src/dst.bytes between a
  // local MemRef and the peer's memory at `offset`; they complete through `req` (req->bytes
  // = bytes moved) — possibly at once. Ordering: only Signal orders them for the peer: a
  // Signal posted after a Put's completion is seen by the peer only after the Put's data.
  // The defaults refuse (a transport that cannot do one-sided says so, by name).
  using RemoteKey = uint64_t;
  virtual StatusOr<std::string> PackRemoteKey(RegHandle handle);
  virtual StatusOr<RemoteKey> ImportRemoteKey(int peer, const std::string& packed);
  virtual Status PostPut(int peer, const MemRef& src, RemoteKey dst, size_t offset, TransportRequest* req);
  virtual Status PostGet(int peer, const MemRef& dst, RemoteKey src, size_t offset, TransportRequest* req);
  // Posts the next signal to `peer` (counted, never lost; a non-zero `tag` travels with it).
  virtual Status Signal(int peer, uint64_t tag);
  // Completes `req` once the next not-yet-consumed signal from `peer` has arrived (with a
  // non-zero `expect_tag`, that signal must carry it, else a kTagMismatchMarker error).
  virtual Status PostWait(int peer, TransportRequest* req, uint64_t expect_tag);
  // Forgets an imported key (the peer's memory is no longer reached through it: a mapping
  // made for it is dropped). The default keeps nothing, so there is nothing to forget.
  virtual Status ReleaseRemoteKey(int peer, RemoteKey key) {
    (void)peer;
    (void)key;
    return OkStatus();
  }

 protected:
  RegistrationCache registrations_;
};

}  // namespace weft

namespace weft {

// A transport whose peers' memory this rank can map (same host): shm, cuda_ipc. Direct steps
// of a schedule (kDirectRead/kDirectReduce on a peer's Scratch region, kSignal/kWait) use it.
//
// Windows: each rank's Scratch buffer for a direct schedule lives in a window that every
// peer of the transport has mapped. Per operation, every rank calls PrepareWindow(bytes) with
// the same size (schedules are symmetric); the executor then uses LocalWindow() as this rank's
// Scratch and PeerWindow(p) to read peer p's Scratch. Accesses are ordered only by
// Signal/Wait, exactly as the schedule says (the checker proves the ordering).
class DirectTransport : public Transport {
 public:
  // Makes this rank's window at least `bytes` long (collective over the transport's peers
  // only in the sense that every rank does it for the same operation; it must not block on
  // peers). Growing may replace the mapping: pointers from earlier calls become invalid.
  virtual Status PrepareWindow(size_t bytes) = 0;
  // This rank's window, with its memory kind (shm: kHostShared): the executor's Scratch for a
  // direct schedule takes its kind from here.
  virtual MemRef LocalWindow() = 0;
  // Peer p's window (mapped on first use or after the peer grew it), at least min_bytes long,
  // with its kind. Only valid to read after a Wait that the peer's matching Signal follows its
  // window preparation.
  virtual StatusOr<MemRef> PeerWindow(int peer, size_t min_bytes) = 0;
  // Posts the next signal to `peer` (non-blocking; signals are counted, never lost). A
  // non-zero `tag` travels with it: the executor tags the first signal of an operation to each
  // peer with the call tag, so direct schedules (which exchange no messages) still detect
  // ranks running different calls.
  Status Signal(int peer, uint64_t tag) override = 0;
  Status Signal(int peer) { return Signal(peer, 0); }
  // Completes `req` once the next not-yet-consumed signal from `peer` has arrived. With a
  // non-zero `expect_tag`, that signal must carry the same tag, else `req` fails with a
  // kTagMismatchMarker error naming both.
  Status PostWait(int peer, TransportRequest* req, uint64_t expect_tag) override = 0;
  Status PostWait(int peer, TransportRequest* req) { return PostWait(peer, req, 0); }
  // The same wait, done at once when the signal has already arrived: returns true with its
  // result in *st (the tag check), else false and nothing is consumed. Only when no wait
  // posted to `peer` is pending (the executor's in-order path), on the owner thread. No
  // request, no lock: the tiny collective's wait usually ends here.
  virtual bool TryWait(int peer, uint64_t expect_tag, Status* st) {
    (void)peer; (void)expect_tag; (void)st;
    return false;
  }

  // The call tag of the collective this rank is starting (one per call, before its first
  // step). Peers compare it with theirs while they wait: ranks in the same call (sequence
  // number) with different descriptors planned different schedules, and where one waits for
  // a direct signal while the other waits for a message, no tag check ever runs. Owner
  // thread only; a few nanoseconds.
  virtual void PublishCurrentCall(uint64_t tag) { (void)tag; }

  // ---- zero-copy: peers read the caller's registered buffers (src/core/registered_memory.h) ----
  // A small per-call record each rank publishes for its peers (which registered buffer holds
  // its input and output in this call) before the signal that lets them read it. Two slots,
  // chosen by the parity of `seq`: a rank publishes call seq + 2 only after every peer
  // signalled it in call seq + 1, i.e. after the peer finished reading call seq's record.
  static constexpr size_t kCallInfoBytes = 48;
  virtual Status PublishCallInfo(uint64_t seq, const void* info, size_t bytes) {
    (void)seq; (void)info; (void)bytes;
    return InvalidUsage(std::string(name()) + " transport: no per-call records");
  }
  // Reads `peer`'s record for call `seq`; a record of another call is an error (ranks out of
  // step). Only valid after a Wait whose matching Signal followed the peer's PublishCallInfo.
  virtual Status PeerCallInfo(int peer, uint64_t seq, void* info, size_t bytes) {
    (void)peer; (void)seq; (void)info; (void)bytes;
    return InvalidUsage(std::string(name()) + " transport: no per-call records");
  }
  // Where [offset, offset + bytes) of `peer`'s registered memory behind `key` (imported) is
  // mapped in this process, for direct steps to read in place; an error when the memory is
  // not mapped (it was not allocated shareable: weftMemAlloc) or the range leaves it.
  // The MemRef is `bytes` long, of the mapping's kind (shm: kHostShared).
  virtual StatusOr<MemRef> MappedRemote(int peer, RemoteKey key, size_t offset, size_t bytes) {
    (void)peer; (void)key; (void)offset; (void)bytes;
    return InvalidUsage(std::string(name()) + " transport: peers' memory is not mapped");
  }
};

// The argument checks every transport makes on a post, with the same messages: `peer` another
// rank of [0, nranks) (or this one, where `self_ok`), `channel` in [0, max_channel], `req` set,
// `mem.ptr` set when mem.bytes > 0, and `mem` host memory (the transports here move host
// memory only: a device MemRef is refused naming its kind and device, where a host copy
// would fault). `transport` and `what` name the call ("tcp", "send").
Status CheckPostArgs(const char* transport, const char* what, int rank, int nranks, int peer,
                     int channel, int max_channel, const MemRef& mem,
                     const TransportRequest* req, bool self_ok = false);

}  // namespace weft
