// One-shot direct allreduce (same host, every peer's window mapped): each rank reads every
// peer's copy of the data straight from its window and reduces it into its own output.
//
// Latency-optimal (one signal round trip per round) and each rank reads (p-1) * n elements,
// so it wins for small and medium messages; twoshot moves less data for large ones.
// Phases for rank r, per round k of at most C elements at offset o (double-buffered windows,
// slot k % 2 of Scratch, so copying round k overlaps peers still reading round k-1):
//   1. copy input[o, c) into Scratch slot k % 2, signal every peer ("ready k");
//   2. from each peer q: wait "done k-1" (q finished reading our slot of round k-1; its
//      signal precedes "ready k", and signals are counted, so it must be consumed first), then
//      wait "ready k";
//   3. output[o, c) = slot of rank 0 (op) slot of rank 1 (op) ... in rank order, so every rank
//      computes bit-identical results; finalize (avg divides once);
//   4. signal every peer "done k".
// After the last round: wait every peer's last "done", so nobody still reads our window when
// the next operation overwrites it. Slot k % 2 is rewritten in round k + 2 only after "done k"
// from every peer was consumed in round k + 1.
// Scratch: 2 * C elements; C = chunk_elems (capped) or kDirectScratchElems / 2, which keeps
// the window <= 4 MiB even for 8-byte types (the shm transport's initial window).
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllReduceOneshot(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "oneshot");
  const int p = req.nranks;
  const size_t n = req.count;
  const DirectRounds plan(req, n, kDirectScratchElems / 2);
  const size_t c_max = plan.per_round, rounds = plan.rounds;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n;
    if (n == 0) continue;
    if (p == 1) {
      SingleRankResult(rs, n, /*reduction=*/true);
      continue;
    }
    rs.scratch_count = 2 * c_max;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
      // 1. publish our contribution
      rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
      SignalAll(rs, r, p);
      // 2. everyone's contribution is ready
      for (int q = 0; q < p; ++q) {
        if (q == r) continue;
        if (k > 0) WaitOne(rs, q);  // done k-1
        WaitOne(rs, q);             // ready k
      }
      // 3. reduce in rank order
      for (int q = 0; q < p; ++q) {
        Step s;
        if (q == r) {
          s = q == 0 ? CopyStep(Tmp(slot, c), Out(o, c)) : ReduceStep(Tmp(slot, c), Out(o, c));
        } else {
          s.op = q == 0 ? StepOp::kDirectRead : StepOp::kDirectReduce;
          s.peer = q;
          if (q != 0) s.src = Out(o, c);
          s.dst = Out(o, c);
          s.remote = Tmp(slot, c);
        }
        rs.steps.push_back(s);
      }
      rs.steps.push_back(FinalizeStep(Out(o, c)));
      // 4. done reading this round's slots
      SignalAll(rs, r, p);
    }
    WaitAll(rs, r, p);  // last "done": our window is free again
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "oneshot",
                        AllRanksMappable,
                        BuildAllReduceOneshot);

}  // namespace
}  // namespace weft
