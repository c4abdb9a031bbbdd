// optimizer.cc: AdamW, clipping and the schedule.
#include "optimizer.h"

#include <cmath>

#include "thread_pool.h"

namespace moe {

float LearningRate(const TrainConfig& c, int step) {
  if (step < c.warmup) return c.lr * static_cast<float>(step + 1) / c.warmup;
  const double span = std::max(1, c.steps - c.warmup);
  const double progress = std::min(1.0, (step - c.warmup) / span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine));
}

float ClipScale(double grad_norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double coef = max_norm / (grad_norm + 1e-6);
  return static_cast<float>(std::min(1.0, coef));
}

void AdamW::Init(const ParamLayout& layout, std::vector<Segment> segments) {
  segments_ = std::move(segments);
  size_t total = 0;
  for (const Segment& s : segments_) total += s.count;
  m.assign(total, 0.0f);
  v.assign(total, 0.0f);
  // Per-element decay flags: shards cut across tensors. Padding is never decayed (stays 0).
  decay_dense_.assign(layout.dense_size(), 0);
  decay_expert_.assign(layout.expert_size(), 0);
  tensors_.clear();
  for (const TensorInfo& t : layout.tensors()) {
    // Expert tensors hold [local experts, rows, cols]: one matrix (and one clip) per expert,
    // as an expert that starts to get tokens is exactly the case the clip is for.
    const int parts = t.expert ? t.shape[0] : 1;
    for (int e = 0; e < parts; ++e)
      tensors_.push_back(Segment{t.expert, t.offset + e * (t.size / parts), t.size / parts});
    auto& mask = t.expert ? decay_expert_ : decay_dense_;
    std::fill(mask.begin() + t.offset, mask.begin() + t.offset + t.size, t.decay ? 1 : 0);
  }
}

void AdamW::Step(const TrainConfig& c, int step, float lr, float grad_scale,
                 const ParamBuffers& grads, ParamBuffers* params) {
  const double bias1 = 1.0 - std::pow(static_cast<double>(c.beta1), step);
  const double bias2 = 1.0 - std::pow(static_cast<double>(c.beta2), step);
  const float step_size = static_cast<float>(lr / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const float decay_factor = 1.0f - lr * c.weight_decay;
  size_t state = 0;
  for (const Segment& s : segments_) {
    float* p = (s.expert ? params->expert.data() : params->dense.data()) + s.begin;
    const float* g = (s.expert ? grads.expert.data() : grads.dense.data()) + s.begin;
    const unsigned char* decay = (s.expert ? decay_expert_.data() : decay_dense_.data()) + s.begin;
    float* ms = m.data() + state;
    float* vs = v.data() + state;
    ParallelFor(s.count, s.count > 65536, [&](long lo, long hi) {
      for (long i = lo; i < hi; ++i) {
        const float grad = g[i] * grad_scale;
        if (decay[i]) p[i] *= decay_factor;
        ms[i] = ms[i] + (grad - ms[i]) * (1.0f - c.beta1);  // torch: exp_avg.lerp_(grad, 1-b1)
        vs[i] = vs[i] * c.beta2 + (1.0f - c.beta2) * grad * grad;
        const float denom = std::sqrt(vs[i]) / bias2_sqrt + c.adam_eps;
        p[i] -= step_size * (ms[i] / denom);
      }
    });
    state += s.count;
  }
}

size_t AdamW::StateIndex(bool expert, size_t offset) const {
  size_t state = 0;
  for (const Segment& s : segments_) {
    if (s.expert == expert && offset >= s.begin && offset < s.begin + s.count)
      return state + (offset - s.begin);
    state += s.count;
  }
  return state;  // not held here: callers only ask for whole-buffer segments (no ZeRO-1)
}

void AdamW::LocalMomentum(const TrainConfig& c, bool expert, size_t offset, size_t count,
                          int group, ParamBuffers* grads) const {
  float* g = (expert ? grads->expert.data() : grads->dense.data()) + offset;
  const float* ms = m.data() + StateIndex(expert, offset);
  const float keep = c.beta1 / static_cast<float>(group), take = 1.0f - c.beta1;
  const float* vs = v.data() + StateIndex(expert, offset);
  ParallelFor(count, count > 65536, [&](long lo, long hi) {
    for (long i = lo; i < hi; ++i) g[i] = vs[i] > 0.0f ? ms[i] * keep + g[i] * take : 0.0f;
  });
}

void AdamW::FrozenVarianceStep(const TrainConfig& c, int step, int freeze_step, float lr,
                               const ParamBuffers& momenta, ParamBuffers* params) {
  const double bias1 = 1.0 - std::pow(static_cast<double>(c.beta1), step);
  // v_hat = v / (1 - beta2^t) stops at the freeze: v no longer moves, so neither may its
  // correction (letting t grow would shrink v_hat and raise the step size ~2x by step 400).
  const double bias2 = 1.0 - std::pow(static_cast<double>(c.beta2), freeze_step);
  const float inv_bias1 = static_cast<float>(1.0 / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const float decay_factor = 1.0f - lr * c.weight_decay;
  for (const Segment& t : tensors_) {
    float* p = (t.expert ? params->expert.data() : params->dense.data()) + t.begin;
    const float* mom = (t.expert ? momenta.expert.data() : momenta.dense.data()) + t.begin;
    const unsigned char* decay = (t.expert ? decay_expert_.data() : decay_dense_.data()) + t.begin;
    float* ms = m.data() + StateIndex(t.expert, t.begin);
    const float* vs = v.data() + StateIndex(t.expert, t.begin);
    auto update = [&](long i) {  // u = m_hat / (sqrt(v_hat) + eps)
      return ms[i] * inv_bias1 / (std::sqrt(vs[i]) / bias2_sqrt + c.adam_eps);
    };
    double sum_sq = 0.0;  // one thread, fixed order: every rank and layout gets the same bits
    for (long i = 0; i < static_cast<long>(t.count); ++i) {
      // v == 0: no gradient ever reached this element in the warm-up (embedding rows of
      // bytes the text never holds). Its frozen step size would be lr / eps, so the codec's
      // error on it (a sign codec gives every element of a block a magnitude) would throw
      // the parameter away; DeepSpeed's 1-bit Adam masks such momenta too (exp_avg_mask).
      ms[i] = vs[i] > 0.0f ? mom[i] : 0.0f;
      const double u = update(i);
      sum_sq += u * u;
    }
    const double rms = std::sqrt(sum_sq / std::max<size_t>(1, t.count));
    const float scale = lr * static_cast<float>(rms > 1.0 ? 1.0 / rms : 1.0);
    ParallelFor(t.count, t.count > 65536, [&](long lo, long hi) {
      for (long i = lo; i < hi; ++i) {
        if (decay[i]) p[i] *= decay_factor;
        p[i] -= scale * update(i);
      }
    });
  }
}

}  // namespace moe
