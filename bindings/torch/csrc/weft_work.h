// The c10d::Work of one weft operation. The backend's progress thread (or the caller, for a
// blocking call run inline) completes it once; wait() blocks on it and rethrows weft's error,
// and getFuture() returns a Future holding the output tensors, completed at the same moment,
// which is what DDP communication hooks chain on. The Future is created on first request so
// that blocking calls, which never ask for it, do not pay for it.
//
// A point-to-point Work carries a "before wait" hook: its operation is held back until someone
// waits on it (or asks whether it completed, or for its Future), and the hook then posts every
// held-back send and receive together as one weft group (see WeftBackend::FlushPointToPoint).
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace weft_torch {

class WeftWork : public c10d::Work {
 public:
  WeftWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, uint64_t sequence);

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;  // 0: none
  bool isCompleted() override;
  std::vector<at::Tensor> result() override;
  uint64_t getSequencenumber() const override;

  // Marks the work (and its Future, if any) done; error is null on success. Call once.
  void Complete(std::exception_ptr error);
  // Sets (or, with an empty function, clears) the hook run once before the first wait.
  void SetBeforeWait(std::function<void()> hook);

 private:
  // Runs the hook, if still set, exactly once (outside the lock: it enqueues work).
  void RunBeforeWait();

  void MarkFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                  const std::exception_ptr& error);

  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by Work::mutex_
  std::function<void()> before_wait_;  // guarded by Work::mutex_
  const uint64_t sequence_;
};

}  // namespace weft_torch
