// Microbenchmark: a same-host peer's single-copy read (process_vm_readv, what the shm transport
// does for messages of 256 KiB and more) of 16 MiB, by the page size of either side.
//
// The reader pins the source's pages one 4 KiB page at a time and copies each: from 4 KiB
// pages that runs at about a third of the rate from 2 MiB pages on this VM, whatever the
// reader's own pages are. `collapsed` starts the source on 4 KiB pages and lets
// HugePageCollapser fold it on its second use, as the shm transport does for a reused send
// buffer (src/common/huge_pages.h).
//
//   cma_pages_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include <benchmark/benchmark.h>

#include "common/huge_pages.h"

namespace {

constexpr size_t kBytes = size_t{16} << 20;
enum Pages { kSmall = 0, kHuge = 1, kCollapsed = 2 };

// kBytes on the pages asked for, 2 MiB aligned, every page touched; `raw` is what to unmap.
unsigned char* Buffer(Pages pages, void** raw) {
  const size_t h = weft::kHugePageBytes;
  *raw = mmap(nullptr, kBytes + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* p = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(*raw) + h - 1) & ~(h - 1));
  madvise(p, kBytes, pages == kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 1, kBytes);
  if (pages == kCollapsed) {
    madvise(p, kBytes, MADV_HUGEPAGE);  // lifts the refusal (MADV_COLLAPSE honours it)
    weft::HugePageCollapser c;
    c.BeforePeerPins(p, kBytes);
    c.BeforePeerPins(p, kBytes);
  }
  return p;
}

void BM_CmaRead(benchmark::State& state) {
  const Pages remote = static_cast<Pages>(state.range(0));
  const Pages local = static_cast<Pages>(state.range(1));
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) return state.SkipWithError("pipe");
  const pid_t child = fork();
  if (child == 0) {  // holds the source until told to go
    void* raw = nullptr;
    unsigned char* src = Buffer(remote, &raw);
    if (write(to_parent[1], &src, sizeof(src)) != sizeof(src)) _exit(1);
    char go;
    if (read(to_child[0], &go, 1) < 0) _exit(1);
    _exit(0);
  }
  unsigned char* src = nullptr;
  if (read(to_parent[0], &src, sizeof(src)) != sizeof(src)) return state.SkipWithError("child");
  void* raw = nullptr;
  unsigned char* dst = Buffer(local, &raw);
  for (auto _ : state) {
    struct iovec l = {dst, kBytes}, r = {src, kBytes};
    if (process_vm_readv(child, &l, 1, &r, 1, 0) != static_cast<ssize_t>(kBytes)) {
      state.SkipWithError("process_vm_readv failed (ptrace restrictions?)");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
  char go = 0;
  if (write(to_child[1], &go, 1) != 1) return state.SkipWithError("child");
  waitpid(child, nullptr, 0);
  munmap(raw, kBytes + weft::kHugePageBytes);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}
// remote (the source, pinned), local (the reader's destination): 0 small, 1 huge, 2 collapsed.
BENCHMARK(BM_CmaRead)
    ->ArgNames({"remote", "local"})
    ->Args({kSmall, kSmall})
    ->Args({kSmall, kHuge})
    ->Args({kHuge, kSmall})
    ->Args({kHuge, kHuge})
    ->Args({kCollapsed, kSmall})
    ->UseRealTime();

}  // namespace
