#include "core/device_progress.h"

#include "core/device_staging.h"
#include "device/device_runtime.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace weft {
namespace {

class Progress {
 public:
  Progress() : worker_([this] { Loop(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void Enqueue(std::function<void()> job) {
    {
      std::unique_lock<std::mutex> l(mu_);
      done_cv_.wait(l, [&] { return unfinished_ < kMaxDeviceJobs; });
      jobs_.push_back(std::move(job));
      ++unfinished_;
    }
    cv_.notify_all();
  }
  void Drain() {
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return unfinished_ == 0; });
  }
  void SetError(const Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = s;
  }
  Status error() const {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

  bool OnThisThread() const { return t_running == this; }

 private:
  // The Progress whose thread this is: its jobs may call weft's host collectives (the staged
  // compressed calls), which wait for the earlier device jobs; those are done (FIFO), and
  // waiting for the running job itself would never end.
  static thread_local const Progress* t_running;

  void Loop() {
    t_running = this;
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every queued job ran
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      l.unlock();
      job();
      l.lock();
      --unfinished_;
      done_cv_.notify_all();
    }
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> jobs_;
  size_t unfinished_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

thread_local const Progress* Progress::t_running = nullptr;

std::mutex g_mu;
std::map<const weftComm*, std::shared_ptr<Progress>> g_progress;
std::atomic<bool> g_any_progress{false};  // a host-only process never takes g_mu per call

std::shared_ptr<Progress> Find(const weftComm* comm, bool create) {
  std::lock_guard<std::mutex> l(g_mu);
  auto it = g_progress.find(comm);
  if (it != g_progress.end()) return it->second;
  if (!create) return nullptr;
  auto p = std::make_shared<Progress>();
  g_progress[comm] = p;
  g_any_progress.store(true, std::memory_order_release);
  return p;
}

}  // namespace

void EnqueueDeviceJob(weftComm* comm, std::function<void()> job) {
  Find(comm, true)->Enqueue(std::move(job));
}

void WaitDeviceJobs(const weftComm* comm) {
  if (!g_any_progress.load(std::memory_order_acquire)) return;
  if (auto p = Find(comm, false))
    if (!p->OnThisThread()) p->Drain();
}

void SetDeviceAsyncError(const weftComm* comm, const Status& error) {
  if (auto p = Find(comm, false)) p->SetError(error);
}

Status DeviceAsyncError(const weftComm* comm) {
  auto p = Find(comm, false);
  return p ? p->error() : OkStatus();
}

void StopDeviceProgress(const weftComm* comm) {
  std::shared_ptr<Progress> p;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_progress.find(comm);
    if (it == g_progress.end()) return;
    p = std::move(it->second);
    g_progress.erase(it);
  }
  p.reset();  // the destructor runs the queued jobs, then joins
  // This communicator's jobs are done, so freeing pinned staging cannot wait on them.
  TrimStaging(device::ActiveRuntime());
}

}  // namespace weft
