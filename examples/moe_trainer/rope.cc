// rope.cc: rotary position embedding (RoFormer, "rotate half" pairing as in GPT-NeoX/LLaMA):
// in each head, element i pairs with i + head_dim/2 and the pair rotates by angle
// pos * base^(-2i/head_dim). Backward rotates the gradient by the opposite angle.
#include <cmath>

#include "layers.h"
#include "thread_pool.h"

namespace moe {

RopeTable MakeRopeTable(int seq_len, int head_dim, float base) {
  RopeTable t;
  t.seq_len = seq_len;
  t.half = head_dim / 2;
  t.cos.resize(static_cast<size_t>(seq_len) * t.half);
  t.sin.resize(t.cos.size());
  for (int pos = 0; pos < seq_len; ++pos)
    for (int i = 0; i < t.half; ++i) {
      // Angles in double, rounded once to float (the twin does the same).
      const double freq = std::pow(static_cast<double>(base), -2.0 * i / head_dim);
      const double angle = pos * freq;
      t.cos[pos * t.half + i] = static_cast<float>(std::cos(angle));
      t.sin[pos * t.half + i] = static_cast<float>(std::sin(angle));
    }
  return t;
}

namespace {
// sign = +1 forward rotation, -1 inverse.
void Rotate(float* qkv, int rows, int dim, int heads, const RopeTable& t, float sign) {
  const int head_dim = dim / heads, half = t.half;
  ParallelFor(rows, static_cast<long>(rows) * dim > 65536, [&](long lo, long hi) {
    for (int r = static_cast<int>(lo); r < hi; ++r) {
      const int pos = r % t.seq_len;
      const float* c = &t.cos[pos * half];
      const float* s = &t.sin[pos * half];
      for (int part = 0; part < 2; ++part)  // q then k
        for (int h = 0; h < heads; ++h) {
          float* v = qkv + static_cast<long>(r) * 3 * dim + part * dim + h * head_dim;
          for (int i = 0; i < half; ++i) {
            const float a = v[i], b = v[i + half], sn = sign * s[i];
            v[i] = a * c[i] - b * sn;
            v[i + half] = b * c[i] + a * sn;
          }
        }
    }
  });
}
}  // namespace

void RopeForward(float* qkv, int rows, int dim, int heads, const RopeTable& table) {
  Rotate(qkv, rows, dim, heads, table, 1.0f);
}

void RopeBackward(float* dqkv, int rows, int dim, int heads, const RopeTable& table) {
  Rotate(dqkv, rows, dim, heads, table, -1.0f);
}

}  // namespace moe
