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
// Two regimes, chosen by whether this host's ranks outnumber the usable cores:
//  - a core per rank: spin for up to 2 ms, then sleep; no yield stage. sched_yield() is what
//    made tiny collectives slow whenever anything else ran on the machine: CFS hands the core
//    to the other runnable task for its slice, so a rank that yields while a competing process
//    (a build, a `nice -n 10` busy loop) is runnable waits milliseconds for the core back,
//    while a spinning rank keeps its fair share and answers within the cache-line round trip.
//    (Open MPI's shared-memory progress spins the same way.) The 2 ms bound covers a peer that
//    was preempted for one scheduler slice; after it the rank sleeps on the futex, so a long
//    wait (a straggler, a slow tier) does not burn a core.
//  - more ranks than cores: no spin (it only steals the core from the rank that would produce
//    our data), yield for up to 1 ms, then sleep.
// The spin stage adapts to how long waits turn out to be (a core per rank): a wait longer than
// twice the full spin stage (the peer was preempted by another process) shows that spinning
// bought nothing, so the next spin stage is halved, down to kMinAdaptiveSpinUs; a wait that
// ended after the current spin stage but within the full one shows a longer spin would have
// caught it, so it doubles, up to spin_us. Short waits (small messages) end inside the spin
// stage and change nothing. Without this, on a loaded machine every wait of a large
// collective first burned 2 ms of its process group's CPU share that the peer needed: 64 MiB
// allreduce, 2 ranks, load 9, 125 ms of CPU per call against 39 ms with a short spin.
//
// Knobs (environment, read by BackoffPolicy::FromEnv):
//   WEFT_SPIN_US   spin stage length, microseconds (default 2000; 0 when oversubscribed)
//   WEFT_YIELD_US  end of the yield stage, microseconds since idle (default = spin, i.e. no
//                  yield stage; 1000 when oversubscribed); raised to WEFT_SPIN_US if below it.
//
// Also here: futex helpers on a 32-bit word (process-shared: the word may live in a shared
// memory segment, so the non-private futex ops are used).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft {

struct BackoffPolicy {
  int spin_us = 2000;
  int yield_us = 2000;
  // The defaults above, adjusted for `ranks_per_host` ranks sharing this host's usable CPUs
  // (sched_getaffinity), then overridden by WEFT_SPIN_US / WEFT_YIELD_US when set.
  static BackoffPolicy FromEnv(int ranks_per_host);
  // The same with the number of CPUs the host's ranks may use between them (shm exchanges the
  // ranks' affinity masks: two ranks each pinned to its own core have 2 CPUs, not 1).
  static BackoffPolicy FromEnv(int ranks_per_host, int usable_cpus);
  // A network transport's (tcp, ucx): FromEnv for `ranks_on_machine` ranks (0 = unknown: one)
  // sharing the host's online CPUs, the spin stage fixed to `spin_us` when it is >= 0 (the
  // transport's own knob, WEFT_SOCKET_SPIN_US / WEFT_UCX_SPIN_US).
  static BackoffPolicy ForNetwork(int ranks_on_machine, int spin_us);
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int UsableCpuCount();
// Number of CPUs online on this host, at least 1.
int UsableCpuCountOfHost();

class Backoff {
 public:
  enum class Stage { kSpin, kYield, kSleep };
  explicit Backoff(const BackoffPolicy& policy = BackoffPolicy()) : policy_(policy) {}

  // Call when progress was made: the next idle period starts from the spin stage again.
  void Reset() {
    if (idle_) RecordWait(IdleMicros());
    idle_ = false;
  }
  // The stage the caller is in now (starts the idle clock on the first call after Reset).
  Stage CurrentStage();
  // Waits once according to the current stage: a burst of pause instructions, or one
  // sched_yield(). Returns kSleep without waiting when the caller should block in the kernel.
  Stage Pause();
  // Like Pause, but yields the CPU in the spin stage too (the caller knows that the task it
  // waits for needs this CPU). Returns kSleep without waiting when the caller should block.
  Stage Yield();
  // Microseconds since the idle period's clock started (0 right after Reset, and during the
  // first few spin polls, which read no clock).
  int64_t IdleMicros() const;
  const BackoffPolicy& policy() const { return policy_; }
  // The spin stage's current length (policy().spin_us, shortened after long waits).
  int spin_limit_us() const { return spin_limit_us_; }
  static constexpr int kMinAdaptiveSpinUs = 50;
  // Adapts the spin stage to a wait that lasted `waited_us` (Reset calls it for each idle
  // period that ended in progress).
  void RecordWait(int64_t waited_us);

 private:
  // In the spin stage the clock is read on every kSpinPollsPerClockRead-th call only, and
  // first on the kSpinPollsPerClockRead-th call of an idle period: a read (vDSO
  // clock_gettime, ~20-30 ns under KVM) took 8% of an 8-byte allreduce's samples and
  // lengthens each poll round, so the data that lands mid-round waits longer to be seen. The
  // spin stage then ends at most twice that many bursts (~2-4 us) late, against its 2 ms.
  static constexpr uint32_t kSpinPollsPerClockRead = 8;
  BackoffPolicy policy_;
  int spin_limit_us_ = policy_.spin_us;
  bool idle_ = false;
  bool clock_started_ = false;  // idle_since_ is set (at the idle period's first clock read)
  uint32_t spin_polls_ = 0;  // calls in the spin stage since the clock was last read
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

// Asymmetric fences (Linux membarrier), for a Dekker handshake whose one side runs on every
// tiny operation (a publisher: store the data, then look whether the consumer sleeps) and
// whose other side runs rarely (a consumer about to sleep after a millisecond of waiting:
// store `sleeping`, then look for the data). A full fence on the publisher's side waits for
// its stores to reach the cache, i.e. for the consumer's copy of their lines to be taken
// away: a cross-core round trip on every call. With the process registered
// (RegisterAsymmetricFence), the publisher needs only a compiler barrier (LightFence) and the
// consumer pays instead (HeavyFence: the kernel runs a full barrier on every CPU that runs a
// registered process, about 0.5 us here).
// Registers this process (idempotent): whether LightFence may skip the hardware fence. False
// where the kernel or a seccomp profile refuses membarrier, or WEFT_SHM_MEMBARRIER=0.
bool RegisterAsymmetricFence();
// The publisher's side: a compiler barrier when registered, else a full fence.
inline void LightFence(bool registered) {
  if (registered)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}
// The consumer's side: a full fence here and on every CPU running a registered process.
// Returns false when the kernel refused (then only this CPU's fence was run, and a publisher
// that took LightFence's short way may be missed: the caller bounds its sleep).
bool HeavyFence();

}  // namespace weft
