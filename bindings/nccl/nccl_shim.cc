// nccl_shim.cc: libweft_nccl.so, NCCL 2.28's C ABI (soname libnccl.so.2) over weft's C API.
//
// Every symbol nccl.h declares is exported, as pnccl* (the implementation) and nccl* (an
// alias, as NCCL's profiling interface expects). Each entry point checks what weft cannot
// see (where buffers live, dynamic reduction ops, config structs) and translates to one weft
// call; types, ops and result codes share NCCL's numbering. Device buffers (weft's device
// runtime: CUDA or the emulated GPU) are stream-ordered on the caller's cudaStream_t through
// weft's device path; host buffers wait for the stream, then complete before returning
// (buffers.h). What weft cannot do is answered with ncclInvalidUsage and a message in
// ncclGetLastError, never a crash: memory windows, ncclCommInitRankScalable with several ids,
// ncclGroupSimulateEnd.
#include "nccl_shim.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <weft/weft_device.h>

#include "buffers.h"
#include "cuda_probe.h"

using weft_nccl::Fail;
using weft_nccl::FromWeft;
using weft_nccl::ReadyComm;
using weft_nccl::RunOrQueue;


using weft_nccl::Unsupported;

// ---- version and errors ----

WEFT_NCCL_EXPORT ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr) return Fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the NCCL release whose ABI this shim implements
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclGetVersion)

WEFT_NCCL_EXPORT const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
WEFT_NCCL_ALIAS(ncclGetErrorString)

WEFT_NCCL_EXPORT const char* pncclGetLastError(ncclComm_t comm) {
  return weft_nccl::LastError();
}
WEFT_NCCL_ALIAS(ncclGetLastError)

WEFT_NCCL_EXPORT void pncclResetDebugInit() {}  // weft reads WEFT_DEBUG per call site
WEFT_NCCL_ALIAS(ncclResetDebugInit)

// ---- communicators ----

namespace weft_nccl {

ncclResult_t Unsupported(const char* call, const char* why) {
  return Fail(ncclInvalidUsage, std::string(call) + ": not supported by weft's NCCL shim (" +
                                    why + ")");
}

ncclResult_t ReadConfig(const ncclConfig_t* config, const char* call, ConfigView* view) {
  if (config == nullptr) return ncclSuccess;
  constexpr unsigned kMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's magic
  if (config->magic != kMagic)
    return Fail(ncclInvalidArgument,
                std::string(call) + ": config was not set with NCCL_CONFIG_INITIALIZER (magic " +
                    std::to_string(config->magic) + ")");
  size_t need = offsetof(ncclConfig_t, blocking) + sizeof(config->blocking);
  if (config->size < need)
    return Fail(ncclInvalidArgument, std::string(call) + ": config size " +
                                         std::to_string(config->size) + " is too small");
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return Fail(ncclInvalidArgument, std::string(call) + ": config blocking = " +
                                           std::to_string(config->blocking) + " (0 or 1)");
    view->blocking = config->blocking == 1;
  }
  return ncclSuccess;
}

ncclComm* NewComm() {
  ncclComm* c = new ncclComm;
  c->cuda_device = weft_nccl::CurrentDevice();
  return c;
}

}  // namespace weft_nccl

namespace {

using weft_nccl::ConfigView;
using weft_nccl::NewComm;
using weft_nccl::ReadConfig;

ncclResult_t InitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                      ncclConfig_t* config, const char* call) {
  if (out == nullptr) return Fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  ConfigView view;
  ncclResult_t r = ReadConfig(config, call, &view);
  if (r != ncclSuccess) return r;
  static_assert(sizeof(ncclUniqueId) == sizeof(weftUniqueId), "unique ids differ in size");
  weftUniqueId wid;
  memcpy(&wid, &id, sizeof(wid));
  ncclComm* c = NewComm();
  *out = c;
  return weft_nccl::StartInit(c, view.blocking, [c, nranks, wid, rank] {
    return weftCommInitRank(&c->weft, nranks, wid, rank);
  });
}

}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  weftUniqueId wid;
  weftResult_t r = weftGetUniqueId(&wid);
  if (r != weftSuccess) return FromWeft(r, nullptr);
  memcpy(uniqueId, &wid, sizeof(wid));
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclGetUniqueId)

WEFT_NCCL_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                int rank) {
  return InitRank(comm, nranks, id, rank, nullptr, "ncclCommInitRank");
}
WEFT_NCCL_ALIAS(ncclCommInitRank)

WEFT_NCCL_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                      ncclUniqueId id, int rank,
                                                      ncclConfig_t* config) {
  return InitRank(comm, nranks, id, rank, config, "ncclCommInitRankConfig");
}
WEFT_NCCL_ALIAS(ncclCommInitRankConfig)

