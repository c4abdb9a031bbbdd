// shm_allocation: host memory that the other processes of this host can map (weftMemAlloc).
//
// Each allocation is an anonymous memory file (memfd_create), mapped shared and page-aligned.
// A peer maps it by opening /proc/<owner pid>/fd/<fd> (shm_memory.cc, ImportRemoteKey): the
// same access rule as reading the owner's /proc entries (same user), which holds where the
// Yama ptrace restriction refuses cross-memory attach. No name ever appears in /dev/shm, so
// nothing is left behind: the kernel frees the pages when the owner has unmapped and closed
// the file and the last peer mapping is gone (process exit included).
//
// A process-wide table records the live allocations, so that registration can tell whether a
// buffer lies in one (and peers can map it) or is ordinary memory (they cannot). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace weft {

struct SharedAllocation {
  char* base = nullptr;
  size_t bytes = 0;  // mapped size (a multiple of the page size)
  int fd = -1;       // the memory file, open in this process
  uint64_t id = 0;   // unique in this process, never reused
};

// Allocates `bytes` (> 0) of shareable memory, zero-filled, page-aligned, its pages
// populated at once (MAP_POPULATE).
StatusOr<void*> SharedAllocate(size_t bytes);
// Frees an allocation made by SharedAllocate; anything else (or a second free) is an error
// naming the pointer.
Status SharedFree(void* ptr);
// The live allocation that holds [ptr, ptr + bytes) entirely; false when there is none.
bool FindSharedAllocation(const void* ptr, size_t bytes, SharedAllocation* out);

}  // namespace weft
