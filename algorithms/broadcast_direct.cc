// Direct broadcast (same host, every peer's window mapped): the root publishes the data in its
// window, every other rank reads it straight from there into its output.
//
// One signal latency per round and each non-root reads n elements once; the root copies each
// element twice (into its window and, out of place, into its output). For the device path
// (the ipc transport) this is the broadcast that runs device to device; on host memory the
// selector weighs it against the message algorithms.
// Per round k of at most C elements at offset o (double-buffered Scratch slots k % 2 of the
// root's window):
//   root:   from round 2 on, wait every peer's "done k-2" (slot k % 2 is free again); copy
//           input[o, c) into the slot; signal every peer "ready k"; copy input to output.
//   others: wait the root's "ready k"; output[o, c) = the root's slot; signal it "done k".
// After the last round the root waits the "done" signals still due, so nobody reads its window
// when the next operation overwrites it.
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

void BuildRoot(RankSchedule& rs, int root, int p, size_t n, const DirectRounds& plan) {
  const size_t c_max = plan.per_round;
  rs.scratch_count = 2 * c_max;
  for (size_t k = 0; k < plan.rounds; ++k) {
    const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
    if (k >= 2) WaitAll(rs, root, p);  // done k-2: peers finished reading this slot
    rs.steps.push_back(CopyStep(In(o, c), Tmp(slot, c)));
    SignalAll(rs, root, p);
    rs.steps.push_back(CopyStep(In(o, c), Out(o, c)));  // nothing to do in place
  }
  for (size_t k = 0; k < DoneStillDue(plan); ++k) WaitAll(rs, root, p);
}

void BuildReader(RankSchedule& rs, int root, size_t n, const DirectRounds& plan) {
  const size_t c_max = plan.per_round;
  for (size_t k = 0; k < plan.rounds; ++k) {
    const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * c_max;
    WaitOne(rs, root);
    rs.steps.push_back(DirectStep(root, Tmp(slot, c), Out(o, c), /*reduce=*/false));
    SignalOne(rs, root);
  }
}

StatusOr<Schedule> BuildBroadcastDirect(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  const int p = req.nranks, root = req.root;
  const size_t n = req.count;
  return BuildRootedDirect(
      req, /*reduction=*/false,
      [&](RankSchedule& rs, const DirectRounds& plan) { BuildRoot(rs, root, p, n, plan); },
      [&](RankSchedule& rs, const DirectRounds& plan) { BuildReader(rs, root, n, plan); });
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kBroadcast, "direct", BuildBroadcastDirect, nullptr);

}  // namespace
}  // namespace weft
