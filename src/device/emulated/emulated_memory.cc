#include "device/emulated/emulated_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace weft::device::emulated {
namespace {

// Virtual size of each device's memory: reserved, not committed (pages exist once touched).
constexpr size_t kArenaBytes = size_t{8} << 30;
constexpr size_t kAlignment = 256;  // cudaMalloc's guarantee
constexpr uint32_t kHandleMagic = 0x554d4557;  // "WEMU"

struct HandleWire {  // the bytes of an IpcHandle
  uint32_t magic;
  int32_t device;
  int32_t pid;
  int32_t fd;
  uint64_t offset;
  uint64_t bytes;
};
static_assert(sizeof(HandleWire) <= kIpcHandleBytes, "IPC handle too large");

std::string Hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

std::string Errno(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

Memory::Memory(int devices) : devices_(devices), arena_of_(static_cast<size_t>(devices), nullptr) {}

Memory::~Memory() {
  for (auto& [start, r] : ranges_) {
    munmap(r.client, r.bytes);
    munmap(r.alias, r.bytes);
    close(r.fd);
  }
  for (auto& [start, bytes] : pinned_) munmap(reinterpret_cast<void*>(start), bytes);
}

Status Memory::MapTwice(int fd, size_t offset, size_t bytes, char** client, char** alias) {
  void* c = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (c == MAP_FAILED) return SystemError(Errno("emulated GPU: reserving device addresses: mmap"));
  void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (a == MAP_FAILED) {
    munmap(c, bytes);
    return SystemError(Errno("emulated GPU: mapping device memory: mmap"));
  }
  *client = static_cast<char*>(c);
  *alias = static_cast<char*>(a);
  return OkStatus();
}

Status Memory::EnsureArena(int device) {
  if (arena_of_[static_cast<size_t>(device)] != nullptr) return OkStatus();
  const std::string name = "weft-emulated-gpu" + std::to_string(device);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return SystemError(Errno("emulated GPU: memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(kArenaBytes)) != 0) {
    close(fd);
    return SystemError(Errno("emulated GPU: ftruncate"));
  }
  Range r;
  r.fd = fd;
  r.bytes = kArenaBytes;
  r.device = device;
  Status s = MapTwice(fd, 0, kArenaBytes, &r.client, &r.alias);
  if (!s.ok()) {
    close(fd);
    return s;
  }
  r.free[0] = kArenaBytes;
  arena_of_[static_cast<size_t>(device)] = r.client;
  ranges_[reinterpret_cast<uintptr_t>(r.client)] = std::move(r);
  return OkStatus();
}

Status Memory::Malloc(void** ptr, size_t bytes, int device) {
  if (ptr == nullptr) return InvalidArgument("device malloc: ptr (output pointer) is NULL");
  if (device < 0 || device >= devices_)
    return InvalidArgument("device malloc: device=" + std::to_string(device) + " is not in [0, " +
                           std::to_string(devices_) + ")");
  *ptr = nullptr;
  if (bytes == 0) return OkStatus();  // as cudaMalloc: a null pointer, nothing to free
  const size_t need = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> l(mu_);
  WEFT_RETURN_IF_ERROR(EnsureArena(device));
  Range& r = ranges_[reinterpret_cast<uintptr_t>(arena_of_[static_cast<size_t>(device)])];
  for (auto it = r.free.begin(); it != r.free.end(); ++it) {
    if (it->second < need) continue;
    const size_t offset = it->first;
    const size_t rest = it->second - need;
    r.free.erase(it);
    if (rest > 0) r.free[offset + need] = rest;
    r.live[offset] = need;
    *ptr = r.client + offset;
    return OkStatus();
  }
  return Status(weftSystemError, "device malloc: bytes=" + std::to_string(bytes) +
                                     ": out of emulated device memory on device " +
                                     std::to_string(device));
}

Status Memory::Free(void* ptr) {
  if (ptr == nullptr) return OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  Range* r = Find(ptr);
  const size_t offset = r != nullptr ? static_cast<size_t>(static_cast<char*>(ptr) - r->client) : 0;
  if (r == nullptr || r->imported || r->live.count(offset) == 0)
    return InvalidArgument("device free: ptr=" + Hex(ptr) + " is not a live device allocation");
  size_t start = offset, bytes = r->live[offset];
  r->live.erase(offset);
  // Coalesce with the free neighbours so that memory is reused after many calls.
  auto next = r->free.find(start + bytes);
  if (next != r->free.end()) {
    bytes += next->second;
    r->free.erase(next);
  }
  auto prev = r->free.lower_bound(start);
  if (prev != r->free.begin() && (--prev)->first + prev->second == start) {
    start = prev->first;
    bytes += prev->second;
    r->free.erase(prev);
  }
  r->free[start] = bytes;
  return OkStatus();
}

Status Memory::HostAlloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return InvalidArgument("pinned host alloc: ptr (output pointer) is NULL");
  *ptr = nullptr;
  if (bytes == 0) return OkStatus();
  const size_t rounded = (bytes + PageSize() - 1) / PageSize() * PageSize();
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return SystemError(Errno("pinned host alloc: mmap"));
  std::lock_guard<std::mutex> l(mu_);
  pinned_[reinterpret_cast<uintptr_t>(p)] = rounded;
  *ptr = p;
  return OkStatus();
}

Status Memory::HostFree(void* ptr) {
  if (ptr == nullptr) return OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  auto it = pinned_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == pinned_.end())
    return InvalidArgument("pinned host free: ptr=" + Hex(ptr) + " is not from HostAlloc");
  munmap(ptr, it->second);
  pinned_.erase(it);
  return OkStatus();
}

const Memory::Range* Memory::Find(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return nullptr;
  --it;
  return p < it->first + it->second.bytes ? &it->second : nullptr;
}

Memory::Range* Memory::Find(const void* ptr) {
  return const_cast<Range*>(static_cast<const Memory*>(this)->Find(ptr));
}

PointerAttributes Memory::Info(const void* ptr) const {
  PointerAttributes a;
  std::lock_guard<std::mutex> l(mu_);
  if (const Range* r = Find(ptr)) {
    a.is_device = true;
    a.device = r->device;
    return a;
  }
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = pinned_.upper_bound(p);
  if (it != pinned_.begin() && p < (--it)->first + it->second) a.is_pinned = true;
  return a;
}

Status Memory::Resolve(const char* what, const void* ptr, size_t bytes, bool device_only,
                       void** out) const {
  std::lock_guard<std::mutex> l(mu_);
  const Range* r = Find(ptr);
  if (r == nullptr) {
    if (device_only)
      return InvalidArgument(std::string(what) + "=" + Hex(ptr) +
                             " is not device memory (kernels take device pointers only)");
    *out = const_cast<void*>(ptr);
    return OkStatus();
  }
  const size_t offset = static_cast<size_t>(static_cast<const char*>(ptr) - r->client);
  if (!r->imported) {  // the whole range must lie inside one live allocation
    auto it = r->live.upper_bound(offset);
    if (it == r->live.begin() || offset + bytes > std::prev(it)->first + std::prev(it)->second)
      return InvalidArgument(std::string(what) + "=" + Hex(ptr) + " (+" + std::to_string(bytes) +
                             " bytes) is not inside a live allocation of device " +
                             std::to_string(r->device));
  } else if (offset + bytes > r->bytes) {
    return InvalidArgument(std::string(what) + "=" + Hex(ptr) + " (+" + std::to_string(bytes) +
                           " bytes) runs past the imported allocation");
  }
  *out = r->alias + offset;
  return OkStatus();
}

Status Memory::Export(void* ptr, IpcHandle* handle) const {
  if (handle == nullptr) return InvalidArgument("IPC export: handle (output pointer) is NULL");
  std::lock_guard<std::mutex> l(mu_);
  const Range* r = Find(ptr);
  const size_t offset = r != nullptr ? static_cast<size_t>(static_cast<char*>(ptr) - r->client) : 0;
  if (r == nullptr || r->imported || r->live.count(offset) == 0)
    return InvalidArgument("IPC export: ptr=" + Hex(ptr) +
                           " is not the start of a device allocation of this process");
  HandleWire w{kHandleMagic, r->device, static_cast<int32_t>(getpid()), r->fd, offset,
               r->live.at(offset)};
  *handle = IpcHandle{};
  std::memcpy(handle->bytes, &w, sizeof w);
  return OkStatus();
}

Status Memory::Import(const IpcHandle& handle, void** ptr) {
  if (ptr == nullptr) return InvalidArgument("IPC import: ptr (output pointer) is NULL");
  HandleWire w;
  std::memcpy(&w, handle.bytes, sizeof w);
  if (w.magic != kHandleMagic || w.bytes == 0)
    return InvalidArgument("IPC import: handle is not an emulated GPU handle (magic " +
                           std::to_string(w.magic) + ")");
  const std::string path = "/proc/" + std::to_string(w.pid) + "/fd/" + std::to_string(w.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return SystemError("IPC import: open " + path + ": " + std::strerror(errno) +
                       " (has the exporting process exited?)");
  const size_t first_page = w.offset / PageSize() * PageSize();
  const size_t end = w.offset + w.bytes;
  Range r;
  r.fd = fd;
  r.device = w.device;
  r.imported = true;
  r.bytes = (end - first_page + PageSize() - 1) / PageSize() * PageSize();
  Status s = MapTwice(fd, first_page, r.bytes, &r.client, &r.alias);
  if (!s.ok()) {
    close(fd);
    return s.WithContext("IPC import");
  }
  *ptr = r.client + (w.offset - first_page);
  std::lock_guard<std::mutex> l(mu_);
  ranges_[reinterpret_cast<uintptr_t>(r.client)] = std::move(r);
  return OkStatus();
}

Status Memory::CloseImported(void* ptr) {
  std::lock_guard<std::mutex> l(mu_);
  Range* r = Find(ptr);
  if (r == nullptr || !r->imported)
    return InvalidArgument("IPC close: ptr=" + Hex(ptr) + " is not an imported allocation");
  munmap(r->client, r->bytes);
  munmap(r->alias, r->bytes);
  close(r->fd);
  ranges_.erase(reinterpret_cast<uintptr_t>(r->client));
  return OkStatus();
}

}  // namespace weft::device::emulated
