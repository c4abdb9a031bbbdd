// Host streams (weftStream_t without CUDA): a worker thread per stream runs what is queued on
// it in order, like a CUDA stream; the first error sticks (weftStreamSynchronize/Query).
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "core/api_internal.h"

namespace weft {

class HostStream {
 public:
  HostStream() : worker_([this] { Loop(); }) {}
  ~HostStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void Enqueue(std::function<Status()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(fn));
      ++pending_;
    }
    cv_.notify_all();
  }
  Status Synchronize() {
    std::unique_lock<std::mutex> l(mu_);
    idle_cv_.wait(l, [&] { return pending_ == 0; });
    return error_;
  }
  weftResult_t Query() {
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.ok()) return error_.code();
    return pending_ == 0 ? weftSuccess : weftInProgress;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
      std::function<Status()> fn = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      Status st = fn();
      l.lock();
      // Like a CUDA stream: the first error sticks; later operations still run (each fails
      // fast on a communicator left unusable by the error).
      if (!st.ok() && error_.ok()) error_ = st;
      if (--pending_ == 0) idle_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<Status()>> queue_;
  size_t pending_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

namespace {
std::mutex g_streams_mu;
std::set<HostStream*> g_streams;
}  // namespace

HostStream* LookupStream(weftStream_t s) {
  std::lock_guard<std::mutex> l(g_streams_mu);
  auto* hs = static_cast<HostStream*>(s);
  return g_streams.count(hs) ? hs : nullptr;
}

void EnqueueOnStream(HostStream* hs, std::function<Status()> fn) { hs->Enqueue(std::move(fn)); }

}  // namespace weft

using namespace weft;  // NOLINT: C API implementation file

extern "C" {

weftResult_t weftStreamCreate(weftStream_t* stream) {
  if (stream == nullptr) return Report(InvalidArgument("stream (output pointer) is NULL"));
  auto* s = new HostStream();
  {
    std::lock_guard<std::mutex> l(g_streams_mu);
    g_streams.insert(s);
  }
  *stream = s;
  return weftSuccess;
}

weftResult_t weftStreamSynchronize(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;  // the blocking stream has nothing pending
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return Report(InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream"));
  return Report(hs->Synchronize());
}

weftResult_t weftStreamQuery(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return Report(InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream"));
  return hs->Query();
}

weftResult_t weftStreamDestroy(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return Report(InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream"));
  // Like cudaStreamDestroy: queued work finishes first; its sticky error (already reported by
  // weftStreamSynchronize/Query to whoever asked) goes with the stream.
  Status dropped = hs->Synchronize();
  (void)dropped;
  {
    std::lock_guard<std::mutex> l(g_streams_mu);
    g_streams.erase(hs);
  }
  delete hs;
  return weftSuccess;
}

}  // extern "C"
