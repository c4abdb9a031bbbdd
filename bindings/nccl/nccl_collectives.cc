// nccl_collectives.cc: the NCCL shim's collectives, point-to-point calls and PreMulSum ops.
//
// Each entry point validates what weft cannot see (device buffers, dynamic ops), then runs
// or queues (inside a group) one weft call. Gather and scatter, which weft has no collective
// for, are point-to-point calls in one weft group.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cuda_probe.h"
#include "nccl_shim.h"

using weft_nccl::Fail;
using weft_nccl::ReadyComm;
using weft_nccl::RunOrQueue;


namespace {

std::string Hex(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

// Device buffers are refused until weft's GPU path exists; host buffers proceed after the
// stream's earlier work (which may have produced them) is done.
ncclResult_t CheckBuffers(const char* call, const void* send, const void* recv, void* stream) {
  for (const void* p : {send, recv})
    if (weft_nccl::IsDevicePointer(p))
      return Fail(ncclInvalidUsage,
                  std::string(call) + ": buffer " + Hex(p) +
                      " is CUDA device memory; weft's NCCL shim supports host buffers only "
                      "until weft's GPU path lands");
  for (const void* p : {send, recv})
    if (p != nullptr && !weft_nccl::IsReadableHostAddress(p))
      return Fail(ncclInvalidUsage,
                  std::string(call) + ": buffer " + Hex(p) +
                      " is not host memory this process can read (a device pointer with no "
                      "CUDA driver loaded, or an unmapped address)");
  if (stream != nullptr && !weft_nccl::SynchronizeStream(stream))
    return Fail(ncclUnhandledCudaError,
                std::string(call) + ": cuStreamSynchronize failed on stream " + Hex(stream));
  return ncclSuccess;
}

// Resolves an op: a built-in one maps to weft's; a PreMulSum op (>= ncclNumOps) yields
// weftSum and the scale to apply to the input first.
ncclResult_t ResolveOp(ncclComm* comm, ncclRedOp_t op, ncclDataType_t type, weftRedOp_t* out,
                       const PreMulSumOp** premul, const char* call) {
  *premul = nullptr;
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
  *premul = &comm->premul_ops[index];
  *out = weftSum;
  return ncclSuccess;
}

template <typename T>
void ScaleInto(const void* in, void* out, size_t n, double scalar) {
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i] * scalar);
}

bool PreMulSumTypeSupported(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat64 || t == ncclInt32 || t == ncclInt64 ||
         t == ncclUint32 || t == ncclUint64 || t == ncclInt8 || t == ncclUint8;
}

// The scaled copy of the input that a PreMulSum reduction sums. The buffer is owned by the
// call's closure, which lives until the weft group that runs it has ended.
using Scratch = std::shared_ptr<std::vector<char>>;
void* ScaleInput(const Scratch& buf, const void* send, size_t n, ncclDataType_t t,
                 double scalar) {
  buf->resize(n * weftTypeSize(static_cast<weftDataType_t>(t)));
  switch (t) {
    case ncclFloat32: ScaleInto<float>(send, buf->data(), n, scalar); break;
    case ncclFloat64: ScaleInto<double>(send, buf->data(), n, scalar); break;
    case ncclInt32: ScaleInto<int32_t>(send, buf->data(), n, scalar); break;
    case ncclInt64: ScaleInto<int64_t>(send, buf->data(), n, scalar); break;
    case ncclUint32: ScaleInto<uint32_t>(send, buf->data(), n, scalar); break;
    case ncclUint64: ScaleInto<uint64_t>(send, buf->data(), n, scalar); break;
    case ncclInt8: ScaleInto<int8_t>(send, buf->data(), n, scalar); break;
    default: ScaleInto<uint8_t>(send, buf->data(), n, scalar); break;
  }
  return buf->data();
}



weftDataType_t W(ncclDataType_t t) { return static_cast<weftDataType_t>(t); }

// The checks every reducing collective makes: comm ready, host buffers, op resolved.
struct ReduceArgs {
  weftRedOp_t op = weftSum;
  const PreMulSumOp* premul = nullptr;
};
ncclResult_t PrepareReduce(ncclComm* comm, const void* send, void* recv, ncclDataType_t type,
                           ncclRedOp_t op, void* stream, const char* call, ReduceArgs* out) {
  ncclResult_t r = ReadyComm(comm, call);
  if (r == ncclSuccess) r = CheckBuffers(call, send, recv, stream);
  if (r == ncclSuccess) r = ResolveOp(comm, op, type, &out->op, &out->premul, call);
  return r;
}

