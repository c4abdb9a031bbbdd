// Communicator: rank, size, transports to every peer, algorithm choice, schedule cache, and
// the sequence number that tags every operation's messages.
//
// Lifecycle: created by weftCommInitRank / weftCommInitAll / weftCommInitFromEnv /
// weftCommSplit (src/core/init.cc); a communicator whose creation failed still exists as a
// handle whose calls all fail with the initialization error, so that callers who ignore the
// init result get a clear message instead of a crash. Destroy/Abort free it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "algorithms/algo_override.h"
#include "algorithms/direct_pattern.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "common/status.h"
#include "core/flight_recorder.h"
#include "core/registered_memory.h"
#include "exec/executor.h"
#include "exec/scratch.h"
#include "exec/tiny_program.h"
#include "transports/transport.h"
#include "weft/weft.h"

namespace weft {
class Bootstrap;
struct ElasticState;
struct IpcCommState;
class InprocHub;
class Fabric;
class Selector;
}  // namespace weft

namespace weft {
// The shape of a call that determines its plan (the reduction op does not: schedules are
// op-agnostic and kFinalize is a no-op unless the op is avg).
struct PlanKey {
  Collective collective;
  size_t count;
  size_t elem_size;
  int root;
  bool out_of_place = false;  // ScheduleRequest::out_of_place: such plans skip in-place staging
  bool zero_copy = false;     // ScheduleRequest::peer_buffers_mapped: registered buffers read in place
  bool operator==(const PlanKey& o) const {
    return collective == o.collective && count == o.count && elem_size == o.elem_size &&
           root == o.root && out_of_place == o.out_of_place && zero_copy == o.zero_copy;
  }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = std::hash<size_t>()(k.count);
    h ^= (static_cast<size_t>(k.collective) << 48) ^ (k.elem_size << 40) ^
         (static_cast<size_t>(k.root) << 20) ^ (static_cast<size_t>(k.out_of_place) << 63) ^
         (static_cast<size_t>(k.zero_copy) << 62);
    return h;
  }
};
struct Plan {
  const AlgorithmInfo* algorithm = nullptr;
  std::shared_ptr<const Schedule> schedule;
  std::string what;  // "allreduce ring", for messages
  uint32_t shape_hash = 0;  // HashCallShape (core/call_check.h) of the call shape + algorithm
  std::vector<int> peers;   // distinct peers of this rank's steps (for the flight recorder)
  // Direct window use (ScheduleRequest::window_half): `uses_window` when the schedule has
  // direct steps; `holds_window` when it is a single-round schedule that returns while peers
  // may still read this rank's window: then `schedule` uses half 0 and `other_half` half 1,
  // and calls alternate between them (weftComm::window).
  bool uses_window = false;
  bool holds_window = false;
  std::shared_ptr<const Schedule> other_half;
  // Built with ScheduleRequest::peer_buffers_mapped: reads peers' registered buffers in place
  // (the call's agreement said so on every rank; core/registered_memory.h).
  bool zero_copy = false;
  // The tiny-call path (exec/tiny_program.h): this rank's schedule (and other half's) compiled
  // for the per-call fast loop; null when it does not qualify or WEFT_TINY_PATH=0.
  std::shared_ptr<const TinyProgram> tiny, tiny_other_half;
};
// Appended to the algorithm's name in a zero-copy plan's descriptor hash (ranks that disagree
// fail as mismatched) and in weftCommGetLastAlgorithm ("twoshot+zerocopy").
constexpr const char* kZeroCopySuffix = "+zerocopy";
}  // namespace weft

namespace weft {
// A Status several threads read while one may set it: weftCommGetAsyncError polls it (torch's
// watchdog thread does, through the NCCL shim) while a failing collective sets it.
class GuardedStatus {
 public:
  void Set(const Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    status_ = s;
  }
  void SetIfOk(const Status& s) {  // the first failure stays
    std::lock_guard<std::mutex> l(mu_);
    if (status_.ok()) status_ = s;
  }
  Status Get() const {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }
  bool ok() const { return Get().ok(); }

 private:
  mutable std::mutex mu_;
  Status status_;
};
}  // namespace weft

