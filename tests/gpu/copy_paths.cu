// Calibrates the copy model of transports/ipc/ipc_options.h (CopyModel: the copy engine's
// set-up and rate against the SM copy kernel's launch and rate) on a lent GPU, without weft's
// runtime: for sizes 4 KiB .. 64 MiB, device to device on GPU 0 (the several-ranks-per-GPU
// case a one-GPU machine has), the time of one copy by cudaMemcpyAsync (the copy engine) and
// by weft's SM copy kernel (kernels/copy.cu, linked in: the very kernel LaunchCopy runs):
//   alone      each copy followed by a stream synchronize: issue-to-completion, what a
//              serial direct schedule pays per step (the host's synchronize is in both);
//   queued     20 copies back to back, then one synchronize: the per-copy cost in a stream.
// Prints one line per size and the first size where the copy engine is at least as fast
// (alone), to compare with CopyCrossoverBytes (2.1 MB by the published figures).
// Built by tests/gpu/bundle.sh (nvcc, with kernels/copy.cu); run by tests/gpu/run.sh.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "kernels/copy_cuda.h"

namespace {

using Clock = std::chrono::steady_clock;

// One copy of `bytes` on `stream` by the copy engine or the SM kernel.
void CopyOnce(bool engine, void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (engine) {
    CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  } else if (weft::kernels::cuda::Copy(dst, src, bytes, stream) != weftSuccess) {
    std::fprintf(stderr, "the SM copy kernel failed to launch\n");
    std::exit(2);
  }
}

// Median microseconds of one copy alone (copy + synchronize), over `rounds`.
double AloneUs(bool engine, void* dst, const void* src, size_t bytes, cudaStream_t s, int rounds) {
  std::vector<double> us;
  for (int i = 0; i < rounds; ++i) {
    const Clock::time_point t0 = Clock::now();
    CopyOnce(engine, dst, src, bytes, s);
    CHECK(cudaStreamSynchronize(s));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Microseconds per copy of `queued` copies issued back to back.
double QueuedUs(bool engine, void* dst, const void* src, size_t bytes, cudaStream_t s, int queued) {
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < queued; ++i) CopyOnce(engine, dst, src, bytes, s);
  CHECK(cudaStreamSynchronize(s));
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / queued;
}

}  // namespace

int main() {
  const size_t max_bytes = size_t{64} << 20;
  void *src = nullptr, *dst = nullptr;
  cudaStream_t s = nullptr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&src, max_bytes));
  CHECK(cudaMalloc(&dst, max_bytes));
  CHECK(cudaMemset(src, 1, max_bytes));
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (bool engine : {true, false}) (void)AloneUs(engine, dst, src, max_bytes, s, 3);  // warm up
  std::printf("%10s %12s %12s %12s %12s\n", "bytes", "ce_alone_us", "sm_alone_us", "ce_queued_us",
              "sm_queued_us");
  size_t crossover = 0;
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 2) {
    const double ce = AloneUs(true, dst, src, bytes, s, 51);
    const double sm = AloneUs(false, dst, src, bytes, s, 51);
    const double ce_q = QueuedUs(true, dst, src, bytes, s, 20);
    const double sm_q = QueuedUs(false, dst, src, bytes, s, 20);
    std::printf("%10zu %12.2f %12.2f %12.2f %12.2f\n", bytes, ce, sm, ce_q, sm_q);
    if (crossover == 0 && ce <= sm) crossover = bytes;
  }
  if (crossover != 0) std::printf("copy engine at least as fast (alone) from %zu bytes\n", crossover);
  else std::printf("the SM kernel was faster (alone) at every size up to %zu bytes\n", max_bytes);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return 0;
}
