// Compressed all-to-all(v), e.g. MoE token dispatch in fp8 (one scale per block of 128
// channels): every block is encoded once by its sender and decoded once by its receiver; the
// wire carries only encodings. The own block goes through the codec too (encoded and decoded
// locally), so a token's values do not depend on which rank its expert lives on.
//
// Phases for rank r (counts[src * p + dst], displacements as for the plain all-to-allv):
//   1 encode:   block q of the input -> enc[q], for every q with a non-empty block (stochastic
//               stream q, the composition's: rank << 32 | q).
//   2 exchange: step k = 1..p-1: send enc[(r+k) % p], receive the block of (r-k) % p into
//               recv[(r-k) % p] (sizes follow from the counts: both sides know them).
//   3 decode:   output block of q = decode(recv[q]) (own block: decode(enc[r])).
// Out-of-place only (as the plain all-to-allv). No error feedback: tokens are not accumulated.
// Scratch (elements): enc[q] per destination, recv[q] per source but r.
#include "algorithms/compressed.h"

#include <algorithm>

#include "algorithms/patterns.h"

namespace weft {

StatusOr<Schedule> BuildAllToAllvCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "alltoallv:compressed"));
  const int p = req.nranks;
  const size_t n = static_cast<size_t>(p);
  if (req.a2av_counts.size() != n * n || req.a2av_send_displs.size() != n * n ||
      req.a2av_recv_displs.size() != n * n)
    return InvalidArgument("alltoallv:compressed needs nranks^2 = " + std::to_string(n * n) +
                           " counts and displacements, got " + std::to_string(req.a2av_counts.size()) +
                           "/" + std::to_string(req.a2av_send_displs.size()) + "/" +
                           std::to_string(req.a2av_recv_displs.size()));
  auto count = [&](int src, int dst) { return req.a2av_counts[src * n + dst]; };
  auto sdispl = [&](int src, int dst) { return req.a2av_send_displs[src * n + dst]; };
  auto rdispl = [&](int dst, int src) { return req.a2av_recv_displs[dst * n + src]; };
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    std::vector<Region> enc(p), recv(p);
    size_t at = 0;
    for (int q = 0; q < p; ++q) {
      rs.input_count = std::max(rs.input_count, sdispl(r, q) + count(r, q));
      rs.output_count = std::max(rs.output_count, rdispl(r, q) + count(q, r));
      enc[q] = Tmp(at, count(r, q) > 0 ? EncodedElements(req.codec, count(r, q)) : 0);
      at += enc[q].count;
    }
    for (int q = 0; q < p; ++q) {
      recv[q] = q == r ? enc[r] : Tmp(at, count(q, r) > 0 ? EncodedElements(req.codec, count(q, r)) : 0);
      if (q != r) at += recv[q].count;
    }
    rs.scratch_count = at;
    for (int q = 0; q < p; ++q)
      if (count(r, q) > 0)
        rs.steps.push_back(EncodeStep(In(sdispl(r, q), count(r, q)), enc[q], static_cast<uint32_t>(q)));
    for (int k = 1; k < p; ++k) {
      const int to = (r + k) % p, from = (r - k + p) % p;
      if (count(r, to) > 0) rs.steps.push_back(SendStep(to, enc[to]));
      if (count(from, r) > 0) rs.steps.push_back(RecvStep(from, recv[from]));
    }
    for (int q = 0; q < p; ++q)
      if (count(q, r) > 0)
        rs.steps.push_back(DecodeStep(recv[q], Out(rdispl(r, q), count(q, r))));
  }
  return sched;
}

}  // namespace weft
