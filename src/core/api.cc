// The C API (include/weft/weft.h): argument checking, error reporting, groups, host streams.
//
// Every entry point turns internal Status values into a weftResult_t and records the message
// for weftGetLastError() on the calling thread. Messages name the argument and its value.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <variant>

#include "common/log.h"
#include "compress/compress_error.h"
#include "compress/job_wide_compression.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/init.h"
#include "kernels/dtype.h"
#include "transports/inproc/inproc_transport.h"
#include "weft/weft.h"

namespace weft {
namespace {
thread_local std::string t_last_error;
}  // namespace

void SetLastErrorMessage(const std::string& message) { t_last_error = message; }

namespace {

weftResult_t Report(const Status& s) {
  if (!s.ok()) {
    t_last_error = s.message();
    WEFT_WARN("%s: %s", weftGetErrorString(s.code()), s.message().c_str());
  }
  return s.code();
}

std::string PtrStr(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

// ---- argument checks ----

Status CheckType(weftDataType_t t) {
  if (IsValidDataType(t)) return OkStatus();
  if (t == weftFloat8e4m3 || t == weftFloat8e5m2)
    return InvalidArgument("datatype=" + std::to_string(static_cast<int>(t)) +
                           " (fp8) is reserved and not yet supported by collectives");
  return InvalidArgument("datatype=" + std::to_string(static_cast<int>(t)) +
                         " is not a valid weftDataType_t");
}

Status CheckOp(weftRedOp_t op) {
  if (IsValidRedOp(op)) return OkStatus();
  return InvalidArgument("op=" + std::to_string(static_cast<int>(op)) +
                         " is not a valid weftRedOp_t");
}

// count * multiplier * elem must fit in a signed size (no buffer can be larger).
Status CheckCount(const char* name, size_t count, size_t multiplier, size_t elem) {
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
  if (elem == 0) return OkStatus();
  if (multiplier == 0 || count <= limit / multiplier / elem) return OkStatus();
  return InvalidArgument(std::string(name) + "=" + std::to_string(count) +
                         " overflows: " + std::to_string(count) + " x " +
                         std::to_string(multiplier) + " x " + std::to_string(elem) +
                         " bytes does not fit in a buffer");
}

Status CheckBuffer(const char* name, const void* p, size_t count) {
  if (p == nullptr && count > 0)
    return InvalidArgument(std::string(name) + " is NULL with count=" + std::to_string(count));
  return OkStatus();
}

Status CheckRank(const char* name, int value, const weftComm* comm) {
  if (value < 0 || value >= comm->nranks)
    return InvalidArgument(std::string(name) + "=" + std::to_string(value) +
                           " is outside [0, " + std::to_string(comm->nranks) + ")");
  return OkStatus();
}

// One side of an all-to-allv: counts[p] elements at displs[p]. Every block's end
// (displs[p] + counts[p]) and its size in bytes, and the sum of all counts, are computed
// without wrap-around: an unchecked unsigned sum lets (SIZE_MAX - 1) + 2 == 0 pass and the
// copy then reads or writes before the buffer. *extent = elements the buffer must hold.
Status CheckBlockTable(const char* side, const size_t* counts, const size_t* displs, int nranks,
                       size_t elem, size_t* extent) {
  const std::string cname = std::string(side) + "counts", dname = side[0] == 's' ? "sdispls" : "rdispls";
  size_t total = 0;
  *extent = 0;
  for (int p = 0; p < nranks; ++p) {
    const std::string at = "[" + std::to_string(p) + "]";
    WEFT_RETURN_IF_ERROR(CheckCount((cname + at).c_str(), counts[p], 1, elem));
    size_t end = 0;
    if (__builtin_add_overflow(displs[p], counts[p], &end))
      return InvalidArgument(dname + at + "=" + std::to_string(displs[p]) + " + " + cname + at +
                             "=" + std::to_string(counts[p]) + " overflows size_t");
    Status fits = CheckCount((dname + at + " + " + cname + at).c_str(), end, 1, elem);
    if (!fits.ok()) return fits;
    if (__builtin_add_overflow(total, counts[p], &total))
      return InvalidArgument("the sum of " + cname + " overflows size_t (at " + cname + at + "=" +
                             std::to_string(counts[p]) + ")");
    if (counts[p] > 0) *extent = std::max(*extent, end);
  }
  return CheckCount(("sum of " + cname).c_str(), total, 1, elem);
}

// ---- host streams ----

class HostStream {
 public:
  HostStream() : worker_([this] { Loop(); }) {}
  ~HostStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void Enqueue(std::function<Status()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(fn));
      ++pending_;
    }
    cv_.notify_all();
  }
  Status Synchronize() {
    std::unique_lock<std::mutex> l(mu_);
    idle_cv_.wait(l, [&] { return pending_ == 0; });
    return error_;
  }
  weftResult_t Query() {
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.ok()) return error_.code();
    return pending_ == 0 ? weftSuccess : weftInProgress;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
      std::function<Status()> fn = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      Status st = fn();
      l.lock();
      // Like a CUDA stream: the first error sticks; later operations still run (each fails
      // fast on a communicator left unusable by the error).
      if (!st.ok() && error_.ok()) error_ = st;
      if (--pending_ == 0) idle_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<Status()>> queue_;
  size_t pending_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

std::mutex g_streams_mu;
std::set<HostStream*> g_streams;

HostStream* LookupStream(weftStream_t s) {
  std::lock_guard<std::mutex> l(g_streams_mu);
  auto* hs = static_cast<HostStream*>(s);
  return g_streams.count(hs) ? hs : nullptr;
}

std::mutex g_comms_mu;
std::set<weftComm*> g_comms;  // live handles (detects use after destroy)

Status CheckLiveComm(const weftComm* comm) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  {
    std::lock_guard<std::mutex> l(g_comms_mu);
    if (!g_comms.count(const_cast<weftComm*>(comm)))
      return InvalidArgument("comm=" + PtrStr(comm) +
                             " is not a live communicator (destroyed, or never initialized)");
  }
  return CheckComm(comm);
}

weftComm* NewComm() {
  auto* c = new weftComm();
  InitCommon(c);
  std::lock_guard<std::mutex> l(g_comms_mu);
  g_comms.insert(c);
  return c;
}

void FreeComm(weftComm* c, const Status& why) {
  {
    std::lock_guard<std::mutex> l(g_comms_mu);
    g_comms.erase(c);
  }
  for (auto& t : c->transports) t->Abort(why);
  if (c->bootstrap) c->bootstrap->Abort();
  {
    // Wait for an operation still running on another thread (Abort from a watchdog) to
    // notice the aborted transports and return before freeing what it uses.
    std::lock_guard<std::mutex> l(c->exec_mu);
    c->magic = 0;
  }
  delete c;
}

// ---- groups ----

struct QueuedOp {
  weftComm* comm;
  std::variant<CollectiveCall, P2POp> op;
  weftStream_t stream;
};
thread_local int t_group_depth = 0;
thread_local std::vector<QueuedOp> t_group_ops;

// Runs ops (already validated) on the stream or here: consecutive send/recv on the same
// communicator run together as one batch.
Status RunNow(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops) {
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

Status Dispatch(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops,
                weftStream_t stream) {
  if (stream == nullptr) return RunNow(comm, std::move(ops));
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return InvalidArgument("stream=" + PtrStr(stream) +
                           " is not a weft host stream (use NULL or weftStreamCreate; device "
                           "streams need a CUDA build)");
  hs->Enqueue([comm, ops = std::move(ops)]() mutable { return RunNow(comm, std::move(ops)); });
  return OkStatus();
}

Status Submit(weftComm* comm, std::variant<CollectiveCall, P2POp> op, weftStream_t stream) {
  // Fast path: a blocking collective outside a group runs right here, with no queueing.
  if (stream == nullptr && t_group_depth == 0 && std::holds_alternative<CollectiveCall>(op))
    return RunCollective(comm, std::get<CollectiveCall>(op));
  if (stream != nullptr && LookupStream(stream) == nullptr)
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

Status SubmitCollective(weftComm* comm, CollectiveCall call, weftStream_t stream) {
  return Submit(comm, std::move(call), stream);
}

// What differs between the entry points of the regular collectives.
struct EntrySpec {
  const char* fn;          // API name, prefixed to messages
  Collective collective;
  const char* count_name;  // the count argument's name in weft.h
  bool per_rank_blocks;    // a buffer holds nranks * count elements
  bool has_op;
  bool has_root;           // broadcast: only root's sendbuff is read; reduce: only root's recvbuff is written
};

// Argument checks shared by the regular collectives, then submission.
weftResult_t Entry(const EntrySpec& spec, const void* sendbuff, void* recvbuff, size_t count,
                   weftDataType_t datatype, weftRedOp_t op, int root, weftComm_t comm,
                   weftStream_t stream) {
  Status st = CheckLiveComm(comm);
  if (st.ok()) st = CheckType(datatype);
  if (st.ok() && spec.has_op) st = CheckOp(op);
  if (st.ok() && spec.has_root) st = CheckRank("root", root, comm);
  if (st.ok())
    st = CheckCount(spec.count_name, count, spec.per_rank_blocks ? comm->nranks : 1, TypeSize(datatype));
  if (!st.ok()) return Report(st.WithContext(spec.fn));
  // comm is known live only from here: its rank may be read.
  bool reads_send = !(spec.collective == Collective::kBroadcast && comm->rank != root);
  bool writes_recv = !(spec.collective == Collective::kReduce && comm->rank != root);
  if (reads_send) st = CheckBuffer("sendbuff", sendbuff, count);
  if (st.ok() && writes_recv) st = CheckBuffer("recvbuff", recvbuff, count);
  if (!st.ok()) return Report(st.WithContext(spec.fn));
  if (count == 0) {  // as NCCL: nothing to do, no synchronization
    comm->last_algorithm = nullptr;  // no algorithm ran
    return weftSuccess;
  }
  CollectiveCall c;
  c.collective = spec.collective;
  c.sendbuff = sendbuff;
  c.recvbuff = recvbuff;
  c.count = count;
  c.dtype = datatype;
  c.op = op;
  c.root = root;
  return Report(SubmitCollective(comm, std::move(c), stream).WithContext(spec.fn));
}

}  // namespace
}  // namespace weft

using namespace weft;  // NOLINT: C API implementation file

extern "C" {

const char* weftGetErrorString(weftResult_t result) {
  switch (result) {
    case weftSuccess: return "no error";
    case weftUnhandledCudaError: return "unhandled cuda error";
    case weftSystemError: return "unhandled system error (network, memory, /dev/shm...)";
    case weftInternalError: return "internal error (a weft bug or mismatched calls across ranks)";
    case weftInvalidArgument: return "invalid argument";
    case weftInvalidUsage: return "invalid usage";
    case weftRemoteError: return "remote process exited or there was a network error";
    case weftInProgress: return "operation in progress";
    case weftTimeout: return "operation timed out";
    default: return "unknown result code";
  }
}

const char* weftGetLastError(weftComm_t comm) {
  (void)comm;
  return t_last_error.c_str();
}

weftResult_t weftGetVersion(int* version) {
  if (version == nullptr) return Report(InvalidArgument("version is NULL"));
  *version = WEFT_VERSION_CODE;
  return weftSuccess;
}

size_t weftTypeSize(weftDataType_t datatype) { return TypeSize(datatype); }

weftResult_t weftGetUniqueId(weftUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Report(InvalidArgument("uniqueId is NULL"));
  StatusOr<BootstrapId> id = CreateUniqueId();
  if (!id.ok()) return Report(id.status());
  return Report(PackUniqueId(*id, uniqueId));
}

weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId commId, int rank) {
  if (comm == nullptr) return Report(InvalidArgument("comm (output pointer) is NULL"));
  *comm = nullptr;
  if (nranks < 1) return Report(InvalidArgument("nranks=" + std::to_string(nranks) + " must be >= 1"));
  if (rank < 0 || rank >= nranks)
    return Report(InvalidArgument("rank=" + std::to_string(rank) + " is outside [0, " +
                                  std::to_string(nranks) + ")"));
  weftComm* c = NewComm();
  *comm = c;
  StatusOr<BootstrapId> id = UnpackUniqueId(commId);
  Status st = id.ok() ? JoinAndInit(c, *id, nranks, rank) : id.status().WithContext("commId");
  if (!st.ok()) c->init_error = st;
  return Report(st);
}

weftResult_t weftCommInitFromEnv(weftComm_t* comm) {
  if (comm == nullptr) return Report(InvalidArgument("comm (output pointer) is NULL"));
  weftComm* c = NewComm();
  *comm = c;
  Status st = InitFromEnvironment(c);
  if (!st.ok()) c->init_error = st;
  return Report(st);
}

weftResult_t weftCommInitAll(weftComm_t* comms, int ndev, const int* devlist) {
  (void)devlist;
  if (comms == nullptr) return Report(InvalidArgument("comms is NULL"));
  if (ndev < 1) return Report(InvalidArgument("ndev=" + std::to_string(ndev) + " must be >= 1"));
  auto hub = std::make_shared<InprocHub>(ndev);
  for (int r = 0; r < ndev; ++r) {
    weftComm* c = NewComm();
    Status st = InitInproc(c, hub, r);
    if (!st.ok()) c->init_error = st;
    comms[r] = c;
  }
  return weftSuccess;
}

weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t* newcomm) {
  if (newcomm == nullptr) return Report(InvalidArgument("newcomm (output pointer) is NULL"));
  *newcomm = nullptr;
  Status st = CheckLiveComm(comm);
  if (st.ok() && color < 0 && color != WEFT_SPLIT_NOCOLOR)
    st = InvalidArgument("color=" + std::to_string(color) +
                         " must be >= 0 or WEFT_SPLIT_NOCOLOR");
  if (!st.ok()) return Report(st.WithContext("weftCommSplit"));
  weftComm* child = NewComm();
  child->timeout_s = comm->timeout_s;
  bool joined = false;
  st = SplitComm(comm, color, key, child, &joined);
  if (!joined) {
    FreeComm(child, InvalidUsage("not part of the split"));
    return Report(st);
  }
  if (!st.ok()) child->init_error = st;
  *newcomm = child;
  return Report(st);
}

