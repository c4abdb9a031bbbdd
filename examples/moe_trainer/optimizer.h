// optimizer.h: AdamW (PyTorch's formula and order of operations), the global gradient-norm
// clip factor, and the learning-rate schedule (linear warm-up, then cosine to min_lr_ratio).
// The optimizer updates a list of segments of the parameter buffers: the whole buffers for
// plain data parallelism, or this rank's shard of every bucket for ZeRO-1 (its moments then
// exist only for that shard).
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
  const std::vector<Segment>& segments() const { return segments_; }
  std::vector<float> m, v;  // concatenated over segments

 private:
  std::vector<Segment> segments_;
  std::vector<unsigned char> decay_dense_, decay_expert_;
};

}  // namespace moe

#endif  // MOE_TRAINER_OPTIMIZER_H_
