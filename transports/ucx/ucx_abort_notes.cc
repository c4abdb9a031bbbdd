// UcxTransport's abort notes and culprit announcements. Abort notes: blame that travels, so a survivor that is not the failed rank's
// neighbour names the failed rank and not the healthy neighbour that aborted in turn (the
// same rule as tcp's notes, issue 11; here on UCX's reserved kNoteChannel).
//
// Every rank keeps one receive per peer posted on kNoteChannel from setup on; those receives
// are not counted as pending (HasPending ignores them). A note is {int32 origin, reason}. It
// is handled inside UCX's receive callback, so a note followed by the sender's close is read
// before the close is reported (UCX delivers what arrived before the error).
// Culprits (transport.h's timeout diagnosis, used by the executor before it reports a
// timeout): a 4-byte message on kCulpritChannel; one receive per peer stays posted the same
// way and is re-posted by Drive after each announcement.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "transports/ucx/ucx_wire.h"
#include "transports/ucx/ucx_transport.h"

namespace weft {
namespace {

using namespace ucx_tag;  // NOLINT: the tag layout is this file's vocabulary

constexpr size_t kMaxNoteBytes = 512;  // origin + reason (a longer reason is cut)
constexpr int kNoteFlushMs = 200;      // Abort must not hang on a peer that stopped reading
constexpr int kNoteGraceMs = 100;      // progress after the notes left, before closing

}  // namespace

UcxTransport::Op* UcxTransport::NewInternalOp(int peer, OpKind kind, int channel) {
  ops_.emplace_back();
  Op* op = &ops_.back();
  op->owner = this;
  op->self = std::prev(ops_.end());
  op->peer = peer;
  op->channel = channel;
  op->kind = kind;
  op->req = nullptr;  // nobody waits for it: not pending
  return op;
}

void UcxTransport::PostNoteRecvs() {
  for (Peer& p : peers_) {
    if (p.rank == rank_ || p.ep == nullptr) continue;
    Op* note = NewInternalOp(p.rank, OpKind::kNote, kNoteChannel);
    note->is_recv = true;
    note->note.assign(kMaxNoteBytes, '\0');
    PostInternalRecv(note);
    Op* culprit = NewInternalOp(p.rank, OpKind::kCulprit, kCulpritChannel);
    culprit->is_recv = true;
    PostInternalRecv(culprit);
  }
}

void UcxTransport::PostInternalRecv(Op* op) {
  op->ucx_done = false;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = &UcxTransport::OnRecvDone;
  prm.user_data = op;
  void* buf = op->kind == OpKind::kNote ? static_cast<void*>(&op->note[0]) : static_cast<void*>(&op->word);
  size_t bytes = op->kind == OpKind::kNote ? op->note.size() : sizeof(op->word);
  void* r = ucp_tag_recv_nbx(worker_, buf, bytes, MakeTag(op->peer, op->channel, 0), kMatchMask, &prm);
  if (UCS_PTR_IS_ERR(r)) {  // no blame from this peer; failures are still reported
    op->ucx_done = true;
    r = nullptr;
  }
  op->ucx_request = r;
}

// ---- culprits (timeout diagnosis, transport.h) ----

void UcxTransport::AnnounceCulprit(int culprit) {
  if (culprit < 0 || culprit >= nranks_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return;
  for (Peer& p : peers_) {
    if (p.rank == rank_ || p.rank == culprit || !p.error.ok() || p.ep == nullptr) continue;
    Op* op = NewInternalOp(p.rank, OpKind::kCulprit, kCulpritChannel);
    int32_t c = culprit;
    std::memcpy(&op->word, &c, sizeof(c));
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = &UcxTransport::OnSendDone;
    prm.user_data = op;
    void* r = ucp_tag_send_nbx(p.ep, &op->word, sizeof(c), MakeTag(rank_, kCulpritChannel, 0), &prm);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {  // sent in place, or not at all (best effort)
      ops_.erase(op->self);
      continue;
    }
    op->ucx_request = r;  // FinishOp frees it when UCX is done
  }
}

int UcxTransport::AnnouncedCulprit(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= nranks_ || peer == rank_) return -1;
  return peers_[peer].announced_culprit;
}

// Inside ucp_worker_progress (under mu_). The op stays in ops_ (the destructor frees its
// request): erasing here could pull it from under a loop over ops_ that cancels receives.
void UcxTransport::OnNote(Op* op) {
  op->ucx_done = true;
  if (op->ucx_status != UCS_OK || op->info.length < sizeof(int32_t)) return;
  int32_t origin = -1;
  std::memcpy(&origin, op->note.data(), sizeof(origin));
  std::string reason = op->note.substr(sizeof(origin), op->info.length - sizeof(origin));
  Peer& p = peers_[op->peer];
  std::string msg = origin == p.rank ? "ucx: " + PeerName(p) + " aborted the communicator: " + reason
                                     : "ucx: rank " + std::to_string(origin) + " failed (reported by " +
                                           PeerName(p) + "): " + reason;
  // A note means the job is failing: its origin is the one to forward if this rank aborts.
  NoteOrigin(origin, reason);
  if (!p.error.ok()) return;
  p.error = RemoteError(msg);
  p.closed = false;  // later requests to p fail with the note, not "disconnected"
  if (p.pending > 0) {
    FailPeerRequests(p, p.error);
    if (round_error_.ok()) round_error_ = p.error;
  }
}

void UcxTransport::NoteOrigin(int origin, const std::string& reason) {
  failure_.Note(origin, reason);
}

int UcxTransport::FailedOrigin() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_.failed();
}