WEFT_NCCL_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1)
    return Fail(ncclInvalidArgument, "ncclCommInitAll: comms is NULL or ndev = " +
                                         std::to_string(ndev) + " < 1");
  std::vector<weftComm_t> w(ndev);
  weftResult_t r = weftCommInitAll(w.data(), ndev, devlist);
  if (r != weftSuccess) return FromWeft(r, nullptr);
  for (int i = 0; i < ndev; ++i) {
    comms[i] = NewComm();
    comms[i]->weft = w[i];
    comms[i]->init_state.store(ncclSuccess);
  }
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommInitAll)

WEFT_NCCL_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                                             ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t r = ReadyComm(comm, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  if (newcomm == nullptr) return Fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  ConfigView view;
  if ((r = ReadConfig(config, "ncclCommSplit", &view)) != ncclSuccess) return r;
  ncclComm* c = NewComm();
  *newcomm = c;
  // NCCL_SPLIT_NOCOLOR ranks get NULL once the split has run (weft writes NULL then too).
  weftComm_t parent = comm->weft;
  // A NCCL_SPLIT_NOCOLOR rank still takes part in the split but gets NULL; its placeholder
  // is freed once the split has run (at once, or at ncclGroupEnd).
  c->discard_after_init = color == NCCL_SPLIT_NOCOLOR;
  if (c->discard_after_init) *newcomm = nullptr;
  bool deferred = weft_nccl::InGroup();
  r = weft_nccl::StartInit(c, view.blocking || c->discard_after_init, [c, parent, color, key] {
    return weftCommSplit(parent, color, key, &c->weft);
  });
  if (c->discard_after_init && !deferred) delete c;
  return r;
}
WEFT_NCCL_ALIAS(ncclCommSplit)

// Revoke and shrink map to weft's (include/weft/weft.h: same arguments and flags). weft's
// revoke returns once the operation in flight has stopped, so the communicator is already
// quiescent (NCCL's ncclInProgress state is never seen).
WEFT_NCCL_EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  ncclResult_t r = ReadyComm(comm, "ncclCommRevoke");
  if (r != ncclSuccess) return r;
  return weft_nccl::FromWeft(weftCommRevoke(comm->weft, revokeFlags), comm->weft);
}
WEFT_NCCL_ALIAS(ncclCommRevoke)

WEFT_NCCL_EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                              int excludeRanksCount, ncclComm_t* newcomm,
                                              ncclConfig_t* config, int shrinkFlags) {
  static_assert(NCCL_SHRINK_DEFAULT == WEFT_SHRINK_DEFAULT && NCCL_SHRINK_ABORT == WEFT_SHRINK_ABORT,
                "the shrink flags pass through unchanged");
  ncclResult_t r = ReadyComm(comm, "ncclCommShrink");
  if (r != ncclSuccess) return r;
  if (newcomm == nullptr) return Fail(ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  ConfigView view;
  if ((r = ReadConfig(config, "ncclCommShrink", &view)) != ncclSuccess) return r;
  ncclComm* c = NewComm();
  *newcomm = c;
  weftComm_t parent = comm->weft;
  std::vector<int> exclude(excludeRanksList, excludeRanksList + std::max(excludeRanksCount, 0));
  r = weft_nccl::StartInit(c, view.blocking, [c, parent, exclude, excludeRanksCount, shrinkFlags] {
    return weftCommShrink(parent, exclude.data(), excludeRanksCount, &c->weft, shrinkFlags);
  });
  return r;
}
WEFT_NCCL_ALIAS(ncclCommShrink)

WEFT_NCCL_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  // Every weft call on a host buffer has completed when it returns: nothing to flush.
  return ReadyComm(comm, "ncclCommFinalize");
}
WEFT_NCCL_ALIAS(ncclCommFinalize)

namespace {
ncclResult_t Release(ncclComm_t comm, weftResult_t (*destroy)(weftComm_t), const char* call) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
  if (comm->init_thread.joinable()) comm->init_thread.join();
  weftResult_t r = destroy(comm->weft);
  delete comm;
  return r == weftSuccess ? ncclSuccess
                          : Fail(weft_nccl::MapResult(r),
                                 std::string(call) + ": " + weftGetLastError(nullptr));
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return Release(comm, weftCommDestroy, "ncclCommDestroy");
}
WEFT_NCCL_ALIAS(ncclCommDestroy)

WEFT_NCCL_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return Release(comm, weftCommAbort, "ncclCommAbort");
}
WEFT_NCCL_ALIAS(ncclCommAbort)

WEFT_NCCL_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  int state = comm->init_state.load(std::memory_order_acquire);
  if (state != ncclSuccess) {  // still initializing, or init failed
    if (state != ncclInProgress) Fail(static_cast<ncclResult_t>(state), comm->init_error);
    *asyncError = static_cast<ncclResult_t>(state);
    return ncclSuccess;
  }
  weftResult_t async = weftSuccess;
  weftResult_t r = weftCommGetAsyncError(comm->weft, &async);
  if (r != weftSuccess) return FromWeft(r, comm->weft);
  *asyncError = weft_nccl::MapResult(async);
  if (async != weftSuccess) Fail(*asyncError, weftGetLastError(comm->weft));
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommGetAsyncError)

