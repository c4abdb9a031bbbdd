// layers.h: the model's building blocks as plain functions over row-major float buffers, each
// with a hand-written backward. One file per role: rmsnorm.cc, rope.cc, attention.cc,
// swiglu.cc, router.cc, cross_entropy.cc. Backward functions ADD into gradient buffers that
// are shared (the residual stream, weight gradients) and overwrite private ones, as each
// comment says. A CUDA version of a layer would implement the same signature.
#ifndef MOE_TRAINER_LAYERS_H_
#define MOE_TRAINER_LAYERS_H_

#include <vector>

#include "config.h"

namespace moe {

// ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * w ----
void RmsNormForward(const float* x, const float* w, float* y, float* rstd, int rows, int dim,
                    float eps);
// dx += ..., dw += ...
void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* dy,
                     float* dx, float* dw, int rows, int dim);

// ---- Rotary position embedding on the q and k parts of a [rows, 3*dim] qkv buffer ----
struct RopeTable {
  int seq_len = 0, half = 0;  // half = head_dim / 2 frequency pairs (i, i + half)
  std::vector<float> cos, sin;  // [seq_len, half]
};
RopeTable MakeRopeTable(int seq_len, int head_dim, float base);
// Rotates q and k of every head in place; row r is position r % seq_len.
void RopeForward(float* qkv, int rows, int dim, int heads, const RopeTable& table);
// The inverse rotation applied to dq and dk in place.
void RopeBackward(float* dqkv, int rows, int dim, int heads, const RopeTable& table);

// ---- Causal multi-head attention over qkv [B*T, 3C] -> out [B*T, C]; probs [B, H, T, T] ----
void AttentionForward(const float* qkv, float* probs, float* out, int batch, int seq_len,
                      int dim, int heads);
// dqkv is overwritten.
void AttentionBackward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                       int batch, int seq_len, int dim, int heads);

// ---- SwiGLU feed-forward: y = (silu(x w1) * (x w3)) w2, one expert over `rows` tokens ----
struct SwigluWeights {
  const float* w1;  // [dim, hidden]
  const float* w3;  // [dim, hidden]
  const float* w2;  // [hidden, dim]
};
struct SwigluGrads {
  float* w1;
  float* w3;
  float* w2;
};
// h1, h3: [rows, hidden] kept for backward; y: [rows, dim] overwritten.
void SwigluForward(const float* x, int rows, int dim, int hidden, const SwigluWeights& w,
                   float* h1, float* h3, float* y, std::vector<float>* scratch);
// dx overwritten; weight gradients += (computed apart, then added, so the sum of several
// calls does not depend on how tokens were grouped into calls).
void SwigluBackward(const float* x, int rows, int dim, int hidden, const SwigluWeights& w,
                    const float* h1, const float* h3, const float* dy, float* dx,
                    const SwigluGrads& g, std::vector<float>* scratch);

// ---- Router: scores, top-k choice, capacity, gates, balancing losses ----
struct RouterOutput {
  std::vector<float> scores;      // [N, E] softmax probabilities or sigmoid scores
  std::vector<int> choice;        // [N, k] global expert ids, by descending selection score
  std::vector<float> gate;        // [N, k] combine weight; 0 when dropped
  std::vector<unsigned char> kept;  // [N, k] 0 when dropped by the capacity limit
  std::vector<float> lse;         // [N] log-sum-exp of the logits (softmax router: z-loss)
  std::vector<double> selected;   // [E] assignments per expert before dropping
  double aux_loss = 0.0;          // this rank's share of the global loss terms
  double z_loss = 0.0;
};
// Normalizers make every loss term a share of the global mean, so the sum over ranks of the
// gradients is the gradient of the global loss.
struct LossScale {
  double tokens = 1.0;     // tokens in the global batch
  double sequences = 1.0;  // sequences in the global batch
};
void RouterForward(const ModelConfig& m, const float* logits, const float* bias, int sequences,
                   const LossScale& scale, RouterOutput* out);
// dgate: [N, k] gradient of the loss w.r.t. the combine weights. dlogits overwritten.
void RouterBackward(const ModelConfig& m, const float* logits, const RouterOutput& r,
                    const float* dgate, int sequences, const LossScale& scale, float* dlogits);

// ---- Cross-entropy over byte logits [N, V]: returns sum of token losses / scale.tokens and,
// when dlogits is not null, writes dloss/dlogits there ----
double CrossEntropy(const float* logits, const int* targets, int rows, int vocab,
                    const LossScale& scale, float* dlogits);

}  // namespace moe

#endif  // MOE_TRAINER_LAYERS_H_
