// ucx_memory: memory registration with a cache, and one-sided Put/Get/Signal/Wait over UCX
// RMA and atomics, so that direct algorithms could run across hosts.
//
// Why not a weft::DirectTransport: today's DirectTransport hands the executor a *pointer* to
// a peer's window (PeerWindow) that it reads with loads; across hosts there is no such
// pointer, only RMA. Core v2's interface (DESIGN.md, layer 11: Register(MemRef) -> handle,
// asynchronous put/get/signal/wait on registered memory) is what this class implements; until
// the executor speaks it, UcxOneSided is driven directly (tests/ucx_transport_test.cc).
//
// Registration (UcxMemoryRegistry): ucp_mem_map of a user buffer, its rkey packed for peers.
// The cache answers a request for [ptr, ptr+bytes) with an existing region that contains it
// (a collective re-running on the same buffers registers nothing new); regions are unmapped
// when the registry is destroyed.
//
// Windows (UcxOneSided::Create, collective): every rank registers its window and an array of
// nranks 64-bit signal counters, and allgathers {window address, size, window rkey, signal
// address, signal rkey}; each rank unpacks its peers' rkeys on its endpoints to them.
//   PostPut/PostGet  ucp_put_nbx/ucp_get_nbx at an offset into the peer's window; done when
//                    the local buffer may be reused (put) or holds the data (get).
//   Signal(peer)     ucp_worker_fence (every put/get posted before it is remotely complete
//                    before what follows), then an atomic add of 1 to the peer's counter for
//                    this rank: the peer sees the signal only after the data.
//   PostWait(peer)   done once the counter from `peer` exceeds the signals already consumed.
// Progress: the transport's worker (UcxTransport::Progress) moves RMA; waits are checked
// after it. Over the tcp/sm lanes UCX emulates RMA and atomics with active messages handled in
// the target's progress, which also wakes its event fd; with hardware RDMA atomics nothing
// wakes a sleeping target, so Progress(timeout) then returns after its timeout and the caller
// re-checks (bounded, never lost).
//
// Threading: as the transport (one thread at a time, the same one that calls its Progress).
// Abort is the transport's: after UcxTransport::Abort, requests of this layer that UCX still
// holds complete with an error when the transport is destroyed.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"
#include "transports/ucx/ucx_bootstrap.h"
#include "transports/ucx/ucx_transport.h"

namespace weft {

class UcxMemoryRegistry {
 public:
  struct Region {
    char* base = nullptr;
    size_t bytes = 0;
    ucp_mem_h memh = nullptr;
    std::string packed_rkey;  // what a peer needs to access the region
  };
  explicit UcxMemoryRegistry(ucp_context_h context) : context_(context) {}
  ~UcxMemoryRegistry();
  UcxMemoryRegistry(const UcxMemoryRegistry&) = delete;
  UcxMemoryRegistry& operator=(const UcxMemoryRegistry&) = delete;

  // A region containing [ptr, ptr+bytes): cached, or newly mapped. bytes == 0 is an error.
  StatusOr<const Region*> Register(void* ptr, size_t bytes);
  size_t regions() const { return regions_.size(); }

 private:
  ucp_context_h context_;
  std::map<char*, Region> regions_;  // by base address
};

class UcxOneSided {
 public:
  // Collective over the transport's ranks (same bootstrap the transport was created with).
  // `window` (`bytes` long, may differ per rank) stays owned by the caller and must outlive
  // this object.
  static StatusOr<std::unique_ptr<UcxOneSided>> Create(UcxTransport* transport,
                                                       UcxBootstrap* bootstrap, void* window,
                                                       size_t bytes);
  ~UcxOneSided();

  // Writes `bytes` from `src` into peer's window at `offset`.
  Status PostPut(int peer, const void* src, size_t bytes, size_t offset, TransportRequest* req);
  // Reads `bytes` from peer's window at `offset` into `dst`.
  Status PostGet(int peer, void* dst, size_t bytes, size_t offset, TransportRequest* req);
  // Counted signal to `peer`, ordered after this rank's earlier puts/gets to it.
  Status Signal(int peer);
  Status PostWait(int peer, TransportRequest* req);
  // Drives the transport and completes satisfied waits; true-to-contract as Transport::Progress.
  Status Progress(int timeout_us);
  bool HasPending() const { return pending_ > 0 || !waits_.empty(); }
  const UcxMemoryRegistry& registry() const { return *registry_; }

 private:
  struct RemoteWindow {
    uint64_t window_addr = 0;
    uint64_t window_bytes = 0;
    uint64_t signal_addr = 0;
    ucp_rkey_h window_rkey = nullptr;
    ucp_rkey_h signal_rkey = nullptr;
  };
  struct Wait {
    int peer;
    TransportRequest* req;
  };
  UcxOneSided() = default;
  Status CheckRange(int peer, size_t bytes, size_t offset, const char* what) const;
  Status Exchange(UcxBootstrap* bootstrap, const UcxMemoryRegistry::Region& window,
                  const UcxMemoryRegistry::Region& signals);
  // Hands `r` (a ucp_*_nbx result) to completion tracking.
  Status Track(void* r, TransportRequest* req, const std::string& what);
  void CheckWaits();
  static void OnDone(void* request, ucs_status_t status, void* user_data);

  UcxTransport* transport_ = nullptr;
  int rank_ = 0;
  int nranks_ = 1;
  std::unique_ptr<UcxMemoryRegistry> registry_;
  std::vector<uint64_t> signals_;   // signals_[p]: signals received from p (registered)
  std::vector<uint64_t> consumed_;  // waits completed per peer
  std::vector<RemoteWindow> remote_;
  std::vector<Wait> waits_;
  int pending_ = 0;  // puts/gets/atomics UCX has not completed
  const uint64_t one_ = 1;  // the atomic add's operand (read by UCX when it sends)
};

}  // namespace weft
