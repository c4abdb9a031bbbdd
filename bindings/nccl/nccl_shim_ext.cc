// nccl_shim_ext.cc: the NCCL 2.29/2.30 entry points PyTorch imports beyond nccl.h 2.28
// (nccl_ext.h): grow maps to weft's elastic API (weftCommGetUniqueId / weftCommGrow, the same
// arguments); suspend/resume gate the communicator without releasing anything (weft's
// buffers are not NCCL's suspendable GPU memory), and the memory statistics say so (zeros,
// plus the suspended flag); the window, signal and device-communicator calls need NCCL's
// symmetric memory windows, which weft does not have (ncclCommWindowRegister is refused, so
// no window exists to name): ncclInvalidUsage with a message naming the function.
//
// torch gates suspend/resume/memory statistics on NCCL >= 2.29.7 at run time, and the shim
// reports 2.28.9 (ncclGetVersion), so torch does not call them; they are here so that the
// loader resolves every symbol torch imports and a direct caller gets a defined answer.
#include <cstring>
#include <optional>
#include <string>

#include "nccl_ext.h"
#include "nccl_shim.h"

using weft_nccl::Fail;
using weft_nccl::ReadyComm;
using weft_nccl::Unsupported;

// ---- grow ----

WEFT_NCCL_EXPORT ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  ncclResult_t r = ReadyComm(comm, "ncclCommGetUniqueId");
  if (r != ncclSuccess) return r;
  if (uniqueId == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommGetUniqueId: uniqueId is NULL");
  weftUniqueId wid;
  weftResult_t w = weftCommGetUniqueId(comm->weft, &wid);
  if (w != weftSuccess) return weft_nccl::FromWeft(w, comm->weft);
  memcpy(uniqueId, &wid, sizeof(wid));
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommGetUniqueId)

// Existing ranks pass comm (the root also the id from ncclCommGetUniqueId, the others NULL;
// rank -1), new ranks comm = NULL, the id and their rank: weftCommGrow takes the same.
// Like ncclCommInitRankConfig, the new communicator is initialized now, on a thread
// (config->blocking = 0), or at ncclGroupEnd.
WEFT_NCCL_EXPORT ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks,
                                            const ncclUniqueId* uniqueId, int rank,
                                            ncclComm_t* newcomm, ncclConfig_t* config) {
  weftComm_t parent = nullptr;
  if (comm != nullptr) {
    ncclResult_t r = ReadyComm(comm, "ncclCommGrow");
    if (r != ncclSuccess) return r;
    parent = comm->weft;
  }
  if (newcomm == nullptr) return Fail(ncclInvalidArgument, "ncclCommGrow: newcomm is NULL");
  weft_nccl::ConfigView view;
  ncclResult_t r = weft_nccl::ReadConfig(config, "ncclCommGrow", &view);
  if (r != ncclSuccess) return r;
  std::optional<weftUniqueId> id;
  if (uniqueId != nullptr) {
    id.emplace();
    memcpy(&*id, uniqueId, sizeof(weftUniqueId));
  }
  ncclComm* c = weft_nccl::NewComm();
  *newcomm = c;
  return weft_nccl::StartInit(c, view.blocking, [c, parent, nRanks, id, rank] {
    return weftCommGrow(parent, nRanks, id ? &*id : nullptr, rank, &c->weft);
  });
}
WEFT_NCCL_ALIAS(ncclCommGrow)

// ---- suspend, resume, memory statistics ----

WEFT_NCCL_EXPORT ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  ncclResult_t r = ReadyComm(comm, "ncclCommSuspend");  // refuses an already suspended comm
  if (r != ncclSuccess) return r;
  if ((flags & ~NCCL_SUSPEND_MEM) != 0)
    return Fail(ncclInvalidArgument, "ncclCommSuspend: flags = " + std::to_string(flags) +
                                         " (0 or NCCL_SUSPEND_MEM)");
  comm->suspended.store(true, std::memory_order_release);
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommSuspend)

