// ScratchBuffer: memory of one kind that the executor uses for itself (a schedule's Scratch
// buffer when it has no window, a recv-reduce's landing buffer), allocated through the kernel
// backend that will touch it (KernelBackend::Allocate), so its kind is the one its owner chose
// (the communicator: host memory for host schedules) rather than whatever std::vector gives.
// Grows on demand, never shrinks, never zero-fills; kept between operations by its owner.
#pragma once

#include <cstddef>

#include "common/memref.h"
#include "common/status.h"
#include "kernels/kernel_backend.h"

namespace weft {

class ScratchBuffer {
 public:
  explicit ScratchBuffer(MemKind kind = MemKind::kHost, int device = -1)
      : kind_(kind), device_(device) {}
  ~ScratchBuffer() { Free(); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least `bytes` of this buffer's kind from `kb` (the same backend as before, or the old
  // memory is released first); the MemRef returned is exactly `bytes` long.
  StatusOr<MemRef> Reserve(size_t bytes, KernelBackend& kb) {
    if (owner_ != &kb || bytes > mem_.bytes) {
      Free();
      StatusOr<MemRef> m = kb.Allocate(bytes, kind_, device_);
      if (!m.ok()) return m.status();
      mem_ = *m;
      owner_ = &kb;
    }
    return mem_.Slice(0, bytes);
  }
  MemKind kind() const { return kind_; }
  // The current memory (empty before the first Reserve).
  const MemRef& held() const { return mem_; }

 private:
  void Free() {
    if (owner_ != nullptr) owner_->Release(mem_);
    owner_ = nullptr;
    mem_ = MemRef{nullptr, 0, kind_, device_, 0};
  }
  MemKind kind_;
  int device_;
  KernelBackend* owner_ = nullptr;
  MemRef mem_{nullptr, 0, MemKind::kHost, -1, 0};
};

}  // namespace weft
