// ShmSegment implementation (see shm_segment.h).
#include "transports/shm/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>

namespace weft {

namespace {
std::string Errno(int e) { return std::string(std::strerror(e)); }
}  // namespace

size_t ShmFreeBytes() {
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return 0;
  return static_cast<size_t>(st.f_bavail) * st.f_frsize;
}

void ShmUnlinkName(const std::string& name) {
  if (!name.empty()) shm_unlink(("/" + name).c_str());
}

Status ShmSpaceError(const std::string& name, size_t needed, const std::string& why) {
  return SystemError("shm: cannot create shared-memory segment /dev/shm/" + name + ": needed " +
                     std::to_string(needed) + " bytes (" + why + "); /dev/shm has " +
                     std::to_string(ShmFreeBytes()) +
                     " bytes free. Enlarge /dev/shm (e.g. `docker run --shm-size=1g`, or "
                     "`mount -o remount,size=2G /dev/shm`), lower WEFT_SHM_RING_BYTES / "
                     "WEFT_SHM_WINDOW_BYTES, or set WEFT_SHM_DISABLE=1 to use another transport");
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

void ShmSegment::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  ShmUnlinkName(name_);
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, size_t bytes,
                                                         size_t budget_left) {
  if (bytes > budget_left)
    return ShmSpaceError(name, bytes,
                         "WEFT_SHM_MAX_BYTES leaves only " + std::to_string(budget_left) +
                             " bytes for this rank");
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  std::string path = "/" + name;
  int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    return SystemError("shm: shm_open(" + path + ", O_CREAT|O_EXCL) failed: " + Errno(e));
  }
  seg->fd_ = fd;
  seg->unlinked_ = false;  // from here on, the destructor path must unlink on failure
  // posix_fallocate, not just ftruncate: tmpfs allocates pages lazily, and a page that cannot
  // be allocated on first touch raises SIGBUS in whichever rank touches it. Reserving now turns
  // that into an error at creation.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    if (rc == ENOSPC) {
      seg->Unlink();
      return ShmSpaceError(name, bytes, "posix_fallocate: " + Errno(rc));
    }
    if (rc != EOPNOTSUPP && rc != EINVAL) {
      seg->Unlink();
      return SystemError("shm: posix_fallocate(" + path + ", " + std::to_string(bytes) +
                         ") failed: " + Errno(rc));
    }
    // A filesystem without fallocate: fall back to ftruncate (pages come on first touch).
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int e = errno;
      seg->Unlink();
      return ShmSpaceError(name, bytes, "ftruncate: " + Errno(e));
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    seg->Unlink();
    return SystemError("shm: mmap of " + path + " (" + std::to_string(bytes) +
                       " bytes) failed: " + Errno(e));
  }
  seg->data_ = p;
  seg->size_ = bytes;
  return seg;
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, size_t bytes) {
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  std::string path = "/" + name;
  int fd = shm_open(path.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    return SystemError("shm: shm_open(" + path + ") failed: " + Errno(e));
  }
  seg->fd_ = fd;
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes)
    return InternalError("shm: segment " + path + " holds " + std::to_string(st.st_size) +
                         " bytes, expected at least " + std::to_string(bytes));
  size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    return SystemError("shm: mmap of " + path + " failed: " + Errno(e));
  }
  seg->data_ = p;
  seg->size_ = size;
  return seg;
}

bool PrefaultRange(void* data, size_t bytes, bool write) {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // linux/mman.h, 5.14
#endif
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  // madvise wants a page-aligned start: widen the range to whole pages.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  return madvise(reinterpret_cast<void*>(begin), end - begin,
                 write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0;
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Anonymous(size_t bytes) {
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    return SystemError("shm: anonymous mmap of " + std::to_string(bytes) + " bytes failed: " +
                       Errno(e));
  }
  seg->data_ = p;
  seg->size_ = bytes;
  return seg;
}

}  // namespace weft
