// fuzz/loopback_job.h: a real two-rank bootstrap inside the fuzzing process, for targets
// that must feed bytes to code that only reads them from sockets (no pure decoding function
// exists for them yet; see fuzz/README.md). Rank 0 lives on a helper thread that takes part
// in the collective setup calls; the fuzz target plays rank 1 and, through raw sockets, a
// misbehaving rank 0.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/bootstrap.h"

namespace weft_fuzz {

class LoopbackJob {
 public:
  // Starts a root on 127.0.0.1 and joins both ranks; aborts the process when that fails
  // (the fuzzer cannot run without it, and it involves no fuzzed bytes).
  LoopbackJob();
  ~LoopbackJob();
  weft::Bootstrap* rank1() { return rank1_.get(); }
  const weft::net::Secret& secret() const { return secret_; }
  // Runs `mine` on this thread as rank 1 while rank 0's thread runs `theirs` with its own
  // bootstrap (both usually call the same collective setup function); returns when both did.
  void Together(const std::function<void(weft::Bootstrap*)>& theirs,
                const std::function<void(weft::Bootstrap*)>& mine);

 private:
  void Rank0Loop();
  weft::net::Secret secret_;
  std::unique_ptr<weft::Bootstrap> rank0_, rank1_;
  std::thread thread0_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void(weft::Bootstrap*)> work_;
  bool has_work_ = false, stop_ = false;
};

}  // namespace weft_fuzz
