// MemRef: a reference to a buffer together with what kind of memory it is (Core v2, item 1).
//
// Every buffer weft touches — the caller's send/receive buffers, scratch, staging, shm windows —
// is handed around as a MemRef, so a transport or kernel backend can decide how to move or
// reduce it (memcpy vs cudaMemcpyAsync, pinned vs pageable, a registered RDMA key) without
// guessing from the pointer. Plain value type; it owns nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft {

enum class MemKind : uint8_t {
  kHost = 0,        // pageable host memory (malloc, std::vector, the caller's CPU tensors)
  kHostShared = 1,  // host memory other processes of this host have mapped (shm windows)
  kHostPinned = 2,  // page-locked host memory a device can DMA (cudaHostAlloc, registered)
  kCudaDevice = 3,  // device memory of GPU `device`
};

inline const char* MemKindName(MemKind k) {
  switch (k) {
    case MemKind::kHost: return "host";
    case MemKind::kHostShared: return "host-shared";
    case MemKind::kHostPinned: return "host-pinned";
    case MemKind::kCudaDevice: return "cuda-device";
  }
  return "unknown";
}

// What a transport returns from Register(): opaque to everyone else. 0 = not registered.
using RegHandle = uint64_t;

struct MemRef {
  void* ptr = nullptr;
  size_t bytes = 0;
  MemKind kind = MemKind::kHost;
  int device = -1;        // GPU index for kCudaDevice (and pinned memory's home device), else -1
  RegHandle handle = 0;   // registration with the transport that will move it, if any
  // A hint for destinations: written once and larger than the cache (a large collective's
  // output), so a CPU kernel may write it with streaming stores, saving each line's read.
  bool streaming = false;

  static MemRef Host(void* p, size_t n) { return MemRef{p, n, MemKind::kHost, -1, 0}; }
  static MemRef Host(const void* p, size_t n) { return Host(const_cast<void*>(p), n); }
  bool is_host() const { return kind != MemKind::kCudaDevice; }
  // A sub-range [offset, offset + n) of this buffer: same kind, device and registration.
  MemRef Slice(size_t offset, size_t n) const {
    MemRef r = *this;
    r.ptr = static_cast<char*>(ptr) + offset;
    r.bytes = n;
    return r;
  }
};

}  // namespace weft
