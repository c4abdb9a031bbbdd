// UcxTransport's registered memory and one-sided operations through the common Transport
// interface (transport.h): Register/Deregister with the registration cache (ucp_mem_map),
// packed rkeys, Put/Get over UCX RMA, and Signal/PostWait as flushed tagged messages. The rules
// are in ucx_transport.h; why signals are messages and not remote atomics is in README.md.
#include <chrono>
#include <cstring>
#include <string>

#include "transports/ucx/ucx_wire.h"
#include "transports/ucx/ucx_transport.h"

namespace weft {
namespace {

using namespace ucx_tag;  // NOLINT: the tag layout is this file's vocabulary

constexpr uint32_t kKeyMagic = 0x4b435557;  // "WUCK"
// How long Signal drives its endpoint flush before leaving the rest to Progress.
constexpr int kSignalDriveUs = 200;

// The packed key's fixed head; UCX's packed rkey follows it.
struct KeyHead {
  uint32_t magic;
  int32_t owner;
  uint64_t address;
  uint64_t bytes;
};
static_assert(sizeof(KeyHead) == 24, "packed key layout");

std::string Ucs(ucs_status_t s) { return ucs_status_string(s); }

}  // namespace

// ---- registration ----

StatusOr<RegHandle> UcxTransport::Register(const MemRef& mem) {
  std::lock_guard<std::mutex> lock(mu_);
  WEFT_RETURN_IF_ERROR(RegistrationCache::Validate(mem, "ucx register"));
  const bool device = !mem.is_host();
  if (device && !cuda_memory_)
    return InvalidArgument(std::string("ucx register: ") + MemKindName(mem.kind) + " memory (device " +
                           std::to_string(mem.device) + "): this UCX context has no CUDA memory support");
  if (const RegistrationCache::Entry* e = registrations_.Acquire(mem)) return e->handle;
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = mem.ptr;
  params.length = mem.bytes;
  if (device) {  // handed to UCX as is: its cuda lanes (cuda_copy, cuda_ipc, GPUDirect) reach it
    params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    params.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  Mapped m;
  ucs_status_t s = ucp_mem_map(context_, &params, &m.memh);
  if (s != UCS_OK)
    return SystemError("ucx register: ucp_mem_map of " + std::to_string(mem.bytes) + " bytes: " + Ucs(s));
  void* packed = nullptr;
  size_t packed_size = 0;
  s = ucp_rkey_pack(context_, m.memh, &packed, &packed_size);
  if (s != UCS_OK) {
    ucp_mem_unmap(context_, m.memh);
    return SystemError("ucx register: ucp_rkey_pack: " + Ucs(s));
  }
  m.packed_rkey.assign(static_cast<const char*>(packed), packed_size);
  ucp_rkey_buffer_release(packed);
  RegHandle h = registrations_.Add(mem, 0).handle;
  mapped_[h] = std::move(m);
  return h;
}

Status UcxTransport::Deregister(RegHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  bool last = false;
  WEFT_RETURN_IF_ERROR(registrations_.Release(handle, &last, nullptr));
  if (last) {
    auto it = mapped_.find(handle);
    if (it != mapped_.end()) {
      ucp_mem_unmap(context_, it->second.memh);
      mapped_.erase(it);
    }
  }
  return OkStatus();
}

size_t UcxTransport::registered_regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_.size();
}

StatusOr<std::string> UcxTransport::PackRemoteKey(RegHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  const RegistrationCache::Entry* e = registrations_.Find(handle);
  auto m = mapped_.find(handle);
  if (e == nullptr || m == mapped_.end())
    return InvalidArgument("ucx pack key: handle " + std::to_string(handle) + " is not registered here");
  KeyHead head{kKeyMagic, rank_, reinterpret_cast<uint64_t>(e->begin), e->bytes};
  std::string out(reinterpret_cast<const char*>(&head), sizeof(head));
  return out + m->second.packed_rkey;
}

StatusOr<Transport::RemoteKey> UcxTransport::ImportRemoteKey(int peer, const std::string& packed) {
  std::lock_guard<std::mutex> lock(mu_);
  WEFT_RETURN_IF_ERROR(CheckOneSided(peer, this, "import key"));
  KeyHead head;
  if (packed.size() <= sizeof(head))
    return InvalidArgument("ucx import key for rank " + std::to_string(peer) + ": " + std::to_string(packed.size()) +
                           " bytes (not a key packed by a ucx transport)");
  std::memcpy(&head, packed.data(), sizeof(head));
  if (head.magic != kKeyMagic || head.owner != peer)
    return InvalidArgument("ucx import key for rank " + std::to_string(peer) + ": packed by rank " +
                           std::to_string(head.owner) + (head.magic != kKeyMagic ? " (bad magic)" : ""));
  ImportedKey k;
  k.peer = peer;
  k.address = head.address;
  k.bytes = head.bytes;
  ucs_status_t s = ucp_ep_rkey_unpack(peers_[peer].ep, packed.data() + sizeof(head), &k.rkey);
  if (s != UCS_OK)
    return InvalidArgument("ucx import key for rank " + std::to_string(peer) + ": ucp_ep_rkey_unpack: " + Ucs(s));
  imported_.push_back(k);
  return static_cast<RemoteKey>(imported_.size());
}

// Imported rkeys go before the endpoints, mappings before the context (destructor).
void UcxTransport::ReleaseMemory() {
  for (ImportedKey& k : imported_) {
    if (k.rkey != nullptr) ucp_rkey_destroy(k.rkey);
    k.rkey = nullptr;
  }
  for (auto& [h, m] : mapped_) ucp_mem_unmap(context_, m.memh);
  mapped_.clear();
}

// ---- put / get ----

Status UcxTransport::CheckOneSided(int peer, const void* req, const char* what) {
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    return InvalidArgument(std::string("ucx ") + what + ": peer=" + std::to_string(peer) +
                           " is not another rank of 0.." + std::to_string(nranks_ - 1) + " (this is rank " +
                           std::to_string(rank_) + ")");
  if (req == nullptr) return InvalidArgument(std::string("ucx ") + what + ": req is NULL");
  if (aborted_.load()) return abort_status_;
  Peer& p = peers_[peer];
  if (!p.error.ok()) return GonePeer(p);
  if (p.ep == nullptr) return RemoteError("ucx " + std::string(what) + ": no endpoint to " + PeerName(p));
  return OkStatus();
}

Status UcxTransport::PostPut(int peer, const MemRef& src, RemoteKey dst, size_t offset, TransportRequest* req) {
  return PostRma(true, peer, src, dst, offset, req);
}

Status UcxTransport::PostGet(int peer, const MemRef& dst, RemoteKey src, size_t offset, TransportRequest* req) {
  return PostRma(false, peer, dst, src, offset, req);
}

Status UcxTransport::PostRma(bool put, int peer, const MemRef& local, RemoteKey key, size_t offset,
                             TransportRequest* req) {
  const char* verb = put ? "put" : "get";
  std::lock_guard<std::mutex> lock(mu_);
  WEFT_RETURN_IF_ERROR(CheckOneSided(peer, req, verb));
  const std::string who = std::string("ucx ") + (put ? "put to " : "get from ") + PeerName(peers_[peer]);
  if (local.bytes > 0 && local.ptr == nullptr) return InvalidArgument(who + ": local ptr is NULL");
  if (!local.is_host() && !cuda_memory_)
    return InvalidArgument(who + ": local buffer is " + MemKindName(local.kind) +
                           " memory and this UCX context has no CUDA memory support");
  if (key == 0 || key > imported_.size() || imported_[key - 1].peer != peer)
    return InvalidArgument(who + ": remote key " + std::to_string(key) + " was not imported for this peer");
  const ImportedKey& k = imported_[key - 1];
  if (offset > k.bytes || local.bytes > k.bytes - offset)
    return InvalidArgument(who + ": offset " + std::to_string(offset) + " + " + std::to_string(local.bytes) +
                           " bytes is outside its registered " + std::to_string(k.bytes) + " bytes");
  Op* op = NewOp(peer, 0, false, 0, local.bytes, req);
  op->kind = put ? OpKind::kPut : OpKind::kGet;
  if (local.bytes == 0) {  // nothing to move; UCX is not asked
    op->ucx_done = true;
    FinishOp(op);
    return OkStatus();
  }
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = &UcxTransport::OnSendDone;
  prm.user_data = op;
  if (!local.is_host()) {
    prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  ucp_ep_h ep = peers_[peer].ep;
  ++peers_[peer].rma_unflushed;  // the next Signal to this peer must flush first
  void* r = put ? ucp_put_nbx(ep, local.ptr, local.bytes, k.address + offset, k.rkey, &prm)
                : ucp_get_nbx(ep, local.ptr, local.bytes, k.address + offset, k.rkey, &prm);
  if (UCS_PTR_IS_ERR(r)) {
    Status st = RemoteError(who + ": " + Ucs(UCS_PTR_STATUS(r)));
    op->ucx_done = true;
    CompleteUser(op, st);
    FinishOp(op);
    return st;
  }
  op->ucx_request = r;
  if (r == nullptr) {  // completed in place
    op->ucx_done = true;
    FinishOp(op);
  }
  return OkStatus();
}

// ---- signal / wait ----

Status UcxTransport::Signal(int peer, uint64_t tag) {
  std::lock_guard<std::mutex> lock(mu_);
  WEFT_RETURN_IF_ERROR(CheckOneSided(peer, this, "signal"));
  Peer& p = peers_[peer];
  Op* op = NewOp(peer, kSignalChannel, false, tag, sizeof(uint64_t), nullptr);
  op->kind = OpKind::kSignal;
  op->word = tag;
  p.signals.push_back(op);
  if (p.rma_unflushed == 0) {  // no put/get to order: the message may leave now
    op->flush_done = true;
    PumpSignals(p);
    return OkStatus();
  }
  // Remote completion of every put/get posted to this peer before the signal: only then may
  // the peer learn of it (UCX lanes may differ between RMA and tagged messages, so a fence
  // would not order them; a flush does).
  p.rma_unflushed = 0;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = &UcxTransport::OnSendDone;
  prm.user_data = op;
  void* r = ucp_ep_flush_nbx(p.ep, &prm);
  if (UCS_PTR_IS_ERR(r)) {
    Status st = RemoteError("ucx signal to " + PeerName(p) + ": flush: " + Ucs(UCS_PTR_STATUS(r)));
    p.signals.remove(op);
    CompleteUser(op, st);
    ops_.erase(op->self);
    return st;
  }
  op->ucx_request = r;
  if (r == nullptr) {
    op->ucx_done = true;
    FinishSignal(op);
    return OkStatus();
  }
  // The flush usually needs one round trip: drive it briefly here, so the signal leaves even
  // if the caller does not call Progress again soon (it must while HasPending(), else).
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(kSignalDriveUs);
  while (!p.signals.empty() && std::chrono::steady_clock::now() < end) Drive();
  return OkStatus();
}

// Two stages: the flush finished (send the message, unless the signal failed meanwhile),
// then the message finished (the signal is done).
void UcxTransport::FinishSignal(Op* op) {
  Peer& p = peers_[op->peer];

  if (op->ucx_request != nullptr && !UCS_PTR_IS_ERR(op->ucx_request)) ucp_request_free(op->ucx_request);
  op->ucx_request = nullptr;
  if (!op->flush_done) {
    op->flush_done = true;
    if (op->ucx_status != UCS_OK && op->req != nullptr) {
      Status st = RemoteError("ucx signal to " + PeerName(p) + ": flush: " + Ucs(op->ucx_status));
      if (round_error_.ok()) round_error_ = st;
      CompleteUser(op, st);
    }
    PumpSignals(p);
    return;
  }
  if (op->req != nullptr) {
    Status st;
    if (op->ucx_status != UCS_OK) {
      st = RemoteError("ucx signal to " + PeerName(p) + ": " + Ucs(op->ucx_status));
      if (round_error_.ok()) round_error_ = st;
    }
    CompleteUser(op, st);
  }
  ops_.erase(op->self);
}

void UcxTransport::PumpSignals(Peer& p) {
  while (!p.signals.empty() && p.signals.front()->flush_done) {
    Op* op = p.signals.front();
    p.signals.pop_front();
    if (op->req == nullptr || aborted_.load() || p.ep == nullptr) {  // failed meanwhile
      if (op->req != nullptr) CompleteUser(op, aborted_.load() ? abort_status_ : p.error);
      ops_.erase(op->self);
      continue;
    }
    op->ucx_done = false;
    op->ucx_status = UCS_OK;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = &UcxTransport::OnSendDone;
    prm.user_data = op;
    void* r = ucp_tag_send_nbx(p.ep, &op->word, sizeof(op->word), MakeTag(rank_, kSignalChannel, 0), &prm);
    if (UCS_PTR_IS_ERR(r)) {
      op->ucx_status = UCS_PTR_STATUS(r);
      r = nullptr;
    }
    op->ucx_request = r;
    if (r == nullptr) {
      op->ucx_done = true;
      FinishSignal(op);
    }
  }
}

Status UcxTransport::PostWait(int peer, TransportRequest* req, uint64_t expect_tag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= nranks_ || peer == rank_ || req == nullptr || aborted_.load())
    return CheckOneSided(peer, req, "wait");
  Peer& p = peers_[peer];
  if (!p.error.ok()) {  // a closed peer's last signals may still wait in UCX's queue
    ucp_tag_recv_info_t probe{};
    if (!p.closed ||
        ucp_tag_probe_nb(worker_, MakeTag(peer, kSignalChannel, 0), kMatchMask, 0, &probe) == nullptr)
      return GonePeer(p);
  }
  Op* op = NewOp(peer, kSignalChannel, true, expect_tag, sizeof(uint64_t), req);
  op->kind = OpKind::kWait;
  return PostTaggedRecv(op, &op->word, sizeof(op->word));
}

Status UcxTransport::CheckWait(const Op& op) const {
  const Peer& p = peers_[op.peer];
  if (op.ucx_status != UCS_OK || op.info.length != sizeof(uint64_t))
    return RemoteError("ucx wait for a signal from " + PeerName(p) + ": " +
                       (op.ucx_status != UCS_OK ? Ucs(op.ucx_status)
                                                : std::to_string(op.info.length) + "-byte signal message"));
  if (op.tag != 0 && op.word != op.tag)
    return TagMismatch("ucx wait for a signal from " + PeerName(p), op.tag, op.word);
  return OkStatus();
}

}  // namespace weft
