// The emulated GPU's memory: device memory the calling threads cannot touch.
//
// Each emulated device owns a memfd (its "VRAM", sparse, sized kArenaBytes). The process sees
// it twice: a client range reserved PROT_NONE, where device pointers live, so that any host
// load or store through a device pointer faults (SIGSEGV) as it would on a discrete GPU; and a
// private read-write alias of the memfd that only the device's stream threads use, after
// translating a device pointer into it (Resolve). An IPC handle names the memfd through
// /proc/<pid>/fd/<n> plus the allocation's offset and size; the importing process maps it the
// same two ways.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "device/device_runtime.h"

namespace weft::device::emulated {

class Memory {
 public:
  explicit Memory(int devices);
  ~Memory();
  int devices() const { return devices_; }

  Status Malloc(void** ptr, size_t bytes, int device);
  Status Free(void* ptr);
  Status HostAlloc(void** ptr, size_t bytes);
  Status HostFree(void* ptr);
  PointerAttributes Info(const void* ptr) const;

  // The address the device threads use for [ptr, ptr + bytes): the alias for device memory
  // (the whole range must lie in one allocation or import), ptr itself for host memory unless
  // device_only. Errors name `what` and the pointer.
  Status Resolve(const char* what, const void* ptr, size_t bytes, bool device_only,
                 void** out) const;

  Status Export(void* ptr, IpcHandle* handle) const;
  Status Import(const IpcHandle& handle, void** ptr);
  Status CloseImported(void* ptr);

 private:
  struct Range {           // one client range: a device's arena or one import
    char* client = nullptr;
    char* alias = nullptr;
    size_t bytes = 0;
    int device = -1;
    int fd = -1;           // the memfd (arenas) or the imported file
    bool imported = false;
    std::map<size_t, size_t> live;  // arenas: allocated blocks, offset -> bytes
    std::map<size_t, size_t> free;  // arenas: free blocks, offset -> bytes
  };
  Status EnsureArena(int device);
  const Range* Find(const void* ptr) const;  // mu_ held
  Range* Find(const void* ptr);
  static Status MapTwice(int fd, size_t offset, size_t bytes, char** client, char** alias);

  const int devices_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Range> ranges_;      // by client start
  std::vector<char*> arena_of_;            // device -> its arena's client start (or null)
  std::map<uintptr_t, size_t> pinned_;     // pinned host blocks
};

}  // namespace weft::device::emulated
