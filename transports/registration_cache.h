// RegistrationCache: the memory registrations of one transport instance (Core v2 item 4).
//
// Registering memory is what RDMA (ucp_mem_map: pinning + keys) and cuda_ipc (an IPC handle
// per allocation) must do before a peer can touch it, and it is expensive, so callers that
// register the same buffer again (every step of a training loop) must hit a cache: a range
// inside an existing registration of the same memory kind returns that registration with one
// more reference; Deregister drops one and reports when the last one went (the transport then
// releases what it pinned). Handles are never 0 (MemRef's "not registered") and never reused.
//
// Not thread-safe: owned by one transport, used under its one-thread-at-a-time rule.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/memref.h"
#include "common/status.h"

namespace weft {

class RegistrationCache {
 public:
  struct Entry {
    RegHandle handle = 0;
    char* begin = nullptr;
    size_t bytes = 0;
    MemKind kind = MemKind::kHost;
    int device = -1;
    int refs = 0;
    uint64_t transport_data = 0;  // what the transport attached (its own key, an index)
  };

  // Checks `mem` (non-null, non-empty) for `who`'s messages ("tcp register").
  static Status Validate(const MemRef& mem, const char* who);
  // The registration that covers `mem` entirely, with one more reference; null when none.
  const Entry* Acquire(const MemRef& mem);
  // A new registration of `mem` with one reference.
  const Entry& Add(const MemRef& mem, uint64_t transport_data);
  const Entry* Find(RegHandle handle) const;
  // Drops one reference. *last = true (and *released = the entry) when it was the last one.
  Status Release(RegHandle handle, bool* last, Entry* released);
  size_t size() const { return by_handle_.size(); }

 private:
  std::map<RegHandle, Entry> by_handle_;
  RegHandle next_ = 1;
};

}  // namespace weft
