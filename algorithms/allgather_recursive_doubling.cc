// Allgather, recursive doubling: round k swaps the blocks gathered so far with the participant
// at distance 2^k, so the owned contiguous range of blocks doubles. log2(p) rounds: the
// latency choice. Non-powers of two fold first (even ranks below 2*rem hand their block to
// the odd neighbour, which stands for both, and get everything back at the end).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllGatherRecursiveDoubling(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "recursive_doubling");
  const int p = request.nranks;
  const size_t c = request.count;
  const Fold fold(p);
  auto blocks = [&](int first_rank, int end_rank) {
    return Out(static_cast<size_t>(first_rank) * c, static_cast<size_t>(end_rank - first_rank) * c);
  };
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = c;
    rs.output_count = static_cast<size_t>(p) * c;
    if (c == 0) continue;
    rs.steps.push_back(CopyStep(In(0, c), Out(r * c, c)));
    const int v = fold.Participant(r);
    if (v < 0) {
      rs.steps.push_back(SendStep(r + 1, In(0, c)));
      if (r > 0) rs.steps.push_back(RecvStep(r + 1, blocks(0, r)));
      rs.steps.push_back(RecvStep(r + 1, blocks(r + 1, p)));
      continue;
    }
    if (r < 2 * fold.rem) rs.steps.push_back(RecvStep(r - 1, Out((r - 1) * c, c)));
    // round k: participants [lo, lo + 2^k) swap with the partner's equal-sized group.
    for (int mask = 1; mask < fold.p2; mask <<= 1) {
      const int partner = fold.RankOf(v ^ mask);
      const int mine = v & ~(mask - 1), theirs = (v ^ mask) & ~(mask - 1);
      rs.steps.push_back(SendStep(partner, blocks(fold.FirstRank(mine), fold.FirstRank(mine + mask))));
      rs.steps.push_back(RecvStep(partner, blocks(fold.FirstRank(theirs), fold.FirstRank(theirs + mask))));
    }
    if (r < 2 * fold.rem) {
      const int e = r - 1;  // the folded neighbour has its own block already
      if (e > 0) rs.steps.push_back(SendStep(e, blocks(0, e)));
      rs.steps.push_back(SendStep(e, blocks(e + 1, p)));
    }
  }
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllGather, "recursive_doubling", AlwaysApplicable,
                        BuildAllGatherRecursiveDoubling);

}  // namespace
}  // namespace weft
