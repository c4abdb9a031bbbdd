// swiglu.cc: the SwiGLU feed-forward used by every expert (routed and shared):
//   h1 = x w1, h3 = x w3, a = silu(h1) * h3, y = a w2,   silu(z) = z * sigmoid(z)
// Backward: da = dy w2^T; dw2 = a^T dy; dh1 = da * h3 * silu'(h1); dh3 = da * silu(h1);
//           dx = dh1 w1^T + dh3 w3^T; dw1 = x^T dh1; dw3 = x^T dh3.
#include <cmath>

#include "blas.h"
#include "layers.h"
#include "thread_pool.h"

namespace moe {
namespace {

inline float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// a = silu(h1) * h3 over n elements.
void GatedActivation(const float* h1, const float* h3, float* a, long n) {
  ParallelFor(n, n > 65536, [&](long lo, long hi) {
    for (long i = lo; i < hi; ++i) a[i] = h1[i] * Sigmoid(h1[i]) * h3[i];
  });
}

void AddInto(float* dst, const float* src, long n) {
  for (long i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void SwigluForward(const float* x, int rows, int dim, int hidden, const SwigluWeights& w,
                   float* h1, float* h3, float* y, std::vector<float>* scratch) {
  if (rows == 0) return;
  const long n = static_cast<long>(rows) * hidden;
  if (static_cast<long>(scratch->size()) < n) scratch->resize(n);
  float* a = scratch->data();
  Matmul(x, Trans::kNo, w.w1, Trans::kNo, h1, rows, hidden, dim, false);
  Matmul(x, Trans::kNo, w.w3, Trans::kNo, h3, rows, hidden, dim, false);
  GatedActivation(h1, h3, a, n);
  Matmul(a, Trans::kNo, w.w2, Trans::kNo, y, rows, dim, hidden, false);
}

void SwigluBackward(const float* x, int rows, int dim, int hidden, const SwigluWeights& w,
                    const float* h1, const float* h3, const float* dy, float* dx,
                    const SwigluGrads& g, std::vector<float>* scratch) {
  if (rows == 0) return;
  const long n = static_cast<long>(rows) * hidden;
  const long weight = static_cast<long>(dim) * hidden;
  if (static_cast<long>(scratch->size()) < 3 * n + weight) scratch->resize(3 * n + weight);
  float* a = scratch->data();
  float* dh1 = a + n;
  float* dh3 = dh1 + n;
  float* dw = dh3 + n;  // one weight gradient at a time, added into g
  GatedActivation(h1, h3, a, n);
  Matmul(a, Trans::kYes, dy, Trans::kNo, dw, hidden, dim, rows, false);
  AddInto(g.w2, dw, weight);
  Matmul(dy, Trans::kNo, w.w2, Trans::kYes, dh1, rows, hidden, dim, false);  // da into dh1
  ParallelFor(n, n > 65536, [&](long lo, long hi) {
    for (long i = lo; i < hi; ++i) {
      const float sig = Sigmoid(h1[i]);
      const float da = dh1[i];
      dh3[i] = da * h1[i] * sig;
      dh1[i] = da * h3[i] * sig * (1.0f + h1[i] * (1.0f - sig));
    }
  });
  Matmul(dh1, Trans::kNo, w.w1, Trans::kYes, dx, rows, dim, hidden, false);
  Matmul(dh3, Trans::kNo, w.w3, Trans::kYes, dx, rows, dim, hidden, true);
  Matmul(x, Trans::kYes, dh1, Trans::kNo, dw, dim, hidden, rows, false);
  AddInto(g.w1, dw, weight);
  Matmul(x, Trans::kYes, dh3, Trans::kNo, dw, dim, hidden, rows, false);
  AddInto(g.w3, dw, weight);
}

}  // namespace moe
