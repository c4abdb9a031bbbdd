// Direct all-to-all (same host, every peer's window mapped): rank r reads block r of every
// peer's input straight from the peer's window.
//
// One signal round trip per round; each rank reads (p-1) * n elements (the minimum).
// Per round k of at most C elements at offset o of each block (double-buffered Scratch slots
// k % 2, each p * C elements: the block for rank q at q * C):
//   1. copy input[q * n + o, c) into the slot for every q != r, and our own block straight to
//      output[r * n + o, c); signal every peer "ready k";
//   2. from each peer: wait "done k-1" (consumed in order), then "ready k";
//   3. output[q * n + o, c) = block r of peer q's slot, for every q != r;
//   4. signal every peer "done k".
// In-place calls are safe: every block of the round is copied out of the input before the
// signal, and the output writes of step 3 only touch this round's blocks.
// After the last round: wait every peer's last "done".
//
// Single-round variant (ScheduleRequest::window_half = h, for calls whose p blocks fit half the
// window in one round; as allreduce oneshot's, see allreduce_oneshot.cc): steps 1-3 in half h
// (block q at h * H + q * n, H = window_half_elems), and no "done" round: the call returns
// while peers may still read our half. The communicator alternates halves between calls; a
// rank rewrites half h two calls later, after it consumed every peer's "ready" of the call
// between, which each peer signals only once its reads of this call are done.
//
// Zero-copy variant (ScheduleRequest::peer_buffers_mapped, and out_of_place: in place, block q
// of our buffer is both what peer q reads and where its block to us lands, so it must be
// staged): after "ready", output[q * n, n) = block r of peer q's input, read in place; "done"
// keeps every rank from returning while a peer still reads its input.
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

// The block plan of a call with `n` elements per block (rounds of at most the budget).
DirectRounds BlockRounds(const ScheduleRequest& req, size_t n) {
  return DirectRounds(req, n, std::max<size_t>(1, DirectScratchElems(req) / 2 / req.nranks));
}

bool ZeroCopy(const ScheduleRequest& req) { return req.peer_buffers_mapped && req.out_of_place; }

// Steps 1-3 of one round: elements [o, o + c) of every block, staged at `slot` + q * `stride`
// of Scratch.
void PublishWaitRead(RankSchedule& rs, int r, int p, size_t n, size_t o, size_t c, size_t slot,
                     size_t stride, bool wait_done_first) {
  for (int q = 0; q < p; ++q) {
    if (q == r)
      rs.steps.push_back(CopyStep(In(r * n + o, c), Out(r * n + o, c)));
    else
      rs.steps.push_back(CopyStep(In(q * n + o, c), Tmp(slot + q * stride, c)));
  }
  ReadyRound(rs, r, p, wait_done_first);
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    rs.steps.push_back(DirectStep(q, Tmp(slot + r * stride, c), Out(q * n + o, c), /*reduce=*/false));
  }
}

StatusOr<Schedule> BuildAllToAllDirect(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "direct");
  const int p = req.nranks;
  const size_t n = req.count;
  const DirectRounds plan = BlockRounds(req, n);
  const size_t c_max = plan.per_round, rounds = plan.rounds;
  const size_t slot_elems = p * c_max;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n * p;
    rs.output_count = n * p;
    if (n == 0) continue;
    if (p == 1) {
      SingleRankResult(rs, n, /*reduction=*/false);
      continue;
    }
    if (ZeroCopy(req)) {
      SignalRound(rs, r, p);  // ready
      rs.steps.push_back(CopyStep(In(r * n, n), Out(r * n, n)));
      for (int q = 0; q < p; ++q)
        if (q != r) rs.steps.push_back(DirectStep(q, In(r * n, n), Out(q * n, n), /*reduce=*/false));
      SignalRound(rs, r, p);  // done
      continue;
    }
    if (SingleRoundInHalf(req, p * n, plan)) {
      const size_t half = SingleRoundHalf(req, rs);
      PublishWaitRead(rs, r, p, n, /*o=*/0, n, half, /*stride=*/n, /*wait_done_first=*/false);
      continue;
    }
    rs.scratch_count = 2 * slot_elems;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o), slot = (k % 2) * slot_elems;
      PublishWaitRead(rs, r, p, n, o, c, slot, c_max, /*wait_done_first=*/k > 0);
      SignalAll(rs, r, p);  // done k
    }
    WaitAll(rs, r, p);
  }
  return sched;
}

// The single-round variant returns holding the window (peers may still read its half).
bool DirectHoldsWindow(const ScheduleRequest& req) {
  if (req.nranks < 2 || ZeroCopy(req)) return false;
  return SingleRoundInHalf(req, req.nranks * req.count, BlockRounds(req, req.count));
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kAllToAll, "direct", BuildAllToAllDirect,
                               DirectHoldsWindow);

}  // namespace
}  // namespace weft
