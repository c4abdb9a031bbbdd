// Collectives and send/recv on device buffers, stream-ordered as NCCL's (issue 35, phase 5).
//
// A call whose buffers are device memory (or that names a device stream) is queued on the
// caller's device stream and returns at once:
//   stream:   copy every device buffer region into pinned staging; record `inputs_ready`;
//             wait for the `done` flag; copy the written regions back; record `outputs_copied`
//   progress: (the communicator's thread, device_progress.h) wait for inputs_ready; run the
//             host collective on the staging; set `done`; wait for outputs_copied; free.
// So the work completes in order with the caller's other work on that stream, and a failure
// after return (a dead peer) reaches weftCommGetAsyncError naming this rank and the call.
// In-place and overlapping buffers keep their aliasing: overlapping regions share staging.
// A NULL stream is the device runtime's default stream.
#pragma once

#include <variant>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "weft/weft.h"

namespace weft {

// True when op touches device memory or stream is a device stream (not a weft host stream).
bool NeedsDevicePath(const weftComm* comm, const std::variant<CollectiveCall, P2POp>& op,
                     weftStream_t stream);
bool NeedsDevicePath(const weftComm* comm, const CollectiveCall& call, weftStream_t stream);
// Queues ops (already validated, all of comm) on the device stream as described above.
Status SubmitDeviceOps(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops,
                       weftStream_t stream);

}  // namespace weft
