// ShmSegment: one POSIX shared-memory segment (/dev/shm/<name>) or anonymous memory, mapped.
//
// Creation reserves every page up front with posix_fallocate, so a /dev/shm that is too small
// fails here with a message saying how much was needed and how much is free, instead of a
// SIGBUS on first touch much later. Segments are unlinked by their owner as soon as every
// peer has mapped them (see shm_transport.h), so a crash leaves nothing behind in /dev/shm.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace weft {

class ShmSegment {
 public:
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creates /dev/shm/<name> (name without the leading '/') of `bytes`, exclusively (fails if
  // it exists), fully allocated and mapped read-write. `budget_left` is what the
  // WEFT_SHM_MAX_BYTES cap still allows this rank (SIZE_MAX = no cap); asking for more fails
  // with the same message as a full /dev/shm.
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, size_t bytes,
                                                      size_t budget_left);
  // Maps an existing segment created by a peer; `bytes` must not exceed its size.
  static StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, size_t bytes);
  // Private anonymous memory with the same interface (a rank alone on its host).
  static StatusOr<std::unique_ptr<ShmSegment>> Anonymous(size_t bytes);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }  // -1 for anonymous memory
  const std::string& name() const { return name_; }
  // Removes the name from /dev/shm (mappings stay valid). Idempotent; ENOENT is fine.
  void Unlink();

 private:
  ShmSegment() = default;
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  bool unlinked_ = true;
};

// Maps the pages of [data, data + bytes) of a mapped segment into this process's page tables
// now, for reading or writing (madvise MADV_POPULATE_READ/WRITE, Linux 5.14; nothing changes
// in the memory). A ring's pages otherwise fault in on their first pass, one minor fault per
// page on each side: a 2-rank all-to-all of 8 KiB ran at 6-7 us for its first ~250 calls
// against 1.5-2.2 us after. Returns false where the kernel cannot (the pages then fault in
// as before).
bool PrefaultRange(void* data, size_t bytes, bool write);

// Free bytes in /dev/shm (statvfs), or 0 when it cannot be read.
size_t ShmFreeBytes();
// Removes /dev/shm/<name> if it exists (for names of segments whose owner died).
void ShmUnlinkName(const std::string& name);
// The message for "not enough shared memory", shared by all failure paths.
Status ShmSpaceError(const std::string& name, size_t needed, const std::string& why);

}  // namespace weft
