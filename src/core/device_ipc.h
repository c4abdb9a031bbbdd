// Device calls device to device between the processes of a host: the ipc transport
// (transports/ipc/) and a direct schedule enqueued on the caller's stream
// (exec/stream_program.h), instead of staging through pinned host memory (device_calls.h).
//
// Which calls: a single allreduce, allgather, reduce-scatter, all-to-all, broadcast or reduce on
// device buffers of a process communicator, with WEFT_IPC on (the default) and an algorithm:
//   * one host: a direct algorithm, WEFT_ALGO's when it names one (a forced non-direct
//     algorithm, e.g. ring, is staged as before), else the selector's device choice when the
//     fabric models this rank's GPU (Selector::ChooseDevice: IPC algorithms against staging,
//     from the GPU links), else oneshot for allreduces up to kOneshotMaxBytes, twoshot above
//     and `direct` for the others (broadcast: the root's window read by every rank; reduce:
//     every window read by the root); the whole schedule runs on the stream;
//   * several hosts: hierarchical_direct (allreduce, allgather, all-to-all): its direct steps
//     on the stream inside each host, its messages across hosts staged (device_hybrid.h).
// All-to-allv, send/recv, groups of several operations, broadcast and reduce across hosts, and
// anything else are staged. The decision depends only on the call's arguments and settings every rank
// shares, so every rank takes the same path.
//
// Set-up: the first such call allocates this rank's window on the stream's device and
// exchanges windows over the data path (AllGatherOnComm): once per communicator, after the
// device calls queued before it. `WEFT_DEBUG=INFO` then names the transport for each peer.
//
// Ordering: the communicator's calls run one after another whatever their streams (each
// call's stream first waits for the previous call's end, as NCCL orders a communicator's
// work), because the transport's signal counters are per communicator.
//
// Failure: each call has a watchdog job on the communicator's progress thread
// (device_progress.h) that waits for the call's end event, checks the peers' processes every
// 100 ms and gives up after the communicator's timeout; on a dead peer or the timeout it
// releases the stream's waits (the call's results are then undefined) and reports the failure
// through weftCommGetAsyncError, naming the rank. Later ipc calls then fail at once.
#pragma once

#include <variant>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "weft/weft.h"

namespace weft {

// Allreduces up to this many bytes use oneshot (one read of every peer, latency-bound), larger
// ones twoshot (each rank reduces 1/p and gathers the rest: (p-1)/p of the traffic). The
// crossover of NCCL-class one-host kernels lies around 256 KiB-1 MiB on NVLink.
inline constexpr size_t kOneshotMaxBytes = size_t{256} << 10;

// Enqueues ops through the ipc transport when they take that path (above): *taken = true and
// the call's status; otherwise *taken = false and nothing happened.
Status TrySubmitIpc(weftComm* comm, const std::vector<std::variant<CollectiveCall, P2POp>>& ops,
                    weftStream_t stream, bool* taken);
// How many calls of comm went through the ipc transport (tests, and tools that report the path).
size_t IpcCallCount(const weftComm* comm);
// Drops the communicator's ipc state (its window and imports), after its device jobs ended.
void ReleaseIpc(weftComm* comm);

}  // namespace weft
