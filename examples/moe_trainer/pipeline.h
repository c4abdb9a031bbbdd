// pipeline.h: one step's forward and backward on this rank's pipeline stage, over the
// micro-batches of its share of the batch, in the 1F1B order (PipeDream-Flush, as Megatron's
// non-interleaved schedule): stage s first runs min(P - s - 1, M) forwards, then alternates one
// forward and one backward, then finishes the backwards. Activations go to the next stage and
// their gradients back with grouped weftSend/weftRecv (Parallel::ExchangeStages): where a
// stage sends one way and receives the other in the same step, both are posted together, so
// neighbouring stages never wait on each other's sends. Gradients accumulate over the
// micro-batches (every loss term is already a share of the global batch's mean), and the
// buckets are handed to the data-parallel reduction during the last micro-batch's backward.
// Without pipeline parallelism (one stage) it is forward then backward per micro-batch.
#ifndef MOE_TRAINER_PIPELINE_H_
#define MOE_TRAINER_PIPELINE_H_

#include <functional>
#include <vector>

#include "model.h"
#include "parallel.h"

namespace moe {

class Pipeline {
 public:
  Pipeline(Model* model, Parallel* parallel, int micro_batches);
  // Forward and backward of `batch` (this data-parallel rank's share); gradients are added into
  // the model's; *total sums the micro-batches' loss terms and expert counts.
  Status Train(const Batch& batch, const LossScale& scale,
               const std::function<Status(int bucket)>& bucket_done, ForwardResult* total);
  // Forward only (validation); *total as for Train (the loss on the last stage only).
  Status Evaluate(const Batch& batch, const LossScale& scale, ForwardResult* total);

 private:
  void Split(const Batch& batch);
  Status Forward(int micro, const LossScale& scale, ForwardResult* total);
  Status Backward(int micro, const LossScale& scale,
                  const std::function<Status(int bucket)>& bucket_done);
  // The transfers of one step of the schedule (a set of Transfer bits; at the first and last
  // stage those with no neighbour are skipped), posted as one group.
  enum Transfer : unsigned {
    kSendForward = 1,   // this stage's output to the next stage
    kRecvForward = 2,   // the previous stage's output
    kSendBackward = 4,  // the gradient of this stage's input to the previous stage
    kRecvBackward = 8,  // the gradient of this stage's output from the next stage
  };
  Status Exchange(unsigned transfers);
  int Slot(int micro) const { return micro % slots_; }

  Model* model_;
  Parallel* parallel_;
  int micro_batches_, stage_ = 0, stages_ = 1, slots_ = 1;
  std::vector<Batch> micro_;
  size_t width_ = 0;             // floats per micro-batch activation: tokens x dim
  std::vector<float> x_in_, dy_;  // received activations / output gradients
};

}  // namespace moe

#endif  // MOE_TRAINER_PIPELINE_H_
