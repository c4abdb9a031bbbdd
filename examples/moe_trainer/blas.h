// blas.h: the one place matrix products happen. Row-major C = op(A) * op(B) through OpenBLAS's
// cblas_sgemm, so a CUDA backend can later replace this file's implementation.
#ifndef MOE_TRAINER_BLAS_H_
#define MOE_TRAINER_BLAS_H_

#include <string>

namespace moe {

enum class Trans { kNo, kYes };

// C[M,N] = op(A)[M,K] * op(B)[K,N] (+ C when accumulate). op(A) = A ([M,K]) or A^T (A is [K,M]).
void Matmul(const float* a, Trans trans_a, const float* b, Trans trans_b, float* c, int m, int n,
            int k, bool accumulate);

// The same with explicit leading dimensions (row strides) for views into larger buffers.
void MatmulStrided(const float* a, int lda, Trans trans_a, const float* b, int ldb, Trans trans_b,
                   float* c, int ldc, int m, int n, int k, bool accumulate);

// Debian's OpenBLAS chooses its kernels from the CPU's identity when the library loads and
// falls back to the generic "Prescott" ones on CPUs it does not recognize (VMs): about half
// the speed. When OPENBLAS_CORETYPE is unset and OpenBLAS chose such a generic kernel although
// the CPU has AVX2 / AVX-512, this sets OPENBLAS_CORETYPE from the CPU's features and
// re-executes the program (the only way to make OpenBLAS choose again); it returns when
// nothing is to be done or the re-execution failed. Call first thing in main.
void UseFastBlasKernel(char** argv);
// "OpenBLAS 0.3.21 ..., kernel SkylakeX (how it was chosen)", for the banner.
std::string BlasDescription();

// Threads for BLAS and for the trainer's own parallel loops.
void SetComputeThreads(int threads);
int ComputeThreads();

}  // namespace moe

#endif  // MOE_TRAINER_BLAS_H_
