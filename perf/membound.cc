// membound: the memory-bandwidth bound of a same-host collective, measured on this machine.
//
//   membound BYTES_PER_RANK RANKS [REPS]
//
// An allreduce of S bytes over p ranks of one host must at least read every rank's input once
// and write every rank's output once: p*S bytes read and p*S written, spread over the p ranks'
// cores. That is exactly p threads each copying S bytes at once, so the bound is the time of
// the slowest of p concurrent S-byte copies (weft's own Copy, the fastest copy we have). Prints
// "bound_us <median> bound_busbw_GBps <S / median>"; RESULTS.md reports weft's time as a
// fraction of it. (For allgather and alltoall the same p*S in / p*S out argument holds with S
// = the output bytes per rank.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/reduce.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: membound BYTES_PER_RANK RANKS [REPS]\n");
    return 2;
  }
  const size_t bytes = strtoull(argv[1], nullptr, 10);
  const int ranks = atoi(argv[2]);
  const int reps = argc > 3 ? atoi(argv[3]) : 9;
  if (bytes == 0 || ranks < 1 || reps < 1) {
    fprintf(stderr, "membound: BYTES_PER_RANK=%s RANKS=%s: both must be positive\n", argv[1], argv[2]);
    return 2;
  }
  std::vector<std::vector<char>> src(ranks, std::vector<char>(bytes, 1)), dst(ranks, std::vector<char>(bytes, 0));
  std::vector<double> times;
  for (int rep = 0; rep < reps + 1; ++rep) {
    std::atomic<int> ready{0};
    std::vector<double> per(ranks);
    std::vector<std::thread> threads;
    for (int t = 0; t < ranks; ++t)
      threads.emplace_back([&, t] {
        ready++;
        while (ready.load() < ranks) {
        }
        auto a = std::chrono::steady_clock::now();
        weft::kernels::Copy(dst[t].data(), src[t].data(), bytes);
        per[t] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
      });
    for (auto& th : threads) th.join();
    if (rep > 0) times.push_back(*std::max_element(per.begin(), per.end()));  // rep 0 warms up
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  printf("bound_us %.1f bound_busbw_GBps %.2f\n", median, bytes / median / 1e3);
  return 0;
}
