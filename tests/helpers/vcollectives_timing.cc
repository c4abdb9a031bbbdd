// Timing loop for perf/RESULTS.md (not a test): weftAllGatherV with equal counts against
// weftAllGather on the same bytes, per size, on the ranks weftrun starts:
//   weftrun -n 4 build/bin/vcollectives_timing [MIN_BYTES MAX_BYTES ITERS]
// Each size: 2 warm-up calls, then ITERS calls of each, alternated in rounds so that drift on a
// loaded machine hits both alike; reports the median per-call time (rank 0 prints; every rank
// times the same calls). Bytes are the total gathered (nccl-tests' "size" for allgather).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "weft/weft.h"

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : size_t{1} << 20;
  const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : size_t{64} << 20;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 10;
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    std::fprintf(stderr, "init failed: %s\n", weftGetLastError(nullptr));
    return 1;
  }
  int rank = 0, n = 1;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &n);
  if (rank == 0) std::printf("%12s %14s %14s %8s\n", "bytes", "allgather_us", "allgatherv_us", "v/even");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const size_t count = bytes / sizeof(float) / n;
    std::vector<float> in(count, 1.0f), out(count * n);
    std::vector<size_t> counts(n, count), displs(n);
    for (int q = 0; q < n; ++q) displs[q] = q * count;
    std::vector<double> even, v;
    for (int i = -2; i < iters; ++i) {
      double t0 = Seconds();
      if (weftAllGather(in.data(), out.data(), count, weftFloat32, comm, nullptr) != weftSuccess) return 2;
      double t1 = Seconds();
      if (weftAllGatherV(in.data(), count, out.data(), counts.data(), displs.data(), weftFloat32, comm,
                         nullptr) != weftSuccess)
        return 3;
      double t2 = Seconds();
      if (i < 0) continue;  // warm-up
      even.push_back(t1 - t0);
      v.push_back(t2 - t1);
    }
    if (rank == 0)
      std::printf("%12zu %14.1f %14.1f %8.3f\n", count * n * sizeof(float), Median(even) * 1e6,
                  Median(v) * 1e6, Median(v) / Median(even));
  }
  weftCommDestroy(comm);
  return 0;
}
