// nccl_collectives.cc: the NCCL shim's collectives, point-to-point calls and PreMulSum ops.
//
// Each entry point validates what weft cannot see (where the buffers live, dynamic ops), then
// runs or queues (inside a group) one weft call: device buffers with the caller's stream
// (stream-ordered, buffers.h), host buffers blocking. Gather and scatter, which weft has no
// collective for, are point-to-point calls in one weft group.
#include <weft/weft_device.h>

#include <cstring>
#include <memory>
#include <string>

#include "buffers.h"
#include "nccl_shim.h"

using weft_nccl::Fail;
using weft_nccl::Placement;
using weft_nccl::ReadyComm;
using weft_nccl::RunOrQueue;


namespace {

// Resolves an op: a built-in one maps to weft's; a PreMulSum op (>= ncclNumOps) yields
// weftSum and the scale to apply to the input first.
// *premul is a copy of the op, taken under the lock (ops may be created meanwhile).
ncclResult_t ResolveOp(ncclComm* comm, ncclRedOp_t op, ncclDataType_t type, weftRedOp_t* out,
                       PreMulSumOp* premul, const char* call) {
  premul->live = false;
  if (op >= 0 && op < ncclNumOps) {
    *out = static_cast<weftRedOp_t>(op);
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(comm->ops_mutex);
  size_t index = static_cast<size_t>(op) - ncclNumOps;
  if (op < 0 || index >= comm->premul_ops.size() || !comm->premul_ops[index].live)
    return Fail(ncclInvalidArgument, std::string(call) + ": op " + std::to_string(op) +
                                         " is neither built in nor created on this comm");
  if (comm->premul_ops[index].datatype != type)
    return Fail(ncclInvalidArgument, std::string(call) + ": op " + std::to_string(op) +
                                         " was created for another datatype");
  *premul = comm->premul_ops[index];
  *out = weftSum;
  return ncclSuccess;
}

template <typename T>
void ScaleInPlace(void* buf, size_t n, double scalar) {
  T* v = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(v[i] * scalar);
}

bool PreMulSumTypeSupported(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat64 || t == ncclInt32 || t == ncclInt64 ||
         t == ncclUint32 || t == ncclUint64 || t == ncclInt8 || t == ncclUint8;
}

// A scalar of a PreMulSum type as a double.
double ScalarValue(const void* p, ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: return *static_cast<const float*>(p);
    case ncclFloat64: return *static_cast<const double*>(p);
    case ncclInt32: return *static_cast<const int32_t*>(p);
    case ncclInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case ncclUint32: return *static_cast<const uint32_t*>(p);
    case ncclUint64: return static_cast<double>(*static_cast<const uint64_t*>(p));
    case ncclInt8: return *static_cast<const int8_t*>(p);
    default: return *static_cast<const uint8_t*>(p);
  }
}

weftDataType_t W(ncclDataType_t t) { return static_cast<weftDataType_t>(t); }

// The scaled copy of the input that a PreMulSum reduction sums: the input (host or device
// memory) is copied into buf, then scaled by the op's scalar (a device scalar is read now, so
// the caller has waited for the stream that writes it). buf is owned by the call's closures.
using Scratch = std::shared_ptr<std::vector<char>>;
weftResult_t ScaleInput(const Scratch& buf, const void* send, size_t n, ncclDataType_t t,
                        const PreMulSumOp& op) {
  size_t elem = weftTypeSize(W(t));
  buf->resize(n * elem);
  double scalar = op.scalar;
  if (op.device_scalar != nullptr) {
    char value[8];
    weftResult_t r = weftDeviceMemcpy(value, op.device_scalar, elem);
    if (r != weftSuccess) return r;
    scalar = ScalarValue(value, t);
  }
  weftResult_t r = weftDeviceMemcpy(buf->data(), send, n * elem);  // host->host: memmove
  if (r != weftSuccess) return r;
  switch (t) {
    case ncclFloat32: ScaleInPlace<float>(buf->data(), n, scalar); break;
    case ncclFloat64: ScaleInPlace<double>(buf->data(), n, scalar); break;
    case ncclInt32: ScaleInPlace<int32_t>(buf->data(), n, scalar); break;
    case ncclInt64: ScaleInPlace<int64_t>(buf->data(), n, scalar); break;
    case ncclUint32: ScaleInPlace<uint32_t>(buf->data(), n, scalar); break;
    case ncclUint64: ScaleInPlace<uint64_t>(buf->data(), n, scalar); break;
    case ncclInt8: ScaleInPlace<int8_t>(buf->data(), n, scalar); break;
    default: ScaleInPlace<uint8_t>(buf->data(), n, scalar); break;
  }
  return weftSuccess;
}


// The checks every reducing collective makes: comm ready, buffers placed, op resolved.
struct ReduceArgs {
  weftRedOp_t op = weftSum;
  PreMulSumOp premul;  // live for a PreMulSum op: a copy, as it may be destroyed before a
                       // queued call runs
  Placement place;
};
ncclResult_t PrepareReduce(ncclComm* comm, const void* send, void* recv, ncclDataType_t type,
                           ncclRedOp_t op, void* stream, const char* call, ReduceArgs* out) {
  ncclResult_t r = ReadyComm(comm, call);
  if (r == ncclSuccess) r = weft_nccl::PlaceCall(call, send, recv, stream, &out->place);
  if (r == ncclSuccess) r = ResolveOp(comm, op, type, &out->op, &out->premul, call);
  return r;
}

// Runs (or queues) a reduction as fn(input, op): with the caller's input and op, or, for a
// PreMulSum op, with weftSum on a scaled host copy of the input (scratch, owned by the call's
// closures). A device call first waits for its stream (which writes the input and a device
// scalar), and its scratch is kept until the stream has read it: that call completes before
// the shim returns from it (or from its ncclGroupEnd).
template <typename Fn>
ncclResult_t RunReduction(ncclComm* comm, const ReduceArgs& a, const void* send,
                          size_t input_count, ncclDataType_t type, Fn fn) {
  if (!a.premul.live) return RunOrQueue(comm, [=] { return fn(send, a.op); });
  auto scratch = std::make_shared<std::vector<char>>();
  const PreMulSumOp op = a.premul;
  const bool device = a.place.device || op.device_scalar != nullptr;
  weftStream_t stream = a.place.stream;
  auto run = [=] {
    weftResult_t r = device ? weft_nccl::WaitForStream(stream) : weftSuccess;
    if (r == weftSuccess) r = ScaleInput(scratch, send, input_count, type, op);
    return r == weftSuccess ? fn(scratch->data(), weftSum) : r;
  };
  if (!a.place.device) return RunOrQueue(comm, run);
  return RunOrQueue(comm, run, [scratch, stream] { (void)weft_nccl::WaitForStream(stream); });
}

}  // namespace

