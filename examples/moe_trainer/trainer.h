// trainer.h: one training step end to end on this rank: forward, backward with bucketed
// gradient reduction overlapping it, global statistics, clipping, AdamW (full or ZeRO-1
// shard), parameter all-gather, and the sigmoid router's bias update. Shared by the trainer
// program and the golden test.
#ifndef MOE_TRAINER_TRAINER_H_
#define MOE_TRAINER_TRAINER_H_

#include <memory>
#include <vector>

#include "config.h"
#include "model.h"
#include "optimizer.h"
#include "parallel.h"
#include "pipeline.h"

namespace moe {

struct StepStats {
  double loss = 0.0;  // global: cross-entropy + balancing losses (what is minimized)
  double ce = 0.0, aux = 0.0, z = 0.0;
  double grad_norm = 0.0;
  float lr = 0.0f;
  std::vector<double> selected;  // [layers, E] global router assignments
  double max_load = 0.0;         // max over experts of load / mean load, averaged over layers
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, Parallel* parallel);
  // Builds the layout and model, initializes parameters from the seed, sets up AdamW.
  Status Init();
  // Forward + backward + gradient reduction + global statistics (no update).
  Status ComputeGradients(const Batch& batch, StepStats* stats);
  // Clip, AdamW for step `step` (from 0), gather parameters, move router biases.
  Status ApplyUpdate(int step, StepStats* stats);
  Status TrainStep(int step, const Batch& batch, StepStats* stats);
  // Mean cross-entropy over batches (every rank passes its share of each).
  Status Evaluate(const std::vector<Batch>& batches, double* mean_ce);

  Model& model() { return *model_; }
  AdamW& optimizer() { return optimizer_; }
  const TrainConfig& config() const { return config_; }
  Parallel& parallel() { return *parallel_; }

 private:
  LossScale Scale() const;
  // Sums the step's statistics over the world: each (stage, data rank) counts once.
  Status SumStatistics(std::vector<double>* values);
  // 1-bit Adam's compressed stage: momenta, not gradients, travel (optimizer.h).
  bool OneBitStage() const { return config_.onebit_adam && step_ >= config_.compress_after; }
  TrainConfig config_;
  int step_ = 0;  // the step being trained (from 0)
  Parallel* parallel_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Pipeline> pipeline_;
  AdamW optimizer_;
};

}  // namespace moe

#endif  // MOE_TRAINER_TRAINER_H_
