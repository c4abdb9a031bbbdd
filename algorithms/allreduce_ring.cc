// Ring allreduce = ring reduce-scatter followed by ring allgather, in the output buffer.
//
// Each rank sends and receives 2(p-1)/p of the data, independent of p: bandwidth-optimal,
// latency 2(p-1) steps. Phases for rank r (segments mod p):
//   reduce-scatter, step s = 0..p-2: send segment (r - s), receive segment (r - s - 1) from the
//     previous rank and reduce it with our own input into output. Step 0 reads the input;
//     later steps forward what the previous step reduced (hazard tracking orders them).
//     After it, rank r holds the full sum of segment (r + 1): finalize it (avg divides once).
//   allgather, step s = 0..p-2: send segment (r + 1 - s), receive segment (r - s) into output.
// Every segment is cut into chunks (ChunkPolicy) so consecutive ring steps pipeline.
//
// Not yet fused (recv_reduce_send / recv_copy_send, as the ring reduce-scatter and allgather
// are): the fused ring simulates up to ~2.3x faster on multi-host fabrics (receives posted
// early, hops no longer in lockstep), which the selector's analytic ring formula
// (src/tune/analytic_model.cc, 2(p-1) x the slowest link's round) does not model yet, so the
// pre-filter would discard it. Switch once that formula follows the simulation.
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
  for (int r : RanksToBuild(req)) {
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
    // Reduce-scatter.
    for (int s = 0; s < p - 1; ++s) {
      int send_seg = RingLayout::Mod(r - s, p), recv_seg = RingLayout::Mod(r - s - 1, p);
      for (size_t j = 0; j < ring.chunks; ++j) {
        size_t so = ring.ChunkOffset(send_seg, j), sn = ring.ChunkSize(send_seg, j);
        size_t ro = ring.ChunkOffset(recv_seg, j), rn = ring.ChunkSize(recv_seg, j);
        // Empty chunks (segments shorter than the chunk count) are skipped on both sides.
        Region src = s == 0 ? In(so, sn) : Out(so, sn);
        if (sn > 0) rs.steps.push_back(SendStep(next, src, ring.Channel(j)));
        if (rn > 0)
          rs.steps.push_back(RecvReduceStep(prev, In(ro, rn), Out(ro, rn), ring.Channel(j)));
      }
    }
    int owned = RingLayout::Mod(r + 1, p);
    rs.steps.push_back(FinalizeStep(Out(ring.SegOffset(owned), ring.SegSize(owned))));
    // Allgather.
    for (int s = 0; s < p - 1; ++s) {
      int send_seg = RingLayout::Mod(r + 1 - s, p), recv_seg = RingLayout::Mod(r - s, p);
      for (size_t j = 0; j < ring.chunks; ++j) {
        size_t so = ring.ChunkOffset(send_seg, j), sn = ring.ChunkSize(send_seg, j);
        size_t ro = ring.ChunkOffset(recv_seg, j), rn = ring.ChunkSize(recv_seg, j);
        if (sn > 0) rs.steps.push_back(SendStep(next, Out(so, sn), ring.Channel(j)));
        if (rn > 0) rs.steps.push_back(RecvStep(prev, Out(ro, rn), ring.Channel(j)));
      }
    }
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "ring",
                        [](const ScheduleRequest&) { return true; }, BuildAllReduceRing);

}  // namespace
}  // namespace weft