void UcxTransport::NoteFailedOrigin(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank >= 0 && rank < nranks_ && rank != rank_) NoteOrigin(rank, "");
}

// Sends every healthy peer (not the origin) a note, then keeps the worker progressing for a
// short grace period before the endpoints are closed: a forced close with unread data in the
// socket (a peer still streaming to us) makes the kernel send a reset, and a peer that has
// not read our note by then loses it with its receive queue (measured on the loaded 2-core
// VM: 1 in 6 runs of the 4-rank reset case without the grace, 1 in 9 with 30 ms). Progressing
// reads what peers send, and lets them read the note. (An ucp_ep_flush_nbx here tripped an assertion in UCX 1.13's tcp lane on the peer,
// "tcp_ep.c:939 ep->flags & UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK", when the peer had a
// zero-copy put to us in flight: not used.)
void UcxTransport::SendAbortNotes(const Status& why) {
  const int origin = failure_.NoteOrigin(rank_);
  std::string reason = failure_.NoteReason(why.message());
  if (reason.size() > kMaxNoteBytes - sizeof(int32_t)) reason.resize(kMaxNoteBytes - sizeof(int32_t));
  const int32_t origin32 = origin;
  std::vector<Op*> notes;
  for (Peer& p : peers_) {
    if (p.rank == rank_ || p.rank == origin || !p.error.ok() || p.ep == nullptr) continue;
    ops_.emplace_back();
    Op* op = &ops_.back();
    op->owner = this;
    op->self = std::prev(ops_.end());
    op->peer = p.rank;
    op->channel = kNoteChannel;
    op->kind = OpKind::kNote;
    op->req = nullptr;
    op->note.assign(reinterpret_cast<const char*>(&origin32), sizeof(origin32));
    op->note += reason;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = &UcxTransport::OnSendDone;
    prm.user_data = op;
    void* r = ucp_tag_send_nbx(p.ep, op->note.data(), op->note.size(), MakeTag(rank_, kNoteChannel, 0), &prm);
    op->ucx_done = r == nullptr || UCS_PTR_IS_ERR(r);
    op->ucx_request = UCS_PTR_IS_ERR(r) ? nullptr : r;
    notes.push_back(op);
  }
  if (notes.empty()) return;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point grace_end = start + std::chrono::milliseconds(kNoteGraceMs);
  const Clock::time_point deadline = start + std::chrono::milliseconds(kNoteFlushMs);
  auto all_out = [&] {
    for (Op* op : notes)
      if (!op->ucx_done) return false;
    return true;
  };
  while (Clock::now() < deadline && (!all_out() || Clock::now() < grace_end)) ucp_worker_progress(worker_);
  WEFT_INFO("ucx: rank %d sent abort notes naming rank %d to %zu peer(s)%s", rank_, origin, notes.size(),
            all_out() ? "" : " (not all sent in time)");
}

}  // namespace weft
