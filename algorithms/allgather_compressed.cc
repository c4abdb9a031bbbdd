// Compressed allgather, flat: each rank's block is encoded once and sent to every other rank;
// every rank, the sender included, decodes all blocks from the same bytes, so all ranks hold
// bitwise-identical results.
//
// Phases for rank r:
//   1 encode:   the input -> gathered[r] (stochastic stream 0).
//   2 exchange: step k = 1..p-1: send gathered[r] to rank (r+k) % p, receive gathered[(r-k) % p].
//   3 decode:   output block q = decode(gathered[q]) for every q, r's own included.
// Wire bytes per rank: (p-1) encoded blocks, as a ring allgather of the encoded block.
// Scratch (elements): gathered[p], one encoded block each.
#include "algorithms/compressed.h"

#include "algorithms/patterns.h"

namespace weft {

StatusOr<Schedule> BuildAllGatherCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "allgather:compressed"));
  const int p = req.nranks;
  const size_t n = req.count;
  const size_t enc_elems = EncodedElements(req.codec, n);
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n * p;
    if (n == 0) continue;
    std::vector<Region> gathered;
    for (int q = 0; q < p; ++q) gathered.push_back(Tmp(q * enc_elems, enc_elems));
    rs.scratch_count = p * enc_elems;
    rs.steps.push_back(EncodeStep(In(0, n), gathered[r], 0));
    for (int k = 1; k < p; ++k) {
      rs.steps.push_back(SendStep((r + k) % p, gathered[r]));
      rs.steps.push_back(RecvStep((r - k + p) % p, gathered[(r - k + p) % p]));
    }
    for (int q = 0; q < p; ++q) rs.steps.push_back(DecodeStep(gathered[q], Out(q * n, n)));
  }
  return sched;
}

}  // namespace weft
