// Direct reduce (same host, every peer's window mapped): every rank publishes its input in its
// window, the root reads every peer's copy and reduces into its output in rank order.
//
// One signal latency per round; the root reads (p-1) * n elements, the others copy theirs
// once. For the device path (the ipc transport) this is the reduce that runs device to device;
// on host memory the selector weighs it against the message algorithms. Non-root ranks never
// touch their output (NCCL lets them pass NULL).
// Per round k of at most C elements at offset o (double-buffered Scratch slots k % 2):
//   others: from round 2 on, wait the root's "done k-2" (slot k % 2 is free again); copy
//           input[o, c) into the slot; signal the root "ready k".
//   root:   copy its input[o, c) into its own slot; wait every peer's "ready k"; output[o, c)
//           = term 0 (op) term 1 ... in rank order; finalize; signal every peer "done k".
// After the last round the others wait the root's "done" signals still due.
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

// The root stages its own term in its slot too: in place (input = output) the first term
// written to the output would otherwise overwrite its input before it is read.
void BuildRoot(RankSchedule& rs, int root, int p, size_t n, const DirectRounds& plan) {
  const size_t c_max = plan.per_round;
  rs.scratch_count = 2 * c_max;
  for (size_t k = 0; k < plan.rounds; ++k) {
    const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
    rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
    WaitAll(rs, root, p);  // ready k
    for (int q = 0; q < p; ++q) rs.steps.push_back(InRankOrder(root, q, q == 0, Tmp(slot, c), Out(o, c)));
    rs.steps.push_back(FinalizeStep(Out(o, c)));
    SignalAll(rs, root, p);  // done k
  }
}

void BuildContributor(RankSchedule& rs, int root, size_t n, const DirectRounds& plan) {
  const size_t c_max = plan.per_round;
  rs.scratch_count = 2 * c_max;
  for (size_t k = 0; k < plan.rounds; ++k) {
    const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
    if (k >= 2) WaitOne(rs, root);  // done k-2
    rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
    SignalOne(rs, root);  // ready k
  }
  for (size_t k = 0; k < DoneStillDue(plan); ++k) WaitOne(rs, root);
}

StatusOr<Schedule> BuildReduceDirect(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  const int p = req.nranks, root = req.root;
  const size_t n = req.count;
  return BuildRootedDirect(
      req, /*reduction=*/true,
      [&](RankSchedule& rs, const DirectRounds& plan) { BuildRoot(rs, root, p, n, plan); },
      [&](RankSchedule& rs, const DirectRounds& plan) { BuildContributor(rs, root, n, plan); });
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kReduce, "direct", BuildReduceDirect, nullptr);

}  // namespace
}  // namespace weft
