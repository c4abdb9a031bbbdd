// The waiting policy's two regimes (src/common/backoff.h): with a core per rank, spin for
// 2 ms and never sched_yield (yielding handed the core to any competing process for a whole
// slice); with more ranks than the CPUs they may use between them, no spin and a short yield
// stage. WEFT_SPIN_US alone must not create a yield stage; WEFT_YIELD_US still sets one. The
// spin stage halves after waits far beyond it and doubles back after waits just beyond it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>

#include "common/backoff.h"

namespace weft {
namespace {

struct EnvGuard {
  EnvGuard() { Clear(); }
  ~EnvGuard() { Clear(); }
  static void Clear() {
    unsetenv("WEFT_SPIN_US");
    unsetenv("WEFT_YIELD_US");
  }
};

TEST(BackoffPolicy, CorePerRankSpinsAndNeverYields) {
  EnvGuard env;
  BackoffPolicy p = BackoffPolicy::FromEnv(/*ranks_per_host=*/2, /*usable_cpus=*/2);
  EXPECT_EQ(p.spin_us, 2000);
  EXPECT_EQ(p.yield_us, p.spin_us);  // no yield stage
  // Two ranks each pinned to its own core: 2 CPUs between them, still a core per rank.
  p = BackoffPolicy::FromEnv(2, 8);
  EXPECT_EQ(p.spin_us, 2000);
}

TEST(BackoffPolicy, OversubscribedYieldsBriefly) {
  EnvGuard env;
  BackoffPolicy p = BackoffPolicy::FromEnv(/*ranks_per_host=*/4, /*usable_cpus=*/2);
  EXPECT_EQ(p.spin_us, 0);
  EXPECT_EQ(p.yield_us, 1000);
}

TEST(BackoffPolicy, SpinSettingAloneAddsNoYieldStage) {
  EnvGuard env;
  setenv("WEFT_SPIN_US", "7", 1);
  BackoffPolicy p = BackoffPolicy::FromEnv(2, 2);
  EXPECT_EQ(p.spin_us, 7);
  EXPECT_EQ(p.yield_us, 7);
  setenv("WEFT_YIELD_US", "500", 1);
  p = BackoffPolicy::FromEnv(2, 2);
  EXPECT_EQ(p.spin_us, 7);
  EXPECT_EQ(p.yield_us, 500);
  // Oversubscribed keeps its own yield stage unless WEFT_YIELD_US says otherwise.
  unsetenv("WEFT_YIELD_US");
  p = BackoffPolicy::FromEnv(4, 2);
  EXPECT_EQ(p.spin_us, 7);
  EXPECT_EQ(p.yield_us, 1000);
}

TEST(BackoffPolicy, YieldNeverEndsBeforeSpin) {
  EnvGuard env;
  setenv("WEFT_SPIN_US", "300", 1);
  setenv("WEFT_YIELD_US", "100", 1);
  BackoffPolicy p = BackoffPolicy::FromEnv(2, 2);
  EXPECT_EQ(p.spin_us, 300);
  EXPECT_EQ(p.yield_us, 300);
}

TEST(BackoffPolicy, YieldStageOfTheBackoffItself) {
  // Backoff::Yield yields in the spin stage and reports the stage like Pause.
  BackoffPolicy p;
  p.spin_us = 1000000;
  p.yield_us = 1000000;
  Backoff b(p);
  EXPECT_EQ(b.Yield(), Backoff::Stage::kSpin);
  p.spin_us = 0;
  p.yield_us = 0;
  Backoff sleeper(p);
  EXPECT_EQ(sleeper.Yield(), Backoff::Stage::kSleep);
}

TEST(BackoffPolicy, SpinStageShrinksAfterLongWaitsAndGrowsBack) {
  BackoffPolicy p;  // a core per rank: spin 2000 us, no yield stage
  Backoff b(p);
  EXPECT_EQ(b.spin_limit_us(), 2000);
  b.RecordWait(1);  // a short wait ends inside the spin stage: nothing changes
  b.RecordWait(1500);
  EXPECT_EQ(b.spin_limit_us(), 2000);
  b.RecordWait(3000);  // beyond the spin stage, but not twice beyond: no evidence either way
  EXPECT_EQ(b.spin_limit_us(), 2000);
  b.RecordWait(9000);  // far beyond even the full spin stage: spinning bought nothing
  EXPECT_EQ(b.spin_limit_us(), 1000);
  for (int i = 0; i < 20; ++i) b.RecordWait(50000);
  EXPECT_EQ(b.spin_limit_us(), Backoff::kMinAdaptiveSpinUs);
  b.RecordWait(300);  // a spin of 2000 would have caught it: spin longer next time
  EXPECT_EQ(b.spin_limit_us(), 2 * Backoff::kMinAdaptiveSpinUs);
  b.RecordWait(3000);  // beyond the full spin stage: no change
  EXPECT_EQ(b.spin_limit_us(), 2 * Backoff::kMinAdaptiveSpinUs);
  for (int i = 0; i < 20; ++i) b.RecordWait(b.spin_limit_us() + 1);
  EXPECT_EQ(b.spin_limit_us(), 2000);  // never beyond the policy's spin stage
}

TEST(BackoffPolicy, ShortenedSpinKeepsNoYieldStageAndOversubscribedDoesNotAdapt) {
  BackoffPolicy p;
  Backoff b(p);
  b.RecordWait(100000);
  ASSERT_EQ(b.spin_limit_us(), 1000);
  // Still a core per rank: after the shortened spin comes the sleep, not a yield stage. (The
  // idle clock starts at its first read, kSpinPollsPerClockRead polls in, and is then read
  // every that many polls while spinning.)
  for (int i = 0; i <= 8; ++i) EXPECT_EQ(b.CurrentStage(), Backoff::Stage::kSpin);
  usleep(1200);
  Backoff::Stage after = Backoff::Stage::kSpin;
  for (int i = 0; i < 16 && after == Backoff::Stage::kSpin; ++i) after = b.CurrentStage();
  EXPECT_EQ(after, Backoff::Stage::kSleep);
  BackoffPolicy over;
  over.spin_us = 0;
  over.yield_us = 20;
  Backoff o(over);
  o.RecordWait(100000);
  EXPECT_EQ(o.spin_limit_us(), 0);
}

}  // namespace
}  // namespace weft
