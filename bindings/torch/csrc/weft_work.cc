// WeftWork: completion of one weft operation (see weft_work.h).
#include "weft_work.h"

#include <ATen/core/jit_type.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace weft_torch {

WeftWork::WeftWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                   uint64_t sequence, std::vector<c10::Device> devices,
                   std::function<void()> async_error_check)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      sequence_(sequence),
      devices_(std::move(devices)),
      async_error_check_(std::move(async_error_check)) {}

std::vector<at::Tensor> WeftWork::result() { return outputs_; }

uint64_t WeftWork::getSequencenumber() const { return sequence_; }

void WeftWork::MarkFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                          const std::exception_ptr& error) {
  if (error) {
    future->setError(error);
    return;
  }
  // A CUDA Future records its events on the current streams of its devices: make the current
  // stream (the work's own when called at submission) wait for the work first.
  if (std::shared_ptr<c10::Event> event = EndEvent()) BlockCurrentStream(*event);
  future->markCompleted(c10::IValue(outputs_));
}

void WeftWork::RecordEnd(const c10::Stream& stream) {
  auto event = std::make_shared<c10::Event>(stream.device_type());
  event->record(stream);
  std::lock_guard<std::mutex> lock(event_mu_);
  end_event_ = std::move(event);
}

std::shared_ptr<c10::Event> WeftWork::EndEvent() {
  std::lock_guard<std::mutex> lock(event_mu_);
  return end_event_;
}

void WeftWork::BlockCurrentStream(const c10::Event& event) const {
  const c10::impl::VirtualGuardImpl guard(event.device_type());
  event.block(guard.getStream(event.device()));
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
  if (devices_.empty()) return c10d::Work::wait(timeout);  // host work: done when it returns
  WaitQueued(timeout);
  std::shared_ptr<c10::Event> event = EndEvent();
  if (async_error_check_) async_error_check_();
  if (event) BlockCurrentStream(*event);
  return true;
}

// c10d::Work::wait calls synchronize() under Work::mutex_, so this takes that mutex only for
// CUDA work, whose wait() does not go through c10d::Work::wait.
void WeftWork::synchronize() {
  if (devices_.empty()) return;  // host work: wait() did everything
  RunBeforeWait();
  WaitQueued(kNoTimeout);
  if (std::shared_ptr<c10::Event> event = EndEvent()) event->synchronize();
  if (async_error_check_) async_error_check_();
}

void WeftWork::WaitQueued(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto queued = [&] { return completed_; };
  if (timeout == kNoTimeout)
    cv_.wait(lock, queued);
  else if (!cv_.wait_for(lock, timeout, queued))
    C10_THROW_ERROR(DistBackendError, "weft: the operation was not queued on its stream within " +
                                          std::to_string(timeout.count()) + " ms");
  if (exception_) std::rethrow_exception(exception_);
}

bool WeftWork::isCompleted() {
  RunBeforeWait();
  if (!c10d::Work::isCompleted()) return false;
  std::shared_ptr<c10::Event> event = EndEvent();
  return !event || event->query();
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
          c10::ListType::create(c10::TensorType::get()), devices_);
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
