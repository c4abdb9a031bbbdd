// optimizer.h: AdamW (PyTorch's formula and order of operations), the global gradient-norm
// clip factor, and the learning-rate schedule (linear warm-up, then cosine to min_lr_ratio).
// The optimizer updates a list of segments of the parameter buffers: the whole buffers for
// plain data parallelism, or this rank's shard of every bucket for ZeRO-1 (its moments then
// exist only for that shard).
//
// 1-bit Adam (Tang et al., "1-bit Adam", 2021; DeepSpeed's OnebitAdam) splits training in two
// stages. The warm-up (the first --compress-after steps) is plain AdamW on exactly reduced
// gradients; it exists to let the variance v settle. Then v (and its bias correction) is
// frozen, so Adam becomes momentum SGD with a fixed per-element preconditioner, which is
// linear in what is communicated: each rank forms its local momentum
// beta1 * m + (1 - beta1) * g_local and the ranks all-reduce that (1-bit compressed, with
// error feedback on both the worker's and the reducing owner's side, which weft's compressed
// all-reduce keeps in the per-bucket residual). Sign compression of the gradient under plain
// Adam fails because Adam's per-element normalization turns a block of equal-magnitude
// values into equal steps; with v frozen the compression error is just an additive error in
// m, which error feedback cancels over steps. There is no global gradient in this stage, so
// no gradient clipping either (the warm-up clips as usual). Instead the update is clipped as
// Adafactor does for a stale second moment (Shazeer & Stern 2018, section 6): per matrix,
// u = m_hat / (sqrt(v_hat) + eps) is scaled down to RMS 1 when above. Plain Adam keeps that
// RMS near or below 1 by itself; with v frozen a tensor whose gradients grow (a router whose
// logits grow, an expert that starts getting tokens) would otherwise take ever larger steps:
// measured, the default config with a near-exact codec (bf16) diverged 60 steps after the
// freeze (z-loss 4.1, then NaN).
#ifndef MOE_TRAINER_OPTIMIZER_H_
#define MOE_TRAINER_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "config.h"
#include "params.h"

namespace moe {

struct Segment {
  bool expert = false;
  size_t begin = 0, count = 0;
};

float LearningRate(const TrainConfig& config, int step);  // step counts from 0

// min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_.
float ClipScale(double grad_norm, float max_norm);

class AdamW {
 public:
  void Init(const ParamLayout& layout, std::vector<Segment> segments);
  // step counts from 1 (bias correction). Gradients are multiplied by grad_scale first.
  void Step(const TrainConfig& config, int step, float lr, float grad_scale,
            const ParamBuffers& grads, ParamBuffers* params);
  // 1-bit Adam's compressed stage, two halves around the all-reduce. Before: overwrite
  // count local gradients at (expert, offset) with this rank's share of the new momentum,
  // beta1 * m / group + (1 - beta1) * g, so the sum over the group is the momentum. After:
  // take the summed momenta as m and update with the variance frozen at step freeze_step.
  void LocalMomentum(const TrainConfig& config, bool expert, size_t offset, size_t count,
                     int group, ParamBuffers* grads) const;
  void FrozenVarianceStep(const TrainConfig& config, int step, int freeze_step, float lr,
                          const ParamBuffers& momenta, ParamBuffers* params);
  const std::vector<Segment>& segments() const { return segments_; }
  std::vector<float> m, v;  // concatenated over segments

 private:
  // The moments of (expert, offset): the segment holding it (whole buffers outside ZeRO-1).
  size_t StateIndex(bool expert, size_t offset) const;
  std::vector<Segment> segments_;
  std::vector<Segment> tensors_;  // each parameter matrix's range (per expert; update clip)
  std::vector<unsigned char> decay_dense_, decay_expert_;
};

}  // namespace moe

#endif  // MOE_TRAINER_OPTIMIZER_H_
