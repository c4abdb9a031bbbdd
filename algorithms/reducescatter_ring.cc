// Ring reduce-scatter: p-1 steps; rank r ends with block r summed over all ranks.
//
// At step s rank r sends block (r - s - 1) and receives block (r - s - 2) from the previous
// rank, reducing it with its own input block. Partial sums travel through two scratch blocks
// used alternately (step s writes scratch[s % 2], step s+1 forwards it), because the input is
// read-only and the output is a single block; the last step reduces straight into the output,
// where it is finalized (avg divides once). The receive of step s and the send of step s+1
// are one fused step (recv_reduce_send). Blocks are chunked so steps pipeline.
#include <algorithm>

#include "algorithms/patterns.h"
#include "algorithms/registry.h"
#include "algorithms/ring_pattern.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceScatterRing(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "ring");
  const int p = req.nranks;
  const size_t n = req.count;
  const BlockChunks blk(n, req.chunk);
  sched.window = blk.Window();
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n * p;
    rs.output_count = n;
    rs.scratch_count = p > 2 ? 2 * n : 0;
    if (n == 0) continue;
    if (p == 1) {
      rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
      rs.steps.push_back(FinalizeStep(Out(0, n)));
      continue;
    }
    const int next = (r + 1) % p, prev = (r - 1 + p) % p;
    for (int s = 0; s < p - 1; ++s) {
      int send_blk = RingLayout::Mod(r - s - 1, p), recv_blk = RingLayout::Mod(r - s - 2, p);
      bool last = s == p - 2;
      for (size_t j = 0; j < blk.chunks; ++j) {
        const size_t off = blk.Offset(j), len = blk.Size(j);
        // Step s's message travels on StepChannel(s, j): forwards on their own channels.
        const uint16_t ch = blk.StepChannel(s, j);
        if (s == 0) rs.steps.push_back(SendStep(next, In(send_blk * n + off, len), ch));
        // The partial sum received at step s is forwarded at step s+1: one fused step.
        if (last)
          rs.steps.push_back(RecvReduceStep(prev, In(recv_blk * n + off, len), Out(off, len), ch));
        else
          rs.steps.push_back(RecvReduceSendStep(prev, In(recv_blk * n + off, len),
                                                Tmp((s % 2) * n + off, len), next, ch,
                                                blk.ForwardChannel(j)));
      }
    }
    rs.steps.push_back(FinalizeStep(Out(0, n)));
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduceScatter, "ring",
                        [](const ScheduleRequest&) { return true; }, BuildReduceScatterRing);

}  // namespace
}  // namespace weft
