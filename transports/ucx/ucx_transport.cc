// UcxTransport: setup, tagged send/recv, progress with event-fd sleep, failures, abort.
// The design (tag layout, waiting, failure rules) is in ucx_transport.h.
#include "transports/ucx/ucx_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/settings.h"
#include "transports/ucx/ucx_wire.h"

namespace weft {
namespace {

using namespace ucx_tag;  // NOLINT: the tag layout is this file's vocabulary

using Clock = std::chrono::steady_clock;


std::string Ucs(ucs_status_t s) { return ucs_status_string(s); }


std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace

// ---- setup ----

StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(UcxBootstrap* bootstrap,
                                                              const UcxOptions& options) {
  std::unique_ptr<UcxTransport> t(new UcxTransport());
  t->rank_ = bootstrap->rank();
  t->nranks_ = bootstrap->nranks();
  t->options_ = options;
  t->backoff_ = Backoff(BackoffPolicy::ForNetwork(options.ranks_on_machine, options.spin_us));
  std::string me = "ucx rank " + std::to_string(t->rank_);
  if (t->nranks_ > (1 << kRankBits)) {
    return InvalidArgument(me + ": nranks=" + std::to_string(t->nranks_) +
                           " exceeds the 2^20 ranks the UCP tag layout can name");
  }
  // A rank whose UCX setup failed still takes part in the address exchange (with an empty
  // address) so the others fail with a message instead of waiting.
  Status init = t->InitUcx(options);
  Status connect = t->ConnectPeers(bootstrap);
  if (!init.ok()) return init.WithContext(me);
  if (!connect.ok()) return connect.WithContext(me);
  WEFT_RETURN_IF_ERROR_CTX(t->ExchangeHellos(options.connect_timeout_s), me);
  {
    std::lock_guard<std::mutex> lock(t->mu_);
    t->PostNoteRecvs();
  }
  for (Peer& p : t->peers_) {
    if (p.rank == t->rank_) continue;
    p.lanes = t->DescribeLanes(p.ep);
    WEFT_INFO("ucx: rank %d -> %s over %s", t->rank_, t->PeerName(p).c_str(), p.lanes.c_str());
  }
  return t;
}

Status UcxTransport::InitUcx(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return SystemError("ucp_config_read: " + Ucs(s));
  if (!options.tls.empty()) {
    s = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return InvalidArgument("UCX transports tls=\"" + options.tls + "\" rejected: " + Ucs(s));
    }
  }
  if (SettingText("UCX_KEEPALIVE_INTERVAL").empty() && options.keepalive_s > 0) {
    std::string interval = std::to_string(static_cast<int>(options.keepalive_s * 1000)) + "ms";
    ucp_config_modify(config, "KEEPALIVE_INTERVAL", interval.c_str());  // best effort
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // RMA for the one-sided operations (ucx_one_sided.cc); AMO64 kept for RDMA atomics.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA | UCP_FEATURE_AMO64;
  params.estimated_num_eps = static_cast<size_t>(nranks_);
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return SystemError("ucp_init: " + Ucs(s));
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) == UCS_OK)
    cuda_memory_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(context_, &wparams, &worker_);
  if (s != UCS_OK) return SystemError("ucp_worker_create: " + Ucs(s));
  s = ucp_worker_get_efd(worker_, &worker_fd_);
  if (s != UCS_OK) return SystemError("ucp_worker_get_efd: " + Ucs(s));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return SystemError(std::string("eventfd: ") + strerror(errno));
  return OkStatus();
}

// Exchanges {host name, worker address} and creates an endpoint to every peer.
Status UcxTransport::ConnectPeers(UcxBootstrap* bootstrap) {
  std::string mine;
  if (worker_ != nullptr) {
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    ucs_status_t s = ucp_worker_get_address(worker_, &addr, &len);
    if (s == UCS_OK) {
      std::string host = HostName();
      uint32_t hl = static_cast<uint32_t>(host.size());
      mine.append(reinterpret_cast<const char*>(&hl), 4).append(host);
      mine.append(reinterpret_cast<const char*>(addr), len);
      ucp_worker_release_address(worker_, addr);
    }
  }
  std::vector<std::string> all;
  WEFT_RETURN_IF_ERROR_CTX(bootstrap->AllGatherBlobs(mine, &all), "exchanging UCX worker addresses");
  if (mine.empty()) return SystemError("could not set up UCX (see the error above)");
  peers_.resize(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    Peer& p = peers_[r];
    p.owner = this;
    p.rank = r;
    const std::string& blob = all[r];
    uint32_t hl = 0;
    if (blob.size() >= 4) memcpy(&hl, blob.data(), 4);
    if (blob.size() < 4 + static_cast<size_t>(hl) + 1) {
      return RemoteError("rank " + std::to_string(r) + " could not set up UCX");
    }
    p.host = blob.substr(4, hl);
    if (r == rank_) continue;
    WEFT_RETURN_IF_ERROR(
        CreateEndpoint(p, reinterpret_cast<const ucp_address_t*>(blob.data() + 4 + hl)));
  }
  return OkStatus();
}

