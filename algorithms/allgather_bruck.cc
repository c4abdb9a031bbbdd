// Allgather, Bruck et al. (1997): ceil(log2 p) rounds for any p. Rank r keeps its blocks
// rotated in scratch (scratch block j = rank (r+j) % p's block); round k sends the first
// min(2^k, p-2^k) blocks to r-2^k and receives as many from r+2^k behind them. A final local
// rotation puts the blocks in place. The latency choice for non-powers of two.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllGatherBruck(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "bruck");
  const int p = request.nranks;
  const size_t c = request.count;
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = c;
    rs.output_count = static_cast<size_t>(p) * c;
    if (c == 0) continue;
    if (p == 1) {
      rs.steps.push_back(CopyStep(In(0, c), Out(0, c)));
      continue;
    }
    rs.steps.push_back(CopyStep(In(0, c), Tmp(0, c)));
    for (int d = 1; d < p; d <<= 1) {
      const size_t cnt = static_cast<size_t>(std::min(d, p - d));
      // round log2(d): blocks [0, cnt) to r-d; blocks [d, d+cnt) from r+d.
      rs.steps.push_back(SendStep(Mod(r - d, p), Tmp(0, cnt * c)));
      rs.steps.push_back(RecvStep(Mod(r + d, p), Tmp(d * c, cnt * c)));
    }
    // scratch block j is rank (r+j) % p's block: two contiguous copies.
    const size_t head = static_cast<size_t>(p - r);  // blocks j < p-r go to ranks r..p-1
    rs.steps.push_back(CopyStep(Tmp(0, head * c), Out(r * c, head * c)));
    if (r > 0) rs.steps.push_back(CopyStep(Tmp(head * c, r * c), Out(0, r * c)));
  }
  FitScratch(&s);
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllGather, "bruck", AlwaysApplicable, BuildAllGatherBruck);

}  // namespace
}  // namespace weft
