// UcxTransport's data path: posting tagged sends/recvs, UCX completion callbacks, checking a
// received message against its recv, progress and sleeping on the event fd, peer failures
// and Abort. Setup and teardown are in ucx_transport.cc; the rules in ucx_transport.h.
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/log.h"
#include "transports/ucx/ucx_wire.h"
#include "transports/ucx/ucx_transport.h"

namespace weft {
namespace {

using namespace ucx_tag;  // NOLINT: the tag layout is this file's vocabulary

using Clock = std::chrono::steady_clock;


}  // namespace

UcxTransport::Op* UcxTransport::NewOp(int peer, int channel, bool is_recv, uint64_t tag,
                                      size_t bytes, TransportRequest* req) {
  Op* op = NewInternalOp(peer, is_recv ? OpKind::kRecv : OpKind::kSend, channel);
  op->is_recv = is_recv;
  op->tag = tag;
  op->bytes = bytes;
  op->req = req != nullptr ? req : &op->internal;
  op->req->Reset();
  ++peers_[peer].pending;
  pending_.fetch_add(1, std::memory_order_acq_rel);
  return op;
}

Status UcxTransport::PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                              TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("ucx", "send", rank_, nranks_, peer, channel, kMaxUserChannel, src, req));
  const void* const buf = src.ptr;
  const size_t bytes = src.bytes;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return abort_status_;
  Peer& p = peers_[peer];
  if (!p.error.ok()) return GonePeer(p);
  Op* op = NewOp(peer, channel, false, tag, bytes, req);
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = &UcxTransport::OnSendDone;
  prm.user_data = op;
  void* r = ucp_tag_send_nbx(p.ep, buf, bytes, MakeTag(rank_, channel, tag), &prm);
  if (UCS_PTR_IS_ERR(r)) {
    Status st = RemoteError("ucx send to " + PeerName(p) + ": " +
                            ucs_status_string(UCS_PTR_STATUS(r)));
    op->ucx_done = true;
    CompleteUser(op, st);
    FinishOp(op);
    return st;
  }
  op->ucx_request = r;
  if (r == nullptr) {  // completed in place (small eager message)
    op->ucx_done = true;
    FinishOp(op);
  }
  return OkStatus();
}

Status UcxTransport::PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                              TransportRequest* req) {
  return PostRecvImpl(peer, channel, tag, dst, false, req);
}

Status UcxTransport::PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                                  TransportRequest* req) {
  return PostRecvImpl(peer, channel, tag, dst, true, req);
}

// UCX itself receives any message up to the buffer's size and reports its length, so both
// kinds of receive are the same UCP call; only CheckRecv's size rule differs.
Status UcxTransport::PostRecvImpl(int peer, int channel, uint64_t tag, const MemRef& dst,
                                  bool up_to, TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("ucx", "recv", rank_, nranks_, peer, channel, kMaxUserChannel, dst, req));
  void* const buf = dst.ptr;
  const size_t bytes = dst.bytes;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return abort_status_;
  Peer& p = peers_[peer];
  const ucp_tag_t match = MakeTag(peer, channel, 0);
  if (!p.error.ok()) {
    // A closed peer's last messages may still wait in UCX's unexpected queue; a failed
    // peer's may not be trusted.
    ucp_tag_recv_info_t probe{};
    if (!p.closed || ucp_tag_probe_nb(worker_, match, kMatchMask, 0, &probe) == nullptr) {
      return GonePeer(p);
    }
  }
  Op* op = NewOp(peer, channel, true, tag, bytes, req);
  op->up_to = up_to;
  return PostTaggedRecv(op, buf, bytes);
}

Status UcxTransport::PostTaggedRecv(Op* op, void* buf, size_t bytes) {
  ucp_request_param_t prm{};
  // Always through the callback: UCX 1.13 left RECV_INFO unfilled when a recv matched an
  // already-arrived message in place (measured: sender tag and length read as 0).
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = &UcxTransport::OnRecvDone;
  prm.user_data = op;
  void* r = ucp_tag_recv_nbx(worker_, buf, bytes, MakeTag(op->peer, op->channel, 0), kMatchMask, &prm);
  if (UCS_PTR_IS_ERR(r)) {
    Status st = SystemError("ucx recv from " + PeerName(peers_[op->peer]) + ": " +
                            ucs_status_string(UCS_PTR_STATUS(r)));
    op->ucx_done = true;
    CompleteUser(op, st);
    FinishOp(op);
    return st;
  }
  op->ucx_request = r;
  return OkStatus();
}

// ---- completion ----

void UcxTransport::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  op->ucx_done = true;
  op->ucx_status = status;
  op->owner->completed_.push_back(op);
}

void UcxTransport::OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  op->ucx_done = true;
  op->ucx_status = status;
  if (info != nullptr) op->info = *info;
  // A note must be read before the close that follows it fails the peer with less detail.
  if (op->kind == OpKind::kNote) return op->owner->OnNote(op);
  if (op->kind == OpKind::kCulprit) {  // re-posted by Drive (not from inside UCX's callback)
    op->ucx_done = true;
    if (status != UCS_OK) return;  // cancelled: the transport is closing
    int32_t culprit = -1;
    std::memcpy(&culprit, &op->word, sizeof(culprit));
    UcxTransport* t = op->owner;
    if (culprit >= 0 && culprit < t->nranks_) t->peers_[op->peer].announced_culprit = culprit;
    t->culprit_reposts_.push_back(op);
    return;
  }
  op->owner->completed_.push_back(op);
}

