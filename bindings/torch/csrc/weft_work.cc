// WeftWork: completion of one weft operation (see weft_work.h).
#include "weft_work.h"

#include <ATen/core/jit_type.h>

namespace weft_torch {

WeftWork::WeftWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                   uint64_t sequence)
    : c10d::Work(rank, type), outputs_(std::move(outputs)), sequence_(sequence) {}

std::vector<at::Tensor> WeftWork::result() { return outputs_; }

uint64_t WeftWork::getSequencenumber() const { return sequence_; }

void WeftWork::MarkFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                          const std::exception_ptr& error) {
  if (error)
    future->setError(error);
  else
    future->markCompleted(c10::IValue(outputs_));
}

void WeftWork::SetBeforeWait(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  before_wait_ = std::move(hook);
}

void WeftWork::RunBeforeWait() {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hook.swap(before_wait_);
  }
  if (hook) hook();
}

bool WeftWork::wait(std::chrono::milliseconds timeout) {
  RunBeforeWait();
  return c10d::Work::wait(timeout);
}

bool WeftWork::isCompleted() {
  RunBeforeWait();
  return c10d::Work::isCompleted();
}

c10::intrusive_ptr<c10::ivalue::Future> WeftWork::getFuture() {
  RunBeforeWait();
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool already_done = false;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()));
      // Complete() ran before anyone asked: it saw no Future, so mark it here (exactly once).
      already_done = completed_;
      error = exception_;
    }
    future = future_;
  }
  if (already_done) MarkFuture(future, error);
  return future;
}

void WeftWork::Complete(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
    future = future_;
  }
  cv_.notify_all();
  // Callbacks chained on the Future (DDP hooks) run here, outside the lock.
  if (future) MarkFuture(future, error);
}

}  // namespace weft_torch
