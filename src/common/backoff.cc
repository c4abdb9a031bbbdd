// Backoff policy and futex helpers (see backoff.h).
#include "common/backoff.h"
#include "common/settings.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

namespace weft {
namespace {

// A bad value keeps the default here; ValidateSettings() fails communicator creation on it.
int SettingOr(const char* name, int fallback) {
  return static_cast<int>(SettingIntOr(name, fallback));
}

}  // namespace

int UsableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int UsableCpuCountOfHost() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

BackoffPolicy BackoffPolicy::FromEnv(int ranks_per_host) {
  return FromEnv(ranks_per_host, UsableCpuCount());
}

BackoffPolicy BackoffPolicy::FromEnv(int ranks_per_host, int usable_cpus) {
  BackoffPolicy p;
  if (ranks_per_host > usable_cpus) {
    // Oversubscribed: the producer we wait for likely needs our core. Spinning only delays it;
    // yielding hands it the core (ranks of one launcher share a scheduling group). Yield for up
    // to 1 ms before sleeping: a sleeping rank's wake-up costs far more than the yields on a
    // quiet VM (an idle vCPU is woken through the hypervisor). Measured with
    // perf/regression.sh --rounds 3 against ceded60, quiet: with a 20 us yield stage 4 local
    // ranks 1.26x and netns 2x2 1.16x slower; with 1 ms 0.94x and 0.99x.
    p.spin_us = 0;
    p.yield_us = 1000;
  }
  const int spin_env = SettingOr("WEFT_SPIN_US", -1);  // -1: unset (or invalid, refused at init)
  if (spin_env >= 0) {
    p.spin_us = spin_env;
    // With a core per rank there is no yield stage by default: WEFT_SPIN_US alone must not
    // create one.
    if (ranks_per_host <= usable_cpus) p.yield_us = spin_env;
  }
  p.yield_us = SettingOr("WEFT_YIELD_US", p.yield_us);
  if (p.yield_us < p.spin_us) p.yield_us = p.spin_us;
  return p;
}

BackoffPolicy BackoffPolicy::ForNetwork(int ranks_on_machine, int spin_us) {
  BackoffPolicy p = FromEnv(std::max(1, ranks_on_machine), UsableCpuCountOfHost());
  if (spin_us >= 0) p.spin_us = spin_us;
  return p;
}

int64_t Backoff::IdleMicros() const {
  if (!idle_ || !clock_started_) return 0;
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - idle_since_).count();
}

void Backoff::RecordWait(int64_t waited_us) {
  // Oversubscribed policies do not spin, and tiny spins have nothing to gain.
  if (policy_.spin_us <= kMinAdaptiveSpinUs) return;
  // Only a wait that even the full spin stage would not have caught is evidence against
  // spinning: medium waits (a peer reducing a chunk for 300 us on a quiet machine) keep the
  // full spin, and a wait that a longer spin would have caught earns it back.
  if (waited_us > 2 * int64_t{policy_.spin_us}) {
    spin_limit_us_ = std::max(kMinAdaptiveSpinUs, spin_limit_us_ / 2);
  } else if (waited_us > spin_limit_us_ && waited_us <= policy_.spin_us) {
    spin_limit_us_ = std::min(policy_.spin_us, spin_limit_us_ * 2);
  }
}

Backoff::Stage Backoff::CurrentStage() {
  if (!idle_) {
    idle_ = true;
    clock_started_ = false;
    spin_polls_ = 0;
  }
  // Spinning, the clock is read on every kSpinPollsPerClockRead-th call only, the first one
  // included: a wait that ends within that many polls (a tiny message) reads no clock.
  if (spin_limit_us_ > 0 && spin_polls_ < kSpinPollsPerClockRead) {
    ++spin_polls_;
    return Stage::kSpin;
  }
  const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  if (!clock_started_) {  // the idle clock starts at its first read (a few polls late)
    idle_since_ = now;
    clock_started_ = true;
  }
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(now - idle_since_).count();
  if (us < spin_limit_us_) {
    spin_polls_ = 1;
    return Stage::kSpin;
  }
  spin_polls_ = kSpinPollsPerClockRead;  // past the spin stage: the clock decides every call
  // The yield stage keeps its length when the spin stage is shortened.
  if (us < int64_t{policy_.yield_us} - policy_.spin_us + spin_limit_us_) return Stage::kYield;
  return Stage::kSleep;
}

Backoff::Stage Backoff::Pause() {
  Stage s = CurrentStage();
  if (s == Stage::kSpin) {
    // A few pause hints only: data that arrives mid-burst waits for the burst to end (a Zen 2
    // pause is ~65 cycles, a Skylake one ~140), and the poll between bursts is a cache hit.
    for (int i = 0; i < 8; ++i) CpuRelax();
  } else if (s == Stage::kYield) {
    sched_yield();
  }
  return s;
}

Backoff::Stage Backoff::Yield() {
  Stage s = CurrentStage();
  if (s != Stage::kSleep) sched_yield();
  return s;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word layout");
  struct timespec ts;
  struct timespec* tsp = nullptr;
  if (timeout_us >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_us / 1000000);
    ts.tv_nsec = static_cast<long>((timeout_us % 1000000) * 1000);
    tsp = &ts;
  }
  // Not FUTEX_WAIT_PRIVATE: the word may be in memory shared with other processes.
  // EAGAIN (value changed), EINTR and ETIMEDOUT all just mean "go look again".
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, tsp, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

bool RegisterAsymmetricFence() {
  // Asked again on every call, not cached: registration belongs to the address space, and a
  // child forked after it is not registered (the syscalls cost about a microsecond, once per
  // transport).
  if (!SettingFlagOr("WEFT_SHM_MEMBARRIER", true)) return false;
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

bool HeavyFence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

}  // namespace weft