// ---- reducing collectives ----

WEFT_NCCL_EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
  ReduceArgs a;
  ncclResult_t r = PrepareReduce(comm, sendbuff, recvbuff, datatype, op, stream, "ncclAllReduce", &a);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  weftStream_t ws = a.place.stream;
  return RunReduction(comm, a, sendbuff, count, datatype, [=](const void* in, weftRedOp_t wop) {
    return weftAllReduce(in, recvbuff, count, W(datatype), wop, w, ws);
  });
}
WEFT_NCCL_ALIAS(ncclAllReduce)

WEFT_NCCL_EXPORT ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, ncclRedOp_t op, int root,
                                          ncclComm_t comm, cudaStream_t stream) {
  ReduceArgs a;
  ncclResult_t r = PrepareReduce(comm, sendbuff, recvbuff, datatype, op, stream, "ncclReduce", &a);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  weftStream_t ws = a.place.stream;
  return RunReduction(comm, a, sendbuff, count, datatype, [=](const void* in, weftRedOp_t wop) {
    return weftReduce(in, recvbuff, count, W(datatype), wop, root, w, ws);
  });
}
WEFT_NCCL_ALIAS(ncclReduce)

WEFT_NCCL_EXPORT ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                 size_t recvcount, ncclDataType_t datatype,
                                                 ncclRedOp_t op, ncclComm_t comm,
                                                 cudaStream_t stream) {
  ReduceArgs a;
  ncclResult_t r = PrepareReduce(comm, sendbuff, recvbuff, datatype, op, stream, "ncclReduceScatter", &a);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  weftStream_t ws = a.place.stream;
  int n = 0;
  weftCommCount(w, &n);  // the input holds nranks slices of recvcount
  size_t input_count = recvcount * static_cast<size_t>(n);
  return RunReduction(comm, a, sendbuff, input_count, datatype, [=](const void* in, weftRedOp_t wop) {
    return weftReduceScatter(in, recvbuff, recvcount, W(datatype), wop, w, ws);
  });
}
WEFT_NCCL_ALIAS(ncclReduceScatter)

// ---- data movement ----

namespace {
// Comm ready and buffers placed; *ws is the stream to hand to weft.
ncclResult_t PrepareMove(ncclComm* comm, const void* send, const void* recv, void* stream,
                         const char* call, weftStream_t* ws) {
  ncclResult_t r = ReadyComm(comm, call);
  Placement place;
  if (r == ncclSuccess) r = weft_nccl::PlaceCall(call, send, recv, stream, &place);
  *ws = place.stream;
  return r;
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, int root, ncclComm_t comm,
                                             cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclBroadcast", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftBroadcast(sendbuff, recvbuff, count, W(datatype), root, w, ws); });
}
WEFT_NCCL_ALIAS(ncclBroadcast)

WEFT_NCCL_EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                                         int root, ncclComm_t comm, cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);  // in place
}
WEFT_NCCL_ALIAS(ncclBcast)

WEFT_NCCL_EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff,
                                             size_t sendcount, ncclDataType_t datatype,
                                             ncclComm_t comm, cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclAllGather", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftAllGather(sendbuff, recvbuff, sendcount, W(datatype), w, ws); });
}
WEFT_NCCL_ALIAS(ncclAllGather)

