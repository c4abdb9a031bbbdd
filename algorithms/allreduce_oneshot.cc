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
// Scratch: 2 * C elements; C = chunk_elems (capped) or half the window budget (DirectScratchElems:
// kDirectScratchElems, which keeps shm's window <= 4 MiB even for 8-byte types, or the ipc window).
//
// Single-round variant (ScheduleRequest::window_half = h, set by the communicator for calls
// that fit one round in half the window): steps 1-3 only, in half h of the window (elements
// [h * H, h * H + n), H = window_half_elems, a fixed byte size), and no "done" round: the
// call returns while peers may still read our half h. The communicator alternates h between
// calls, so call m + 1 writes the other half; call m + 2 rewrites half h only after it
// consumed every peer's "ready m + 1", which each peer signals after finishing call m. Any
// other schedule that uses the window first runs DirectWindowRelease (direct_pattern.h). The
// checker proves such call sequences (checker.h: CheckCallSequence). One signal latency per
// call instead of two: the tiny-message path.
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

// Steps 1-3 of one round: elements [o, o + c) through `slot` of Scratch.
void PublishWaitReduce(RankSchedule& rs, int r, int p, size_t o, size_t c, size_t slot,
                       bool wait_done_first) {
  // 1. publish our contribution
  rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
  // 2. everyone's contribution is ready
  ReadyRound(rs, r, p, wait_done_first);
  // 3. reduce in rank order
  for (int q = 0; q < p; ++q) rs.steps.push_back(InRankOrder(r, q, q == 0, Tmp(slot, c), Out(o, c)));
  rs.steps.push_back(FinalizeStep(Out(o, c)));
}

StatusOr<Schedule> BuildAllReduceOneshot(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "oneshot");
  const int p = req.nranks;
  const size_t n = req.count;
  const DirectRounds plan(req, n, DirectScratchElems(req) / 2);
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
    if (SingleRoundInHalf(req, n, plan)) {
      const size_t half = SingleRoundHalf(req, rs);
      PublishWaitReduce(rs, r, p, /*o=*/0, n, half, /*wait_done_first=*/false);
      continue;
    }
    rs.scratch_count = 2 * c_max;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
      PublishWaitReduce(rs, r, p, o, c, slot, /*wait_done_first=*/k > 0);
      // 4. done reading this round's slots
      SignalAll(rs, r, p);
    }
    WaitAll(rs, r, p);  // last "done": our window is free again
  }
  return sched;
}

// The single-round variant returns holding the window (peers may still read its half).
bool OneshotHoldsWindow(const ScheduleRequest& req) {
  if (req.nranks < 2) return false;
  return SingleRoundInHalf(req, req.count, DirectRounds(req, req.count, DirectScratchElems(req) / 2));
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kAllReduce, "oneshot", BuildAllReduceOneshot,
                               OneshotHoldsWindow);

}  // namespace
}  // namespace weft
