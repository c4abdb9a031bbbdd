// The tiny-call path: a small direct schedule compiled once per plan into a flat list of
// resolved operations, run in a tight loop on every call.
//
// Why: a 2-rank 8-byte allreduce on shm needs ~0.1 us for its data and signals (a standalone
// exchange of one line each way, alternating halves), but the generic executor (Runner:
// context, Prepare, hazard bookkeeping, per-step dispatch through the kernel backend's
// MemRefs) added ~0.2 us per call. The compiled program runs the same steps in the same
// order with the same kernels: it is an executor for schedules that the checker proved, not a
// new algorithm. Step i of the program is step i of the schedule.
//
// What compiles: schedules whose steps are all local copies/reductions/finalize, direct reads
// or reductions from peers' windows, signals and waits, with every region small (the
// single-round oneshot of small calls). Anything else (sends, codec steps, zero-copy reads of
// peers' buffers) keeps the Runner.
//
// Waiting: the program never blocks. It stops at the first wait whose signal has not arrived
// (after the transport's own short spin in TryWait) and returns that step's index; the caller
// runs the rest of the schedule through the executor from there (ExecContext::first_step),
// which owns the waiting policy, the timeout and the blame for a dead peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "transports/transport.h"
#include "weft/weft.h"

namespace weft {

struct TinyOp {
  StepOp op = StepOp::kCopy;
  // Which buffer a local operand lies in: Input, Output or this rank's window (Scratch).
  Buffer dst_buffer = Buffer::kOutput, src_buffer = Buffer::kInput;
  bool tagged = false;  // the first signal to / wait on `peer` in the call: carries the call tag
  int peer = -1;
  size_t dst_offset = 0, src_offset = 0, remote_offset = 0;  // bytes
  size_t bytes = 0;   // of dst (copies) or of each operand (reductions)
  size_t count = 0;   // elements
};

struct TinyProgram {
  std::vector<TinyOp> ops;
  size_t scratch_bytes = 0;  // the window every call prepares (RankSchedule::scratch_count)
};

// Regions above this size keep the Runner: for them its per-call work is noise, and its
// streaming hints (MemRef::streaming) matter.
constexpr size_t kTinyMaxRegionBytes = 16 << 10;

// Compiles `rs` (one rank's steps, elements of `elem` bytes, peers in [0, nranks)); false when
// it does not qualify.
bool CompileTinyProgram(const RankSchedule& rs, size_t elem, int nranks, TinyProgram* out);

// Runs `prog` from its first op while each completes at once. Returns the index of the first
// wait whose signal has not arrived (prog.ops.size() when all ran), or the error of a signal,
// a wait's tag check (ranks running different calls) or a peer window's mapping, named as the
// executor names a step ("<what> step 3 (wait from rank 1)"). On an error the caller aborts
// the transport, as the executor does.
StatusOr<size_t> RunTinyProgram(const TinyProgram& prog, DirectTransport* direct, const void* in,
                                void* out, weftDataType_t dtype, weftRedOp_t op, int nranks,
                                uint64_t tag, const char* what);

// Whether the tiny path is on (WEFT_TINY_PATH, default on; off runs every call through the
// executor, for comparisons).
bool TinyPathEnabled();

}  // namespace weft
