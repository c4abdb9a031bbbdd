// Symbolic schedule checker: proves that a Schedule computes the right result for every rank,
// with no transport, by executing it on symbolic values.
//
// Every element holds the set of contributions it carries: an origin index (which element of
// the senders' input it is), a bitmask of the ranks whose input has been reduced into it, and a
// "finalized" flag (kFinalize, weftAvg's division). Reducing overlapping sets is double
// counting; reading an element nothing wrote is an uninitialized read; at the end every output
// element must hold exactly the expected set. Errors name rank, step, op and region.
//
// Execution model (mirrors src/exec/executor.cc exactly; what each op reads, writes, receives
// and sends, and which ops are asynchronous or fences, comes from algorithms/step_table.h):
//   - each rank issues its steps in program order, at most `window` asynchronous steps in
//     flight (send, recv, recv_reduce, fused, wait); local steps (copy, reduce, finalize, direct
//     read/reduce, signal) complete when issued;
//   - a step issues only when no in-flight step of the rank conflicts with it (a write on
//     either side of overlapping memory, after in-place aliasing is resolved);
//   - kSignal issues only when nothing is in flight (release fence); while a kWait is in flight
//     nothing issues after it (acquire fence);
//   - sends are rendezvous: the k-th send a->b on channel c matches the k-th recv/recv_reduce
//     at b from a on channel c; sizes must be equal; data is captured at match time;
//   - the k-th kWait at r from p completes once p has issued its k-th kSignal to r;
//   - fused steps (recv_reduce_send, recv_copy_send) are a recv from `peer` and, once it has
//     matched, a send of dst to `to` on `to_channel`, posted in program order per stream
//     (schedule.h); their window slot is freed when the receive completes, the step when the
//     forward does.
// Direct reads of a peer's Scratch are checked for races with vector clocks (happens-before
// through matched send/recv, signal/wait and same-rank ordering the executor guarantees).
// Zero-copy schedules (ScheduleRequest::peer_buffers_mapped) read peers' Input/Output the same
// way, with two more rules: a peer's buffer it has not written in the call (its input) is read
// only after one of its signals in this call, and every read of a rank's buffers happens-before
// that rank's last step completes (its caller may reuse the buffer once the call returns). A
// copy onto itself (in place, input and output aliased) writes nothing, as in the executor.
//
// Limits: up to 64 ranks (contributions are a 64-bit mask).
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "common/status.h"

namespace weft {

struct CheckOptions {
  bool in_place = false;
  // weftAvg: every reduced output element must be finalized exactly once. When false,
  // kFinalize is still checked structurally (never on an incomplete element, never twice),
  // but a missing finalize is not an error.
  bool avg = false;
  int window = -1;  // -1: the schedule's window
};

// Proves that executing `schedule` under the execution rule above gives every rank the right
// result for `request`.
Status CheckSchedule(const Schedule& schedule, const ScheduleRequest& request,
                     const CheckOptions& options);

// Convenience: builds with `info` and checks it in-place and out-of-place (alltoallv:
// out-of-place only), with avg on for reducing collectives (which implies avg off).
Status ProveAlgorithm(const AlgorithmInfo& info, const ScheduleRequest& request);

// Proves calls that run back to back on one communicator, for the same request shape: each
// rank runs the calls' steps one after another, so what a call leaves behind (a single-round
// direct schedule returns while peers may still read its window: ScheduleRequest::window_half)
// is checked against what later calls write there, with the same vector clocks as within one
// schedule; signals stay counted across calls, as the transport counts them. Every output must
// hold the last call's result. Out-of-place only (in place, each call would reduce the result
// of the one before). Every schedule must hold every rank's steps (PlanScope::AllRanks()).
Status CheckCallSequence(const std::vector<const Schedule*>& calls, const ScheduleRequest& request,
                         const CheckOptions& options);

// What the proof executed (tests use it for structural properties, e.g. traffic per rank).
struct CheckStats {
  size_t steps = 0;     // steps executed
  size_t messages = 0;  // matched send/recv pairs
  size_t elements_moved = 0;                 // sum of matched message sizes
  std::vector<size_t> elements_sent_by_rank;  // per rank
};
Status CheckScheduleWithStats(const Schedule& schedule, const ScheduleRequest& request,
                              const CheckOptions& options, CheckStats* stats);

}  // namespace weft
