// Barrier, dissemination (Hensgen, Finkel, Manber 1988): ceil(log2 p) rounds; in round k rank
// r sends a token to r + 2^k and receives one from r - 2^k. After the last round every rank has
// (transitively) heard from every other rank.
//
// Why one-element tokens and not zero-count messages: the execution rule orders steps only by
// overlapping regions, and empty regions overlap nothing, so round k+1's send could leave
// before round k's token arrived and the barrier would not synchronize. Round k's token is
// received into scratch[k+1], which round k+1 sends on; that read-after-write is what orders
// the rounds. The token's contents are meaningless (scratch[0] is never written).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildBarrierDissemination(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "dissemination");
  s.count = 0;
  const int p = request.nranks, rounds = CeilLog2(p);
  for (int r : RanksToBuild(request)) {
    auto& steps = s.ranks[r].steps;
    for (int k = 0; k < rounds; ++k) {
      const int d = 1 << k;
      // round k: token to r + 2^k, token from r - 2^k.
      steps.push_back(SendStep((r + d) % p, Tmp(k, 1)));
      steps.push_back(RecvStep(Mod(r - d, p), Tmp(k + 1, 1)));
    }
    s.ranks[r].scratch_count = rounds > 0 ? rounds + 1 : 0;
  }
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kBarrier, "dissemination", AlwaysApplicable,
                        BuildBarrierDissemination);

}  // namespace
}  // namespace weft
