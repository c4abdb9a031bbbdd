// Ring allreduce = ring reduce-scatter followed by ring allgather, in the output buffer.
//
// Each rank sends and receives 2(p-1)/p of the data, independent of p: bandwidth-optimal,
// latency 2(p-1) steps. Phases for rank r (segments mod p):
//   reduce-scatter, step s = 0..p-2: send segment (r - s), receive segment (r - s - 1) from the
//     previous rank and reduce it with our own input into output. Step 0 sends the input;
//     later steps forward what the previous step reduced, fused with its receive
//     (recv_reduce_send: one step per hop, the forward posted as soon as the data is reduced).
//     After it, rank r holds the full sum of segment (r + 1): finalize it (avg divides once).
//   allgather, step s = 0..p-2: send segment (r + 1 - s), receive segment (r - s) into output,
//     the receive fused with the next step's send (recv_copy_send).
// Every segment is cut into chunks (ChunkPolicy) so consecutive ring steps pipeline. The order
// of additions is the unfused ring's: segment j gets ranks j+1, j+2, ..., j, one per hop.
#include "algorithms/patterns.h"
#include "algorithms/registry.h"
#include "algorithms/ring_pattern.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllReduceRing(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "ring");
  const int p = req.nranks;
  const size_t n = req.count;
  RingLayout ring(p, n, req.chunk);
  sched.window = ring.Window();
  for (int r = 0; r < p; ++r) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n;
    if (n == 0) continue;
    if (p == 1) {
      rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
      rs.steps.push_back(FinalizeStep(Out(0, n)));
      continue;
    }
    const int next = ring.Next(r), prev = ring.Prev(r);
    // Reduce-scatter. Empty chunks (segments shorter than the chunk count) are skipped on
    // both sides. The receive of step s is fused with the send of step s+1 (the same chunk
    // goes on, reduced): recv_reduce_send; the last step's receive completes our segment.
    // Step s's message travels on StepChannel(s, j) (forwards on their own channels).
    for (int s = 0; s < p - 1; ++s) {
      int send_seg = RingLayout::Mod(r - s, p), recv_seg = RingLayout::Mod(r - s - 1, p);
      for (size_t j = 0; j < ring.chunks; ++j) {
        size_t so = ring.ChunkOffset(send_seg, j), sn = ring.ChunkSize(send_seg, j);
        size_t ro = ring.ChunkOffset(recv_seg, j), rn = ring.ChunkSize(recv_seg, j);
        if (s == 0 && sn > 0) rs.steps.push_back(SendStep(next, In(so, sn), ring.Channel(j)));
        if (rn == 0) continue;
        if (s < p - 2)
          rs.steps.push_back(RecvReduceSendStep(prev, In(ro, rn), Out(ro, rn), next,
                                                ring.StepChannel(s, j), ring.ForwardChannel(j)));
        else
          rs.steps.push_back(RecvReduceStep(prev, In(ro, rn), Out(ro, rn), ring.StepChannel(s, j)));
      }
    }
    // Our segment is complete: finalize it chunk by chunk (avg divides once) and start the
    // allgather with it, so chunk 0 goes out while later chunks are still arriving. Allgather
    // step s receives segment (r - s) and forwards it (recv_copy_send) except at the last step.
    const int owned = RingLayout::Mod(r + 1, p);
    for (int s = 0; s < p - 1; ++s) {
      int recv_seg = RingLayout::Mod(r - s, p);
      for (size_t j = 0; j < ring.chunks; ++j) {
        size_t oo = ring.ChunkOffset(owned, j), on = ring.ChunkSize(owned, j);
        if (s == 0 && on > 0) {
          rs.steps.push_back(FinalizeStep(Out(oo, on)));
          rs.steps.push_back(SendStep(next, Out(oo, on), ring.Channel(j)));
        }
        size_t ro = ring.ChunkOffset(recv_seg, j), rn = ring.ChunkSize(recv_seg, j);
        if (rn == 0) continue;
        if (s < p - 2)
          rs.steps.push_back(RecvCopySendStep(prev, Out(ro, rn), next, ring.StepChannel(s, j),
                                              ring.ForwardChannel(j)));
        else
          rs.steps.push_back(RecvStep(prev, Out(ro, rn), ring.StepChannel(s, j)));
      }
    }
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "ring",
                        [](const ScheduleRequest&) { return true; }, BuildAllReduceRing);

}  // namespace
}  // namespace weft
