// bucket_worker.cc: the ordered task thread of bucket_worker.h.
#include "bucket_worker.h"

namespace moe {

BucketWorker::BucketWorker() : thread_([this] { Loop(); }) {}

BucketWorker::~BucketWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void BucketWorker::Submit(std::function<Status()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

Status BucketWorker::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
  Status result = first_error_;
  first_error_ = Status();
  return result;
}

void BucketWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop requested and nothing left
    std::function<Status()> task = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = !first_error_.ok();
    busy_ = true;
    lock.unlock();
    Status status = skip ? Status() : task();
    lock.lock();
    busy_ = false;
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace moe
