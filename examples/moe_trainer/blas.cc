// blas.cc: Matmul through OpenBLAS. OpenBLAS itself always runs single-threaded here; with
// more than one compute thread the rows of C are split over the trainer's pool
// (thread_pool.h) and each slice is its own single-threaded sgemm. Why: OpenBLAS's pthread
// workers spin-wait, and beside a second pool they fought each other and the other jobs on
// the 2-core VM (2 threads ran 3.7x slower than 1); the pool's workers sleep instead. A row
// of C is computed the same way whichever slice holds it (the summation dimension K is never
// split), so results do not depend on the thread count.
#include "blas.h"

#include <strings.h>
#include <unistd.h>

#include <cblas.h>

#include <cstdlib>

#include "thread_pool.h"

namespace moe {
namespace {
// Every slice of a split product keeps at least this many multiply-adds: below about 1e6
// OpenBLAS (0.3.21, x86-64) takes its small-matrix kernels, which sum in another order, so
// a smaller slice would make results depend on the thread count. Measured: the default
// config's losses are bitwise equal with 1 and 2 threads (test moe_trainer.threads).
constexpr long kMinSliceWork = 1L << 20;

void Sgemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// Rows [begin, end) of C: op(A)'s rows begin.. are A's rows (no transpose) or columns.
void SgemmRows(bool ta, bool tb, int begin, int end, int n, int k, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  if (end <= begin) return;
  const float* a_rows = ta ? a + begin : a + static_cast<long>(begin) * lda;
  Sgemm(ta, tb, end - begin, n, k, a_rows, lda, b, ldb, beta, c + static_cast<long>(begin) * ldc,
        ldc);
}

void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  const int parts = PoolThreads();
  const int rows = (m + parts - 1) / parts;
  const int step = (rows + 7) / 8 * 8;  // whole 8-row panels per slice
  const int last_rows = m - (parts - 1) * step;  // the smallest slice
  if (parts == 1 || last_rows <= 0 || static_cast<long>(last_rows) * n * k < kMinSliceWork) {
    Sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  RunOnPool([&](int part, int parts_now) {  // nested in a pool part: one part, the whole product
    const int begin = parts_now == 1 ? 0 : part * step;
    const int end = parts_now == 1 ? m : (begin + step < m ? begin + step : m);
    SgemmRows(ta, tb, begin, end, n, k, a, lda, b, ldb, beta, c, ldc);
  });
}
}  // namespace

void Matmul(const float* a, Trans trans_a, const float* b, Trans trans_b, float* c, int m, int n,
            int k, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (long i = 0; i < static_cast<long>(m) * n; ++i) c[i] = 0.0f;
    return;
  }
  const bool ta = trans_a == Trans::kYes, tb = trans_b == Trans::kYes;
  Gemm(ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, accumulate ? 1.0f : 0.0f, c, n);
}

void MatmulStrided(const float* a, int lda, Trans trans_a, const float* b, int ldb, Trans trans_b,
                   float* c, int ldc, int m, int n, int k, bool accumulate) {
  if (m == 0 || n == 0 || k == 0) return;  // callers never pass k == 0 here
  Gemm(trans_a == Trans::kYes, trans_b == Trans::kYes, m, n, k, a, lda, b, ldb,
       accumulate ? 1.0f : 0.0f, c, ldc);
}

namespace {
// Set in the re-executed process's environment so the banner can say who chose the kernel.
constexpr char kChosenMarker[] = "MOE_TRAIN_BLAS_CHOSE";

// OpenBLAS's generic x86-64 kernels: what it falls back to when it does not know the CPU.
bool GenericKernel(const char* core) {
  for (const char* name : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                           "Katmai", "Coppermine", "Northwood", "Banias"})
    if (strcasecmp(core, name) == 0) return true;
  return false;
}

// The kernel the CPU's features (as the OS enables them) support; null: none better known.
const char* KernelForCpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}
}  // namespace

void UseFastBlasKernel(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice (or ours)
  const char* want = KernelForCpu();
  if (want == nullptr || !GenericKernel(openblas_get_corename())) return;
  setenv(kChosenMarker, openblas_get_corename(), 1);
  setenv("OPENBLAS_CORETYPE", want, 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: go on with the kernel OpenBLAS chose
  unsetenv(kChosenMarker);
}

std::string BlasDescription() {
  std::string text = std::string(openblas_get_config()) + ", kernel " + openblas_get_corename();
  const char* detected = std::getenv(kChosenMarker);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (detected != nullptr)
    text += std::string(" (chosen by moe_train from the CPU's features; OpenBLAS detected ") +
            detected + "; set OPENBLAS_CORETYPE to override)";
  else if (forced != nullptr)
    text += std::string(" (OPENBLAS_CORETYPE=") + forced + ")";
  else
    text += " (OpenBLAS's own detection)";
  return text;
}

void SetComputeThreads(int threads) {
  openblas_set_num_threads(1);  // parallelism comes from Gemm's row split (see the top)
  SetPoolThreads(threads);
}

int ComputeThreads() { return PoolThreads(); }

}  // namespace moe
