// Huge pages for the memory peers pin (src/common/huge_pages.h): weft's own large host
// buffers come 2 MiB aligned, and HugePageCollapser folds a caller's buffer into huge pages on
// its second use as a single-copy source, leaving its contents as they were.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/huge_pages.h"

namespace weft {
namespace {

// AnonHugePages (bytes) of the mapping that holds `p`, from /proc/self/smaps; -1 if not found.
long long AnonHugeBytesAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::atoll(line.c_str() + 14) * 1024;
  }
  return -1;
}

std::string ThpMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// `pages` huge pages of anonymous memory on 4 KiB pages, 2 MiB aligned, filled with a pattern.
struct SmallPaged {
  explicit SmallPaged(size_t pages) : bytes(pages * kHugePageBytes) {
    raw = mmap(nullptr, bytes + kHugePageBytes, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
    data = reinterpret_cast<unsigned char*>((r + kHugePageBytes - 1) & ~(kHugePageBytes - 1));
    // Under THP "madvise" unadvised memory faults in 4 KiB pages and khugepaged leaves it
    // alone. Under "always" the fault would take huge pages: refuse them for the fill, then
    // lift the refusal (MADV_COLLAPSE honours it), as for any malloc'd buffer.
    const bool always = ThpMode().find("[always]") != std::string::npos;
    if (always) madvise(data, bytes, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 7 + i / 4096);
    if (always) madvise(data, bytes, MADV_HUGEPAGE);
  }
  ~SmallPaged() { munmap(raw, bytes + kHugePageBytes); }
  bool Intact() const {
    for (size_t i = 0; i < bytes; ++i)
      if (data[i] != static_cast<unsigned char>(i * 7 + i / 4096)) return false;
    return true;
  }
  size_t bytes;
  void* raw;
  unsigned char* data;
};

TEST(HugePages, LargeHostBuffersAreHugePageAligned) {
  unsetenv("WEFT_HUGE_PAGES");
  void* big = AllocateHostBuffer(3 * kHugePageBytes + 5);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHugePageBytes, 0u);
  std::memset(big, 0xab, 3 * kHugePageBytes + 5);  // every byte writable
  FreeHostBuffer(big, 3 * kHugePageBytes + 5);
  void* small = AllocateHostBuffer(4096);
  ASSERT_NE(small, nullptr);
  std::memset(small, 1, 4096);
  FreeHostBuffer(small, 4096);
  EXPECT_EQ(AllocateHostBuffer(0), nullptr);
}

TEST(HugePages, ASourceIsCollapsedOnItsSecondUseWithItsContents) {
  unsetenv("WEFT_HUGE_PAGES");
  if (ThpMode().find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off on this host ([never]): nothing to fold";
  SmallPaged buf(4);
  ASSERT_EQ(AnonHugeBytesAt(buf.data), 0) << "the test buffer should start on 4 KiB pages";
  HugePageCollapser c;
  // A message from the middle of the buffer covers all four pages in part.
  c.BeforePeerPins(buf.data + kHugePageBytes / 2, buf.bytes - kHugePageBytes);
  EXPECT_EQ(c.collapsed_pages(), 0u) << "a first use folds nothing";
  EXPECT_EQ(AnonHugeBytesAt(buf.data), 0);
  // The second use folds them; a page the kernel refuses for now (EAGAIN: still referenced
  // from a CPU's page batch; ENOMEM: no free huge page) is retried on the next uses.
  for (int use = 0; use < HugePageCollapser::kMaxTries && c.collapsed_pages() < 4; ++use)
    c.BeforePeerPins(buf.data + kHugePageBytes / 2, buf.bytes - kHugePageBytes);
  if (c.given_up_pages() == 4 && c.last_error() == EINVAL)
    GTEST_SKIP() << "this kernel refuses MADV_COLLAPSE (before Linux 6.1?): nothing to fold";
  EXPECT_EQ(c.collapsed_pages(), 4u) << c.given_up_pages() << " pages given up, last error "
                                     << std::strerror(c.last_error());
  EXPECT_EQ(AnonHugeBytesAt(buf.data), static_cast<long long>(buf.bytes));
  EXPECT_TRUE(buf.Intact());
  c.BeforePeerPins(buf.data, buf.bytes);  // a collapsed page is not looked at again
  EXPECT_EQ(c.collapsed_pages(), 4u);
  EXPECT_EQ(c.given_up_pages(), 0u);
}

TEST(HugePages, ALargeSourceIsFoldedOverSeveralUses) {
  unsetenv("WEFT_HUGE_PAGES");
  if (ThpMode().find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off on this host ([never]): nothing to fold";
  const size_t pages = HugePageCollapser::kMaxPagesPerUse + 4;
  SmallPaged buf(pages);
  HugePageCollapser c;
  c.BeforePeerPins(buf.data, buf.bytes);
  c.BeforePeerPins(buf.data, buf.bytes);
  if (c.given_up_pages() > 0 && c.last_error() == EINVAL)
    GTEST_SKIP() << "this kernel refuses MADV_COLLAPSE (before Linux 6.1?): nothing to fold";
  // One use folds at most kMaxPagesPerUse pages (fewer if the kernel asked for a retry).
  EXPECT_LE(c.collapsed_pages(), HugePageCollapser::kMaxPagesPerUse);
  EXPECT_GT(c.collapsed_pages(), 0u);
  for (int use = 0; use < 2 * HugePageCollapser::kMaxTries && c.collapsed_pages() < pages; ++use)
    c.BeforePeerPins(buf.data, buf.bytes);
  EXPECT_EQ(c.collapsed_pages(), pages) << c.given_up_pages() << " pages given up, last error "
                                        << std::strerror(c.last_error());
  EXPECT_EQ(AnonHugeBytesAt(buf.data), static_cast<long long>(buf.bytes));
  EXPECT_TRUE(buf.Intact());
}

TEST(HugePages, MemoryThatCannotFoldIsGivenUpAndLeftAlone) {
  unsetenv("WEFT_HUGE_PAGES");
  // Memory the host may not touch (a PROT_NONE reservation, as the emulated GPU's device memory
  // looks from the host) folds into nothing, and the collapser stops trying after its tries.
  void* p = mmap(nullptr, 4 * kHugePageBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  HugePageCollapser c;
  for (int i = 0; i < 2 + HugePageCollapser::kMaxTries; ++i) c.BeforePeerPins(p, 4 * kHugePageBytes);
  EXPECT_EQ(c.collapsed_pages(), 0u);
  EXPECT_GT(c.given_up_pages(), 0u);
  munmap(p, 4 * kHugePageBytes);
}

TEST(HugePages, TheSettingTurnsCollapsingOff) {
  setenv("WEFT_HUGE_PAGES", "0", 1);
  SmallPaged buf(2);
  HugePageCollapser c;
  for (int i = 0; i < 3; ++i) c.BeforePeerPins(buf.data, buf.bytes);
  EXPECT_EQ(c.collapsed_pages(), 0u);
  EXPECT_EQ(c.given_up_pages(), 0u);
  EXPECT_EQ(AnonHugeBytesAt(buf.data), 0);
  unsetenv("WEFT_HUGE_PAGES");
}

}  // namespace
}  // namespace weft
