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
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace weft_torch {

// CUDA work (constructed with its device): Complete() says the work was queued on its stream
// (or failed to queue), and RecordEnd(stream) before it records an event after the work there.
// Then wait() makes the caller's current stream wait for that event and returns at once (as
// NCCL's Work), isCompleted() queries the event, synchronize() waits on the host, and the
// Future, created for the device, completes with events on the stream so DDP's hooks and
// then() callbacks order after the work. Errors of queued work (a dead peer) are read from the
// communicator (the async-error check) by wait() and, after the event, by synchronize().
class WeftWork : public c10d::Work {
 public:
  WeftWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, uint64_t sequence,
           std::vector<c10::Device> devices = {}, std::function<void()> async_error_check = {});

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;  // 0: none
  bool isCompleted() override;
  void synchronize() override;
  // CUDA work: records the end event on stream (the one the work was queued on). Call before
  // Complete.
  void RecordEnd(const c10::Stream& stream);
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
  // The end event (null for host work or work that never queued).
  std::shared_ptr<c10::Event> EndEvent();
  // CUDA work: waits (on the host) until the work was queued on its stream, or failed to be
  // (rethrows the error); timeout 0: no limit.
  void WaitQueued(std::chrono::milliseconds timeout);
  // Makes the current stream of the event's device wait for the end event.
  void BlockCurrentStream(const c10::Event& event) const;

  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by Work::mutex_
  std::function<void()> before_wait_;  // guarded by Work::mutex_
  const uint64_t sequence_;
  const std::vector<c10::Device> devices_;  // empty: host work
  const std::function<void()> async_error_check_;
  std::mutex event_mu_;  // not Work::mutex_: c10d::Work::wait holds it around synchronize()
  std::shared_ptr<c10::Event> end_event_;  // guarded by event_mu_; set by RecordEnd
};

}  // namespace weft_torch
