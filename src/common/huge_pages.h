// Large host allocations backed by transparent huge pages where the kernel allows them.
//
// Why: on a host whose THP policy is "madvise" (Debian's and Ubuntu's default), anonymous
// memory gets 4 KiB pages unless its owner asks. A same-host peer reads a large message with
// process_vm_readv, which pins the sender's pages and copies each: from 4 KiB pages at 4.2-4.4
// GB/s here, from 2 MiB pages at 11-13 (perf/microbench/cma_pages_bench.cc; the pinned side's
// page size decides it, the reader's hardly matters). On the 2 hosts x 4 ranks namespace
// harness the same calls ran 25-30% faster under THP "always" (perf/RESULTS.md, issue 39).
//
// Most of those sources are the *caller's* buffers, which weft does not allocate:
// HugePageCollapser folds a reused one into huge pages in place (MADV_COLLAPSE, Linux 6.1+:
// the contents stay, only the mapping changes). weft's own large buffers (a schedule's
// scratch, a receive's landing lane) are allocated on huge pages from the start; alone, that
// measured no gain on the harness, but it costs nothing and spares them the fold.
//
// WEFT_HUGE_PAGES=0 turns both off (plain operator new, as before, and no collapse). Below
// kHugePageBytes nothing changes: a huge page would waste most of itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace weft {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` of uninitialized host memory, or nullptr when out of memory. At least kHugePageBytes
// long and with the setting on: 2 MiB aligned and advised MADV_HUGEPAGE (a hint: the kernel may
// still back it with small pages).
void* AllocateHostBuffer(size_t bytes);
// Frees what AllocateHostBuffer(bytes) returned; `bytes` must be the same.
void FreeHostBuffer(void* p, size_t bytes);

// Whether a buffer of `bytes` would be advised (the setting read once, at the first call).
bool HostBufferUsesHugePages(size_t bytes);

// Folds host memory that same-host peers pin and copy (the shm transport's single-copy sends)
// into huge pages, one 2 MiB page at a time and only on its second use: a buffer sent from
// once pays nothing, a reused one (a gradient bucket, a benchmark's buffer) pays one copy of
// itself (20-300 ms per 64 MiB here, at most kMaxPagesPerUse pages in each use from the
// second on) and then reads at the huge-page rate for good. A page is tried at most kMaxTries
// times (a peer still pinning it makes the kernel refuse), and a page collapsed once is not
// looked at again: if the caller frees it and gets fresh memory at that address, that memory
// stays as the kernel gives it.
// Not thread-safe: one per transport, used by its owner thread.
class HugePageCollapser {
 public:
  HugePageCollapser();  // reads WEFT_HUGE_PAGES
  static constexpr int kMaxTries = 3;
  // A fold stalls the sender (0.3-14 ms per page here, the slow end when the kernel must
  // compact memory for the huge page): at most this many pages per use, so that a message's
  // peers wait ~0.1 s at worst for it.
  static constexpr size_t kMaxPagesPerUse = 8;
  // At most this many pages are remembered (256 GiB of memory); beyond it, new pages are not.
  static constexpr size_t kMaxPages = size_t{1} << 17;

  // Called before a peer pins [p, p + bytes): the 2 MiB pages it covers, whole or in part.
  void BeforePeerPins(const void* p, size_t bytes);
  // Pages collapsed so far (tests and logs).
  size_t collapsed_pages() const { return collapsed_; }
  size_t given_up_pages() const { return given_up_; }
  int last_error() const { return last_error_; }  // errno of the last refusal, 0 if none

 private:
  enum State : uint8_t { kSeenOnce, kCollapsed, kGaveUp };
  struct Page {
    State state = kSeenOnce;
    uint8_t tries = 0;
  };
  void Collapse(uintptr_t first, uintptr_t last);  // pages [first, last] (indices), all due
  std::unordered_map<uintptr_t, Page> pages_;  // by address / kHugePageBytes
  size_t collapsed_ = 0;
  size_t given_up_ = 0;
  int last_error_ = 0;
  bool enabled_;
};

}  // namespace weft
