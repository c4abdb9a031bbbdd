// Collectives and send/recv on device buffers, stream-ordered as NCCL's (issue 35, phase 5).
//
// A call whose buffers are device memory (or that names a device stream) is queued on the
// caller's device stream and returns at once. It is staged in pieces (device_staging.h: a large
// allreduce / reduce / broadcast in chunks, anything else whole):
//   stream:   per piece, copy its device regions into pinned staging and record its event;
//             then per piece, wait for the progress counter to pass it (a flag wait, as
//             cuStreamWaitValue32) and copy its written regions back; record `outputs_copied`
//   progress: (the communicator's thread, device_progress.h) per piece, wait for its event,
//             run the host collective on the staging, advance the counter; then wait for
//             outputs_copied and return the staging to its pool.
// The copies of one piece overlap the host collective (the transfers) of its neighbours.
// So the work completes in order with the caller's other work on that stream, and a failure
// after return (a dead peer) reaches weftCommGetAsyncError naming this rank and the call.
// In-place and overlapping buffers keep their aliasing: overlapping regions share staging.
// A NULL stream is the device runtime's default stream.
#pragma once

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "core/device_staging.h"
#include "weft/weft.h"

namespace weft {

// True when op touches device memory or stream is a device stream (not a weft host stream).
bool NeedsDevicePath(const weftComm* comm, const std::variant<CollectiveCall, P2POp>& op,
                     weftStream_t stream);
bool NeedsDevicePath(const weftComm* comm, const CollectiveCall& call, weftStream_t stream);
// Queues ops (already validated, all of comm) on the device stream as described above.
Status SubmitDeviceOps(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops,
                       weftStream_t stream);

// Host work on device buffers, stream-ordered, staged as one piece: what the compressed
// collectives (host codecs) run on device buffers. The device extents are copied into pinned
// staging (those read), `work` runs on comm's progress thread with a map from each buffer
// address to where it lives for the work (its staging copy, or itself for host memory), and the
// extents written are copied back; all in order on stream. A failure reaches
// weftCommGetAsyncError naming `what`. The work may call weft's host collectives on comm.
using StagingMap = std::function<void*(const void*)>;
using HostWork = std::function<Status(const StagingMap&)>;
bool TouchesDevice(const std::vector<WorkExtent>& extents, weftStream_t stream);
Status StageHostWork(weftComm* comm, const std::vector<WorkExtent>& extents, HostWork work,
                     weftStream_t stream, const std::string& what);

}  // namespace weft
