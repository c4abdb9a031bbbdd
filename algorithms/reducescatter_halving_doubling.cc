// Reduce-scatter, recursive halving: round k keeps the half of the current block range that
// holds this participant's blocks, sends the other half to the partner at distance
// p2/2^(k+1) and adds the partner's copy of the kept half. log2(p) rounds, (p-1)/p of the data
// per rank. Non-powers of two fold first (even ranks below 2*rem hand their whole input to the
// odd neighbour, which then stands for both blocks and returns the even rank's block at the
// end). Partial sums live in scratch: the caller's input is read-only.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceScatterHalvingDoubling(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "halving_doubling");
  const int p = request.nranks;
  const size_t c = request.count;
  const Fold fold(p);
  auto rank_blocks = [&](int first, int end) {  // blocks of ranks [first, end) as (offset, count)
    return std::make_pair(static_cast<size_t>(first) * c, static_cast<size_t>(end - first) * c);
  };
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = static_cast<size_t>(p) * c;
    rs.output_count = c;
    if (c == 0) continue;
    const int v = fold.Participant(r);
    if (v < 0) {
      rs.steps.push_back(SendStep(r + 1, In(0, p * c)));
      rs.steps.push_back(RecvStep(r + 1, Out(0, c)));
      continue;
    }
    // The partial sums start in the input (or, after a fold, in scratch).
    bool in_scratch = false;
    if (r < 2 * fold.rem) {
      rs.steps.push_back(RecvReduceStep(r - 1, In(0, p * c), Tmp(0, p * c)));
      in_scratch = true;
    }
    int lo = 0, hi = fold.p2;  // participants whose blocks this rank still reduces
    for (int mask = fold.p2 >> 1; mask >= 1; mask >>= 1) {
      const int partner = fold.RankOf(v ^ mask);
      const int mid = lo + mask;
      const bool keep_low = (v & mask) == 0;
      auto keep = keep_low ? rank_blocks(fold.FirstRank(lo), fold.FirstRank(mid))
                           : rank_blocks(fold.FirstRank(mid), fold.FirstRank(hi));
      auto give = keep_low ? rank_blocks(fold.FirstRank(mid), fold.FirstRank(hi))
                           : rank_blocks(fold.FirstRank(lo), fold.FirstRank(mid));
      Buffer src = in_scratch ? Buffer::kScratch : Buffer::kInput;
      rs.steps.push_back(SendStep(partner, Region{src, give.first, give.second}));
      rs.steps.push_back(RecvReduceStep(partner, Region{src, keep.first, keep.second},
                                        Tmp(keep.first, keep.second)));
      in_scratch = true;
      if (keep_low) hi = mid; else lo = mid;
    }
    Buffer src = in_scratch ? Buffer::kScratch : Buffer::kInput;  // p == 1: still the input
    if (r < 2 * fold.rem) {
      rs.steps.push_back(FinalizeStep(Tmp((r - 1) * c, 2 * c)));
      rs.steps.push_back(SendStep(r - 1, Tmp((r - 1) * c, c)));
      rs.steps.push_back(CopyStep(Tmp(r * c, c), Out(0, c)));
    } else {
      rs.steps.push_back(CopyStep(Region{src, r * c, c}, Out(0, c)));
      rs.steps.push_back(FinalizeStep(Out(0, c)));
    }
  }
  FitScratch(&s);
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduceScatter, "halving_doubling", AlwaysApplicable,
                        BuildReduceScatterHalvingDoubling);

}  // namespace
}  // namespace weft
