// ucx_memory: registration cache and one-sided Put/Get/Signal/Wait over UCX (see ucx_memory.h).
#include "transports/ucx/ucx_memory.h"

#include <chrono>
#include <cstring>

namespace weft {
namespace {

// What UCX carries back to OnDone for one operation.
struct Completion {
  UcxOneSided* owner;
  TransportRequest* req;  // null for signals (nobody waits on them locally)
  std::string what;
  int* pending;
};

std::string Ucs(ucs_status_t s) { return ucs_status_string(s); }

}  // namespace

// ---- registration ----

UcxMemoryRegistry::~UcxMemoryRegistry() {
  for (auto& [base, region] : regions_) ucp_mem_unmap(context_, region.memh);
}

StatusOr<const UcxMemoryRegistry::Region*> UcxMemoryRegistry::Register(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return InvalidArgument("ucx register: ptr=" + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                           " bytes=" + std::to_string(bytes) + ": need a non-null, non-empty range");
  }
  char* p = static_cast<char*>(ptr);
  // The region with the greatest base <= p contains the range if it reaches far enough.
  auto it = regions_.upper_bound(p);
  if (it != regions_.begin()) {
    --it;
    if (p + bytes <= it->second.base + it->second.bytes) return &it->second;
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = ptr;
  params.length = bytes;
  Region region;
  region.base = p;
  region.bytes = bytes;
  ucs_status_t s = ucp_mem_map(context_, &params, &region.memh);
  if (s != UCS_OK) return SystemError("ucp_mem_map of " + std::to_string(bytes) + " bytes: " + Ucs(s));
  void* packed = nullptr;
  size_t packed_size = 0;
  s = ucp_rkey_pack(context_, region.memh, &packed, &packed_size);
  if (s != UCS_OK) {
    ucp_mem_unmap(context_, region.memh);
    return SystemError("ucp_rkey_pack: " + Ucs(s));
  }
  region.packed_rkey.assign(static_cast<const char*>(packed), packed_size);
  ucp_rkey_buffer_release(packed);
  // A new region overlapping an old one only partly: both stay mapped (UCX allows it).
  auto [pos, inserted] = regions_.insert({p, region});
  if (!inserted) {  // same base, longer range: replace
    ucp_mem_unmap(context_, pos->second.memh);
    pos->second = region;
  }
  return &pos->second;
}

// ---- windows ----

StatusOr<std::unique_ptr<UcxOneSided>> UcxOneSided::Create(UcxTransport* transport,
                                                           UcxBootstrap* bootstrap, void* window,
                                                           size_t bytes) {
  std::unique_ptr<UcxOneSided> o(new UcxOneSided());
  o->transport_ = transport;
  o->rank_ = transport->rank();
  o->nranks_ = transport->nranks();
  o->registry_ = std::make_unique<UcxMemoryRegistry>(transport->context());
  o->signals_.assign(o->nranks_, 0);
  o->consumed_.assign(o->nranks_, 0);
  StatusOr<const UcxMemoryRegistry::Region*> w = o->registry_->Register(window, bytes);
  if (!w.ok()) return w.status().WithContext("ucx one-sided window");
  StatusOr<const UcxMemoryRegistry::Region*> sig =
      o->registry_->Register(o->signals_.data(), o->signals_.size() * sizeof(uint64_t));
  if (!sig.ok()) return sig.status().WithContext("ucx one-sided signal counters");
  WEFT_RETURN_IF_ERROR(o->Exchange(bootstrap, **w, **sig));
  return o;
}

// Record: u64 window addr, u64 window bytes, u64 signal addr, u32 window rkey size, rkeys.
Status UcxOneSided::Exchange(UcxBootstrap* bootstrap, const UcxMemoryRegistry::Region& window,
                             const UcxMemoryRegistry::Region& signals) {
  uint64_t head[3] = {reinterpret_cast<uint64_t>(window.base), window.bytes,
                      reinterpret_cast<uint64_t>(signals.base)};
  uint32_t wlen = static_cast<uint32_t>(window.packed_rkey.size());
  std::string mine(reinterpret_cast<const char*>(head), sizeof(head));
  mine.append(reinterpret_cast<const char*>(&wlen), 4);
  mine += window.packed_rkey + signals.packed_rkey;
  std::vector<std::string> all;
  WEFT_RETURN_IF_ERROR_CTX(bootstrap->AllGatherBlobs(mine, &all), "exchanging ucx rkeys");
  remote_.resize(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    const std::string& b = all[r];
    if (b.size() < sizeof(head) + 4) return RemoteError("rank " + std::to_string(r) + ": bad rkey record");
    RemoteWindow& rw = remote_[r];
    memcpy(head, b.data(), sizeof(head));
    memcpy(&wlen, b.data() + sizeof(head), 4);
    rw.window_addr = head[0];
    rw.window_bytes = head[1];
    rw.signal_addr = head[2];
    const char* keys = b.data() + sizeof(head) + 4;
    ucp_ep_h ep = transport_->endpoint(r);
    ucs_status_t s = ucp_ep_rkey_unpack(ep, keys, &rw.window_rkey);
    if (s == UCS_OK) s = ucp_ep_rkey_unpack(ep, keys + wlen, &rw.signal_rkey);
    if (s != UCS_OK) return RemoteError("unpacking rank " + std::to_string(r) + "'s rkeys: " + Ucs(s));
  }
  return OkStatus();
}

UcxOneSided::~UcxOneSided() {
  // UCX must be done with our operations (their callbacks point here) before we go.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (pending_ > 0 && std::chrono::steady_clock::now() < deadline) {
    if (!transport_->Progress(1000).ok()) break;
  }
  for (RemoteWindow& rw : remote_) {
    if (rw.window_rkey != nullptr) ucp_rkey_destroy(rw.window_rkey);
    if (rw.signal_rkey != nullptr) ucp_rkey_destroy(rw.signal_rkey);
  }
}

