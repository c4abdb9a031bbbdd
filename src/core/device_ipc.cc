#include "core/device_ipc.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "algorithms/registry.h"
#include "common/log.h"
#include "core/api_internal.h"
#include "core/device_hybrid.h"
#include "core/device_progress.h"
#include "device/device_runtime.h"
#include "exec/stream_program.h"
#include "kernels/dtype.h"
#include "topo/fabric.h"
#include "transports/ipc/ipc_transport.h"
#include "tune/selector.h"

namespace weft {

using device::DeviceRuntime;
using device::EventHandle;

// A call's end event is reused kEvents calls later: by then its watchdog job has finished
// (at most kMaxDeviceJobs jobs of the communicator are unfinished at any time).
inline constexpr size_t kEvents = 2 * kMaxDeviceJobs;

struct IpcCommState {
  bool tried = false;                 // set-up ran (transport, or setup_error)
  Status setup_error;
  std::unique_ptr<ipc::IpcTransport> transport;
  std::vector<EventHandle> events;    // the calls' end events, a ring
  size_t calls = 0;
  EventHandle last_done = nullptr;    // the previous call's end: the next call waits for it
  // Built schedules by (collective, count, element size, algorithm).
  std::map<std::tuple<int, size_t, size_t, std::string>, std::shared_ptr<const Schedule>> plans;
  ~IpcCommState() {
    for (EventHandle e : events) (void)device::ActiveRuntime().EventDestroy(e);
  }
};

namespace {

bool IpcCollective(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kAllGather ||
         c == Collective::kReduceScatter || c == Collective::kAllToAll ||
         c == Collective::kBroadcast || c == Collective::kReduce;
}

const ipc::IpcOptions& Options(Status* error) {
  static const StatusOr<ipc::IpcOptions> options = ipc::IpcOptionsFromEnv();
  static const ipc::IpcOptions off = [] { ipc::IpcOptions o; o.enabled = false; return o; }();
  if (!options.ok()) {
    *error = options.status();
    return off;
  }
  return *options;
}

// The call's buffers are device memory (both), *device the receive buffer's. Only whether
// they are device memory decides (as NCCL, every rank passes device buffers), not on which
// device: that is rank-local, and ranks deciding differently would run different paths. A
// buffer on another device than the window is reached as any peer memory is.
// Broadcast's non-root ranks use only their receive buffer and reduce's only their send
// buffer (NCCL lets them pass NULL for the other): only the buffers a rank uses count.
bool DeviceBuffers(const CollectiveCall& call, int rank, int* device) {
  DeviceRuntime& rt = device::ActiveRuntime();
  const device::PointerAttributes s = rt.PointerInfo(call.sendbuff), r = rt.PointerInfo(call.recvbuff);
  const bool uses_send = call.collective != Collective::kBroadcast || rank == call.root;
  const bool uses_recv = call.collective != Collective::kReduce || rank == call.root;
  if ((uses_send && !s.is_device) || (uses_recv && !r.is_device)) return false;
  *device = uses_recv ? r.device : s.device;
  return true;
}

// On one host, a direct algorithm; across hosts, hierarchical_direct (direct steps inside each
// host, messages across). WEFT_ALGO's choice when it is one of those; any other forced
// algorithm: nullptr (staged).
const AlgorithmInfo* ChooseIpcAlgorithm(const weftComm* comm, const CollectiveCall& call, size_t elem) {
  const bool per_rank_blocks = call.collective == Collective::kAllGather ||
                               call.collective == Collective::kReduceScatter ||
                               call.collective == Collective::kAllToAll;
  const bool one_host = comm->host_groups.size() <= 1;
  const size_t bytes = call.count * elem * (per_rank_blocks ? static_cast<size_t>(comm->nranks) : 1);
  auto usable = [one_host](const AlgorithmInfo* info) {
    return info != nullptr && (one_host ? info->direct : info->name == "hierarchical_direct");
  };
  if (const std::string* forced = comm->overrides.Lookup(call.collective, bytes)) {
    const AlgorithmInfo* info = FindAlgorithm(call.collective, *forced);
    return usable(info) ? info : nullptr;
  }
  // One host whose GPU ranks the fabric models: the selector weighs the IPC algorithms against
  // staging (src/tune/device_choice.cc; the same answer on every rank). A fabric without GPU
  // ranks (discovery found none, e.g. no NVML) cannot weigh them: the fixed rule below.
  const Fabric* fabric = comm->selector != nullptr ? comm->selector->fabric() : nullptr;
  if (one_host && fabric != nullptr && fabric->IsGpu(comm->rank)) {
    const std::string chosen = comm->selector->ChooseDevice(call.collective, bytes, elem, call.root);
    if (chosen == "staged") return nullptr;
    const AlgorithmInfo* info = FindAlgorithm(call.collective, chosen);
    return usable(info) ? info : nullptr;
  }
  const char* name = !one_host ? "hierarchical_direct"
                     : call.collective != Collective::kAllReduce ? "direct"
                     : bytes <= kOneshotMaxBytes ? "oneshot" : "twoshot";
  const AlgorithmInfo* info = FindAlgorithm(call.collective, name);
  return usable(info) ? info : nullptr;
}

// The ranks of this rank's host (all of them on one host).
std::vector<int> HostRanks(const weftComm* comm) {
  for (const std::vector<int>& g : comm->host_groups)
    if (std::find(g.begin(), g.end(), comm->rank) != g.end()) return g;
  std::vector<int> all;
  for (int r = 0; r < comm->nranks; ++r) all.push_back(r);
  return all;
}

Status SetUp(weftComm* comm, IpcCommState* st, int device, const ipc::IpcOptions& options) {
  st->tried = true;
  WaitDeviceJobs(comm);  // the exchange is an operation of the communicator: after them
  DeviceRuntime& rt = device::ActiveRuntime();
  auto allgather = [comm](const void* mine, size_t bytes, void* all) {
    return AllGatherOnComm(comm, mine, bytes, all, "ipc window exchange");
  };
  StatusOr<std::unique_ptr<ipc::IpcTransport>> t =
      ipc::IpcTransport::Create(rt, comm->rank, comm->nranks, device, HostRanks(comm), options, allgather);
  if (!t.ok()) return st->setup_error = t.status().WithContext("rank " + std::to_string(comm->rank) + ": ipc set-up");
  st->transport = std::move(*t);
  st->events.assign(kEvents, nullptr);
  for (EventHandle& e : st->events) {
    Status s = rt.EventCreate(&e);
    if (!s.ok()) return st->setup_error = s.WithContext("ipc set-up: events");
  }
  WEFT_INFO("transports (device buffers): %s; window %zu bytes on device %d",
            st->transport->Describe().c_str(), st->transport->window_bytes(), device);
  return OkStatus();
}

StatusOr<std::shared_ptr<const Schedule>> PlanFor(weftComm* comm, IpcCommState* st,
                                                  const CollectiveCall& call,
                                                  const AlgorithmInfo& algo, size_t elem) {
  const auto key = std::make_tuple(static_cast<int>(call.collective), call.count, elem, algo.name);
  auto it = st->plans.find(key);
  if (it != st->plans.end()) return it->second;
  ScheduleRequest req;
  req.collective = call.collective;
  req.nranks = comm->nranks;
  req.count = call.count;
  req.root = call.root;
  req.all_ranks_mappable = comm->host_groups.size() <= 1;
  req.groups_mappable = true;
  req.direct_scratch_elems = st->transport->window_bytes() / std::max<size_t>(elem, 1);  // whole window
  req.groups = comm->host_groups.empty() ? std::vector<std::vector<int>>{HostRanks(comm)} : comm->host_groups;
  // Across hosts every rank's steps are built: whether the call can run this way must be
  // decided alike on every rank (TrySubmitIpc), and ranks' steps differ there.
  req.scope = comm->host_groups.size() > 1 ? PlanScope::AllRanks() : PlanScope::ForRank(comm->rank);
  StatusOr<Schedule> built = BuildSchedule(algo, req);
  if (!built.ok()) return built.status();
  auto plan = std::make_shared<const Schedule>(std::move(*built));
  st->plans.emplace(key, plan);
  return plan;
}

// The watchdog of one call (see device_ipc.h), on the communicator's progress thread.
void Watch(weftComm* comm, const std::shared_ptr<IpcCommState>& st, EventHandle done,
           double timeout_s, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  DeviceRuntime& rt = device::ActiveRuntime();
  const Clock::time_point start = Clock::now();
  Clock::time_point next_check = start + std::chrono::milliseconds(100);
  int sleep_us = 10;
  Status failure;
  while (true) {
    const Status q = rt.EventQuery(done);
    if (q.ok()) return;
    if (q.code() != weftInProgress) {
      failure = q;
      break;
    }
    const Clock::time_point now = Clock::now();
    std::string why;
    if (now >= next_check) {
      next_check = now + std::chrono::milliseconds(100);
      if (st->transport->CheckPeers(&why) >= 0) {
        failure = RemoteError(why);
        break;
      }
    }
    if (timeout_s > 0 && now - start > std::chrono::duration<double>(timeout_s)) {
      failure = TimeoutError("no completion within " + std::to_string(timeout_s) +
                             " s (WEFT_TIMEOUT): a peer stalled or called something else");
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 1000);
  }
  SetDeviceAsyncError(comm, failure.WithContext(what));
  (void)st->transport->ReleaseWaits();
  (void)rt.EventSynchronize(done);  // the released stream drains; the event is then reusable
}

Status Enqueue(weftComm* comm, const std::shared_ptr<IpcCommState>& st, const CollectiveCall& call,
               const Schedule& plan, weftStream_t stream, bool hybrid) {
  DeviceRuntime& rt = device::ActiveRuntime();
  ipc::IpcTransport& t = *st->transport;
  const std::string what = "rank " + std::to_string(comm->rank) + ": " +
                           CollectiveName(call.collective) + " " + plan.algorithm +
                           " on device buffers over ipc (stream " + PtrStr(stream) + ")";
  if (st->last_done != nullptr) WEFT_RETURN_IF_ERROR(rt.StreamWaitEvent(stream, st->last_done));
  std::shared_ptr<HybridJob> host_half;  // messages across hosts (device_hybrid.h)
  Status s;
  if (hybrid) {
    StatusOr<std::shared_ptr<HybridJob>> job = EnqueueHybrid(comm, call, plan, t, stream);
    if (job.ok()) host_half = *job;
    s = job.status();
  } else {
    s = EnqueueStreamProgram(plan.ranks[comm->rank], StreamBuffersOf(call), t, rt, stream);
  }
  EventHandle done = st->events[st->calls++ % kEvents];
  if (s.ok()) s = rt.EventRecord(done, stream);
  if (!s.ok()) {
    // Part of the schedule may be queued and the counters ran ahead: the transport is done.
    (void)t.ReleaseWaits();
    return s.WithContext(what);
  }
  st->last_done = done;
  const double timeout = comm->timeout_s;
  EnqueueDeviceJob(comm, [comm, st, done, timeout, what, host_half] {
    if (host_half) RunHybrid(comm, *host_half, *st->transport, what);
    Watch(comm, st, done, timeout, what);
  });
  return OkStatus();
}

}  // namespace

Status TrySubmitIpc(weftComm* comm, const std::vector<std::variant<CollectiveCall, P2POp>>& ops,
                    weftStream_t stream, bool* taken) {
  *taken = false;
  if (ops.size() != 1 || comm->bootstrap == nullptr) return OkStatus();
  const auto* call = std::get_if<CollectiveCall>(&ops[0]);
  if (call == nullptr || !IpcCollective(call->collective) || !comm->overrides_error.ok()) return OkStatus();
  Status options_error;
  const ipc::IpcOptions& options = Options(&options_error);
  if (!options_error.ok()) return options_error;  // a bad WEFT_IPC* value fails every such call
  int device = -1;
  if (!options.enabled || !DeviceBuffers(*call, comm->rank, &device)) return OkStatus();
  const size_t elem = TypeSize(call->dtype);
  const AlgorithmInfo* algo = ChooseIpcAlgorithm(comm, *call, elem);
  if (algo == nullptr) return OkStatus();
  if (comm->ipc == nullptr) comm->ipc = std::make_shared<IpcCommState>();
  std::shared_ptr<IpcCommState> st = comm->ipc;
  if (!st->tried) (void)SetUp(comm, st.get(), device, options);
  *taken = true;
  if (!st->setup_error.ok()) return st->setup_error;
  if (st->transport->failed())
    return RemoteError("the communicator's ipc transport failed earlier: " + DeviceAsyncError(comm).message());
  StatusOr<std::shared_ptr<const Schedule>> plan = PlanFor(comm, st.get(), *call, *algo, elem);
  if (!plan.ok()) return plan.status().WithContext("ipc: " + algo->name);
  const size_t window = st->transport->window_bytes();
  // Across hosts always the hybrid form, even for a rank without messages in this call: every
  // rank's call then takes one sequence number (device_hybrid.h), and every rank must be able
  // to run its steps so (e.g. Scratch within the window), else all stage the call.
  const bool hybrid = comm->host_groups.size() > 1;
  bool lowerable = true;
  for (int r = 0; r < comm->nranks; ++r)
    if (hybrid || r == comm->rank) {
      const RankSchedule& rs = (*plan)->ranks[r];
      lowerable = lowerable && (hybrid ? HybridLowerable(rs, elem, window) : StreamLowerable(rs, elem, window));
    }
  if (!lowerable) {
    *taken = false;
    return OkStatus();
  }
  comm->last_algorithm = &algo->name;
  return Enqueue(comm, st, *call, **plan, stream, hybrid);
}

size_t IpcCallCount(const weftComm* comm) { return comm->ipc ? comm->ipc->calls : 0; }

void ReleaseIpc(weftComm* comm) { comm->ipc.reset(); }

}  // namespace weft
