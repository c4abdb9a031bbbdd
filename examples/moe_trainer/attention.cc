// attention.cc: causal multi-head self-attention, softmax(q k^T / sqrt(d)) v, one (sequence,
// head) at a time. The four products per head go through BLAS on strided views of the qkv
// buffer (no copies); the full T x T score matrix is computed and the causal part kept (twice
// the minimum work, but BLAS-speed beats a triangular loop at these sizes). Parallel over
// (sequence, head) pairs, which write disjoint outputs, so results do not depend on threads.
#include <cmath>

#include "blas.h"
#include "layers.h"
#include "thread_pool.h"

namespace moe {
namespace {
// Over each row t of scores: softmax of the causal part s <= t, zero elsewhere.
void CausalSoftmaxRows(float* p, int T, float scale) {
  for (int t = 0; t < T; ++t) {
    float* row = p + static_cast<long>(t) * T;
    float max_score = -INFINITY;
    for (int s = 0; s <= t; ++s) max_score = std::fmax(max_score, row[s] * scale);
    float sum = 0.0f;
    for (int s = 0; s <= t; ++s) {
      row[s] = std::exp(row[s] * scale - max_score);
      sum += row[s];
    }
    const float inv = 1.0f / sum;
    for (int s = 0; s <= t; ++s) row[s] *= inv;
    for (int s = t + 1; s < T; ++s) row[s] = 0.0f;
  }
}
}  // namespace

void AttentionForward(const float* qkv, float* probs, float* out, int batch, int T, int C,
                      int H) {
  const int hd = C / H, row = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ParallelFor(batch * H, static_cast<long>(batch) * T * T * hd > 262144, [&](long lo, long hi) {
    for (int bh = static_cast<int>(lo); bh < hi; ++bh) {
      const int b = bh / H, h = bh % H;
      const float* q = qkv + static_cast<long>(b) * T * row + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = probs + static_cast<long>(bh) * T * T;
      MatmulStrided(q, row, Trans::kNo, k, row, Trans::kYes, p, T, T, T, hd, false);  // q k^T
      CausalSoftmaxRows(p, T, scale);
      float* o = out + static_cast<long>(b) * T * C + h * hd;
      MatmulStrided(p, T, Trans::kNo, v, row, Trans::kNo, o, C, T, hd, T, false);  // p v
    }
  });
}

// dP = dO V^T, dV = P^T dO, dS = P * (dP - rowsum(P * dP)) * scale, dQ = dS K, dK = dS^T Q.
void AttentionBackward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                       int batch, int T, int C, int H) {
  const int hd = C / H, row = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ParallelFor(batch * H, static_cast<long>(batch) * T * T * hd > 262144, [&](long lo, long hi) {
    std::vector<float> ds(static_cast<size_t>(T) * T);  // dP, then dS, of one head
    for (int bh = static_cast<int>(lo); bh < hi; ++bh) {
      const int b = bh / H, h = bh % H;
      const long base = static_cast<long>(b) * T * row + h * hd;
      const float* q = qkv + base;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + base;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = probs + static_cast<long>(bh) * T * T;
      const float* d_o = dout + static_cast<long>(b) * T * C + h * hd;
      MatmulStrided(d_o, C, Trans::kNo, v, row, Trans::kYes, ds.data(), T, T, T, hd, false);  // dP
      MatmulStrided(p, T, Trans::kYes, d_o, C, Trans::kNo, dv, row, T, hd, T, false);        // dV
      for (int t = 0; t < T; ++t) {
        const float* pr = p + static_cast<long>(t) * T;
        float* dr = &ds[static_cast<size_t>(t) * T];
        float p_dot_dp = 0.0f;
        for (int s = 0; s <= t; ++s) p_dot_dp += pr[s] * dr[s];
        for (int s = 0; s <= t; ++s) dr[s] = pr[s] * (dr[s] - p_dot_dp) * scale;
        for (int s = t + 1; s < T; ++s) dr[s] = 0.0f;
      }
      MatmulStrided(ds.data(), T, Trans::kNo, k, row, Trans::kNo, dq, row, T, hd, T, false);  // dQ
      MatmulStrided(ds.data(), T, Trans::kYes, q, row, Trans::kNo, dk, row, T, hd, T, false); // dK
    }
  });
}

}  // namespace moe