WEFT_NCCL_EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclComm_t comm,
                                            cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclAlltoAll", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftAllToAll(sendbuff, recvbuff, count, W(datatype), w, ws); });
}
WEFT_NCCL_ALIAS(ncclAlltoAll)

namespace {
// Gather (to_root) or scatter: the root exchanges one block with every peer in one weft
// group, and its own block with itself (a send/recv pair, so a device call copies it in
// stream order too); NCCL's in-place layout (the own block already in place) skips that pair.
weftResult_t RootExchange(bool to_root, const void* send, void* recv, size_t count,
                          ncclDataType_t type, int root, weftComm_t w, weftStream_t ws) {
  int rank = 0, n = 0;
  weftCommUserRank(w, &rank);
  weftCommCount(w, &n);
  size_t block = count * weftTypeSize(W(type));
  weftResult_t r = weftGroupStart();
  if (r != weftSuccess) return r;
  if (rank != root) {
    r = to_root ? weftSend(send, count, W(type), root, w, ws)
                : weftRecv(recv, count, W(type), root, w, ws);
  } else {
    for (int p = 0; p < n && r == weftSuccess; ++p) {
      const char* from = static_cast<const char*>(send) + (to_root ? 0 : p * block);
      char* to = static_cast<char*>(recv) + (to_root ? p * block : 0);
      if (p == root && from == to) continue;
      if (p == root || !to_root) r = weftSend(from, count, W(type), p, w, ws);
      if (r == weftSuccess && (p == root || to_root)) r = weftRecv(to, count, W(type), p, w, ws);
    }
  }
  weftResult_t end = weftGroupEnd();
  return r != weftSuccess ? r : end;
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclGather", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return RootExchange(true, sendbuff, recvbuff, count, datatype, root, w, ws); });
}
WEFT_NCCL_ALIAS(ncclGather)

WEFT_NCCL_EXPORT ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, int root, ncclComm_t comm,
                                           cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclScatter", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return RootExchange(false, sendbuff, recvbuff, count, datatype, root, w, ws); });
}
WEFT_NCCL_ALIAS(ncclScatter)

WEFT_NCCL_EXPORT ncclResult_t pncclSend(const void* sendbuff, size_t count,
                                        ncclDataType_t datatype, int peer, ncclComm_t comm,
                                        cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, sendbuff, nullptr, stream, "ncclSend", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftSend(sendbuff, count, W(datatype), peer, w, ws); });
}
WEFT_NCCL_ALIAS(ncclSend)

WEFT_NCCL_EXPORT ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int peer, ncclComm_t comm, cudaStream_t stream) {
  weftStream_t ws = nullptr;
  ncclResult_t r = PrepareMove(comm, nullptr, recvbuff, stream, "ncclRecv", &ws);
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftRecv(recvbuff, count, W(datatype), peer, w, ws); });
}
WEFT_NCCL_ALIAS(ncclRecv)

// ---- PreMulSum reductions ----

WEFT_NCCL_EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                        ncclDataType_t datatype,
                                                        ncclScalarResidence_t residence,
                                                        ncclComm_t comm) {
  ncclResult_t r = ReadyComm(comm, "ncclRedOpCreatePreMulSum");
  if (r != ncclSuccess) return r;
  if (op == nullptr || scalar == nullptr)
    return Fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL");
  if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    return Fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence " +
                                         std::to_string(residence) + " is not an ncclScalarResidence_t");
  if (!PreMulSumTypeSupported(datatype))
    return Fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: datatype " +
                                      std::to_string(datatype) + " is not supported (16- and 8-bit floats)");
  PreMulSumOp created;
  created.live = true;
  created.datatype = datatype;
  // A host scalar is read now; a device one (device memory, or host memory the device can
  // read) each time a call runs, once its stream has done the earlier work that writes it.
  if (residence == ncclScalarHostImmediate) created.scalar = ScalarValue(scalar, datatype);
  else created.device_scalar = scalar;
  std::lock_guard<std::mutex> lock(comm->ops_mutex);
  size_t slot = 0;
  while (slot < comm->premul_ops.size() && comm->premul_ops[slot].live) ++slot;
  if (slot == comm->premul_ops.size()) comm->premul_ops.push_back(created);
  else comm->premul_ops[slot] = created;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + slot);
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclRedOpCreatePreMulSum)

WEFT_NCCL_EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  ncclResult_t r = ReadyComm(comm, "ncclRedOpDestroy");
  if (r != ncclSuccess) return r;
  std::lock_guard<std::mutex> lock(comm->ops_mutex);
  size_t index = static_cast<size_t>(op) - ncclNumOps;
  if (op < ncclNumOps || index >= comm->premul_ops.size() || !comm->premul_ops[index].live)
    return Fail(ncclInvalidArgument, "ncclRedOpDestroy: op " + std::to_string(op) +
                                         " was not created on this comm");
  comm->premul_ops[index].live = false;
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclRedOpDestroy)
