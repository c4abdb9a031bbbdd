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
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllGatherDirect(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "direct");
  const int p = req.nranks;
  const size_t n = req.count;
  const DirectRounds plan(req, n, kDirectScratchElems / 2);
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
    rs.scratch_count = 2 * c_max;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
      rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
      SignalAll(rs, r, p);  // ready k
      for (int q = 0; q < p; ++q) {
        if (q == r) continue;
        if (k > 0) WaitOne(rs, q);  // done k-1
        WaitOne(rs, q);             // ready k
      }
      for (int q = 0; q < p; ++q) {
        if (q == r) {
          rs.steps.push_back(CopyStep(Tmp(slot, c), Out(r * n + o, c)));
          continue;
        }
        rs.steps.push_back(DirectStep(q, Tmp(slot, c), Out(q * n + o, c), /*reduce=*/false));
      }
      SignalAll(rs, r, p);  // done k
    }
    WaitAll(rs, r, p);
  }
  return sched;
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kAllGather, "direct", BuildAllGatherDirect);

}  // namespace
}  // namespace weft
