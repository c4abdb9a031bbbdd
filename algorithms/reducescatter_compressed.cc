// Compressed reduce-scatter, flat: each contribution quantized once, reduced in float32 at the
// owner of its block, not re-encoded (the output is the float32 sum of the decoded
// contributions).
//
// Rank r's input holds p blocks of `count`; rank j owns block j. Phases for rank r:
//   1 encode:   block j of the input -> enc[j], for every j (stochastic stream j).
//   2 exchange: step k = 1..p-1: send enc[(r+k) % p] to its owner, receive the encoding of
//               block r from rank (r-k) % p into contrib[(r-k) % p].
//   3 reduce:   output = decode(contribution of rank 0), then output += decode(contribution of
//               q) for q = 1..p-1 in rank order (own contribution read from enc[r]); finalize.
// Wire bytes per rank: (p-1)/p of the encoded input.
// Scratch (elements): enc[p], then contrib[q] for q != r (one encoded block each).
#include "algorithms/compressed.h"

#include "algorithms/patterns.h"

namespace weft {

StatusOr<Schedule> BuildReduceScatterCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "reducescatter:compressed"));
  const int p = req.nranks;
  const size_t n = req.count;
  const size_t enc_elems = EncodedElements(req.codec, n);
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n * p;
    rs.output_count = n;
    if (n == 0) continue;
    std::vector<Region> enc, contrib(p);
    for (int j = 0; j < p; ++j) enc.push_back(Tmp(j * enc_elems, enc_elems));
    size_t at = p * enc_elems;
    for (int q = 0; q < p; ++q) {
      contrib[q] = q == r ? enc[r] : Tmp(at, enc_elems);
      if (q != r) at += enc_elems;
    }
    rs.scratch_count = at;
    for (int j = 0; j < p; ++j) rs.steps.push_back(EncodeStep(In(j * n, n), enc[j], j));
    for (int k = 1; k < p; ++k) {
      const int to = (r + k) % p, from = (r - k + p) % p;
      rs.steps.push_back(SendStep(to, enc[to]));
      rs.steps.push_back(RecvStep(from, contrib[from]));
    }
    rs.steps.push_back(DecodeStep(contrib[0], Out(0, n)));
    for (int q = 1; q < p; ++q) rs.steps.push_back(DecodeReduceStep(contrib[q], Out(0, n)));
    rs.steps.push_back(FinalizeStep(Out(0, n)));
  }
  return sched;
}

}  // namespace weft