WEFT_NCCL_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  ncclResult_t r = ReadyComm(comm, "ncclCommCount");
  return r != ncclSuccess ? r : FromWeft(weftCommCount(comm->weft, count), comm->weft);
}
WEFT_NCCL_ALIAS(ncclCommCount)

WEFT_NCCL_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclResult_t r = ReadyComm(comm, "ncclCommUserRank");
  return r != ncclSuccess ? r : FromWeft(weftCommUserRank(comm->weft, rank), comm->weft);
}
WEFT_NCCL_ALIAS(ncclCommUserRank)

WEFT_NCCL_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  ncclResult_t r = ReadyComm(comm, "ncclCommCuDevice");
  if (r != ncclSuccess) return r;
  if (device == nullptr) return Fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  if (comm->cuda_device < 0)
    return Fail(ncclInvalidUsage,
                "ncclCommCuDevice: no CUDA context was current when the communicator was "
                "created (a host-memory communicator has no device)");
  *device = comm->cuda_device;
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommCuDevice)

// Registration is an optimization hint in NCCL: unregistered buffers work the same. weft's
// own registration (weftCommRegister) only means something for weftMemAlloc host memory,
// which an NCCL program never has, and it is collective where NCCL's is not: so the handle is
// a token and the buffers (device ones included) go the unregistered path.
WEFT_NCCL_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                                void** handle) {
  ncclResult_t r = ReadyComm(comm, "ncclCommRegister");
  if (r != ncclSuccess) return r;
  if (handle == nullptr) return Fail(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  *handle = buff;
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommRegister)

WEFT_NCCL_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return ReadyComm(comm, "ncclCommDeregister");
}
WEFT_NCCL_ALIAS(ncclCommDeregister)

// ---- groups ----

WEFT_NCCL_EXPORT ncclResult_t pncclGroupStart() { return weft_nccl::GroupStart(); }
WEFT_NCCL_ALIAS(ncclGroupStart)
WEFT_NCCL_EXPORT ncclResult_t pncclGroupEnd() { return weft_nccl::GroupEnd(); }
WEFT_NCCL_ALIAS(ncclGroupEnd)

// ---- device memory ----

// ncclMemAlloc / ncclMemFree: device memory of weft's runtime (CUDA, or the emulated GPU), on
// the current CUDA device (device 0 without a CUDA context; see buffers.h).
WEFT_NCCL_EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  int count = 0;
  if (weftDeviceGetCount(&count) != weftSuccess || count == 0)
    return Unsupported("ncclMemAlloc", "weft has no device runtime (WEFT_DEVICE=none or no GPU)");
  int device = weft_nccl::AllocationDevice();
  weftResult_t r = weftDeviceMalloc(ptr, size, device);
  if (r != weftSuccess)
    return Fail(weft_nccl::MapResult(r), "ncclMemAlloc: " + std::to_string(size) +
                                             " bytes on device " + std::to_string(device) + ": " +
                                             weftGetLastError(nullptr));
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclMemAlloc)
WEFT_NCCL_EXPORT ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  if (!weft_nccl::IsDeviceMemory(ptr))
    return Fail(ncclInvalidArgument, "ncclMemFree: ptr " + weft_nccl::PtrString(ptr) +
                                         " is not device memory from ncclMemAlloc");
  weftResult_t r = weftDeviceFree(ptr);
  return r == weftSuccess ? ncclSuccess
                          : Fail(weft_nccl::MapResult(r), std::string("ncclMemFree: ") +
                                                              weftGetLastError(nullptr));
}
WEFT_NCCL_ALIAS(ncclMemFree)

// ---- not supported: a clear error each ----

WEFT_NCCL_EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks,
                                                        int myrank, int nId,
                                                        ncclUniqueId* commIds,
                                                        ncclConfig_t* config) {
  if (nId == 1 && commIds != nullptr)  // one id: exactly ncclCommInitRankConfig
    return InitRank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
  return Unsupported("ncclCommInitRankScalable", "only nId = 1 is supported");
}
WEFT_NCCL_ALIAS(ncclCommInitRankScalable)
WEFT_NCCL_EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                      ncclWindow_t* win, int winFlags) {
  return Unsupported("ncclCommWindowRegister",
                     "weft has no symmetric memory windows: use plain device buffers");
}
WEFT_NCCL_ALIAS(ncclCommWindowRegister)
WEFT_NCCL_EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return Unsupported("ncclCommWindowDeregister",
                     "weft has no symmetric memory windows (ncclCommWindowRegister is refused)");
}
WEFT_NCCL_ALIAS(ncclCommWindowDeregister)
WEFT_NCCL_EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return Unsupported("ncclGroupSimulateEnd", "use weft-topo --explain for predictions");
}
WEFT_NCCL_ALIAS(ncclGroupSimulateEnd)
