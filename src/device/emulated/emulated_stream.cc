#include "device/emulated/emulated_stream.h"

#include <chrono>
#include <random>

namespace weft::device::emulated {

Stream::Stream(int device, uint32_t delay_us)
    : device_(device), delay_us_(delay_us), worker_([this] { Loop(); }) {}

Stream::~Stream() {
  Status ignored = Synchronize();
  (void)ignored;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Stream::Enqueue(std::function<Status()> fn, bool always) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(Op{std::move(fn), always});
    ++pending_;
  }
  cv_.notify_all();
}

Status Stream::Synchronize() {
  std::unique_lock<std::mutex> l(mu_);
  idle_cv_.wait(l, [&] { return pending_ == 0; });
  return error_;
}

Status Stream::Query() {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.ok()) return error_;
  if (pending_ != 0) return Status(weftInProgress, "stream has queued work");
  return OkStatus();
}

bool Stream::stopping() const {
  std::lock_guard<std::mutex> l(mu_);
  return stop_;
}

void Stream::Loop() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> delay(0, delay_us_);
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    Op op = std::move(queue_.front());
    queue_.pop_front();
    const bool run = error_.ok() || op.always;
    l.unlock();
    Status s;
    if (run) {
      if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay(rng)));
      s = op.fn();
    }
    l.lock();
    if (!s.ok() && error_.ok()) error_ = std::move(s);
    if (--pending_ == 0) idle_cv_.notify_all();
  }
}

uint64_t Event::NextRecord() {
  std::lock_guard<std::mutex> l(mu_);
  return ++recorded_;
}

uint64_t Event::LastRecord() const {
  std::lock_guard<std::mutex> l(mu_);
  return recorded_;
}

void Event::Complete(uint64_t record) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (record > completed_) completed_ = record;
  }
  cv_.notify_all();
}

void Event::Wait(uint64_t record) const {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return completed_ >= record; });
}

bool Event::Done(uint64_t record) const {
  std::lock_guard<std::mutex> l(mu_);
  return completed_ >= record;
}

}  // namespace weft::device::emulated
