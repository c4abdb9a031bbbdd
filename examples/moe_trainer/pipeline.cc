// pipeline.cc: the 1F1B schedule (see pipeline.h).
#include "pipeline.h"

#include <algorithm>

namespace moe {

Pipeline::Pipeline(Model* model, Parallel* parallel, int micro_batches)
    : model_(model), parallel_(parallel), micro_batches_(micro_batches) {
  stage_ = parallel->pp_rank();
  stages_ = parallel->pp_size();
  // At most P - s micro-batches are in flight on stage s (forwarded, not yet backwarded).
  slots_ = std::max(1, std::min(stages_ - stage_, micro_batches_));
}

void Pipeline::Split(const Batch& batch) {
  const int M = micro_batches_, per = batch.sequences / M;
  const size_t T = batch.inputs.size() / std::max(1, batch.sequences);
  micro_.resize(M);
  for (int i = 0; i < M; ++i) {
    Batch& b = micro_[i];
    b.sequences = per;
    const auto first = static_cast<long>(i * per * T), last = first + static_cast<long>(per * T);
    b.inputs.assign(batch.inputs.begin() + first, batch.inputs.begin() + last);
    b.targets.assign(batch.targets.begin() + first, batch.targets.begin() + last);
  }
  // The rows this rank holds travel (with sequence parallelism each tensor-parallel rank
  // sends its own run to the same tensor-parallel rank of the next stage).
  width_ = static_cast<size_t>(model_->HeldTokens(static_cast<int>(per * T))) * model_->config().dim;
  x_in_.resize(width_);
  dy_.resize(width_);
}

Status Pipeline::Forward(int micro, const LossScale& scale, ForwardResult* total) {
  model_->UseSlot(Slot(micro));
  ForwardResult r;
  MOE_RETURN_IF_ERROR(model_->Forward(micro_[micro], scale, parallel_->exchange(), &r,
                                      stage_ > 0 ? x_in_.data() : nullptr));
  total->ce_loss += r.ce_loss, total->aux_loss += r.aux_loss, total->z_loss += r.z_loss;
  if (total->selected.empty()) total->selected.assign(r.selected.size(), 0.0);
  for (size_t i = 0; i < r.selected.size(); ++i) total->selected[i] += r.selected[i];
  return Status();
}

Status Pipeline::Backward(int micro, const LossScale& scale,
                          const std::function<Status(int bucket)>& bucket_done) {
  model_->UseSlot(Slot(micro));
  // A bucket is final only after the last micro-batch's backward has added to it.
  static const std::function<Status(int)> not_yet = [](int) { return Status(); };
  const bool last = micro + 1 == micro_batches_;
  return model_->Backward(micro_[micro], scale, parallel_->exchange(),
                          last ? bucket_done : not_yet,
                          stage_ + 1 < stages_ ? dy_.data() : nullptr);
}

Status Pipeline::Exchange(unsigned set) {
  using T = Parallel::StageTransfer;
  std::vector<T> transfers;
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  // The model's buffers are only read while the (blocking) group runs.
  float* output = const_cast<float*>(model_->output());
  float* input_grad = const_cast<float*>(model_->input_grad());
  if ((set & kSendForward) && !last) transfers.push_back(T{true, stage_ + 1, output, width_});
  if ((set & kRecvBackward) && !last) transfers.push_back(T{false, stage_ + 1, dy_.data(), width_});
  if ((set & kSendBackward) && !first) transfers.push_back(T{true, stage_ - 1, input_grad, width_});
  if ((set & kRecvForward) && !first) transfers.push_back(T{false, stage_ - 1, x_in_.data(), width_});
  return parallel_->ExchangeStages(transfers);
}

Status Pipeline::Train(const Batch& batch, const LossScale& scale,
                       const std::function<Status(int bucket)>& bucket_done, ForwardResult* total) {
  Split(batch);
  *total = ForwardResult();
  const int M = micro_batches_;
  const int warmup = std::min(stages_ - stage_ - 1, M), steady = M - warmup;
  int forwards = 0, backwards = 0;
  for (int i = 0; i < warmup; ++i) {
    MOE_RETURN_IF_ERROR(Exchange(kRecvForward));
    MOE_RETURN_IF_ERROR(Forward(forwards++, scale, total));
    MOE_RETURN_IF_ERROR(Exchange(kSendForward));
  }
  if (steady > 0) MOE_RETURN_IF_ERROR(Exchange(kRecvForward));
  for (int i = 0; i < steady; ++i) {
    MOE_RETURN_IF_ERROR(Forward(forwards++, scale, total));
    MOE_RETURN_IF_ERROR(Exchange(kSendForward | kRecvBackward));
    MOE_RETURN_IF_ERROR(Backward(backwards++, scale, bucket_done));
    MOE_RETURN_IF_ERROR(Exchange(kSendBackward | (i + 1 < steady ? kRecvForward : 0u)));
  }
  for (int i = 0; i < warmup; ++i) {
    MOE_RETURN_IF_ERROR(Exchange(kRecvBackward));
    MOE_RETURN_IF_ERROR(Backward(backwards++, scale, bucket_done));
    MOE_RETURN_IF_ERROR(Exchange(kSendBackward));
  }
  return Status();
}

Status Pipeline::Evaluate(const Batch& batch, const LossScale& scale, ForwardResult* total) {
  Split(batch);
  *total = ForwardResult();
  for (int i = 0; i < micro_batches_; ++i) {
    MOE_RETURN_IF_ERROR(Exchange(kRecvForward));
    MOE_RETURN_IF_ERROR(Forward(i, scale, total));
    MOE_RETURN_IF_ERROR(Exchange(kSendForward));
  }
  return Status();
}

}  // namespace moe
