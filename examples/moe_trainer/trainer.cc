// trainer.cc: the training step (see trainer.h).
#include "trainer.h"

#include <algorithm>
#include <cmath>

namespace moe {

Trainer::Trainer(const TrainConfig& config, Parallel* parallel)
    : config_(config), parallel_(parallel) {}

Status Trainer::Init() {
  ParamLayout layout =
      ParamLayout::Build(config_.model, parallel_->shard(),
                         BucketPadGroup(config_, parallel_->data_size()),
                         BucketPadGroup(config_, parallel_->expert_dp_size()));
  model_.reset(new Model(config_.model, layout));
  model_->set_tensor_parallel(parallel_->tensor_parallel());
  pipeline_.reset(new Pipeline(model_.get(), parallel_, MicroBatches(config_)));
  parallel_->Prepare(model_->layout());
  InitParams(model_->layout(), config_.seed, &model_->params);
  optimizer_.Init(model_->layout(), parallel_->OptimizerSegments(model_->layout()));
  return Status();
}

LossScale Trainer::Scale() const {
  LossScale scale;
  scale.sequences = config_.batch;
  scale.tokens = static_cast<double>(config_.batch) * config_.model.seq_len;
  return scale;
}

// Tensor-parallel ranks computed the same losses and counts: the first of them reports.
// Stages report their own layers' terms (the loss on the last), data-parallel ranks their
// own tokens'.
Status Trainer::SumStatistics(std::vector<double>* values) {
  if (parallel_->tp_rank() != 0) std::fill(values->begin(), values->end(), 0.0);
  return parallel_->SumOverWorld(values);
}

Status Trainer::ComputeGradients(const Batch& batch, StepStats* stats) {
  ForwardResult fwd;
  const ParamLayout& layout = model_->layout();
  const bool onebit = OneBitStage();
  model_->ZeroGrads();
  MOE_RETURN_IF_ERROR(pipeline_->Train(batch, Scale(), [&](int bucket) {
    if (onebit) {  // the bucket's gradient becomes this rank's share of the momentum
      const Bucket& b = layout.buckets()[bucket];
      optimizer_.LocalMomentum(config_, b.expert, b.offset, b.count,
                               parallel_->BucketGroupSize(b), &model_->grads);
    }
    return parallel_->BucketDone(layout, bucket, &model_->grads);
  }, &fwd));
  MOE_RETURN_IF_ERROR(parallel_->FinishGradients(layout, &model_->grads));
  // One small all-reduce for the loss terms and the router's expert counts.
  std::vector<double> values = {fwd.ce_loss, fwd.aux_loss, fwd.z_loss};
  values.insert(values.end(), fwd.selected.begin(), fwd.selected.end());
  MOE_RETURN_IF_ERROR(SumStatistics(&values));
  stats->ce = values[0], stats->aux = values[1], stats->z = values[2];
  stats->loss = stats->ce + stats->aux + stats->z;
  stats->selected.assign(values.begin() + 3, values.end());
  const int E = config_.model.experts, L = config_.model.layers;
  stats->max_load = 0.0;
  for (int l = 0; l < L; ++l) {
    double max = 0.0, sum = 0.0;
    for (int e = 0; e < E; ++e) {
      max = std::max(max, stats->selected[l * E + e]);
      sum += stats->selected[l * E + e];
    }
    stats->max_load += sum > 0 ? max / (sum / E) / L : 0.0;
  }
  return Status();
}

Status Trainer::ApplyUpdate(int step, StepStats* stats) {
  double norm_sq = 0.0;
  // In 1-bit Adam's compressed stage the buffers hold the reduced momentum: its norm is shown.
  MOE_RETURN_IF_ERROR(parallel_->GradNormSquared(model_->layout(), model_->grads, &norm_sq));
  stats->grad_norm = std::sqrt(norm_sq);
  stats->lr = LearningRate(config_, step);
  if (OneBitStage())
    optimizer_.FrozenVarianceStep(config_, step + 1, config_.compress_after, stats->lr,
                                  model_->grads, &model_->params);
  else
    optimizer_.Step(config_, step + 1, stats->lr, ClipScale(stats->grad_norm, config_.grad_clip),
                    model_->grads, &model_->params);
  MOE_RETURN_IF_ERROR(parallel_->GatherParams(model_->layout(), &model_->params));
  if (config_.model.router == RouterKind::kSigmoid) {
    // DeepSeek-V3: overloaded experts' bias down by gamma, underloaded up, from global counts.
    const ModelConfig& m = config_.model;
    const double mean = static_cast<double>(config_.batch) * m.seq_len * m.top_k / m.experts;
    for (int l = 0; l < m.layers; ++l)
      for (int e = 0; e < m.experts; ++e) {
        const double count = stats->selected[l * m.experts + e];
        const float sign = count < mean ? 1.0f : (count > mean ? -1.0f : 0.0f);
        model_->router_bias[l][e] += m.bias_gamma * sign;
      }
  }
  return Status();
}

Status Trainer::TrainStep(int step, const Batch& batch, StepStats* stats) {
  parallel_->set_step(step);
  step_ = step;
  MOE_RETURN_IF_ERROR(ComputeGradients(batch, stats));
  return ApplyUpdate(step, stats);
}

Status Trainer::Evaluate(const std::vector<Batch>& batches, double* mean_ce) {
  std::vector<double> total(1, 0.0);
  for (const Batch& batch : batches) {
    ForwardResult fwd;
    MOE_RETURN_IF_ERROR(pipeline_->Evaluate(batch, Scale(), &fwd));
    total[0] += fwd.ce_loss;
  }
  MOE_RETURN_IF_ERROR(SumStatistics(&total));
  *mean_ce = batches.empty() ? 0.0 : total[0] / batches.size();
  return Status();
}

}  // namespace moe