// The handle type of the C API (weftComm_t = weftComm*).
struct weftComm {
  uint64_t magic = 0;  // kCommMagic while alive
  int rank = 0;
  int nranks = 0;
  int local_rank = 0;
  weft::Status init_error;  // non-ok: init failed; every call reports it
  weft::GuardedStatus sticky_error;  // a failed collective left the transports unusable
  double timeout_s = 300;
  bool check_calls = false;  // WEFT_CHECK=1: fingerprint exchange before each collective

  std::unique_ptr<weft::Bootstrap> bootstrap;  // null for weftCommInitAll
  std::shared_ptr<weft::InprocHub> hub;
  std::vector<std::unique_ptr<weft::Transport>> transports;  // owned, any kind
  std::vector<weft::Transport*> peer_transport;               // index = peer rank
  weft::DirectTransport* direct = nullptr;  // maps the windows of this rank's host peers
  std::vector<std::vector<int>> host_groups;  // ranks grouped by host
  std::shared_ptr<const weft::Fabric> fabric;
  // Chooses every collective's algorithm (one path: the call's size and WEFT_ALGO are applied
  // there). Process communicators get one with the fabric's model at creation; thread
  // communicators one without a model on their first collective.
  std::shared_ptr<weft::Selector> selector;

  weft::AlgoOverrides overrides;
  weft::Status overrides_error;  // WEFT_ALGO was set but invalid

  uint64_t collective_seq = 0;  // identical on every rank: tags collective messages
  weft::ScratchBuffer heap_scratch{weft::MemKind::kHost};  // host schedules' scratch (executor.h)
  // Decided plans (algorithm + built schedule) per call shape, so a repeated call costs a hash
  // lookup: tiny collectives have a latency budget of a few hundred nanoseconds.
  std::unordered_map<weft::PlanKey, weft::Plan, weft::PlanKeyHash> plans;
  std::map<std::string, std::shared_ptr<const weft::Schedule>> schedule_cache;  // alltoallv
  const std::string* last_algorithm = nullptr;  // name of the last collective's algorithm
  // Which window half the next single-round direct call uses and whether peers may still read
  // the window (algorithms/direct_pattern.h).
  weft::WindowSequencer window;

  // weftCommRegister's registrations and the zero-copy agreement's state
  // (core/registered_memory.h). Used under exec_mu.
  weft::CommRegistry registry;

  // The last operations (WEFT_FLIGHT_RECORDER entries), dumped when one fails for a peer's
  // or the clock's reason. Written under exec_mu.
  weft::FlightRecorder recorder;

  std::mutex exec_mu;  // one operation at a time; Abort waits for it

  // Revoke, shrink and grow's state (core/elastic.h): process communicators only.
  std::shared_ptr<weft::ElasticState> elastic;

  // Device calls device to device through the ipc transport (core/device_ipc.h): set up on
  // the first device call that takes that path. Used by the calling thread.
  std::shared_ptr<weft::IpcCommState> ipc;
};

