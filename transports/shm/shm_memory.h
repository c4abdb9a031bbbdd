// shm_memory: registered memory and one-sided Put/Get for ShmTransport (the methods are
// ShmTransport's, implemented in shm_memory.cc; this header documents them and the packed key).
//
// Registration: ShmTransport::Register(MemRef) records the range (cached, like every
// transport's: registration_cache.h). Host memory only. Three kinds of registered memory:
//   - inside a shareable allocation (weftMemAlloc, shm_allocation.h): the key carries the
//     owner's memory-file descriptor; ImportRemoteKey maps the file (/proc/<pid>/fd/<fd>), so
//     the peer reads and writes it in place (MappedRemote: zero-copy direct steps; Put/Get
//     are a memcpy); the mapping is dropped by ReleaseRemoteKey or with the transport;
//   - inside this rank's window (its shared segment, LocalWindow()): peers reach it through
//     their mapping of that window, a plain memcpy — the "placed in shared memory" case; it
//     stays valid until the window grows (PrepareWindow to a larger size replaces it);
//   - anywhere else in this process: peers reach it by cross-memory attach
//     (process_vm_writev / process_vm_readv, Linux CMA: one copy, no shared mapping), which
//     works where the single-copy probe works (same user, no ptrace restriction or seccomp
//     filter); where it is refused, Put/Get fail with an error that says so.
// PackRemoteKey(handle) -> 80 bytes {magic, owner rank, pid, address, bytes, window offset
// and generation, memory file (fd, allocation id, size, offset of the range in it)};
// ImportRemoteKey(peer, blob) checks it was packed by `peer` on this host.
//
// Per-call records (PublishCallInfo / PeerCallInfo): two slots in the owner's control header
// (shm_layout.h), read by peers after a signal.
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
  int32_t mem_fd;  // >= 0: the range lies in a shareable allocation (a memory file) ...
  uint32_t pad0;
  uint64_t mem_id;      // ... with this id in the owner's process,
  uint64_t mem_bytes;   // of this size,
  uint64_t mem_offset;  // the range starting this far into it
};
static_assert(sizeof(PackedRemoteKey) == 80, "packed key layout");

}  // namespace shm_detail
}  // namespace weft
