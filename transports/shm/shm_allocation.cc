// Shareable host memory (see shm_allocation.h): memfd + shared mapping, and the table of live
// allocations.
#include "transports/shm/shm_allocation.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

namespace weft {
namespace {

std::mutex g_mu;
// By base address, so that the allocation holding any pointer is found with upper_bound.
std::map<uintptr_t, SharedAllocation>& Table() {
  static auto* table = new std::map<uintptr_t, SharedAllocation>();  // outlives exit handlers
  return *table;
}
uint64_t g_next_id = 1;

std::string Hex(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

}  // namespace

StatusOr<void*> SharedAllocate(size_t bytes) {
  if (bytes == 0) return InvalidArgument("size=0: nothing to allocate");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > (SIZE_MAX >> 1)) return InvalidArgument("size=" + std::to_string(bytes) + " is too large");
  const size_t rounded = (bytes + page - 1) / page * page;
  int fd = memfd_create("weft-mem", MFD_CLOEXEC);
  if (fd < 0) return SystemError(std::string("memfd_create: ") + strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    int e = errno;
    close(fd);
    return SystemError("ftruncate of a " + std::to_string(rounded) + "-byte memory file: " + strerror(e));
  }
  // Populated now (as a device allocator reserves its memory): the first collective on it
  // then pays no page faults, which would otherwise land inside a timed call.
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return SystemError("mmap of " + std::to_string(rounded) + " bytes: " + strerror(e));
  }
  std::lock_guard<std::mutex> l(g_mu);
  SharedAllocation a{static_cast<char*>(p), rounded, fd, g_next_id++};
  Table()[reinterpret_cast<uintptr_t>(p)] = a;
  return p;
}

Status SharedFree(void* ptr) {
  if (ptr == nullptr) return InvalidArgument("ptr is NULL");
  SharedAllocation a;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = Table().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Table().end())
      return InvalidArgument("ptr=" + Hex(ptr) +
                             " was not returned by weftMemAlloc, or was freed already");
    a = it->second;
    Table().erase(it);
  }
  munmap(a.base, a.bytes);
  close(a.fd);
  return OkStatus();
}

bool FindSharedAllocation(const void* ptr, size_t bytes, SharedAllocation* out) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> l(g_mu);
  auto it = Table().upper_bound(p);
  if (it == Table().begin()) return false;
  --it;
  const SharedAllocation& a = it->second;
  if (p < it->first || bytes > a.bytes || p - it->first > a.bytes - bytes) return false;
  *out = a;
  return true;
}

}  // namespace weft