Status UcxTransport::CreateEndpoint(Peer& p, const ucp_address_t* address) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = address;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::OnEndpointError;
  ep.err_handler.arg = &p;
  ucs_status_t s = ucp_ep_create(worker_, &ep, &p.ep);
  if (s != UCS_OK && options_.err_mode == UcxOptions::ErrMode::kAuto) {
    // UCX printed why (e.g. "sysv/memory - no peer failure handler"); go on without.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = ucp_ep_create(worker_, &ep, &p.ep);
    if (s == UCS_OK) {
      p.detects_failure = false;
      WEFT_WARN("ucx: the lanes to %s cannot report a dead peer (UCX has no peer-failure "
                "handler for them); a failure there is only caught by WEFT_TIMEOUT",
                PeerName(p).c_str());
    }
  }
  if (s != UCS_OK) return RemoteError("ucp_ep_create to " + PeerName(p) + ": " + Ucs(s));
  return OkStatus();
}

// A zero-byte message each way with every peer, on the reserved channel.
Status UcxTransport::ExchangeHellos(double timeout_s) {
  std::vector<TransportRequest> reqs(2 * static_cast<size_t>(nranks_));
  std::vector<int> peers_of;
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    TransportRequest* recv = &reqs[2 * r];
    TransportRequest* send = &reqs[2 * r + 1];
    std::lock_guard<std::mutex> lock(mu_);
    Op* rop = NewOp(r, kHelloChannel, true, 0, 0, recv);
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = &UcxTransport::OnRecvDone;
    prm.user_data = rop;
    rop->ucx_request = ucp_tag_recv_nbx(worker_, nullptr, 0, MakeTag(r, kHelloChannel, 0),
                                        kMatchMask, &prm);
    Op* sop = NewOp(r, kHelloChannel, false, 0, 0, send);
    prm.cb.send = &UcxTransport::OnSendDone;
    prm.user_data = sop;
    sop->ucx_request = ucp_tag_send_nbx(peers_[r].ep, nullptr, 0,
                                        MakeTag(rank_, kHelloChannel, 0), &prm);
    if (UCS_PTR_IS_ERR(rop->ucx_request) || UCS_PTR_IS_ERR(sop->ucx_request)) {
      return SystemError("posting the setup hello to " + PeerName(peers_[r]) + " failed");
    }
  }
  Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  while (HasPending()) {
    Status st = Progress(10000);
    if (!st.ok()) {
      Abort(st);  // fails the hello requests while `reqs` still exists
      return st.WithContext("setup hello");
    }
    if (Clock::now() > deadline) {
      for (int r = 0; r < nranks_; ++r) {
        if (r != rank_ && (!reqs[2 * r].done.load() || !reqs[2 * r + 1].done.load())) {
          Abort(TimeoutError("ucx setup: no hello exchanged with " + PeerName(peers_[r]) +
                             " within " + std::to_string(timeout_s) + " s"));
          return abort_status_;
        }
      }
    }
  }
  for (const TransportRequest& q : reqs) {
    if (!q.status.ok()) return q.status.WithContext("setup hello");
  }
  return OkStatus();
}

UcxTransport::~UcxTransport() {
  std::lock_guard<std::mutex> lock(mu_);
  // Requests still pending belong to a caller that gave up on them: never touch them again
  // (callbacks that UCX delivers while we close find no request to complete).
  for (Op& op : ops_) op.req = nullptr;
  if (worker_ != nullptr) {
    for (Op& op : ops_) {
      if (op.is_recv && !op.ucx_done && op.ucx_request != nullptr) {
        ucp_request_cancel(worker_, op.ucx_request);
      }
    }
    CloseEndpoints(/*force_all=*/aborted_.load());
    for (Op& op : ops_) {
      if (op.ucx_request != nullptr && !UCS_PTR_IS_ERR(op.ucx_request)) {
        ucp_request_free(op.ucx_request);
      }
    }
    ReleaseMemory();  // after the endpoints: no operation of ours uses an rkey any more
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

// Closes every endpoint: flushing first (so eager data already "sent" leaves), forcing after a
// bound, or at once when `force_all` or the peer failed.
void UcxTransport::CloseEndpoints(bool force_all) {
  std::vector<void*> closing;
  for (Peer& p : peers_) {
    if (p.ep == nullptr) continue;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    bool force = force_all || !p.error.ok();
    prm.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucp_ep_close_nbx(p.ep, &prm);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
    p.ep = nullptr;
  }
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  for (void* r : closing) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(r);
  }
}

std::string UcxTransport::PeerName(const Peer& p) const {
  return "rank " + std::to_string(p.rank) + " (host " + p.host + ")";
}

// "tcp/lo" style names of the lanes in ucp_ep_print_info's report ("lane[0]: 1:tcp/lo.0 ...").
std::string UcxTransport::DescribeLanes(ucp_ep_h ep) const {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return "?";
  ucp_ep_print_info(ep, f);
  fclose(f);
  std::string out;
  std::string all(text, size);
  free(text);
  size_t pos = 0;
  while ((pos = all.find("lane[", pos)) != std::string::npos) {
    size_t colon = all.find(':', all.find(']', pos));
    size_t start = all.find(':', colon + 1);  // "<rsc index>:<tl>/<dev>"
    size_t end = all.find_first_of(" \n", start);
    pos = end;
    if (start == std::string::npos || end == std::string::npos) break;
    std::string lane = all.substr(start + 1, end - start - 1);
    size_t dot = lane.rfind('.');
    if (dot != std::string::npos) lane.resize(dot);  // drop the path index
    if (out.find(lane) == std::string::npos) out += (out.empty() ? "" : ",") + lane;
  }
  return out.empty() ? "?" : out;
}

bool UcxTransport::DetectsPeerFailure(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer >= 0 && peer < nranks_ && peer != rank_ && peers_[peer].detects_failure;
}

std::string UcxTransport::PeerLanes(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= nranks_ || peer == rank_) return "";
  return peers_[peer].lanes;
}

}  // namespace weft
