// blas.cc: Matmul through OpenBLAS. OpenBLAS splits the M and N dimensions over its threads and
// never the K (summation) dimension, so results do not depend on the thread count.
#include "blas.h"

#include <cblas.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace moe {
namespace {
int g_threads = 1;
}

void Matmul(const float* a, Trans trans_a, const float* b, Trans trans_b, float* c, int m, int n,
            int k, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (long i = 0; i < static_cast<long>(m) * n; ++i) c[i] = 0.0f;
    return;
  }
  const bool ta = trans_a == Trans::kYes, tb = trans_b == Trans::kYes;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, accumulate ? 1.0f : 0.0f, c, n);
}

void MatmulStrided(const float* a, int lda, Trans trans_a, const float* b, int ldb, Trans trans_b,
                   float* c, int ldc, int m, int n, int k, bool accumulate) {
  if (m == 0 || n == 0 || k == 0) return;  // callers never pass k == 0 here
  cblas_sgemm(CblasRowMajor, trans_a == Trans::kYes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::kYes ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
              accumulate ? 1.0f : 0.0f, c, ldc);
}

void SetComputeThreads(int threads) {
  g_threads = threads < 1 ? 1 : threads;
  openblas_set_num_threads(g_threads);
#ifdef _OPENMP
  omp_set_num_threads(g_threads);
#endif
}

int ComputeThreads() { return g_threads; }

}  // namespace moe
