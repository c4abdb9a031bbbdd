// Backoff: how a rank that has nothing to do waits, shared by every transport.
//
// Stages, by time since the caller last made progress:
//   1. spin      (< spin_us):   poll with a CPU pause hint. Cheapest wake-up (the data is seen
//                               within ~100 ns of arriving) but burns the core.
//   2. yield     (< yield_us):  poll + sched_yield(). Lets another runnable rank on the same
//                               core go first, so the producer we wait for gets to run.
//   3. sleep     (afterwards):  block in the kernel (futex for shm, poll() for sockets) until a
//                               peer wakes us or the sleep budget passes. Wake-up costs a futex
//                               wake + context switch on each side.
// Measured cost of each stage (shm ping-pong, own cores vs one shared core): see the table in
// transports/shm/shm_transport.h.
// On oversubscribed hosts (more ranks than cores) spinning only steals the core from the rank
// that would produce our data, so the policy drops the spin stage and shortens the yield one.
//
// Knobs (environment, read by BackoffPolicy::FromEnv):
//   WEFT_SPIN_US   spin stage length, microseconds (default 5; 0 when oversubscribed)
//   WEFT_YIELD_US  end of the yield stage, microseconds since idle (default 1000; 20 when
//                  oversubscribed). A rank with a core of its own loses nothing by yielding
//                  for a millisecond, while sleeping in the middle of a pipelined transfer
//                  risks a convoy in which both ranks pay a futex wake-up per chunk (suspected
//                  cause of 3-5x slower runs of 1-64 MiB allreduce seen in perf/results.sh).
//
// Also here: futex helpers on a 32-bit word (process-shared: the word may live in a shared
// memory segment, so the non-private futex ops are used).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft {

struct BackoffPolicy {
  int spin_us = 5;
  int yield_us = 1000;
  // The defaults above, adjusted for `ranks_per_host` ranks sharing this host's usable CPUs
  // (sched_getaffinity), then overridden by WEFT_SPIN_US / WEFT_YIELD_US when set.
  static BackoffPolicy FromEnv(int ranks_per_host);
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int UsableCpuCount();

class Backoff {
 public:
  enum class Stage { kSpin, kYield, kSleep };
  explicit Backoff(const BackoffPolicy& policy = BackoffPolicy()) : policy_(policy) {}

  // Call when progress was made: the next idle period starts from the spin stage again.
  void Reset() { idle_ = false; }
  // The stage the caller is in now (starts the idle clock on the first call after Reset).
  Stage CurrentStage();
  // Waits once according to the current stage: a burst of pause instructions, or one
  // sched_yield(). Returns kSleep without waiting when the caller should block in the kernel.
  Stage Pause();
  // Microseconds since the idle period began (0 right after Reset).
  int64_t IdleMicros() const;
  const BackoffPolicy& policy() const { return policy_; }

 private:
  BackoffPolicy policy_;
  bool idle_ = false;
  std::chrono::steady_clock::time_point idle_since_;
};

// One CPU pause hint (x86 `pause`, arm `yield`); a no-op elsewhere.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Blocks while *word == expected, at most timeout_us microseconds (<0: no limit). Returns
// early on a wake, a signal, or when *word already differs. Works across processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us);
// Wakes up to `count` waiters blocked on `word`.
void FutexWake(std::atomic<uint32_t>* word, int count);

}  // namespace weft
