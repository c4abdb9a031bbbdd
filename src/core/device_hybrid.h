// A schedule with both direct steps and messages on device buffers (hierarchical_direct across
// hosts): the direct steps run device to device on the caller's stream through the ipc
// transport (exec/stream_program.h), the messages on the communicator's progress thread through
// the host transports, staged through pinned host memory (issue 36: "IPC inside each host,
// staging across").
//
// The rank's steps are cut into runs: a run of stream steps is enqueued as it comes; a run of
// message steps (a host segment) becomes, on the stream, copies of the device ranges it
// touches into pinned staging, an event, a flag wait and the copies back; on the progress
// thread, the segment's steps retargeted to the staging run through the executor (its window
// of steps in flight, so a segment's exchange is concurrent as the schedule wants), then the
// flag. Each rank thus runs its program in order, as the schedule's fences already require
// around direct steps; message runs keep their own concurrency.
//
// Every rank's call takes one sequence number (its messages' tag) on the progress thread, in
// job order, whatever its number of segments, so later calls' tags agree across ranks.
#pragma once

#include <memory>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "core/comm.h"
#include "transports/ipc/ipc_transport.h"

namespace weft {

class HybridJob;

// Whether every step of rs is a stream step or a message step without a codec.
bool HybridLowerable(const RankSchedule& rs, size_t elem, size_t window_bytes);

// Plans the segments, takes staging and enqueues the stream half of `plan` for `call`.
StatusOr<std::shared_ptr<HybridJob>> EnqueueHybrid(weftComm* comm, const CollectiveCall& call,
                                                   const Schedule& plan, ipc::IpcTransport& t,
                                                   weftStream_t stream);
// The progress half (on the communicator's progress thread): runs the host segments in
// order. A failure is reported through weftCommGetAsyncError, the ipc waits are released and
// the remaining flags set, so the stream drains.
void RunHybrid(weftComm* comm, HybridJob& job, ipc::IpcTransport& t, const std::string& what);

}  // namespace weft
