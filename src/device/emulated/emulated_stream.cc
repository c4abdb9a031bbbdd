#include "device/emulated/emulated_stream.h"

#include <chrono>
#include <cstdio>
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

void Stream::WaitIdle(const char* why, std::chrono::milliseconds warn_after) {
  std::unique_lock<std::mutex> l(mu_);
  bool warned = false;
  while (pending_ != 0) {
    const uint64_t before = finished_;
    if (idle_cv_.wait_for(l, warn_after, [&] { return pending_ == 0 || finished_ != before; }))
      continue;
    if (!warned) {
      std::fprintf(stderr,
                   "weft emulated GPU: %s has waited %lld ms for device %d's queued work, none of "
                   "which finished; CUDA waits here too, forever if that work waits for this "
                   "thread (a cudaFree/cudaFreeHost while a stream waits on a flag)\n",
                   why, static_cast<long long>(warn_after.count()), device_);
      warned = true;
    }
  }
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
    ++finished_;
    --pending_;
    idle_cv_.notify_all();  // Synchronize waits for idle, WaitIdle for progress too
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
