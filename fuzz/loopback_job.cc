// fuzz/loopback_job.cc: see loopback_job.h.
#include "loopback_job.h"

#include <cstdio>
#include <cstdlib>

namespace weft_fuzz {

LoopbackJob::LoopbackJob() {
  secret_ = weft::net::Secret::Random();
  auto id = weft::StartBootstrapRoot(weft::net::SockAddr::Loopback(AF_INET, 0), secret_, 30);
  if (!id.ok()) {
    std::fprintf(stderr, "fuzz setup: root: %s\n", id.status().message().c_str());
    std::abort();
  }
  weft::BootstrapId bid = *id;
  std::thread joiner([&] {
    auto bs = weft::Bootstrap::Join(bid, 0, 2, 30);
    if (bs.ok()) rank0_ = std::move(*bs);
  });
  auto bs1 = weft::Bootstrap::Join(bid, 1, 2, 30);
  joiner.join();
  if (!bs1.ok() || !rank0_) {
    std::fprintf(stderr, "fuzz setup: join failed: %s\n", bs1.status().message().c_str());
    std::abort();
  }
  rank1_ = std::move(*bs1);
  thread0_ = std::thread([this] { Rank0Loop(); });
}

LoopbackJob::~LoopbackJob() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread0_.join();
}

void LoopbackJob::Rank0Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return has_work_ || stop_; });
    if (stop_) return;
    auto work = work_;
    lock.unlock();
    work(rank0_.get());
    lock.lock();
    has_work_ = false;
    cv_.notify_all();
  }
}

void LoopbackJob::Together(const std::function<void(weft::Bootstrap*)>& theirs,
                           const std::function<void(weft::Bootstrap*)>& mine) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_ = theirs;
    has_work_ = true;
  }
  cv_.notify_all();
  mine(rank1_.get());
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !has_work_; });
}

}  // namespace weft_fuzz