WEFT_NCCL_EXPORT ncclResult_t pncclCommResume(ncclComm_t comm) {
  ncclResult_t r = ReadyComm(comm, "ncclCommResume", /*allow_suspended=*/true);
  if (r != ncclSuccess) return r;
  if (!comm->suspended.exchange(false, std::memory_order_acq_rel))
    return Fail(ncclInvalidUsage, "ncclCommResume: the communicator is not suspended");
  return ncclSuccess;
}
WEFT_NCCL_ALIAS(ncclCommResume)

// weft does not account device memory per communicator and frees nothing on suspend: the byte
// counts are 0 (nothing NCCL-style to suspend or report), the suspended flag is the comm's.
WEFT_NCCL_EXPORT ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat,
                                                uint64_t* value) {
  ncclResult_t r = ReadyComm(comm, "ncclCommMemStats", /*allow_suspended=*/true);
  if (r != ncclSuccess) return r;
  if (value == nullptr) return Fail(ncclInvalidArgument, "ncclCommMemStats: value is NULL");
  switch (stat) {
    case ncclStatGpuMemSuspended:
      *value = comm->suspended.load(std::memory_order_acquire) ? 1 : 0;
      return ncclSuccess;
    case ncclStatGpuMemSuspend:
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal:
      *value = 0;
      return ncclSuccess;
  }
  return Fail(ncclInvalidArgument,
              "ncclCommMemStats: stat = " + std::to_string(static_cast<int>(stat)) + " (0 to 3)");
}
WEFT_NCCL_ALIAS(ncclCommMemStats)

// ---- symmetric memory windows, one-sided signals, the device API: refused ----

namespace {
constexpr const char* kNoWindows =
    "weft has no symmetric memory windows: ncclCommWindowRegister is refused, so no window "
    "exists; use collectives or ncclSend/ncclRecv on plain device buffers";
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win,
                                                 void** outUserPtr) {
  return Unsupported("ncclWinGetUserPtr", kNoWindows);
}
WEFT_NCCL_ALIAS(ncclWinGetUserPtr)

WEFT_NCCL_EXPORT ncclResult_t pncclPutSignal(const void* localbuff, size_t count,
                                             ncclDataType_t datatype, int peer,
                                             ncclWindow_t peerWin, size_t peerWinOffset,
                                             int sigIdx, int ctx, unsigned int flags,
                                             ncclComm_t comm, cudaStream_t stream) {
  return Unsupported("ncclPutSignal", kNoWindows);
}
WEFT_NCCL_ALIAS(ncclPutSignal)

// Signals are counted per window context in NCCL; weft's stream-ordered signals live inside
// its IPC transport and are not exposed: refused rather than emulated with send/recv, whose
// matching rules differ (a signal never waits for its receiver).
WEFT_NCCL_EXPORT ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                                          ncclComm_t comm, cudaStream_t stream) {
  return Unsupported("ncclSignal", "weft does not expose one-sided signals");
}
WEFT_NCCL_ALIAS(ncclSignal)

WEFT_NCCL_EXPORT ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs,
                                              ncclComm_t comm, cudaStream_t stream) {
  return Unsupported("ncclWaitSignal", "weft does not expose one-sided signals");
}
WEFT_NCCL_ALIAS(ncclWaitSignal)

// NCCL's device API has no profiling (pnccl*) names: exported as nccl* only.
WEFT_NCCL_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm,
                                                const struct ncclDevCommRequirements* reqs,
                                                struct ncclDevComm* outDevComm) {
  return Unsupported("ncclDevCommCreate", "weft has no device-side communicators (NCCL's "
                                          "device API runs NCCL kernels on symmetric windows)");
}

WEFT_NCCL_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm,
                                                 const struct ncclDevComm* devComm) {
  return Unsupported("ncclDevCommDestroy", "no device communicator can exist: "
                                           "ncclDevCommCreate is refused");
}

WEFT_NCCL_EXPORT ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                              void** outPtr) {
  return Unsupported("ncclGetLsaMultimemDevicePointer", kNoWindows);
}

WEFT_NCCL_EXPORT ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset,
                                                       int peer, void** outPtr) {
  return Unsupported("ncclGetPeerDevicePointer", kNoWindows);
}
