// rmsnorm.cc: RMSNorm forward and backward (no bias, learned scale).
//   y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)
//   dx = rstd * (dy*w) - x * rstd^3 * mean(dy*w*x)
#include <cmath>

#include "layers.h"
#include "thread_pool.h"

namespace moe {

void RmsNormForward(const float* x, const float* w, float* y, float* rstd, int rows, int dim,
                    float eps) {
  ParallelFor(rows, static_cast<long>(rows) * dim > 65536, [&](long lo, long hi) {
    for (int r = static_cast<int>(lo); r < hi; ++r) {
      const float* xr = x + static_cast<long>(r) * dim;
      float* yr = y + static_cast<long>(r) * dim;
      double sum_sq = 0.0;
      for (int i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
      const float s = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
      rstd[r] = s;
      for (int i = 0; i < dim; ++i) yr[i] = xr[i] * s * w[i];
    }
  });
}

void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* dy,
                     float* dx, float* dw, int rows, int dim) {
  ParallelFor(rows, static_cast<long>(rows) * dim > 65536, [&](long lo, long hi) {
    for (int r = static_cast<int>(lo); r < hi; ++r) {
      const float* xr = x + static_cast<long>(r) * dim;
      const float* dyr = dy + static_cast<long>(r) * dim;
      float* dxr = dx + static_cast<long>(r) * dim;
      const float s = rstd[r];
      double dot = 0.0;  // sum(dy * w * x)
      for (int i = 0; i < dim; ++i) dot += static_cast<double>(dyr[i]) * w[i] * xr[i];
      const float coeff = static_cast<float>(dot / dim) * s * s * s;
      for (int i = 0; i < dim; ++i) dxr[i] += s * dyr[i] * w[i] - xr[i] * coeff;
    }
  });
  // Weight gradient: rows in order on one thread, so the sum is reproducible.
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    const float* dyr = dy + static_cast<long>(r) * dim;
    for (int i = 0; i < dim; ++i) dw[i] += dyr[i] * xr[i] * rstd[r];
  }
}

}  // namespace moe