weftResult_t weftCommDestroy(weftComm_t comm) {
  if (comm == nullptr) return weftSuccess;
  {
    std::lock_guard<std::mutex> l(g_comms_mu);
    if (!g_comms.count(comm))
      return Report(InvalidArgument("comm=" + PtrStr(comm) + " is not a live communicator"));
  }
  FreeComm(comm, InvalidUsage("communicator destroyed"));
  return weftSuccess;
}

weftResult_t weftCommAbort(weftComm_t comm) {
  if (comm == nullptr) return weftSuccess;
  {
    std::lock_guard<std::mutex> l(g_comms_mu);
    if (!g_comms.count(comm))
      return Report(InvalidArgument("comm=" + PtrStr(comm) + " is not a live communicator"));
  }
  FreeComm(comm, RemoteError("communicator aborted (weftCommAbort)"));
  return weftSuccess;
}

weftResult_t weftCommCount(const weftComm_t comm, int* count) {
  if (count == nullptr) return Report(InvalidArgument("count is NULL"));
  Status st = CheckLiveComm(comm);
  if (!st.ok() && st.code() != weftInvalidUsage) return Report(st);
  *count = comm->nranks;
  return weftSuccess;
}

weftResult_t weftCommUserRank(const weftComm_t comm, int* rank) {
  if (rank == nullptr) return Report(InvalidArgument("rank is NULL"));
  Status st = CheckLiveComm(comm);
  if (!st.ok() && st.code() != weftInvalidUsage) return Report(st);
  *rank = comm->rank;
  return weftSuccess;
}

weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError) {
  if (asyncError == nullptr) return Report(InvalidArgument("asyncError is NULL"));
  {
    std::lock_guard<std::mutex> l(g_comms_mu);
    if (comm == nullptr || !g_comms.count(comm))
      return Report(InvalidArgument("comm=" + PtrStr(comm) + " is not a live communicator"));
  }
  *asyncError = !comm->init_error.ok() ? comm->init_error.code() : comm->sticky_error.code();
  if (*asyncError != weftSuccess)
    t_last_error = (!comm->init_error.ok() ? comm->init_error : comm->sticky_error).message();
  return weftSuccess;
}

weftResult_t weftCommGetLastAlgorithm(weftComm_t comm, const char** name) {
  if (name == nullptr) return Report(InvalidArgument("name is NULL"));
  Status st = CheckLiveComm(comm);
  if (!st.ok() && st.code() != weftInvalidUsage) return Report(st);
  *name = comm->last_algorithm ? comm->last_algorithm->c_str() : "";
  return weftSuccess;
}

weftResult_t weftCommSetTimeout(weftComm_t comm, double seconds) {
  Status st = CheckLiveComm(comm);
  if (!st.ok()) return Report(st);
  if (!(seconds >= 0))
    return Report(InvalidArgument("seconds=" + std::to_string(seconds) + " must be >= 0"));
  comm->timeout_s = seconds;
  return weftSuccess;
}

weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           weftStream_t stream) {
  static const EntrySpec spec{"weftAllReduce", Collective::kAllReduce, "count", false, true, false};
  // WEFT_COMPRESSION turns compression on job-wide without code changes; inside a group the
  // call is queued as written (the compressed path is a composition of collectives of its own).
  weft::Status compressed;
  if (weft::t_group_depth == 0 &&
      weft::compress::MaybeRunJobWideCompression(sendbuff, recvbuff, count, datatype, op, comm,
                                                 stream, &compressed))
    return weft::Report(compressed.WithContext("weftAllReduce"));
  return Entry(spec, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

weftResult_t weftAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           weftDataType_t datatype, weftComm_t comm, weftStream_t stream) {
  static const EntrySpec spec{"weftAllGather", Collective::kAllGather, "sendcount", true, false, false};
  return Entry(spec, sendbuff, recvbuff, sendcount, datatype, weftSum, 0, comm, stream);
}

weftResult_t weftReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                               weftStream_t stream) {
  static const EntrySpec spec{"weftReduceScatter", Collective::kReduceScatter, "recvcount", true, true, false};
  return Entry(spec, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

weftResult_t weftBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, int root, weftComm_t comm,
                           weftStream_t stream) {
  static const EntrySpec spec{"weftBroadcast", Collective::kBroadcast, "count", false, false, true};
  return Entry(spec, sendbuff, recvbuff, count, datatype, weftSum, root, comm, stream);
}

weftResult_t weftReduce(const void* sendbuff, void* recvbuff, size_t count,
                        weftDataType_t datatype, weftRedOp_t op, int root, weftComm_t comm,
                        weftStream_t stream) {
  static const EntrySpec spec{"weftReduce", Collective::kReduce, "count", false, true, true};
  return Entry(spec, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

weftResult_t weftAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          weftDataType_t datatype, weftComm_t comm, weftStream_t stream) {
  static const EntrySpec spec{"weftAllToAll", Collective::kAllToAll, "count", true, false, false};
  return Entry(spec, sendbuff, recvbuff, count, datatype, weftSum, 0, comm, stream);
}

weftResult_t weftAllToAllv(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                           void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                           weftDataType_t datatype, weftComm_t comm, weftStream_t stream) {
  Status st = CheckLiveComm(comm);
  if (st.ok()) st = CheckType(datatype);
  if (st.ok() && sendcounts == nullptr) st = InvalidArgument("sendcounts is NULL");
  if (st.ok() && sdispls == nullptr) st = InvalidArgument("sdispls is NULL");
  if (st.ok() && recvcounts == nullptr) st = InvalidArgument("recvcounts is NULL");
  if (st.ok() && rdispls == nullptr) st = InvalidArgument("rdispls is NULL");
  size_t send_extent = 0, recv_extent = 0;
  if (st.ok()) st = CheckBlockTable("send", sendcounts, sdispls, comm->nranks, TypeSize(datatype), &send_extent);
  if (st.ok()) st = CheckBlockTable("recv", recvcounts, rdispls, comm->nranks, TypeSize(datatype), &recv_extent);
  if (st.ok()) st = CheckBuffer("sendbuff", sendbuff, send_extent);
  if (st.ok()) st = CheckBuffer("recvbuff", recvbuff, recv_extent);
  if (!st.ok()) return Report(st.WithContext("weftAllToAllv"));
  CollectiveCall c;
  c.collective = Collective::kAllToAllv;
  c.sendbuff = sendbuff;
  c.recvbuff = recvbuff;
  c.dtype = datatype;
  c.sendcounts.assign(sendcounts, sendcounts + comm->nranks);
  c.sdispls.assign(sdispls, sdispls + comm->nranks);
  c.recvcounts.assign(recvcounts, recvcounts + comm->nranks);
  c.rdispls.assign(rdispls, rdispls + comm->nranks);
  return Report(SubmitCollective(comm, std::move(c), stream).WithContext("weftAllToAllv"));
}

weftResult_t weftBarrier(weftComm_t comm, weftStream_t stream) {
  Status st = CheckLiveComm(comm);
  if (!st.ok()) return Report(st.WithContext("weftBarrier"));
  if (comm->nranks == 1) return weftSuccess;
  CollectiveCall c;
  c.collective = Collective::kBarrier;
  c.dtype = weftUint8;
  return Report(SubmitCollective(comm, std::move(c), stream).WithContext("weftBarrier"));
}

static weftResult_t P2P(bool is_send, void* buff, size_t count, weftDataType_t datatype, int peer,
                        weftComm_t comm, weftStream_t stream) {
  const char* fn = is_send ? "weftSend" : "weftRecv";
  Status st = CheckLiveComm(comm);
  if (st.ok()) st = CheckType(datatype);
  if (st.ok()) st = CheckRank("peer", peer, comm);
  if (st.ok()) st = CheckCount("count", count, 1, TypeSize(datatype));
  if (st.ok()) st = CheckBuffer(is_send ? "sendbuff" : "recvbuff", buff, count);
  if (!st.ok()) return Report(st.WithContext(fn));
  P2POp op;
  op.is_send = is_send;
  op.buff = buff;
  op.count = count;
  op.dtype = datatype;
  op.peer = peer;
  return Report(Submit(comm, op, stream).WithContext(fn));
}

weftResult_t weftSend(const void* sendbuff, size_t count, weftDataType_t datatype, int peer,
                      weftComm_t comm, weftStream_t stream) {
  return P2P(true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

weftResult_t weftRecv(void* recvbuff, size_t count, weftDataType_t datatype, int peer,
                      weftComm_t comm, weftStream_t stream) {
  return P2P(false, recvbuff, count, datatype, peer, comm, stream);
}

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

weftResult_t weftStreamCreate(weftStream_t* stream) {
  if (stream == nullptr) return Report(InvalidArgument("stream (output pointer) is NULL"));
  auto* s = new HostStream();
  {
    std::lock_guard<std::mutex> l(g_streams_mu);
    g_streams.insert(s);
  }
  *stream = s;
  return weftSuccess;
}

weftResult_t weftStreamSynchronize(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;  // the blocking stream has nothing pending
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return Report(InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream"));
  return Report(hs->Synchronize());
}

weftResult_t weftStreamQuery(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return Report(InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream"));
  return hs->Query();
}

weftResult_t weftStreamDestroy(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return Report(InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream"));
  hs->Synchronize();
  {
    std::lock_guard<std::mutex> l(g_streams_mu);
    g_streams.erase(hs);
  }
  delete hs;
  return weftSuccess;
}

}  // extern "C"
