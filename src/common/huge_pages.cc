// Large host allocations on transparent huge pages (huge_pages.h).
#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <new>

#include "common/settings.h"

namespace weft {

namespace {

// Read once: a buffer allocated under one value must be freed under the same.
bool Enabled() {
  static const bool on = SettingFlagOr("WEFT_HUGE_PAGES", true);
  return on;
}

// What a huge-page buffer of `bytes` keeps mapped: the request in whole huge pages. It is
// mapped with one huge page more, to align its start, which AllocateHostBuffer gives back.
size_t KeptBytes(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

}  // namespace

bool HostBufferUsesHugePages(size_t bytes) { return bytes >= kHugePageBytes && Enabled(); }

void* AllocateHostBuffer(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (!HostBufferUsesHugePages(bytes)) return new (std::nothrow) unsigned char[bytes];
  const size_t keep = KeptBytes(bytes);
  const size_t mapped = keep + kHugePageBytes;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  // Keep the 2 MiB aligned middle; give back the unaligned head and whatever tail is left.
  const uintptr_t start = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) munmap(m, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + keep) munmap(reinterpret_cast<void*>(aligned + keep), end - (aligned + keep));
  // A hint: failure (a kernel without THP) leaves ordinary pages, which still work.
  (void)madvise(reinterpret_cast<void*>(aligned), keep, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void FreeHostBuffer(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (!HostBufferUsesHugePages(bytes)) {
    delete[] static_cast<unsigned char*>(p);
    return;
  }
  munmap(p, KeptBytes(bytes));
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack the name
#endif

HugePageCollapser::HugePageCollapser() : enabled_(SettingFlagOr("WEFT_HUGE_PAGES", true)) {}

void HugePageCollapser::BeforePeerPins(const void* p, size_t bytes) {
  if (bytes == 0 || !enabled_) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / kHugePageBytes;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes - 1) / kHugePageBytes;
  // Runs of pages seen once before go to the kernel in one call each, at most kMaxPagesPerUse
  // pages in all; the rest stay due for the next use.
  size_t budget = kMaxPagesPerUse;
  uintptr_t run = 0;
  bool in_run = false;
  for (uintptr_t i = begin; i <= end; ++i) {
    auto it = pages_.find(i);
    bool due = false;
    if (it == pages_.end()) {
      if (pages_.size() < kMaxPages) pages_.emplace(i, Page{});
    } else {
      due = it->second.state == kSeenOnce && budget > 0;
    }
    if (due && !in_run) run = i, in_run = true;
    if (due) --budget;
    if (!due && in_run) Collapse(run, i - 1), in_run = false;
  }
  if (in_run) Collapse(run, end);
}

void HugePageCollapser::Collapse(uintptr_t first, uintptr_t last) {
  void* at = reinterpret_cast<void*>(first * kHugePageBytes);
  const size_t len = (last - first + 1) * kHugePageBytes;
  const int rc = madvise(at, len, MADV_COLLAPSE);
  const int err = rc == 0 ? 0 : errno;
  if (rc == 0) {
    for (uintptr_t i = first; i <= last; ++i) pages_[i].state = kCollapsed;
    collapsed_ += last - first + 1;
    return;
  }
  if (first != last) {
    // The kernel reports one error for the run: find out page by page which ones failed.
    for (uintptr_t i = first; i <= last; ++i) Collapse(i, i);
    return;
  }
  // EAGAIN: the page is pinned right now (a peer's copy in flight); ENOMEM: no free huge page,
  // or part of the page is not mapped. The next use retries, kMaxTries times in all. EINVAL (a
  // kernel before 6.1, memory that cannot fold): never again.
  last_error_ = err;
  Page& pg = pages_[first];
  if ((err != EAGAIN && err != ENOMEM) || ++pg.tries >= kMaxTries) {
    pg.state = kGaveUp;
    ++given_up_;
  }
}

}  // namespace weft