// Runs (or queues) a reduction as fn(input, op): with the caller's input and op, or, for a
// PreMulSum op, with the input scaled into scratch owned by the call's closure and weftSum.
template <typename Fn>
ncclResult_t RunReduction(ncclComm* comm, const ReduceArgs& a, const void* send,
                          size_t input_count, ncclDataType_t type, Fn fn) {
  if (a.premul == nullptr) return RunOrQueue(comm, [=] { return fn(send, a.op); });
  double s = a.premul->scalar;
  auto scratch = std::make_shared<std::vector<char>>();
  return RunOrQueue(comm, [=] {
    return fn(ScaleInput(scratch, send, input_count, type, s), weftSum);
  });
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
  return RunReduction(comm, a, sendbuff, count, datatype, [=](const void* in, weftRedOp_t wop) {
    return weftAllReduce(in, recvbuff, count, W(datatype), wop, w, nullptr);
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
  return RunReduction(comm, a, sendbuff, count, datatype, [=](const void* in, weftRedOp_t wop) {
    return weftReduce(in, recvbuff, count, W(datatype), wop, root, w, nullptr);
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
  int n = 0;
  weftCommCount(w, &n);  // the input holds nranks slices of recvcount
  size_t input_count = recvcount * static_cast<size_t>(n);
  return RunReduction(comm, a, sendbuff, input_count, datatype, [=](const void* in, weftRedOp_t wop) {
    return weftReduceScatter(in, recvbuff, recvcount, W(datatype), wop, w, nullptr);
  });
}
WEFT_NCCL_ALIAS(ncclReduceScatter)

// ---- data movement ----

namespace {
ncclResult_t PrepareMove(ncclComm* comm, const void* send, const void* recv, void* stream,
                         const char* call) {
  ncclResult_t r = ReadyComm(comm, call);
  return r != ncclSuccess ? r : CheckBuffers(call, send, recv, stream);
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, int root, ncclComm_t comm,
                                             cudaStream_t stream) {
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclBroadcast");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftBroadcast(sendbuff, recvbuff, count, W(datatype), root, w, nullptr); });
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
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclAllGather");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftAllGather(sendbuff, recvbuff, sendcount, W(datatype), w, nullptr); });
}
WEFT_NCCL_ALIAS(ncclAllGather)

WEFT_NCCL_EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclComm_t comm,
                                            cudaStream_t stream) {
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclAlltoAll");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftAllToAll(sendbuff, recvbuff, count, W(datatype), w, nullptr); });
}
WEFT_NCCL_ALIAS(ncclAlltoAll)

namespace {
// Gather (to_root) or scatter: the root exchanges one block with every peer in one weft
// group; its own block is a local copy (memmove: NCCL allows the in-place layouts).
weftResult_t RootExchange(bool to_root, const void* send, void* recv, size_t count,
                          ncclDataType_t type, int root, weftComm_t w) {
  int rank = 0, n = 0;
  weftCommUserRank(w, &rank);
  weftCommCount(w, &n);
  size_t block = count * weftTypeSize(W(type));
  weftResult_t r = weftGroupStart();
  if (r != weftSuccess) return r;
  if (rank != root) {
    r = to_root ? weftSend(send, count, W(type), root, w, nullptr)
                : weftRecv(recv, count, W(type), root, w, nullptr);
  } else {
    for (int p = 0; p < n && r == weftSuccess; ++p) {
      if (p == root) continue;
      r = to_root ? weftRecv(static_cast<char*>(recv) + p * block, count, W(type), p, w, nullptr)
                  : weftSend(static_cast<const char*>(send) + p * block, count, W(type), p, w, nullptr);
    }
  }
  weftResult_t end = weftGroupEnd();
  if (r != weftSuccess) return r;
  if (end != weftSuccess) return end;
  if (rank == root && block > 0) {
    const char* from = static_cast<const char*>(send) + (to_root ? 0 : root * block);
    char* to = static_cast<char*>(recv) + (to_root ? root * block : 0);
    memmove(to, from, block);
  }
  return weftSuccess;
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclGather");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return RootExchange(true, sendbuff, recvbuff, count, datatype, root, w); });
}
WEFT_NCCL_ALIAS(ncclGather)

WEFT_NCCL_EXPORT ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, int root, ncclComm_t comm,
                                           cudaStream_t stream) {
  ncclResult_t r = PrepareMove(comm, sendbuff, recvbuff, stream, "ncclScatter");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return RootExchange(false, sendbuff, recvbuff, count, datatype, root, w); });
}
WEFT_NCCL_ALIAS(ncclScatter)

WEFT_NCCL_EXPORT ncclResult_t pncclSend(const void* sendbuff, size_t count,
                                        ncclDataType_t datatype, int peer, ncclComm_t comm,
                                        cudaStream_t stream) {
  ncclResult_t r = PrepareMove(comm, sendbuff, nullptr, stream, "ncclSend");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftSend(sendbuff, count, W(datatype), peer, w, nullptr); });
}
WEFT_NCCL_ALIAS(ncclSend)

WEFT_NCCL_EXPORT ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int peer, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = PrepareMove(comm, nullptr, recvbuff, stream, "ncclRecv");
  if (r != ncclSuccess) return r;
  weftComm_t w = comm->weft;
  return RunOrQueue(comm, [=] { return weftRecv(recvbuff, count, W(datatype), peer, w, nullptr); });
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
  if (residence != ncclScalarHostImmediate)
    return Fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: residence " +
                                      std::to_string(residence) +
                                      " (device scalars need the GPU path; use ncclScalarHostImmediate)");
  if (!PreMulSumTypeSupported(datatype))
    return Fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: datatype " +
                                      std::to_string(datatype) + " is not supported (16- and 8-bit floats)");
  PreMulSumOp created;
  created.live = true;
  created.datatype = datatype;
  switch (datatype) {  // read now: ncclScalarHostImmediate
    case ncclFloat32: created.scalar = *static_cast<float*>(scalar); break;
    case ncclFloat64: created.scalar = *static_cast<double*>(scalar); break;
    case ncclInt32: created.scalar = *static_cast<int32_t*>(scalar); break;
    case ncclInt64: created.scalar = static_cast<double>(*static_cast<int64_t*>(scalar)); break;
    case ncclUint32: created.scalar = *static_cast<uint32_t*>(scalar); break;
    case ncclUint64: created.scalar = static_cast<double>(*static_cast<uint64_t*>(scalar)); break;
    case ncclInt8: created.scalar = *static_cast<int8_t*>(scalar); break;
    default: created.scalar = *static_cast<uint8_t*>(scalar); break;
  }
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
