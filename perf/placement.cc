// placement: which of its placements the VM's two cores are in right now, for the slow-mode
// measurements of issue 17 (perf/RESULTS.md, "The slow mode, found").
//
//   placement [PUBLISH_BYTES]        (default 1 MiB; two threads, pinned to CPUs 0 and 1)
//
// Prints one line: the round trip of one cache line between the two cores (ns per exchange:
// each thread stores its counter and waits for the other's), then the rate at which thread 0
// republishes a PUBLISH_BYTES buffer that thread 1 has just read (plain memcpy and streaming
// stores), and thread 1's read rate. On this project's 2-vCPU VM the exchange takes ~50 ns
// when the two vCPUs share a cache and ~200 ns when they do not, and a plain publish then
// drops from 8-10 GB/s to ~2 GB/s (the line ownership crosses caches) while a streamed one
// stays at 25-29 GB/s: what kernels::CopyToShared decides on.
#include <emmintrin.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct alignas(64) Line {
  std::atomic<uint64_t> v{0};
};

// ns per exchange: both threads store their count and wait for the other's.
double ExchangeNs(int iters) {
  Line a, b;
  auto body = [&](Line& mine, Line& theirs) {
    for (uint64_t i = 1; i <= static_cast<uint64_t>(iters); ++i) {
      mine.v.store(i, std::memory_order_release);
      while (theirs.v.load(std::memory_order_acquire) < i) _mm_pause();
    }
  };
  const Clock::time_point t0 = Clock::now();
  std::thread t([&] { Pin(1); body(b, a); });
  Pin(0);
  body(a, b);
  t.join();
  return Seconds(t0) * 1e9 / iters;
}

void StreamCopy(char* d, const char* s, size_t n) {
  for (size_t i = 0; i + 64 <= n; i += 64) {  // a line's four loads, then its four stores
    __m128i x[4];
    for (int k = 0; k < 4; ++k) x[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16 * k));
    for (int k = 0; k < 4; ++k) _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16 * k), x[k]);
  }
  _mm_sfence();
}

// Thread 0 publishes (copies into buf), thread 1 reads buf; they alternate. GB/s of each.
void PublishRates(size_t n, bool stream, int iters, double* write_gbps, double* read_gbps) {
  std::vector<char> src(n, 1), buf(n, 2);
  std::atomic<int> turn{0};
  double tw = 0, tr = 0;
  std::thread reader([&] {
    Pin(1);
    volatile long sink = 0;
    for (int i = 0; i < iters; ++i) {
      while (turn.load() != 1) _mm_pause();
      const Clock::time_point t0 = Clock::now();
      long sum = 0;
      for (size_t j = 0; j + 8 <= n; j += 8) {
        long v;
        std::memcpy(&v, &buf[j], 8);
        sum += v;
      }
      sink = sink + sum;
      tr += Seconds(t0);
      turn.store(0);
    }
  });
  Pin(0);
  for (int i = 0; i < iters; ++i) {
    while (turn.load() != 0) _mm_pause();
    const Clock::time_point t0 = Clock::now();
    if (stream)
      StreamCopy(buf.data(), src.data(), n);
    else
      std::memcpy(buf.data(), src.data(), n);
    tw += Seconds(t0);
    turn.store(1);
  }
  reader.join();
  *write_gbps = static_cast<double>(n) * iters / tw / 1e9;
  *read_gbps = static_cast<double>(n) * iters / tr / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const long arg = argc > 1 ? std::atol(argv[1]) : (1L << 20);
  if (arg < 64 || argc > 2) {
    std::fprintf(stderr, "usage: placement [PUBLISH_BYTES >= 64]\n");
    return 2;
  }
  const size_t n = static_cast<size_t>(arg) & ~size_t{63};
  const double ns = ExchangeNs(200000);
  double pw, pr, sw, sr;
  PublishRates(n, false, 100, &pw, &pr);
  PublishRates(n, true, 100, &sw, &sr);
  std::printf("exchange_ns %.1f publish_bytes %zu plain_write_GBps %.1f plain_read_GBps %.1f "
              "stream_write_GBps %.1f stream_read_GBps %.1f\n",
              ns, n, pw, pr, sw, sr);
  return 0;
}
