// The GPU's floor for weft's ipc hand-offs, without weft: two parties ping-pong a counter
// through stream memory operations (cuStreamWriteValue32 into the peer's flag,
// cuStreamWaitValue32 on one's own), the same primitives the ipc transport's Signal/Wait use.
// Every round is queued up front, then the host waits once: the figure is the GPU's hand-off
// time, not the host's.
//   flag_pingpong streams ROUNDS  two streams of one process (one CUDA context)
//   flag_pingpong procs ROUNDS    two processes on the same GPU, the flags in one cudaMalloc
//                                 shared by cudaIpcGetMemHandle (two contexts: time-sliced
//                                 unless MPS runs)
// Prints one line: mode, rounds, microseconds per round trip. Built by tests/gpu/bundle.sh.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cuda_check.h"

namespace {

#define CHECK_CU(call)                                                                \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      std::fprintf(stderr, "%s: CUresult %d\n", #call, static_cast<int>(r_));         \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

using WaitFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
WaitFn g_wait;
WriteFn g_write;

void LoadDriverEntries() {
  cudaDriverEntryPointQueryResult found{};
  void* p = nullptr;
  CHECK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found));
  g_wait = reinterpret_cast<WaitFn>(p);
  CHECK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &p, 12000, cudaEnableDefault, &found));
  g_write = reinterpret_cast<WriteFn>(p);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One party's rounds: the pinger writes ping then waits for pong; the ponger the reverse.
void QueueRounds(cudaStream_t s, uint32_t* ping, uint32_t* pong, bool pinger, int rounds) {
  for (int i = 1; i <= rounds; ++i) {
    const auto v = static_cast<cuuint32_t>(i);
    if (pinger) {
      CHECK_CU(g_write(s, reinterpret_cast<CUdeviceptr>(ping), v, 0));
      CHECK_CU(g_wait(s, reinterpret_cast<CUdeviceptr>(pong), v, CU_STREAM_WAIT_VALUE_GEQ));
    } else {
      CHECK_CU(g_wait(s, reinterpret_cast<CUdeviceptr>(ping), v, CU_STREAM_WAIT_VALUE_GEQ));
      CHECK_CU(g_write(s, reinterpret_cast<CUdeviceptr>(pong), v, 0));
    }
  }
}

int Streams(int rounds) {
  LoadDriverEntries();
  uint32_t* flags = nullptr;
  CHECK(cudaMalloc(&flags, 2 * sizeof(uint32_t)));
  CHECK(cudaMemset(flags, 0, 2 * sizeof(uint32_t)));
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());
  const double t0 = Now();
  // Each stream's rounds from its own thread: a queue fills up (about a thousand operations)
  // and then blocks its host thread, which must not be the one that queues the other side.
  std::thread ponger([&] {
    QueueRounds(b, flags, flags + 1, false, rounds);
    CHECK(cudaStreamSynchronize(b));
  });
  QueueRounds(a, flags, flags + 1, true, rounds);
  CHECK(cudaStreamSynchronize(a));
  ponger.join();
  std::printf("streams rounds %d round_trip_us %.2f\n", rounds, (Now() - t0) * 1e6 / rounds);
  return 0;
}

// Rank 0 owns the flags and sends their IPC handle through a pipe; both then queue their
// rounds after a pipe handshake (so neither times the other's start-up).
int Procs(int rounds) {
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) return 2;
  const pid_t pid = fork();  // before any CUDA call: a forked child cannot use the parent's
  const bool pinger = pid != 0;
  LoadDriverEntries();
  uint32_t* flags = nullptr;
  cudaIpcMemHandle_t h{};
  char go = 'g';
  if (pinger) {
    CHECK(cudaMalloc(&flags, 2 * sizeof(uint32_t)));
    CHECK(cudaMemset(flags, 0, 2 * sizeof(uint32_t)));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaIpcGetMemHandle(&h, flags));
    if (write(to_child[1], &h, sizeof h) != sizeof h) return 2;
    if (read(to_parent[0], &go, 1) != 1) return 2;  // the child has imported and is ready
  } else {
    if (read(to_child[0], &h, sizeof h) != sizeof h) return 2;
    CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&flags), h, cudaIpcMemLazyEnablePeerAccess));
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (!pinger && write(to_parent[1], &go, 1) != 1) return 2;
  const double t0 = Now();
  QueueRounds(s, flags, flags + 1, pinger, rounds);
  CHECK(cudaStreamSynchronize(s));
  const double us = (Now() - t0) * 1e6 / rounds;
  if (!pinger) {
    CHECK(cudaIpcCloseMemHandle(flags));
    return 0;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("procs rounds %d round_trip_us %.2f\n", rounds, us);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "streams") != 0 && std::strcmp(argv[1], "procs") != 0)) {
    std::fprintf(stderr, "usage: flag_pingpong streams|procs ROUNDS\n");
    return 2;
  }
  const int rounds = std::atoi(argv[2]);
  if (rounds <= 0) {
    std::fprintf(stderr, "flag_pingpong: ROUNDS=%s must be a positive integer\n", argv[2]);
    return 2;
  }
  return std::strcmp(argv[1], "streams") == 0 ? Streams(rounds) : Procs(rounds);
}
