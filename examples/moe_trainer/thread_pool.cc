// thread_pool.cc: the sleeping worker pool behind RunOnPool (see thread_pool.h).
#include "thread_pool.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace moe {
namespace {

thread_local bool t_inside_part = false;  // nested RunOnPool calls run serially

class Pool {
 public:
  ~Pool() { Resize(1); }

  int threads() const { return threads_; }

  // Joins the old workers and starts threads - 1 new ones (called between steps only).
  void Resize(int threads) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    threads_ = threads < 1 ? 1 : threads;
    for (int part = 1; part < threads_; ++part) workers_.emplace_back([this, part] { Work(part); });
  }

  void Run(const std::function<void(int, int)>& body) {
    if (threads_ == 1 || t_inside_part) {
      body(0, 1);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_ = &body;
      remaining_ = threads_ - 1;
      ++generation_;
    }
    start_.notify_all();
    t_inside_part = true;
    body(0, threads_);
    t_inside_part = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return remaining_ == 0; });
  }

 private:
  void Work(int part) {
    t_inside_part = true;
    std::unique_lock<std::mutex> lock(mu_);
    unsigned long seen = generation_;
    for (;;) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const std::function<void(int, int)>* body = body_;
      const int parts = threads_;
      lock.unlock();
      (*body)(part, parts);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* body_ = nullptr;
  unsigned long generation_ = 0;
  int remaining_ = 0, threads_ = 1;
  bool stop_ = false;
};

Pool& ThePool() {
  static Pool pool;
  return pool;
}

}  // namespace

void SetPoolThreads(int threads) {
  if (threads != ThePool().threads()) ThePool().Resize(threads);
}

int PoolThreads() { return ThePool().threads(); }

void RunOnPool(const std::function<void(int part, int parts)>& body) { ThePool().Run(body); }

}  // namespace moe
