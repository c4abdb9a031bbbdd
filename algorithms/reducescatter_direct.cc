// Direct reduce-scatter (same host, every peer's window mapped): rank r reduces block r of
// every peer's input, read straight from the peers' windows.
//
// One signal round trip per round; each rank reads (p-1) * n elements (the minimum).
// Per round k of at most C elements at offset o of each block (double-buffered Scratch slots
// k % 2, each p * C elements: block q of this round at q * C):
//   1. copy input[q * n + o, c) into the slot for every q (our own block too: in-place calls
//      alias output with input block r, which step 3 overwrites), signal every peer "ready k";
//   2. from each peer: wait "done k-1" (consumed in order), then "ready k";
//   3. output[o, c) = block r of rank 0's slot (op) block r of rank 1's slot (op) ... in rank
//      order (bit-identical whichever rank computes it), finalize;
//   4. signal every peer "done k".
// After the last round: wait every peer's last "done".
//
// Single-round variant (ScheduleRequest::window_half = h, for calls whose p blocks fit half
// the window in one round; as allreduce oneshot's, see allreduce_oneshot.cc): steps 1-3 in
// half h (block q at h * H + q * n), and no "done" round: the call returns while peers may
// still read our half. The communicator alternates halves between calls.
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

DirectRounds BlockRounds(const ScheduleRequest& req) {
  return DirectRounds(req, req.count, std::max<size_t>(1, DirectScratchElems(req) / 2 / req.nranks));
}

// Steps 1-3 of one round: elements [o, o + c) of every block, staged at `slot` + q * `stride`
// of Scratch.
void PublishWaitReduce(RankSchedule& rs, int r, int p, size_t n, size_t o, size_t c, size_t slot,
                       size_t stride, bool wait_done_first) {
  for (int q = 0; q < p; ++q) rs.steps.push_back(CopyStep(In(q * n + o, c), Tmp(slot + q * stride, c)));
  ReadyRound(rs, r, p, wait_done_first);
  const Region mine = Tmp(slot + r * stride, c);  // block r in every rank's slot
  for (int q = 0; q < p; ++q) rs.steps.push_back(InRankOrder(r, q, q == 0, mine, Out(o, c)));
  rs.steps.push_back(FinalizeStep(Out(o, c)));
}

StatusOr<Schedule> BuildReduceScatterDirect(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "direct");
  const int p = req.nranks;
  const size_t n = req.count;
  const DirectRounds plan = BlockRounds(req);
  const size_t c_max = plan.per_round, rounds = plan.rounds;
  const size_t slot_elems = p * c_max;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n * p;
    rs.output_count = n;
    if (n == 0) continue;
    if (p == 1) {
      SingleRankResult(rs, n, /*reduction=*/true);
      continue;
    }
    if (req.peer_buffers_mapped) {
      // Zero-copy: after "ready", output = block r of every rank's input, read in place in
      // rank order; "done" keeps every rank from returning while a peer still reads its input
      // (in place, our output is our own block r, which no peer reads).
      rs.scratch_count = ZeroCopyReduceScratch(r, n);
      SignalRound(rs, r, p);
      ZeroCopyReduceInRankOrder(rs, r, p, In(r * n, n), Out(0, n), /*tmp=*/0);
      rs.steps.push_back(FinalizeStep(Out(0, n)));
      SignalRound(rs, r, p);
      continue;
    }
    if (SingleRoundInHalf(req, p * n, plan)) {
      const size_t half = SingleRoundHalf(req, rs);
      PublishWaitReduce(rs, r, p, n, /*o=*/0, n, half, /*stride=*/n, /*wait_done_first=*/false);
      continue;
    }
    rs.scratch_count = 2 * slot_elems;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * slot_elems;
      PublishWaitReduce(rs, r, p, n, o, c, slot, c_max, /*wait_done_first=*/k > 0);
      SignalAll(rs, r, p);  // done k
    }
    WaitAll(rs, r, p);
  }
  return sched;
}

// The single-round variant returns holding the window (peers may still read its half).
bool DirectHoldsWindow(const ScheduleRequest& req) {
  if (req.nranks < 2 || req.peer_buffers_mapped) return false;
  return SingleRoundInHalf(req, req.nranks * req.count, BlockRounds(req));
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kReduceScatter, "direct", BuildReduceScatterDirect,
                               DirectHoldsWindow);

}  // namespace
}  // namespace weft
