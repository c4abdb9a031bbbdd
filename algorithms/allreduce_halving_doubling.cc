// Allreduce, recursive halving + doubling (Rabenseifner): a reduce-scatter by recursive
// halving (round k: keep half of the current range, send the other half to the partner at
// distance p2/2^(k+1), add the partner's half of ours), then an allgather by recursive doubling
// in reverse. 2*log2(p) rounds and 2*(p-1)/p*count traffic: medium and large messages when the
// network is not a ring. Non-powers of two fold first (standard: even ranks below 2*rem hand
// their input to the odd neighbour and receive the result at the end).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllReduceHalvingDoubling(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "halving_doubling");
  const int p = request.nranks;
  const size_t n = request.count;
  const Fold fold(p);
  const int p2 = fold.p2;
  // Block b of the p2 blocks the vector is cut into.
  auto range = [&](int lo, int hi) {  // blocks [lo, hi) as one contiguous element range
    size_t a = PartOffset(n, p2, lo), b = hi == p2 ? n : PartOffset(n, p2, hi);
    return std::make_pair(a, b - a);
  };
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = n;
    rs.output_count = n;
    if (n == 0) continue;
    const int v = fold.Participant(r);
    if (v < 0) {
      rs.steps.push_back(SendStep(r + 1, In(0, n)));
      rs.steps.push_back(RecvStep(r + 1, Out(0, n)));
      continue;
    }
    if (r < 2 * fold.rem) rs.steps.push_back(RecvReduceStep(r - 1, In(0, n), Out(0, n)));
    else rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
    // reduce-scatter by recursive halving: the current range of blocks [lo, hi) shrinks to
    // the half containing block v.
    int lo = 0, hi = p2;
    for (int mask = p2 >> 1; mask >= 1; mask >>= 1) {
      const int partner = fold.RankOf(v ^ mask);
      const int mid = lo + mask;
      const bool keep_low = (v & mask) == 0;
      auto keep = keep_low ? range(lo, mid) : range(mid, hi);
      auto give = keep_low ? range(mid, hi) : range(lo, mid);
      if (give.second > 0) rs.steps.push_back(SendStep(partner, Out(give.first, give.second)));
      if (keep.second > 0) {
        rs.steps.push_back(RecvStep(partner, Tmp(keep.first, keep.second)));
        rs.steps.push_back(ReduceStep(Tmp(keep.first, keep.second), Out(keep.first, keep.second)));
      }
      if (keep_low) hi = mid; else lo = mid;
    }
    auto mine = range(v, v + 1);
    if (mine.second > 0) rs.steps.push_back(FinalizeStep(Out(mine.first, mine.second)));
    // allgather by recursive doubling: the owned range doubles every round.
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int partner = fold.RankOf(v ^ mask);
      const int plo = (v ^ mask) & ~(mask - 1);
      auto have = range(lo, lo + mask);
      auto get = range(plo, plo + mask);
      if (have.second > 0) rs.steps.push_back(SendStep(partner, Out(have.first, have.second)));
      if (get.second > 0) rs.steps.push_back(RecvStep(partner, Out(get.first, get.second)));
      lo = std::min(lo, plo);
    }
    if (r < 2 * fold.rem) rs.steps.push_back(SendStep(r - 1, Out(0, n)));
  }
  FitScratch(&s);
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "halving_doubling", AlwaysApplicable,
                        BuildAllReduceHalvingDoubling);

}  // namespace
}  // namespace weft
