// nccl_group.cc: errors, initialization states and group semantics of the NCCL shim.
//
// NCCL's rules reproduced here (nccl.h, "Group semantics"): calls between ncclGroupStart
// and ncclGroupEnd return at once and are issued together at the outermost ncclGroupEnd, so
// matched send/recv never deadlock and one thread may drive several communicators;
// ncclCommInitRank inside a group completes at ncclGroupEnd; a config with blocking = 0
// makes init return ncclInProgress and ncclCommGetAsyncError report when it is done.
#include "nccl_shim.h"

#include <map>
#include <utility>

namespace weft_nccl {
namespace {

thread_local std::string t_last_error;
thread_local int t_group_depth = 0;

struct QueuedCall {
  ncclComm* comm;
  std::function<weftResult_t()> run;
  std::function<void()> after;  // once the weft group holding run has ended (may be empty)
};
thread_local std::vector<QueuedCall> t_queued_calls;

struct QueuedInit {
  ncclComm* comm;
  std::function<weftResult_t()> run;
};
thread_local std::vector<QueuedInit> t_queued_inits;

// The outcome of work run on another thread: its code and weft's message from there.
struct Outcome {
  ncclResult_t code = ncclSuccess;
  std::string message;
};

Outcome Capture(weftResult_t result, weftComm_t comm) {
  if (result == weftSuccess) return {};
  return {MapResult(result), weftGetLastError(comm)};
}

void FinishInit(ncclComm* comm, weftResult_t result) {
  if (result != weftSuccess) comm->init_error = weftGetLastError(comm->weft);
  comm->init_state.store(MapResult(result), std::memory_order_release);
}

// Inits are collective: each runs on its own thread so several communicators of this
// process (ncclCommInitAll-style, or two comms created in one group) can join together.
ncclResult_t RunQueuedInits() {
  std::vector<QueuedInit> inits;
  inits.swap(t_queued_inits);
  std::vector<std::thread> threads;
  for (QueuedInit& init : inits)
    threads.emplace_back([&init] { FinishInit(init.comm, init.run()); });
  for (std::thread& t : threads) t.join();
  ncclResult_t first = ncclSuccess;
  for (QueuedInit& init : inits) {
    int state = init.comm->init_state.load();
    if (state != ncclSuccess && first == ncclSuccess)
      first = Fail(static_cast<ncclResult_t>(state), init.comm->init_error);
    if (init.comm->discard_after_init) delete init.comm;
  }
  return first;
}

// One communicator's queued calls inside one weft group (so its sends and receives are
// posted together).
Outcome RunCommCalls(ncclComm* comm, std::vector<QueuedCall>& calls) {
  weftResult_t r = weftGroupStart();
  if (r != weftSuccess) return Capture(r, comm->weft);
  Outcome first;
  for (QueuedCall& call : calls) {
    weftResult_t cr = call.run();
    if (cr != weftSuccess && first.code == ncclSuccess) first = Capture(cr, comm->weft);
  }
  r = weftGroupEnd();
  if (r != weftSuccess && first.code == ncclSuccess) first = Capture(r, comm->weft);
  for (QueuedCall& call : calls)
    if (call.after) call.after();
  return first;
}

ncclResult_t RunQueuedCalls() {
  std::vector<QueuedCall> queued;
  queued.swap(t_queued_calls);
  // Per communicator, in call order (std::map keeps the partition deterministic).
  std::map<ncclComm*, std::vector<QueuedCall>> by_comm;
  for (QueuedCall& q : queued) by_comm[q.comm].push_back(std::move(q));
  std::vector<Outcome> outcomes(by_comm.size());
  if (by_comm.size() == 1) {
    outcomes[0] = RunCommCalls(by_comm.begin()->first, by_comm.begin()->second);
  } else {
    std::vector<std::thread> threads;
    size_t i = 0;
    for (auto& [comm, calls] : by_comm) {
      Outcome* out = &outcomes[i++];
      threads.emplace_back([comm = comm, &calls = calls, out] { *out = RunCommCalls(comm, calls); });
    }
    for (std::thread& t : threads) t.join();
  }
  for (const Outcome& o : outcomes)
    if (o.code != ncclSuccess) return Fail(o.code, o.message);
  return ncclSuccess;
}

}  // namespace

ncclResult_t Fail(ncclResult_t code, const std::string& msg) {
  t_last_error = msg;
  return code;
}

const char* LastError() { return t_last_error.c_str(); }

ncclResult_t MapResult(weftResult_t result) {
  switch (result) {
    case weftSuccess: return ncclSuccess;
    case weftUnhandledCudaError: return ncclUnhandledCudaError;
    case weftSystemError: return ncclSystemError;
    case weftInternalError: return ncclInternalError;
    case weftInvalidArgument: return ncclInvalidArgument;
    case weftInvalidUsage: return ncclInvalidUsage;
    case weftInProgress: return ncclInProgress;
    // NCCL has no timeout code: a peer that stopped progressing is a remote failure
    // (ncclGetLastError still says "timeout" and names the peer and step).
    case weftRemoteError:
    case weftTimeout: return ncclRemoteError;
    default: return ncclInternalError;
  }
}

ncclResult_t FromWeft(weftResult_t result, weftComm_t comm) {
  if (result == weftSuccess) return ncclSuccess;
  return Fail(MapResult(result), weftGetLastError(comm));
}

ncclResult_t ReadyComm(ncclComm* comm, const char* call, bool allow_suspended) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  if (comm->init_thread.joinable()) comm->init_thread.join();  // non-blocking init
  int state = comm->init_state.load(std::memory_order_acquire);
  if (state == ncclInProgress)
    return Fail(ncclInvalidUsage, std::string(call) +
                                      ": the communicator's initialization has not run yet "
                                      "(it was queued in a group: call ncclGroupEnd first)");
  if (state != ncclSuccess)
    return Fail(static_cast<ncclResult_t>(state),
                std::string(call) + ": initialization failed: " + comm->init_error);
  if (!allow_suspended && comm->suspended.load(std::memory_order_acquire))
    return Fail(ncclInvalidUsage,
                std::string(call) + ": the communicator is suspended (call ncclCommResume first)");
  return ncclSuccess;
}