Status UcxTransport::CheckRecv(const Op& op) const {
  const Peer& p = peers_[op.peer];
  if (op.ucx_status != UCS_OK && op.ucx_status != UCS_ERR_MESSAGE_TRUNCATED) {
    return RemoteError("ucx recv from " + PeerName(p) + " channel " + std::to_string(op.channel) +
                       ": " + ucs_status_string(op.ucx_status));
  }
  uint32_t got_fold = static_cast<uint32_t>(op.info.sender_tag & kFoldMask);
  bool truncated = op.ucx_status == UCS_ERR_MESSAGE_TRUNCATED;
  bool size_ok = op.up_to ? op.info.length <= op.bytes : op.info.length == op.bytes;
  if (!truncated && got_fold == FoldTag(op.tag) && size_ok) {
    return OkStatus();
  }
  // The sender's tag, exact when its high word equals ours (same call descriptor, different
  // sequence number); otherwise only its fold is known, and the message says so.
  uint64_t got_tag = (op.tag & ~kFoldMask) | (got_fold ^ static_cast<uint32_t>(op.tag >> 32));
  std::string got_bytes = (truncated && op.info.length <= op.bytes)
                              ? "more than " + std::to_string(op.bytes) + " bytes"
                              : std::to_string(op.info.length) + " bytes";
  // Only the fold of a differing tag travels; say so when it matters.
  std::string caveat = got_fold == FoldTag(op.tag)
                           ? ""
                           : "; exact if its high 32 bits equal ours, else only its 32-bit fold " +
                                 std::to_string(got_fold) + " is known";
  // "mismatched call" is transport.h's kTagMismatchMarker (Core v2: use TagMismatch()).
  return InternalError("ucx recv from " + PeerName(p) + " channel " + std::to_string(op.channel) +
                       ": mismatched call: expected tag " + std::to_string(op.tag) + " (" +
                       (op.up_to ? "at most " : "") + std::to_string(op.bytes) + " bytes), received tag " + std::to_string(got_tag) +
                       " (" + got_bytes + caveat + ")");
}

void UcxTransport::CompleteUser(Op* op, Status st) {
  if (op->req == nullptr) return;
  TransportRequest* req = op->req;
  op->req = nullptr;
  --peers_[op->peer].pending;
  pending_.fetch_sub(1, std::memory_order_acq_rel);
  req->Complete(std::move(st));
}

namespace {
const char* OpVerb(int kind) {
  static const char* const kVerbs[] = {"send to", "recv from", "put to", "get from",
                                       "signal to", "wait for a signal from", "abort note to"};
  return kVerbs[kind];
}
}  // namespace

void UcxTransport::FinishOp(Op* op) {
  if (op->kind == OpKind::kSignal) return FinishSignal(op);
  if (op->req != nullptr) {
    Status st;
    if (op->kind == OpKind::kWait) {
      st = CheckWait(*op);
    } else if (op->is_recv) {
      st = CheckRecv(*op);
      if (st.ok()) op->req->bytes = op->info.length;
    } else if (op->ucx_status != UCS_OK) {
      st = RemoteError(std::string("ucx ") + OpVerb(static_cast<int>(op->kind)) + " " +
                       PeerName(peers_[op->peer]) + " channel " + std::to_string(op->channel) +
                       ": " + ucs_status_string(op->ucx_status));
    } else {
      op->req->bytes = op->bytes;
    }
    CompleteUser(op, std::move(st));
  }
  if (op->ucx_request != nullptr && !UCS_PTR_IS_ERR(op->ucx_request)) {
    ucp_request_free(op->ucx_request);
  }
  ops_.erase(op->self);
}

// ---- progress ----

bool UcxTransport::Drive() {
  bool moved = false;
  // Bounded: a flood of arrivals must not keep one Progress call forever.
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) moved = true;
  if (!completed_.empty()) {
    moved = true;
    std::vector<Op*> done;
    done.swap(completed_);
    for (Op* op : done) FinishOp(op);
  }
  if (!culprit_reposts_.empty()) {
    std::vector<Op*> again;
    again.swap(culprit_reposts_);
    for (Op* op : again) {
      if (op->ucx_request != nullptr) ucp_request_free(op->ucx_request);
      op->ucx_request = nullptr;
      if (!aborted_.load() && peers_[op->peer].error.ok()) PostInternalRecv(op);
    }
  }
  return moved;
}

