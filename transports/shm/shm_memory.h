// shm_memory: registered memory and one-sided Put/Get for ShmTransport (the methods are
// ShmTransport's, implemented in shm_memory.cc; this header documents them and the packed key).
//
// Registration: ShmTransport::Register(MemRef) records the range (cached, like every
// transport's: registration_cache.h). Host memory only. Two kinds of registered memory:
//   - inside this rank's window (its shared segment, LocalWindow()): peers reach it through
//     their mapping of that window, a plain memcpy — the "placed in shared memory" case; it
//     stays valid until the window grows (PrepareWindow to a larger size replaces it);
//   - anywhere else in this process: peers reach it by cross-memory attach
//     (process_vm_writev / process_vm_readv, Linux CMA: one copy, no shared mapping), which
//     works where the single-copy probe works (same user, no ptrace restriction or seccomp
//     filter); where it is refused, Put/Get fail with an error that says so.
// PackRemoteKey(handle) -> 64 bytes {magic, owner rank, pid, address, bytes, window offset
// and generation}; ImportRemoteKey(peer, blob) checks it was packed by `peer` on this host.
//
// Put/Get complete before they return (a copy by this rank's CPU), through the request as
// the interface says. Ordering with Signal: the copy is done when Put returns, and Signal's
// counter is published with release semantics, so a peer that consumed the signal sees the
// data (the mapped path by the memory model; CMA by the syscall having returned).
#pragma once

#include <cstdint>

namespace weft {
namespace shm_detail {

constexpr uint32_t kRemoteKeyMagic = 0x4b4d5357;  // "WSMK"

// The packed key: same host, same build, so a fixed little struct copied as bytes.
struct PackedRemoteKey {
  uint32_t magic;
  int32_t owner;
  int32_t pid;
  uint32_t in_window;
  uint64_t address;
  uint64_t bytes;
  uint64_t window_offset;
  uint64_t window_gen;
  uint64_t reserved;
};
static_assert(sizeof(PackedRemoteKey) == 56, "packed key layout");

}  // namespace shm_detail
}  // namespace weft
