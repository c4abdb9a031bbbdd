// The C API's communicator and collective entry points (include/weft/weft.h): argument
// checks (api_checks.cc), then submission (groups.cc). Host streams are in host_stream.cc.
// Messages name the argument and its value.
#include <cstring>
#include <string>

#include "common/log.h"
#include "compress/compress_error.h"
#include "compress/job_wide_compression.h"
#include "core/api_internal.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/device_progress.h"
#include "core/init.h"
#include "device/device_runtime.h"
#include "kernels/dtype.h"
#include "transports/inproc/inproc_transport.h"
#include "transports/shm/shm_allocation.h"
#include "weft/weft.h"

namespace weft {
namespace {

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
  // One fresh Status per check, returned at once on failure: assigning each result to one
  // variable cost a std::string move-assignment per check on every call (the tiny-call path).
  auto failed = [&](const Status& st) { return Report(st.WithContext(spec.fn)); };
  if (Status st = CheckLiveComm(comm); !st.ok()) return failed(st);
  if (Status st = CheckType(datatype); !st.ok()) return failed(st);
  if (spec.has_op)
    if (Status st = CheckOp(op); !st.ok()) return failed(st);
  if (spec.has_root)
    if (Status st = CheckRank("root", root, comm); !st.ok()) return failed(st);
  if (Status st = CheckCount(spec.count_name, count, spec.per_rank_blocks ? comm->nranks : 1,
                             TypeSize(datatype));
      !st.ok())
    return failed(st);
  // comm is known live only from here: its rank may be read.
  bool reads_send = !(spec.collective == Collective::kBroadcast && comm->rank != root);
  bool writes_recv = !(spec.collective == Collective::kReduce && comm->rank != root);
  if (reads_send)
    if (Status st = CheckBuffer("sendbuff", sendbuff, count); !st.ok()) return failed(st);
  if (writes_recv)
    if (Status st = CheckBuffer("recvbuff", recvbuff, count); !st.ok()) return failed(st);
  if (count == 0) {  // as NCCL: nothing to do, no synchronization
    comm->last_algorithm = nullptr;  // no algorithm ran
    return weftSuccess;
  }
  // WEFT_COMPRESSION turns compression on job-wide without code changes, for allreduces that
  // passed the checks above: the call runs as a compressed allreduce, through the same
  // pipeline (BeginCall, plan, execute, EndCall: core/comm.h) as every other call. Inside a
  // group the call is queued as written (the compressed path is a composition of collectives
  // of its own). Device buffers too: the compressed call stages them on the caller's stream
  // (the host codecs run on pinned copies; compression pays only across hosts, where messages
  // go through host memory anyway).
  if (spec.collective == Collective::kAllReduce && !InGroup()) {
    Status compressed;
    if (compress::MaybeRunJobWideCompression(sendbuff, recvbuff, count, datatype, op, comm,
                                             stream, &compressed))
      return compressed.ok() ? weftSuccess : Report(compressed.WithContext(spec.fn));
  }
  CollectiveCall c;
  c.collective = spec.collective;
  c.sendbuff = sendbuff;
  c.recvbuff = recvbuff;
  c.count = count;
  c.dtype = datatype;
  c.op = op;
  c.root = root;
  Status st2 = SubmitCollective(comm, std::move(c), stream);
  // WithContext takes a std::string: build it only for an error (this is the tiny-call path).
  return st2.ok() ? weftSuccess : Report(st2.WithContext(spec.fn));
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
  return LastErrorMessage().c_str();
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
  if (!IsLiveComm(comm))
    return Report(InvalidArgument("comm=" + PtrStr(comm) + " is not a live communicator"));
  FreeComm(comm, InvalidUsage("communicator destroyed"));
  return weftSuccess;
}

weftResult_t weftCommAbort(weftComm_t comm) {
  if (comm == nullptr) return weftSuccess;
  if (!IsLiveComm(comm))
    return Report(InvalidArgument("comm=" + PtrStr(comm) + " is not a live communicator"));
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
  if (comm == nullptr || !IsLiveComm(comm))
    return Report(InvalidArgument("comm=" + PtrStr(comm) + " is not a live communicator"));
  // A stream-ordered device call that failed after returning comes first: it names the call.
  const Status device_error = DeviceAsyncError(comm);
  const Status e = !comm->init_error.ok() ? comm->init_error
                   : !device_error.ok()   ? device_error
                                          : comm->sticky_error.Get();
  *asyncError = e.code();
  if (*asyncError != weftSuccess) SetLastErrorMessage(e.message());
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

weftResult_t weftMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Report(InvalidArgument("weftMemAlloc: ptr is NULL"));
  *ptr = nullptr;
  if (size == 0) return Report(InvalidArgument("weftMemAlloc: size=0: nothing to allocate"));
  StatusOr<void*> p = SharedAllocate(size);
  if (!p.ok()) return Report(p.status().WithContext("weftMemAlloc(size=" + std::to_string(size) + ")"));
  *ptr = *p;
  return weftSuccess;
}

weftResult_t weftMemFree(void* ptr) {
  Status st = SharedFree(ptr);
  return st.ok() ? weftSuccess : Report(st.WithContext("weftMemFree"));
}

weftResult_t weftCommRegister(const weftComm_t comm, void* buff, size_t size, void** handle) {
  if (handle == nullptr) return Report(InvalidArgument("weftCommRegister: handle is NULL"));
  *handle = nullptr;
  if (buff == nullptr) return Report(InvalidArgument("weftCommRegister: buff is NULL"));
  if (size == 0) return Report(InvalidArgument("weftCommRegister: size=0 (buff=" + PtrStr(buff) + ")"));
  Status st = CheckLiveComm(comm);
  if (!st.ok()) return Report(st.WithContext("weftCommRegister"));
  std::lock_guard<std::mutex> lock(comm->exec_mu);
  st = CheckComm(comm);
  if (st.ok()) st = RegisterBuffer(comm, buff, size, handle);
  return st.ok() ? weftSuccess : Report(st.WithContext("weftCommRegister"));
}

weftResult_t weftCommDeregister(const weftComm_t comm, void* handle) {
  if (handle == nullptr) return Report(InvalidArgument("weftCommDeregister: handle is NULL"));
  Status st = CheckLiveComm(comm);
  if (!st.ok()) return Report(st.WithContext("weftCommDeregister"));
  std::lock_guard<std::mutex> lock(comm->exec_mu);
  st = DeregisterBuffer(comm, handle);
  return st.ok() ? weftSuccess : Report(st.WithContext("weftCommDeregister"));
}

weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           weftStream_t stream) {
  static const EntrySpec spec{"weftAllReduce", Collective::kAllReduce, "count", false, true, false};
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

}  // extern "C"
