// The per-communicator progress thread of stream-ordered device calls (device_calls.cc): runs
// queued jobs in order, off the caller's thread, and keeps the first failure of a job that ran
// after its call returned, for weftCommGetAsyncError.
#pragma once

#include <functional>

#include "common/status.h"

struct weftComm;

namespace weft {

// Queues job on comm's progress thread (started on first use). Jobs run in submission order.
// Blocks while kMaxDeviceJobs of comm's jobs are unfinished: each holds pinned staging as large
// as its call, and unbounded queues of large calls made every call fault in fresh memory.
inline constexpr size_t kMaxDeviceJobs = 4;
void EnqueueDeviceJob(weftComm* comm, std::function<void()> job);
// Records a job's failure (the first one sticks).
void SetDeviceAsyncError(const weftComm* comm, const Status& error);
// The first failure of comm's device jobs, OkStatus when none.
Status DeviceAsyncError(const weftComm* comm);
// Waits until every device job queued on comm so far has finished: a host-buffer call issued
// after device calls runs after them, in issue order as on every rank (otherwise it would race
// the progress thread for the communicator and fail as a second thread). Free for a process
// that never queued a device job.
void WaitDeviceJobs(const weftComm* comm);
// Finishes comm's queued jobs and stops its thread (communicator destruction).
void StopDeviceProgress(const weftComm* comm);

}  // namespace weft
