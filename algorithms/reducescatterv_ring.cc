// Ring reduce-scatterv (per-rank counts): p-1 steps; rank r ends with block r (v_counts[r]
// elements at input offset sum(v_counts[0..r))) reduced over all ranks.
//
// As the even ring (reducescatter_ring.cc): at step s rank r sends the partial sum of block
// (r - s - 1) and receives block (r - s - 2) from the previous rank, reducing it with its own
// input block. Partial sums travel through two scratch slots of the largest block's size used
// alternately (step s writes slot s % 2, step s+1 forwards it); the last step reduces straight
// into the output, which is finalized (avg divides once). The receive of step s and the send of
// step s+1 are one fused step (recv_reduce_send). Empty blocks are skipped on both ends.
#include <algorithm>

#include "algorithms/vcount_pattern.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceScatterVRing(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckVCountRequest(req));
  Schedule sched = NewSchedule(req, "ring");
  const int p = req.nranks;
  const std::vector<size_t> counts = VCounts(req);
  const std::vector<size_t> at = VBlockOffsets(req);
  const size_t slot = VLargestBlock(req);
  sched.window = VWindow(req);
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = VBlockExtent(req);
    rs.output_count = counts[r];
    rs.scratch_count = p > 2 ? 2 * slot : 0;
    if (p == 1) {
      if (counts[r] == 0) continue;
      rs.steps.push_back(CopyStep(In(0, counts[r]), Out(0, counts[r])));
      rs.steps.push_back(FinalizeStep(Out(0, counts[r])));
      continue;
    }
    const int next = (r + 1) % p, prev = (r - 1 + p) % p;
    for (int s = 0; s < p - 1; ++s) {
      const int send_blk = RingLayout::Mod(r - s - 1, p), recv_blk = RingLayout::Mod(r - s - 2, p);
      const bool last = s == p - 2;
      // Step 0's send leaves from the input; its chunks interleave with the receive's so that
      // no rank fills its window with sends its successor cannot take yet.
      const BlockChunks out(s == 0 ? counts[send_blk] : 0, req.chunk);
      const BlockChunks in(counts[recv_blk], req.chunk);
      const size_t sends = out.n > 0 ? out.chunks : 0, recvs = in.n > 0 ? in.chunks : 0;
      for (size_t j = 0; j < std::max(sends, recvs); ++j) {
        if (j < sends)
          rs.steps.push_back(SendStep(next, In(at[send_blk] + out.Offset(j), out.Size(j)),
                                      out.StepChannel(0, j)));
        if (j >= recvs) continue;
        const size_t off = in.Offset(j), len = in.Size(j);
        const Region mine = In(at[recv_blk] + off, len);
        // The partial sum received at step s is forwarded at step s+1: one fused step.
        if (last)
          rs.steps.push_back(RecvReduceStep(prev, mine, Out(off, len), in.StepChannel(s, j)));
        else
          rs.steps.push_back(RecvReduceSendStep(prev, mine, Tmp((s % 2) * slot + off, len), next,
                                                in.StepChannel(s, j), in.ForwardChannel(j)));
      }
    }
    if (counts[r] > 0) rs.steps.push_back(FinalizeStep(Out(0, counts[r])));
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduceScatterV, "ring", AlwaysApplicable,
                        BuildReduceScatterVRing);

}  // namespace
}  // namespace weft