void UcxTransport::WaitForEvents(int timeout_us) {
  Clock::time_point start = Clock::now();
  Clock::time_point end = start + std::chrono::microseconds(timeout_us);
  // Spin stage (UcxOptions::spin_us); the idle clock runs across calls, so a long wait spins
  // once and then only sleeps.
  while (backoff_.Pause() == Backoff::Stage::kSpin && Clock::now() < end) {
    if (Drive()) {
      backoff_.Reset();
      return;
    }
    if (aborted_.load()) return;
  }
  // Arm, then sleep: UCS_ERR_BUSY means events arrived since the last progress.
  ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) {
    Drive();
    return;
  }
  int64_t left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - Clock::now()).count();
  if (left_ns > 0 && !aborted_.load()) {
    pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    timespec ts{static_cast<time_t>(left_ns / 1000000000), static_cast<long>(left_ns % 1000000000)};
    ppoll(fds, 2, &ts, nullptr);
  }
  if (Drive()) backoff_.Reset();
}

Status UcxTransport::Progress(int timeout_us) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return OkStatus();  // requests were failed by Abort
  round_error_ = OkStatus();
  bool moved = Drive();
  if (moved) backoff_.Reset();
  if (!moved && pending_.load() > 0 && round_error_.ok()) {
    if (timeout_us <= 0) {
      sched_yield();  // see ucx_transport.h: let a peer on this core run
    } else {
      WaitForEvents(timeout_us);
    }
  }
  Status st = round_error_;
  round_error_ = OkStatus();
  return st;
}

// ---- failures ----

void UcxTransport::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  Peer* p = static_cast<Peer*>(arg);
  p->owner->OnPeerError(*p, status);
}

// Runs inside ucp_worker_progress (so under mu_).
void UcxTransport::OnPeerError(Peer& p, ucs_status_t status) {
  if (!p.error.ok()) return;
  if (p.pending == 0) {
    // Disconnected while we wanted nothing from it: a normal shutdown, unless we ask later.
    p.closed = true;
    p.error = RemoteError("ucx: " + PeerName(p) + " has disconnected (" +
                          ucs_status_string(status) + ")");
    WEFT_INFO("ucx: %s disconnected with nothing pending", PeerName(p).c_str());
    return;
  }
  NoteOrigin(p.rank, "");  // it left while we still need it: it is the rank that failed
  p.error = RemoteError("ucx: " + PeerName(p) + " failed: " + ucs_status_string(status));
  FailPeerRequests(p, p.error);
  if (round_error_.ok()) round_error_ = p.error;
}

// A closed peer disconnected while we wanted nothing from it, which a shutdown does; a post
// to it now means we still need it, so it is the rank that failed, as OnPeerError says of one
// that leaves with requests pending (tcp's ClosedPeerError does the same). (Without this, a survivor whose next post found the
// victim already closed failed its call naming the victim but weftCommFailedRanks listed no
// one: ElasticKill/ucx_rank0 in a full ctest run on the 2-core VM, 2026-12-02.)
Status UcxTransport::GonePeer(Peer& p) {
  if (p.closed) NoteOrigin(p.rank, "");
  return p.error;
}

// Fails the user's requests to/from `p`; UCX ops stay alive until UCX lets go of them
// (pending receives from it are cancelled; sends complete with an error by themselves).
void UcxTransport::FailPeerRequests(Peer& p, const Status& st) {
  for (Op& op : ops_) {
    if (op.peer != p.rank || op.req == nullptr) continue;
    CompleteUser(&op, st);
    if (op.is_recv && !op.ucx_done && op.ucx_request != nullptr) {
      ucp_request_cancel(worker_, op.ucx_request);
    }
  }
}

void UcxTransport::Abort(const Status& why) {
  aborted_.store(true);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;  // a full counter already means "wake up"
  }
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(why);
}

void UcxTransport::AbortLocked(const Status& why) {
  if (!abort_status_.ok()) return;  // idempotent
  abort_status_ = why.ok() ? SystemError("ucx: transport aborted") : why;
  // Nothing pending (weftCommDestroy aborts the transports of a communicator that finished):
  // flush instead of forcing, since sends that completed locally (eager) may still sit in
  // UCX's buffers while the peers wait for them. With requests pending, forced closing tears
  // down UCX's connections, so no lane - RDMA reads in flight included - writes into a user
  // buffer after Abort returns.
  // A failing communicator (a rank failed, or it was revoked) is never flushed, even with
  // nothing pending: flushing towards a stopped peer waited the whole 2 s close bound, which
  // made a relay's report of a SIGSTOPped rank come WEFT_TIMEOUT + ~3 s late (issue 34).
  const bool revoke = abort_status_.message().find(kRevokedMarker) != std::string::npos;
  const bool flush = pending_.load(std::memory_order_acquire) == 0 && !failure_.known() && !revoke;
  // Notes only when something failed or was cut short (not for a finished communicator's
  // destroy, whose peers must see a normal shutdown), as tcp; a revoke is announced even by an
  // idle rank: stopping the peers is its purpose.
  if (!flush) SendAbortNotes(abort_status_);
  for (Peer& p : peers_) {
    if (p.rank == rank_) continue;
    FailPeerRequests(p, abort_status_);
  }
  CloseEndpoints(/*force_all=*/!flush);  // before marking peers: failed ones are forced
  for (Peer& p : peers_)
    if (p.rank != rank_ && p.error.ok()) p.error = abort_status_;
  round_error_ = OkStatus();
}

}  // namespace weft