bool InGroup() { return t_group_depth > 0; }

ncclResult_t RunOrQueue(ncclComm* comm, std::function<weftResult_t()> fn,
                        std::function<void()> after) {
  if (t_group_depth > 0) {
    t_queued_calls.push_back({comm, std::move(fn), std::move(after)});
    return ncclSuccess;
  }
  ncclResult_t r = FromWeft(fn(), comm->weft);
  if (after) after();
  return r;
}

ncclResult_t StartInit(ncclComm* comm, bool blocking, std::function<weftResult_t()> init) {
  if (t_group_depth > 0) {
    t_queued_inits.push_back({comm, std::move(init)});
    return ncclSuccess;
  }
  if (!blocking) {
    comm->init_thread = std::thread([comm, init = std::move(init)] { FinishInit(comm, init()); });
    return ncclInProgress;
  }
  FinishInit(comm, init());
  int state = comm->init_state.load();
  return state == ncclSuccess ? ncclSuccess
                              : Fail(static_cast<ncclResult_t>(state), comm->init_error);
}

ncclResult_t GroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t GroupEnd() {
  if (t_group_depth == 0)
    return Fail(ncclInvalidUsage, "ncclGroupEnd: no matching ncclGroupStart");
  if (--t_group_depth > 0) return ncclSuccess;
  ncclResult_t r = RunQueuedInits();
  if (r != ncclSuccess) {
    t_queued_calls.clear();
    return r;
  }
  return RunQueuedCalls();
}

}  // namespace weft_nccl