namespace weft {

constexpr uint64_t kCommMagic = 0x77656674636f6d6dULL;  // "weftcomm"
constexpr uint64_t kP2PTag = 0xfffffffffffffff0ULL;       // tag of send/recv messages

// Checks that `comm` is a live communicator that can run operations.
Status CheckComm(const weftComm* comm);

// Takes `comm` for one operation (*lock owns exec_mu on success). One thread at a time, as
// NCCL's: a second thread entering while another runs an operation would take sequence numbers
// in a different order on each rank and mix the calls' data, so it fails at once with
// weftInvalidUsage naming the communicator. Costs what the lock did (a try_lock).
Status ClaimComm(weftComm* comm, std::unique_lock<std::mutex>* lock);

// Everything one collective call needs after argument checking.
struct CollectiveCall {
  Collective collective = Collective::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
  int root = 0;
  // all-to-allv (copied: the call may run later on a stream)
  std::vector<size_t> sendcounts, sdispls, recvcounts, rdispls;
};

// Runs a collective to completion on the calling thread: BeginCall, the plan (cached per call
// shape) and its execution, EndCall.
Status RunCollective(weftComm* comm, const CollectiveCall& call);

// The one run pipeline every collective goes through (plain, v-, zero-copy and compressed
// calls; the job-wide WEFT_COMPRESSION path is a compressed call): BeginCall claims the
// communicator for this thread, refuses a failed one, takes the call's sequence number and
// opens its flight-recorder entry; the caller plans and executes; EndCall completes the entry
// (dumping the recorder when the failure left the communicator unusable) and the call's
// WEFT_METRICS_FILE record. `call` describes the call as the recorder shows it.
struct CallScope {
  std::unique_lock<std::mutex> lock;
  uint64_t seq = 0;
  uint64_t bytes = 0;
  weft::FlightEntry* entry = nullptr;
  int64_t start_ns = 0;
};
Status BeginCall(weftComm* comm, const CollectiveCall& call, uint64_t bytes, CallScope* scope);
// The plan step of a call whose algorithm is given (compressed calls): the schedule
// `algorithm` builds for `req`, from the communicator's schedule cache when the same shape
// (counts, codec, groups) ran before.
StatusOr<std::shared_ptr<const Schedule>> PlanSchedule(weftComm* comm, const AlgorithmInfo& algorithm,
                                                       const ScheduleRequest& req);
Status EndCall(weftComm* comm, const CollectiveCall& call, const CallScope& scope, Status st);

// What one execution of a rank's schedule on the communicator may add to the plain call.
struct ExecExtras {
  const std::vector<PeerUserBuffers>* peer_buffers = nullptr;  // zero-copy: peers' buffers
  const weftCompression* codec = nullptr;                        // codec steps' spec
  CodecFeedback feedback;  // ExecContext::feedback (error feedback of the encode steps)
  float* input_patch = nullptr;                              // ExecBuffers::patch
  const float* input_addend = nullptr;                       // ExecBuffers::addend
  const std::vector<ElementRange>* input_patched = nullptr;  // ExecBuffers::patched
  ScratchBuffer* scratch = nullptr;                              // default: the communicator's
  size_t first_step = 0;  // ExecContext::first_step: the tiny path ran the steps before it
};
// Runs `rs` through the executor with the communicator's transports, timeout and scratch. A
// mismatch between ranks' calls becomes weftInvalidUsage, and any failure makes the
// communicator's sticky error (messages may be half-sent: later operations could not be
// matched safely, as NCCL's). Used by every collective path (plain, zero-copy, compressed).
Status ExecuteOnComm(weftComm* comm, const RankSchedule& rs, int window, weftDataType_t dtype,
                     weftRedOp_t op, uint64_t tag, const void* in, void* out, const char* what,
                     const ExecExtras& extras = ExecExtras());
// The failure half of ExecuteOnComm, for paths that run steps without it (the tiny path):
// the mismatch conversion and the sticky error. Returns the error to report.
Status FailedOnComm(weftComm* comm, Status st);

// One point-to-point operation (weftSend / weftRecv).
struct P2POp {
  bool is_send = true;
  void* buff = nullptr;
  size_t count = 0;
  weftDataType_t dtype = weftFloat32;
  int peer = 0;
};
// Runs a batch of point-to-point operations together (a group), so that matched pairs cannot
// deadlock whatever their order.
Status RunP2P(weftComm* comm, const std::vector<P2POp>& ops);

// Chooses the algorithm for a request through the communicator's selector (which applies
// WEFT_ALGO, the tuning file, then its model or defaults) and fills request->chunk. Exposed
// for tools and tests.
StatusOr<const AlgorithmInfo*> ChooseAlgorithm(weftComm* comm, ScheduleRequest* request,
                                               size_t elem_size, weftRedOp_t op);

// Allgathers `bytes` from every rank over the data path (a tagged ring allgather, one
// operation of the communicator: every rank calls it at the same point of its call sequence).
// For set-up exchanges that happen after init (the ipc transport's windows). *all holds
// nranks * bytes.
Status AllGatherOnComm(weftComm* comm, const void* mine, size_t bytes, void* all, const char* what);

// How many communicators were freed so far (counted where handles are freed, api_checks.cc):
// a thread's cached plan or live-handle check stays valid while it has not changed.
uint64_t CommsFreedCount();

}  // namespace weft
