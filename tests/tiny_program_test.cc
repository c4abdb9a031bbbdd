// The tiny-call path's compiler (src/exec/tiny_program.h): which schedules it takes, and that
// it keeps them step for step (step i of the program is step i of the schedule, so the
// executor can take over at any wait), with the call tag on each peer's first signal and wait
// exactly where the executor puts it. The runs themselves are covered end to end by every
// small same-host collective (process_test: SmallCallsWithALatePeerAreExact and the sweeps).
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "algorithms/direct_pattern.h"
#include "algorithms/registry.h"
#include "exec/tiny_program.h"

namespace weft {
namespace {

// This rank's schedule of `algo` as the communicator builds a single-round direct plan.
RankSchedule Built(const char* algo, int p, int rank, size_t count, size_t elem, int half = 0) {
  const AlgorithmInfo* info = FindAlgorithm(Collective::kAllReduce, algo);
  EXPECT_NE(info, nullptr) << algo;
  ScheduleRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = p;
  req.count = count;
  req.all_ranks_mappable = true;
  req.window_half = half;
  req.window_half_elems = kWindowHalfBytes / elem;
  if (info->holds_window == nullptr || !info->holds_window(req)) req.window_half = -1;
  req.scope = PlanScope::ForRank(rank);
  StatusOr<Schedule> s = BuildSchedule(*info, req);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? s->ranks[rank] : RankSchedule();
}

TEST(TinyProgram, KeepsTheOneshotStepForStepWithTheExecutorsTags) {
  for (int p : {2, 3, 4})
    for (int rank = 0; rank < p; ++rank)
      for (int half : {0, 1}) {
        const RankSchedule rs = Built("oneshot", p, rank, 7, 4, half);
        TinyProgram prog;
        ASSERT_TRUE(CompileTinyProgram(rs, 4, p, &prog)) << p << " ranks, rank " << rank;
        ASSERT_EQ(prog.ops.size(), rs.steps.size());
        EXPECT_EQ(prog.scratch_bytes, rs.scratch_count * 4);
        std::set<std::pair<int, StepOp>> seen;
        int waits = 0;
        for (size_t i = 0; i < rs.steps.size(); ++i) {
          const Step& s = rs.steps[i];
          const TinyOp& t = prog.ops[i];
          EXPECT_EQ(t.op, s.op) << "step " << i;
          EXPECT_EQ(t.peer, s.peer) << "step " << i;
          EXPECT_EQ(t.dst_offset, s.dst.offset * 4) << "step " << i;
          EXPECT_EQ(t.bytes, s.dst.count * 4) << "step " << i;
          if (s.op != StepOp::kSignal && s.op != StepOp::kWait) continue;
          waits += s.op == StepOp::kWait;
          EXPECT_EQ(t.tagged, seen.insert({s.peer, s.op}).second)
              << "step " << i << ": the tag travels with the first signal/wait per peer only";
        }
        EXPECT_EQ(waits, p - 1) << "single round: one wait per peer";
      }
}

TEST(TinyProgram, LeavesToTheExecutorWhatItDoesNotRun) {
  TinyProgram prog;
  // Sends and receives (ring), large regions (a multi-round oneshot's chunks), peers outside
  // the communicator.
  EXPECT_FALSE(CompileTinyProgram(Built("ring", 3, 0, 6, 4), 4, 3, &prog));
  EXPECT_FALSE(CompileTinyProgram(Built("oneshot", 2, 0, (kTinyMaxRegionBytes / 4) + 1, 4), 4, 2, &prog));
  EXPECT_TRUE(CompileTinyProgram(Built("oneshot", 2, 0, kTinyMaxRegionBytes / 4, 4), 4, 2, &prog));
  EXPECT_FALSE(CompileTinyProgram(Built("oneshot", 4, 0, 7, 4), 4, 3, &prog));
  // A zero-copy read of a peer's registered input.
  RankSchedule zc;
  Step read;
  read.op = StepOp::kDirectRead;
  read.peer = 1;
  read.dst = Region{Buffer::kOutput, 0, 4};
  read.remote = Region{Buffer::kInput, 0, 4};
  zc.steps.push_back(read);
  EXPECT_FALSE(CompileTinyProgram(zc, 4, 2, &prog));
  zc.steps[0].remote.buffer = Buffer::kScratch;
  EXPECT_TRUE(CompileTinyProgram(zc, 4, 2, &prog));
}

}  // namespace
}  // namespace weft
