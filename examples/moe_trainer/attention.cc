// attention.cc: causal multi-head self-attention, softmax(q k^T / sqrt(d)) v, per (sequence,
// head) with plain loops (short sequences: the T x T x d work is small next to the matrix
// products, and loops keep the causal mask free). Parallel over (sequence, head) pairs, which
// write disjoint outputs, so results do not depend on the thread count.
#include <cmath>

#include "layers.h"

namespace moe {

void AttentionForward(const float* qkv, float* probs, float* out, int batch, int T, int C,
                      int H) {
  const int hd = C / H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const long row = 3L * C;
#pragma omp parallel for schedule(static) if (static_cast<long>(batch) * T * T * hd > 262144)
  for (int bh = 0; bh < batch * H; ++bh) {
    const int b = bh / H, h = bh % H;
    const float* base = qkv + static_cast<long>(b) * T * row;
    float* p_bh = probs + static_cast<long>(bh) * T * T;
    for (int t = 0; t < T; ++t) {
      const float* q = base + t * row + h * hd;
      float* p = p_bh + static_cast<long>(t) * T;
      float max_score = -INFINITY;
      for (int s = 0; s <= t; ++s) {
        const float* k = base + s * row + C + h * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; ++i) dot += q[i] * k[i];
        p[s] = dot * scale;
        max_score = std::fmax(max_score, p[s]);
      }
      float sum = 0.0f;
      for (int s = 0; s <= t; ++s) {
        p[s] = std::exp(p[s] - max_score);
        sum += p[s];
      }
      const float inv = 1.0f / sum;
      for (int s = 0; s <= t; ++s) p[s] *= inv;
      for (int s = t + 1; s < T; ++s) p[s] = 0.0f;
      float* o = out + (static_cast<long>(b) * T + t) * C + h * hd;
      for (int i = 0; i < hd; ++i) o[i] = 0.0f;
      for (int s = 0; s <= t; ++s) {
        const float* v = base + s * row + 2 * C + h * hd;
        for (int i = 0; i < hd; ++i) o[i] += p[s] * v[i];
      }
    }
  }
}

// dP = dO V^T, dV = P^T dO, dS = P * (dP - rowsum(P * dP)), dQ = dS K * scale, dK = dS^T Q * scale.
void AttentionBackward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                       int batch, int T, int C, int H) {
  const int hd = C / H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const long row = 3L * C;
#pragma omp parallel for schedule(static) if (static_cast<long>(batch) * T * T * hd > 262144)
  for (int bh = 0; bh < batch * H; ++bh) {
    const int b = bh / H, h = bh % H;
    const float* base = qkv + static_cast<long>(b) * T * row;
    float* dbase = dqkv + static_cast<long>(b) * T * row;
    const float* p_bh = probs + static_cast<long>(bh) * T * T;
    for (int t = 0; t < T; ++t)
      for (int part = 0; part < 3; ++part)
        for (int i = 0; i < hd; ++i) dbase[t * row + part * C + h * hd + i] = 0.0f;
    std::vector<float> dp(T);
    for (int t = 0; t < T; ++t) {
      const float* p = p_bh + static_cast<long>(t) * T;
      const float* d_o = dout + (static_cast<long>(b) * T + t) * C + h * hd;
      float p_dot_dp = 0.0f;
      for (int s = 0; s <= t; ++s) {
        const float* v = base + s * row + 2 * C + h * hd;
        float* dv = dbase + s * row + 2 * C + h * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; ++i) {
          dot += d_o[i] * v[i];
          dv[i] += p[s] * d_o[i];
        }
        dp[s] = dot;
        p_dot_dp += p[s] * dot;
      }
      const float* q = base + t * row + h * hd;
      float* dq = dbase + t * row + h * hd;
      for (int s = 0; s <= t; ++s) {
        const float ds = p[s] * (dp[s] - p_dot_dp) * scale;
        const float* k = base + s * row + C + h * hd;
        float* dk = dbase + s * row + C + h * hd;
        for (int i = 0; i < hd; ++i) {
          dq[i] += ds * k[i];
          dk[i] += ds * q[i];
        }
      }
    }
  }
}

}  // namespace moe
