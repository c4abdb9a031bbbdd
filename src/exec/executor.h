// Executor: runs one rank's schedule over transports.
//
// Steps are issued in program order with at most `window` in flight; a step waits to issue
// until no earlier unfinished step overlaps its memory with a write on either side (hazard
// tracking on the resolved byte ranges, so in-place aliasing is handled for free). This is
// exactly the execution rule the checker proves schedules under (algorithms/schedule.h).
//
// Progress: the calling thread drives the transports. When nothing moves, it backs off in
// stages — spin (poll transports), then block inside the single busy transport's Progress()
// (poll()/futex/condvar) — so oversubscribed ranks give their core away.
//
// Failure: a failed request, or no step completing for `timeout_s`, aborts the transports
// that still hold requests (so nothing writes into the caller's buffers afterwards) and
// returns an error naming the step, its op and peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/compressed.h"
#include "algorithms/schedule.h"
#include "common/memref.h"
#include "common/status.h"
#include "exec/scratch.h"
#include "kernels/kernel_backend.h"
#include "transports/transport.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft {

// The caller's buffers. The executor hands them (and scratch, and peers' windows) to the
// transports and the kernel backend as MemRefs of this kind.
struct ExecBuffers {
  const void* input = nullptr;
  void* output = nullptr;
  // Input elements that read as input + addend (float32, host memory): error feedback's lanes,
  // where this rank's residual is not known to be zero, while the rest of the input is read
  // as it is. `patched`: sorted, disjoint element ranges; each input region of the schedule
  // lies inside one or outside all (the executor refuses the schedule otherwise). A codec
  // chain adds the addend in its tiles; for a range that other steps read, the executor first
  // builds input + addend into `patch` (as large as the input) and those steps read it there.
  float* patch = nullptr;
  const float* addend = nullptr;
  const std::vector<ElementRange>* patched = nullptr;
  MemKind kind = MemKind::kHost;  // of both buffers
  int device = -1;                // for kCudaDevice
};

// Where a peer's input and output of this call are mapped in this process (zero-copy: its
// buffers are registered; src/core/registered_memory.h), with the mapping's kind (the window
// transport's MappedRemote). Null pointers: not readable.
struct PeerUserBuffers {
  MemRef input;
  MemRef output;
};

// Error feedback of a compressed call, run by the executor: what each encode step drops
// (values - decode(encoding), 0 where not finite: codec::DroppedIntoResidual) goes into the
// caller's residual as the encode runs, while its values are still in the cache — inside a
// codec chain, tile by tile, so the chain's float32 sum need not be stored for it. spans[k]
// says where encode step k's values lie in the call's count: a contribution or partial sum is
// stored there (each element is encoded so once per call, and first), a reduced result added
// times reduced_weight (nranks for avg: the next call divides it again). Float32 values on
// the CPU kernels only. Elements no span covers are left as they are.
struct CodecFeedback {
  float* residual = nullptr;
  const std::vector<EncodedSpan>* spans = nullptr;
  float reduced_weight = 1.0f;
  bool on() const { return residual != nullptr; }
};

struct ExecContext {
  int rank = 0;
  int nranks = 1;
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
  uint64_t tag = 0;         // operation sequence number, carried by every message
  double timeout_s = 300;   // no completion for this long -> weftTimeout (0 = never)
  // Transport per peer rank (nullptr for self / unreachable).
  const std::vector<Transport*>* peer_transport = nullptr;
  DirectTransport* direct = nullptr;  // same-host window transport, if any
  // Scratch owned by the caller (grown as needed through `kernels`, of the kind it was made
  // for) when the schedule has no direct steps; direct schedules use the window instead.
  ScratchBuffer* scratch = nullptr;
  // Per peer rank: its mapped buffers, for direct steps whose remote region is the peer's
  // Input or Output (zero-copy schedules); nullptr when the call has none.
  const std::vector<PeerUserBuffers>* peer_buffers = nullptr;
  const char* what = "collective";  // for messages: "allreduce ring", ...
  // Runs the local steps (copy, reduce, finalize, direct reads) and the reductions of received
  // data; nullptr = CpuKernelBackend(). A backend that completes later (a CUDA stream) is
  // polled like a transport: the step stays in flight, its memory guarded by the hazards.
  KernelBackend* kernels = nullptr;
  // The codec of encode/decode steps (compressed schedules, dtype float32); nullptr when the
  // schedule has none (a codec step then fails naming itself).
  const weftCompression* codec = nullptr;
  // Error feedback for the encode steps (off: residual null).
  CodecFeedback feedback;
  // Steps before this one already ran (the tiny-call path, exec/tiny_program.h, stopped at a
  // wait whose signal had not arrived): the executor continues from here, with nothing in
  // flight, knowing which peers those steps already signalled or waited on.
  size_t first_step = 0;
};

Status ExecuteSchedule(const RankSchedule& schedule, int window, const ExecContext& ctx,
                       const ExecBuffers& buffers);

// How the executor names step `index` of `what` in its messages, e.g. "allreduce oneshot
// step 3 (wait from rank 1)"; `to` is the forward's rank of a fused step.
std::string DescribeStep(const char* what, size_t index, StepOp op, int peer, int to = -1);

}  // namespace weft