// ---- operations ----

Status UcxOneSided::CheckRange(int peer, size_t bytes, size_t offset, const char* what) const {
  if (peer < 0 || peer >= nranks_ || peer == rank_) {
    return InvalidArgument(std::string("ucx ") + what + ": peer=" + std::to_string(peer) +
                           " is not another rank of 0.." + std::to_string(nranks_ - 1));
  }
  if (transport_->endpoint(peer) == nullptr) {
    return RemoteError(std::string("ucx ") + what + ": the transport to rank " +
                       std::to_string(peer) + " was aborted");
  }
  const RemoteWindow& rw = remote_[peer];
  if (offset > rw.window_bytes || bytes > rw.window_bytes - offset) {
    return InvalidArgument(std::string("ucx ") + what + ": offset=" + std::to_string(offset) +
                           " bytes=" + std::to_string(bytes) + " exceeds rank " +
                           std::to_string(peer) + "'s window of " + std::to_string(rw.window_bytes) +
                           " bytes");
  }
  return OkStatus();
}

void UcxOneSided::OnDone(void* request, ucs_status_t status, void* user_data) {
  Completion* c = static_cast<Completion*>(user_data);
  --*c->pending;
  if (c->req != nullptr) {
    c->req->Complete(status == UCS_OK ? OkStatus() : RemoteError(c->what + ": " + Ucs(status)));
  }
  if (request != nullptr) ucp_request_free(request);
  delete c;
}

Status UcxOneSided::Track(void* r, TransportRequest* req, const std::string& what) {
  if (UCS_PTR_IS_ERR(r)) {
    Status st = RemoteError(what + ": " + Ucs(UCS_PTR_STATUS(r)));
    if (req != nullptr) req->Complete(st);
    return st;
  }
  if (r == nullptr && req != nullptr) req->Complete();  // done in place
  return OkStatus();
}

Status UcxOneSided::PostPut(int peer, const void* src, size_t bytes, size_t offset,
                            TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckRange(peer, bytes, offset, "put"));
  req->Reset();
  const RemoteWindow& rw = remote_[peer];
  std::string what = "ucx put to rank " + std::to_string(peer);
  Completion* c = new Completion{this, req, what, &pending_};
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = &UcxOneSided::OnDone;
  prm.user_data = c;
  void* r = ucp_put_nbx(transport_->endpoint(peer), src, bytes, rw.window_addr + offset,
                        rw.window_rkey, &prm);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete c;  // no callback will come
  else ++pending_;
  return Track(r, req, what);
}

Status UcxOneSided::PostGet(int peer, void* dst, size_t bytes, size_t offset, TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckRange(peer, bytes, offset, "get"));
  req->Reset();
  const RemoteWindow& rw = remote_[peer];
  std::string what = "ucx get from rank " + std::to_string(peer);
  Completion* c = new Completion{this, req, what, &pending_};
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = &UcxOneSided::OnDone;
  prm.user_data = c;
  void* r = ucp_get_nbx(transport_->endpoint(peer), dst, bytes, rw.window_addr + offset,
                        rw.window_rkey, &prm);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete c;
  else ++pending_;
  return Track(r, req, what);
}

Status UcxOneSided::Signal(int peer) {
  WEFT_RETURN_IF_ERROR(CheckRange(peer, 0, 0, "signal"));
  // Remote completion order: the peer must not see the count before the data it announces.
  ucs_status_t s = ucp_worker_fence(transport_->worker());
  if (s != UCS_OK) return SystemError("ucp_worker_fence: " + Ucs(s));
  const RemoteWindow& rw = remote_[peer];
  std::string what = "ucx signal to rank " + std::to_string(peer);
  Completion* c = new Completion{this, nullptr, what, &pending_};
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_DATATYPE;
  prm.cb.send = &UcxOneSided::OnDone;
  prm.user_data = c;
  prm.datatype = ucp_dt_make_contig(sizeof(uint64_t));
  void* r = ucp_atomic_op_nbx(transport_->endpoint(peer), UCP_ATOMIC_OP_ADD, &one_, 1,
                              rw.signal_addr + sizeof(uint64_t) * rank_, rw.signal_rkey, &prm);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete c;
  else ++pending_;
  return Track(r, nullptr, what);
}

Status UcxOneSided::PostWait(int peer, TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckRange(peer, 0, 0, "wait"));
  req->Reset();
  waits_.push_back({peer, req});
  CheckWaits();
  return OkStatus();
}

// Waits complete in posting order per peer, each consuming one signal.
void UcxOneSided::CheckWaits() {
  size_t kept = 0;
  for (size_t i = 0; i < waits_.size(); ++i) {
    Wait w = waits_[i];
    uint64_t arrived = __atomic_load_n(&signals_[w.peer], __ATOMIC_ACQUIRE);
    if (arrived > consumed_[w.peer]) {
      ++consumed_[w.peer];
      w.req->Complete();
    } else {
      waits_[kept++] = w;
    }
  }
  waits_.resize(kept);
}

Status UcxOneSided::Progress(int timeout_us) {
  CheckWaits();
  // RMA is not counted in the transport's pending requests, so it would not sleep for us;
  // a Progress(0) still drives the worker (and yields the core when nothing moved).
  Status st = transport_->Progress(transport_->HasPending() ? timeout_us : 0);
  CheckWaits();
  return st;
}

}  // namespace weft
