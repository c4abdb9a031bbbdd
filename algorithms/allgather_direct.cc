// Direct allgather (same host, every peer's window mapped): each rank reads every peer's
// block straight from the peer's window into its output.
//
// One signal round trip per round, each rank reads (p-1) * n elements (the minimum).
// Per round k of at most C elements at offset o of the per-rank block (double-buffered
// Scratch slots k % 2):
//   1. copy input[o, c) into the slot, signal every peer "ready k";
//   2. from each peer: wait "done k-1" (counted signals: consumed in the order they were
//      sent), then "ready k";
//   3. output[q * n + o, c) = peer q's slot for every q (our own from our slot, which also
//      makes in-place calls, input = output + r * n, a no-op copy);
//   4. signal every peer "done k".
// After the last round: wait every peer's last "done" (our window is free for the next call).
//
// Single-round variant (ScheduleRequest::window_half = h, for calls whose block fits half the
// window in one round; as allreduce oneshot's, see allreduce_oneshot.cc): steps 1-3 in half
// h, and no "done" round: the call returns while peers may still read our half. The
// communicator alternates halves between calls.
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

DirectRounds BlockRounds(const ScheduleRequest& req) {
  return DirectRounds(req, req.count, DirectScratchElems(req) / 2);
}

// Steps 1-3 of one round: elements [o, o + c) of the block, staged at `slot` of Scratch.
void PublishWaitRead(RankSchedule& rs, int r, int p, size_t n, size_t o, size_t c, size_t slot,
                     bool wait_done_first) {
  rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
  ReadyRound(rs, r, p, wait_done_first);
  for (int q = 0; q < p; ++q) {
    if (q == r)
      rs.steps.push_back(CopyStep(Tmp(slot, c), Out(r * n + o, c)));
    else
      rs.steps.push_back(DirectStep(q, Tmp(slot, c), Out(q * n + o, c), /*reduce=*/false));
  }
}

StatusOr<Schedule> BuildAllGatherDirect(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "direct");
  const int p = req.nranks;
  const size_t n = req.count;
  const DirectRounds plan = BlockRounds(req);
  const size_t c_max = plan.per_round, rounds = plan.rounds;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n * p;
    if (n == 0) continue;
    if (p == 1) {
      SingleRankResult(rs, n, /*reduction=*/false);
      continue;
    }
    if (req.peer_buffers_mapped) {
      // Zero-copy: after "ready", block q = rank q's input read in place; "done" keeps every
      // rank from returning while a peer still reads its input.
      SignalRound(rs, r, p);
      rs.steps.push_back(CopyStep(In(0, n), Out(r * n, n)));  // nothing to do in place
      for (int q = 0; q < p; ++q)
        if (q != r) rs.steps.push_back(DirectStep(q, In(0, n), Out(q * n, n), /*reduce=*/false));
      SignalRound(rs, r, p);
      continue;
    }
    if (SingleRoundInHalf(req, n, plan)) {
      const size_t half = SingleRoundHalf(req, rs);
      PublishWaitRead(rs, r, p, n, /*o=*/0, n, half, /*wait_done_first=*/false);
      continue;
    }
    rs.scratch_count = 2 * c_max;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
      PublishWaitRead(rs, r, p, n, o, c, slot, /*wait_done_first=*/k > 0);
      SignalAll(rs, r, p);  // done k
    }
    WaitAll(rs, r, p);
  }
  return sched;
}

// The single-round variant returns holding the window (peers may still read its half).
bool DirectHoldsWindow(const ScheduleRequest& req) {
  if (req.nranks < 2 || req.peer_buffers_mapped) return false;
  return SingleRoundInHalf(req, req.count, BlockRounds(req));
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kAllGather, "direct", BuildAllGatherDirect,
                               DirectHoldsWindow);

}  // namespace
}  // namespace weft
