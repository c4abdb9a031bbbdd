// Ring allgather: p-1 steps; at step s rank r forwards block (r - s) to the next rank and
// receives block (r - s - 1) from the previous one. Each rank sends (p-1)/p of the output.
//
// Step 0 sends straight from the input, so the local copy of our own block into the output
// (skipped by the executor when in-place: input == output + r*count) overlaps the transfer.
// The receive of step s and the forward of step s+1 are one fused step (recv_copy_send).
// Blocks are cut into chunks (ChunkPolicy) so consecutive steps pipeline.
#include <algorithm>

#include "algorithms/patterns.h"
#include "algorithms/registry.h"
#include "algorithms/ring_pattern.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllGatherRing(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "ring");
  const int p = req.nranks;
  const size_t n = req.count;
  const BlockChunks blk(n, req.chunk);
  sched.window = blk.Window();
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n * p;
    if (n == 0) continue;
    rs.steps.push_back(CopyStep(In(0, n), Out(r * n, n)));
    const int next = (r + 1) % p, prev = (r - 1 + p) % p;
    for (int s = 0; s < p - 1; ++s) {
      int recv_blk = RingLayout::Mod(r - s - 1, p);
      for (size_t j = 0; j < blk.chunks; ++j) {
        const size_t off = blk.Offset(j), len = blk.Size(j);
        // Step s's message travels on StepChannel(s, j): forwards on their own channels.
        const uint16_t ch = blk.StepChannel(s, j);
        if (s == 0) rs.steps.push_back(SendStep(next, In(off, len), ch));
        // The block received at step s is forwarded at step s+1: one fused step.
        if (s < p - 2)
          rs.steps.push_back(RecvCopySendStep(prev, Out(recv_blk * n + off, len), next, ch,
                                              blk.ForwardChannel(j)));
        else
          rs.steps.push_back(RecvStep(prev, Out(recv_blk * n + off, len), ch));
      }
    }
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllGather, "ring",
                        [](const ScheduleRequest&) { return true; }, BuildAllGatherRing);

}  // namespace
}  // namespace weft
