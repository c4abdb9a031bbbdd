// Ring allgatherv (per-rank counts): p-1 steps; at step s rank r forwards block (r - s) to the
// next rank and receives block (r - s - 1) from the previous one, as the even ring
// (allgather_ring.cc), with each block its own size and its own place in the output
// (v_displs). Empty blocks are skipped on both ends of every hop.
//
// Step 0 sends straight from the input, so the copy of the own block into the output (skipped
// by the executor in place: input == output + displs[r]) overlaps the transfer. The receive of
// step s and the forward of step s+1 are one fused step (recv_copy_send); each block is cut
// into chunks (ChunkPolicy) so consecutive steps pipeline.
#include <algorithm>

#include "algorithms/vcount_pattern.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllGatherVRing(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckVCountRequest(req));
  Schedule sched = NewSchedule(req, "ring");
  const int p = req.nranks;
  const std::vector<size_t> counts = VCounts(req), displs = VBlockOffsets(req);
  sched.window = VWindow(req);
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = counts[r];
    rs.output_count = VBlockExtent(req);
    if (counts[r] > 0) rs.steps.push_back(CopyStep(In(0, counts[r]), Out(displs[r], counts[r])));
    const int next = (r + 1) % p, prev = (r - 1 + p) % p;
    for (int s = 0; s < p - 1; ++s) {
      const int send_blk = RingLayout::Mod(r - s, p), recv_blk = RingLayout::Mod(r - s - 1, p);
      // Step 0 sends our own block from the input (later blocks leave by fused forwards);
      // its chunks interleave with the receive's, as the even ring's, so that no rank fills
      // its window with sends its successor cannot take yet.
      const BlockChunks out(s == 0 ? counts[send_blk] : 0, req.chunk);
      const BlockChunks in(counts[recv_blk], req.chunk);
      const size_t sends = out.n > 0 ? out.chunks : 0, recvs = in.n > 0 ? in.chunks : 0;
      for (size_t j = 0; j < std::max(sends, recvs); ++j) {
        if (j < sends)
          rs.steps.push_back(SendStep(next, In(out.Offset(j), out.Size(j)), out.StepChannel(0, j)));
        if (j >= recvs) continue;
        const Region dst = Out(displs[recv_blk] + in.Offset(j), in.Size(j));
        // The block received at step s is forwarded at step s+1: one fused step.
        if (s < p - 2)
          rs.steps.push_back(RecvCopySendStep(prev, dst, next, in.StepChannel(s, j),
                                              in.ForwardChannel(j)));
        else
          rs.steps.push_back(RecvStep(prev, dst, in.StepChannel(s, j)));
      }
    }
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllGatherV, "ring", AlwaysApplicable, BuildAllGatherVRing);

}  // namespace
}  // namespace weft
