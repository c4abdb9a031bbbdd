// A direct schedule run device to device: its steps enqueued on a device stream (issue 36).
//
// The executor (executor.h) runs a rank's schedule on the host, driving transports; here the
// same schedule, when it has only local and direct steps (copy, reduce, finalize, direct
// read/reduce of a peer's Scratch, signal, wait: the oneshot and twoshot allreduce and the
// direct allgather / reduce-scatter / all-to-all), becomes stream work over the ipc transport:
//   kCopy, kDirectRead     IpcTransport::Copy (device to device; a peer's window through its
//                          import): the copy engine or an SM kernel, per size (WEFT_IPC_COPY)
//   kReduce, kDirectReduce LaunchReduce (the same element operations as the host kernels)
//   kFinalize              LaunchFinalize (avg's division by nranks)
//   kSignal, kWait         the transport's stream flag write / flag wait
// Scratch is this rank's ipc window, a peer's Scratch is that peer's window. The stream runs
// the steps one after another, which keeps every order the schedule's execution rule allows
// (schedule.h: a window of 1, fences trivially honoured), so the checker's proof carries over.
#pragma once

#include <cstddef>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "device/device_runtime.h"
#include "transports/ipc/ipc_transport.h"
#include "weft/weft.h"

namespace weft {

struct StreamBuffers {
  const char* input = nullptr;  // the call's send buffer (device memory)
  char* output = nullptr;       // its receive buffer
  size_t elem = 0;              // bytes per element
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
};

// Whether the stream runs this kind of step (above).
bool IsStreamStep(StepOp op);
// Whether rs's Scratch fits a window of `window_bytes`.
bool ScratchFits(const RankSchedule& rs, size_t elem, size_t window_bytes);
// Whether every step of rs is one the stream can run (above), and its Scratch fits `window`.
bool StreamLowerable(const RankSchedule& rs, size_t elem, size_t window_bytes);
// Enqueues one stream step (IsStreamStep) of a schedule on `stream`.
Status EnqueueStreamStep(const Step& step, const StreamBuffers& b, ipc::IpcTransport& t,
                         device::DeviceRuntime& rt, device::StreamHandle stream);

// Enqueues rs on `stream`. Errors (a step that cannot run, a runtime refusal) name the step;
// after an error part of the schedule may be queued: the caller must treat the transport as
// failed (its signal counters ran ahead of the stream).
Status EnqueueStreamProgram(const RankSchedule& rs, const StreamBuffers& b, ipc::IpcTransport& t,
                            device::DeviceRuntime& rt, device::StreamHandle stream);

}  // namespace weft
