// InprocTransport (see inproc_transport.h).
#include "transports/inproc/inproc_transport.h"

#include <chrono>
#include <cstring>
#include <string>

namespace weft {

InprocHub::InprocHub(int nranks)
    : nranks_(nranks), wake_(nranks), pending_(nranks, 0), aborted_(nranks, false) {}

InprocHub::Queue& InprocHub::QueueFor(int src, int dst, int channel) {
  return queues_[std::make_tuple(src, dst, channel)];
}

InprocTransport::~InprocTransport() { Abort(InternalError("inproc transport destroyed")); }

Status InprocTransport::PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                                 TransportRequest* req) {
  return Post(true, peer, channel, tag, src, false, req);
}

Status InprocTransport::PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                                 TransportRequest* req) {
  return Post(false, peer, channel, tag, dst, false, req);
}

Status InprocTransport::PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                                     TransportRequest* req) {
  return Post(false, peer, channel, tag, dst, true, req);
}

Status InprocTransport::Post(bool is_send, int peer, int channel, uint64_t tag, const MemRef& mem,
                             bool up_to, TransportRequest* req) {
  // Channels as tcp's: the top one is reserved for culprit notes.
  WEFT_RETURN_IF_ERROR(CheckPostArgs("inproc", is_send ? "send" : "recv", rank_, hub_->nranks(),
                                     peer, channel, kMaxInprocChannel, mem, req));
  void* const buf = mem.ptr;
  const size_t bytes = mem.bytes;
  req->Reset();
  std::lock_guard<std::mutex> lock(hub_->mu_);
  if (hub_->aborted_[rank_]) return InvalidUsage("inproc transport was aborted");
  int src = is_send ? rank_ : peer, dst = is_send ? peer : rank_;
  InprocHub::Queue& q = hub_->QueueFor(src, dst, channel);
  std::deque<InprocHub::Pending>& other = is_send ? q.recvs : q.sends;
  std::deque<InprocHub::Pending>& mine = is_send ? q.sends : q.recvs;
  if (other.empty()) {
    mine.push_back({tag, buf, bytes, req, up_to});
    hub_->pending_[rank_]++;
    return OkStatus();
  }
  // Rendezvous: the peer's request is waiting; copy now and complete both.
  InprocHub::Pending match = other.front();
  other.pop_front();
  const InprocHub::Pending& send = is_send ? InprocHub::Pending{tag, buf, bytes, req} : match;
  const InprocHub::Pending& recv = is_send ? match : InprocHub::Pending{tag, buf, bytes, req, up_to};
  Status status;
  bool size_ok = recv.up_to ? send.bytes <= recv.bytes : send.bytes == recv.bytes;
  if (send.tag != recv.tag || !size_ok) {
    status = TagMismatch("message mismatch from rank " + std::to_string(src) + " to rank " +
                             std::to_string(dst) + " channel " + std::to_string(channel) +
                             ": receiver expected tag " + std::to_string(recv.tag) + " (" +
                             std::to_string(recv.bytes) + " bytes), sender sent tag " +
                             std::to_string(send.tag) + " (" + std::to_string(send.bytes) + " bytes)",
                         recv.tag, send.tag);
  } else if (send.bytes > 0) {
    memcpy(recv.buf, send.buf, send.bytes);
  }
  if (status.ok()) send.req->bytes = recv.req->bytes = send.bytes;
  req->Complete(status);
  match.req->Complete(status);
  hub_->pending_[peer]--;
  hub_->wake_[peer].epoch++;
  hub_->wake_[peer].cv.notify_all();
  return OkStatus();
}

Status InprocTransport::Progress(int timeout_us) {
  // Matching happens at post time; progress only means waiting for a peer to complete one of
  // our requests, which bumps our epoch.
  std::unique_lock<std::mutex> lock(hub_->mu_);
  InprocHub::RankWake& w = hub_->wake_[rank_];
  if (timeout_us > 0 && w.epoch == seen_epoch_ && hub_->pending_[rank_] > 0) {
    w.cv.wait_for(lock, std::chrono::microseconds(timeout_us),
                  [&] { return w.epoch != seen_epoch_; });
  }
  seen_epoch_ = w.epoch;
  return OkStatus();
}

bool InprocTransport::HasPending() const {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  return hub_->pending_[rank_] > 0;
}

void InprocTransport::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  // Remove and fail this rank's queued requests; peers' requests waiting on us stay queued
  // and fail by their own timeout or abort.
  for (auto& [key, q] : hub_->queues_) {
    int src = std::get<0>(key), dst = std::get<1>(key);
    if (src == rank_) {
      for (auto& p : q.sends) p.req->Complete(why);
      q.sends.clear();
    }
    if (dst == rank_) {
      for (auto& p : q.recvs) p.req->Complete(why);
      q.recvs.clear();
    }
  }
  hub_->pending_[rank_] = 0;
  hub_->aborted_[rank_] = true;  // later posts fail, as on every transport
  ++hub_->wake_[rank_].epoch;    // and a Progress waiting in another thread returns now
  hub_->wake_[rank_].cv.notify_all();
}

}  // namespace weft
