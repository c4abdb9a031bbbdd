// The emulated GPU's streams and events.
//
// A Stream is a FIFO of operations drained in order by its own thread (the "device"), so every
// operation runs after the call that queued it has returned. With a delay configured, each
// operation first sleeps a random 0..delay_us microseconds: work that lacks a stream wait then
// races visibly. The first failing operation's error sticks (Query/Synchronize report it) and
// the operations after it are skipped, as a CUDA stream after a fault.
// An Event counts its records; an operation queued by Record completes the record it belongs
// to, and a wait takes the latest record at the time it is queued (CUDA's semantics).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.h"

namespace weft::device::emulated {

class Stream {
 public:
  Stream(int device, uint32_t delay_us);
  ~Stream();  // finishes the queued work first
  int device() const { return device_; }

  // fn runs on the stream's thread; a non-ok result sticks and skips later operations, except
  // those queued with `always` (event records: a waiter must not hang on a failed stream).
  void Enqueue(std::function<Status()> fn, bool always = false);
  Status Synchronize();
  // Waits for the queued work like Synchronize, but after `warn_after` of waiting with no
  // operation finishing, says once on stderr what a real GPU would do here (wait forever,
  // when the queued work waits for the caller).
  void WaitIdle(const char* why, std::chrono::milliseconds warn_after);
  Status Query();
  // True once the destructor began: a flag wait gives up instead of blocking it forever.
  bool stopping() const;

 private:
  void Loop();
  const int device_;
  const uint32_t delay_us_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  struct Op {
    std::function<Status()> fn;
    bool always;
  };
  std::deque<Op> queue_;
  size_t pending_ = 0;
  uint64_t finished_ = 0;  // operations run so far: WaitIdle's sign of progress
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

class Event {
 public:
  // The number this record will complete (Record's operation calls Complete with it).
  uint64_t NextRecord();
  uint64_t LastRecord() const;
  void Complete(uint64_t record);
  void Wait(uint64_t record) const;
  bool Done(uint64_t record) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
};

}  // namespace weft::device::emulated
