// The one dispatch point for CPU reductions: picks the kernel table once (AVX2+F16C when the
// CPU has it, else the baseline; WEFT_KERNEL_ISA=generic forces the baseline) and indexes it
// by (dtype, op). Also Copy: memcpy, or non-temporal stores for copies of at least
// WEFT_COPY_NT_THRESHOLD bytes (default 16 MiB; 0 disables them).
#include "kernels/reduce.h"

#include <cstdint>
#include <cstdlib>
#include <chrono>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>  // SSE2 (baseline x86-64): streaming stores
#endif

#include "common/log.h"
#include "common/settings.h"
#include "kernels/dtype.h"
#include "kernels/reduce_table.h"

namespace weft::kernels {

namespace {

const KernelTable& ChooseTable() {
  const KernelTable* avx2 = Avx2KernelTable();
  const KernelTable* chosen = avx2 != nullptr ? avx2 : &GenericKernelTable();
  const std::string forced_text = SettingText("WEFT_KERNEL_ISA");
  const char* forced = forced_text.c_str();
  // An unknown value or an unavailable ISA keeps the default choice rather than failing:
  // this knob is for testing and measurements, never needed for correctness.
  if (forced != nullptr && *forced != '\0') {
    if (std::strcmp(forced, "generic") == 0) {
      chosen = &GenericKernelTable();
    } else if (std::strcmp(forced, "avx2") != 0 || avx2 == nullptr) {
      WEFT_WARN("WEFT_KERNEL_ISA=%s is not available here (generic%s); using %s", forced,
                avx2 != nullptr ? ", avx2" : "", chosen->isa);
    }
  }
  WEFT_INFO("reduction kernels: %s (%s)", chosen->isa,
            avx2 != nullptr ? "CPU has AVX2+F16C" : "no AVX2+F16C on this CPU/build");
  return *chosen;
}

}  // namespace

const KernelTable& ActiveKernelTable() {
  static const KernelTable& table = ChooseTable();
  return table;
}

const char* KernelIsaName() { return ActiveKernelTable().isa; }

ReduceFn GetReduceFn(weftDataType_t dtype, weftRedOp_t op) {
  if (!IsValidDataType(dtype) || !IsValidRedOp(op)) return nullptr;
  return ActiveKernelTable().reduce[dtype][op];
}

void Reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
            weftRedOp_t op) {
  if (count == 0) return;
  ReduceFn fn = GetReduceFn(dtype, op);
  if (fn != nullptr) fn(dst, a, b, count);
}

void Finalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op, int divisor) {
  if (op != weftAvg || divisor <= 1 || count == 0 || !IsValidDataType(dtype)) return;
  ActiveKernelTable().finalize_avg[dtype](dst, count, divisor);
}

namespace {

// Measured on the 2-core development VM (Google Benchmark, CPU time, medians of 5): glibc
// memcpy 19.6-25 GB/s of traffic at 16-64 MiB, a streaming-store copy 34-40 GB/s; at 8 MiB and
// below memcpy wins (the data still fits the 32 MiB L3 and a consumer finds it there). So
// streaming starts at 16 MiB unless WEFT_COPY_NT_THRESHOLD (bytes) says otherwise.
constexpr size_t kDefaultNonTemporalThreshold = size_t{16} << 20;

size_t NonTemporalThreshold() {
  // Parsed like every byte-count setting (suffixes K/M/G: "64K"). A malformed value keeps the
  // default here (the knob only tunes speed, never correctness) and fails communicator
  // creation in ValidateSettings, naming the variable and value.
  static const size_t threshold = [] {
    StatusOr<size_t> v = SettingBytes("WEFT_COPY_NT_THRESHOLD", kDefaultNonTemporalThreshold);
    if (!v.ok()) return kDefaultNonTemporalThreshold;
    return *v == 0 ? SIZE_MAX : *v;
  }();
  return threshold;
}

#if defined(__x86_64__)
// Streaming stores skip the read-for-ownership of each destination line (a third of the
// traffic of a plain copy) and do not evict useful data for a buffer that exceeds the cache.
// No fence: the callers fence once after their last piece (a fence per 1 KiB block measured
// 4x slower than one per 64 MiB decode).
void StreamUnfenced(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // Streaming stores need 16-byte aligned destinations: copy the head normally.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15u)) & 15u;
  if (head > bytes) head = bytes;  // only with a tiny WEFT_COPY_NT_THRESHOLD
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (size_t blocks = bytes / 64; blocks > 0; --blocks) {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), x3);
    d += 64;
    s += 64;
  }
  std::memcpy(d, s, bytes % 64);
}
#endif

}  // namespace

size_t StreamingThreshold() { return NonTemporalThreshold(); }

void CopyStreamingUnfenced(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  StreamUnfenced(dst, src, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Streaming stores are weakly ordered: fence so that a later flag store (e.g. a shared-memory
// "ready" signal) cannot become visible before the data.
void StreamingFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

void CopyStreaming(void* dst, const void* src, size_t bytes) {
  CopyStreamingUnfenced(dst, src, bytes);
  StreamingFence();
}

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#if defined(__x86_64__)
  if (bytes >= NonTemporalThreshold()) {
    CopyStreaming(dst, src, bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

namespace {

// Per thread: whether this thread's large publishes stream, and how many since the last plain
// (timed) one. Plain publishes run at 8-10 GB/s when the reading core shares a cache with
// ours and 1.8-2.3 GB/s when it does not (the VM's two placements; streamed: 25-29 GB/s in
// both): below kSlowPlainGBps the next kProbeEvery - 1 large publishes stream, then one
// plain copy looks again (the placement changes every few seconds to minutes).
struct PublishState {
  bool stream = false;
  uint32_t since_probe = 0;
};
thread_local PublishState t_publish;
constexpr size_t kPublishTimedBytes = size_t{64} << 10;  // a 64 KiB copy takes 2.5-35 us
constexpr double kSlowPlainGBps = 3.0;
constexpr uint32_t kProbeEvery = 32;

}  // namespace

void CopyToShared(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  // Sizes Copy streams anyway, or that are too small to time, go through Copy's own rule.
  const size_t always_stream = NonTemporalThreshold();
  if (bytes >= kPublishTimedBytes && bytes < always_stream && always_stream != SIZE_MAX) {
    PublishState& st = t_publish;
    if (st.stream && ++st.since_probe < kProbeEvery) {
      CopyStreaming(dst, src, bytes);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.stream = static_cast<double>(bytes) < kSlowPlainGBps * 1e9 * s;
    st.since_probe = 0;
    return;
  }
#endif
  Copy(dst, src, bytes);
}

}  // namespace weft::kernels
