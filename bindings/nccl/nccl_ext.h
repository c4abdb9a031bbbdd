/* nccl_ext.h: the NCCL entry points newer than the nccl.h the shim is built against (2.28),
 * which PyTorch links (torch 2.15 is built against NCCL 2.30): under LD_PRELOAD the shim
 * replaces NCCL, so every function torch's libtorch_cuda.so imports must be exported or the
 * first call is a fatal "symbol lookup error".
 *
 * The declarations are NCCL 2.30's (nccl.h and nccl_device/core.h); with a 2.30 nccl.h they
 * come from it and this file adds nothing but the device-API ones. The device-API structs are
 * only passed by pointer, so their forward declarations suffice (the shim refuses those calls).
 * C and C++: the shim (nccl_shim_ext.cc) and its C test (tests/nccl_ext_test.c) include it. */
#ifndef WEFT_BINDINGS_NCCL_NCCL_EXT_H_
#define WEFT_BINDINGS_NCCL_NCCL_EXT_H_

#include <nccl.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 30, 0)
/* Communicator suspend flags */
#define NCCL_SUSPEND_MEM 0x01

typedef enum {
  ncclStatGpuMemSuspend = 0,   /* GPU memory that can be suspended (bytes) */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist = 2,   /* GPU memory that cannot be suspended (bytes) */
  ncclStatGpuMemTotal = 3      /* all GPU memory tracked by the communicator (bytes) */
} ncclCommMemStat_t;

typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                           ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                            unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                             cudaStream_t stream);
#endif

/* NCCL's device API (nccl_device/core.h, host side): nccl_device.h needs a CUDA compiler, so
 * the few host functions torch imports are declared here with the structs left opaque. */
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                               struct ncclDevComm* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                      void** outPtr);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_BINDINGS_NCCL_NCCL_EXT_H_ */
