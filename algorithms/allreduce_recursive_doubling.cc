// Allreduce, recursive doubling: log2(p) rounds, each exchanging the whole vector with the
// partner at distance 2^k and adding it. Minimal latency, count*log2(p) traffic: the choice
// for small messages. Non-powers of two fold first (even ranks below 2*rem hand their input to
// the odd neighbour and get the result back at the end).
//
// Determinism: every rank computes the same sum tree, and IEEE addition is commutative, so all
// ranks get bitwise identical results; the tree depends on p (not on chunking).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllReduceRecursiveDoubling(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "recursive_doubling");
  const int p = request.nranks;
  const size_t n = request.count;
  const Fold fold(p);
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = n;
    rs.output_count = n;
    if (n == 0) continue;
    const int v = fold.Participant(r);
    if (v < 0) {  // folded away: hand the input over, get the result back
      rs.steps.push_back(SendStep(r + 1, In(0, n)));
      rs.steps.push_back(RecvStep(r + 1, Out(0, n)));
      continue;
    }
    if (r < 2 * fold.rem) rs.steps.push_back(RecvReduceStep(r - 1, In(0, n), Out(0, n)));
    else rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
    // round k: swap the partial sums with participant v ^ 2^k; the incoming one lands in
    // scratch (receiving into the output would wait for our own send: a cycle).
    for (int mask = 1; mask < fold.p2; mask <<= 1) {
      const int partner = fold.RankOf(v ^ mask);
      rs.steps.push_back(SendStep(partner, Out(0, n)));
      rs.steps.push_back(RecvStep(partner, Tmp(0, n)));
      rs.steps.push_back(ReduceStep(Tmp(0, n), Out(0, n)));
    }
    rs.steps.push_back(FinalizeStep(Out(0, n)));
    if (r < 2 * fold.rem) rs.steps.push_back(SendStep(r - 1, Out(0, n)));
  }
  FitScratch(&s);
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "recursive_doubling", AlwaysApplicable,
                        BuildAllReduceRecursiveDoubling);

}  // namespace
}  // namespace weft
