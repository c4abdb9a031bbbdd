// Submission of the C API's operations: run now (blocking), queue on a host stream, or keep
// for weftGroupEnd (weftGroupStart/End nest; consecutive send/recv on one communicator run
// together as one batch).
#include <algorithm>
#include <variant>
#include <vector>

#include "core/api_internal.h"
#include "core/device_calls.h"
#include "core/device_progress.h"

namespace weft {
namespace {

struct QueuedOp {
  weftComm* comm;
  std::variant<CollectiveCall, P2POp> op;
  weftStream_t stream;
};
thread_local int t_group_depth = 0;
thread_local std::vector<QueuedOp> t_group_ops;

}  // namespace

// Runs ops (already validated) on the stream or here: consecutive send/recv on the same
// communicator run together as one batch.
Status RunOps(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops) {
  Status first;
  std::vector<P2POp> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    Status st = RunP2P(comm, batch);
    if (first.ok()) first = st;
    batch.clear();
  };
  for (auto& op : ops) {
    if (std::holds_alternative<P2POp>(op)) {
      batch.push_back(std::get<P2POp>(op));
    } else {
      flush();
      Status st = RunCollective(comm, std::get<CollectiveCall>(op));
      if (first.ok()) first = st;
    }
  }
  flush();
  return first;
}

namespace {

Status Dispatch(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops,
                weftStream_t stream) {
  // Device buffers (or a device stream): queued on the device stream (core/device_calls.h).
  if (std::any_of(ops.begin(), ops.end(),
                  [&](const auto& op) { return NeedsDevicePath(comm, op, stream); }))
    return SubmitDeviceOps(comm, std::move(ops), stream);
  if (stream == nullptr) return RunOps(comm, std::move(ops));
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return InvalidArgument("stream=" + PtrStr(stream) +
                           " is not a weft host stream nor a device stream (use NULL, "
                           "weftStreamCreate or weftDeviceStreamCreate)");
  EnqueueOnStream(hs, [comm, ops = std::move(ops)]() mutable { return RunOps(comm, std::move(ops)); });
  return OkStatus();
}

}  // namespace

bool InGroup() { return t_group_depth > 0; }

Status Submit(weftComm* comm, std::variant<CollectiveCall, P2POp> op, weftStream_t stream) {
  // Fast path: a blocking collective outside a group runs right here, with no queueing.
  const bool device = NeedsDevicePath(comm, op, stream);
  if (!device) WaitDeviceJobs(comm);
  if (stream == nullptr && t_group_depth == 0 && std::holds_alternative<CollectiveCall>(op) && !device)
    return RunCollective(comm, std::get<CollectiveCall>(op));
  if (stream != nullptr && LookupStream(stream) == nullptr && !device)
    return InvalidArgument("stream=" + PtrStr(stream) +
                           " is not a weft host stream (use NULL or weftStreamCreate)");
  if (t_group_depth > 0) {
    t_group_ops.push_back(QueuedOp{comm, std::move(op), stream});
    return OkStatus();
  }
  std::vector<std::variant<CollectiveCall, P2POp>> ops;
  ops.push_back(std::move(op));
  return Dispatch(comm, std::move(ops), stream);
}

Status SubmitCollective(weftComm* comm, CollectiveCall&& call, weftStream_t stream) {
  // A blocking call outside a group runs here, before the call is moved into a variant.
  if (stream == nullptr && t_group_depth == 0 && !NeedsDevicePath(comm, call, stream)) {
    WaitDeviceJobs(comm);  // after the device calls issued before it (device_progress.h)
    return RunCollective(comm, call);
  }
  return Submit(comm, std::move(call), stream);
}

}  // namespace weft

using namespace weft;  // NOLINT: C API implementation file

extern "C" {

weftResult_t weftGroupStart(void) {
  ++t_group_depth;
  return weftSuccess;
}

weftResult_t weftGroupEnd(void) {
  if (t_group_depth == 0)
    return Report(InvalidUsage("weftGroupEnd without a matching weftGroupStart"));
  if (--t_group_depth > 0) return weftSuccess;
  std::vector<QueuedOp> ops;
  ops.swap(t_group_ops);
  // Keep each communicator's ops in call order; run communicators one after another.
  // (Ops of different communicators in one group on one thread would need concurrent
  // progress; we run them in order, which completes as long as the peers group alike.)
  Status first;
  std::vector<weftComm*> order;
  for (const QueuedOp& q : ops)
    if (std::find(order.begin(), order.end(), q.comm) == order.end()) order.push_back(q.comm);
  for (weftComm* c : order) {
    std::vector<std::variant<CollectiveCall, P2POp>> mine;
    weftStream_t stream = nullptr;
    for (QueuedOp& q : ops)
      if (q.comm == c) {
        mine.push_back(std::move(q.op));
        stream = q.stream;
      }
    Status st = Dispatch(c, std::move(mine), stream);
    if (first.ok()) first = st;
  }
  return Report(first.WithContext("weftGroupEnd"));
}

}  // extern "C"
