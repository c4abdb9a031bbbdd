// nccl_shim.h: the pieces of the NCCL ABI shim shared by its entry points (nccl_shim.cc) and
// its group/init machinery (nccl_group.cc).
//
// An ncclComm wraps a weft communicator. Calls made between ncclGroupStart and ncclGroupEnd
// are queued as closures per communicator; at the outermost ncclGroupEnd the deferred
// inits run first (concurrently, since each is collective), then each communicator's calls
// run inside one weft group, on their own thread when the group spans several
// communicators (one thread driving several ranks, as ncclCommInitAll users do, needs that).
#ifndef WEFT_BINDINGS_NCCL_NCCL_SHIM_H_
#define WEFT_BINDINGS_NCCL_NCCL_SHIM_H_

#include <nccl.h>
#include <weft/weft.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// A reduction created by ncclRedOpCreatePreMulSum: sum after scaling the input by a scalar,
// read when the op was created (ncclScalarHostImmediate) or, from device_scalar, when each
// call runs (ncclScalarDevice: after the call's stream has done its earlier work).
struct PreMulSumOp {
  bool live = false;
  ncclDataType_t datatype = ncclFloat32;
  double scalar = 1.0;
  const void* device_scalar = nullptr;
};

struct ncclComm {
  weftComm_t weft = nullptr;
  // Initialization may run on another thread (non-blocking config, or deferred in a group):
  // ncclInProgress until it finishes, then its result.
  std::atomic<int> init_state{ncclInProgress};
  std::string init_error;
  std::thread init_thread;
  std::mutex ops_mutex;
  std::vector<PreMulSumOp> premul_ops;  // index k is ncclRedOp_t (ncclNumOps + k)
  int cuda_device = -1;                 // the current device when the comm was created
  bool discard_after_init = false;      // a NCCL_SPLIT_NOCOLOR placeholder: freed after init
  // Between ncclCommSuspend and ncclCommResume: every call on the comm is refused (NCCL:
  // "the communicator cannot be used while suspended"); weft releases nothing meanwhile.
  std::atomic<bool> suspended{false};
};

// Entry points are defined as pnccl* (NCCL's profiling names) and exported under both names:
// nccl* is an alias, so a profiler interposing nccl* still reaches the implementation.
#define WEFT_NCCL_EXPORT extern "C" __attribute__((visibility("default")))
#define WEFT_NCCL_ALIAS(name) \
  extern "C" __typeof__(p##name) name __attribute__((alias("p" #name), visibility("default")));

namespace weft_nccl {

// Records msg as this thread's last error (ncclGetLastError) and returns code.
ncclResult_t Fail(ncclResult_t code, const std::string& msg);
// ncclInvalidUsage, the message naming call and saying why weft cannot do it.
ncclResult_t Unsupported(const char* call, const char* why);
// This thread's last error message ("" when none).
const char* LastError();
// Maps a weft result to NCCL's, recording weft's message for comm on failure.
ncclResult_t FromWeft(weftResult_t result, weftComm_t comm);
ncclResult_t MapResult(weftResult_t result);

// Waits for comm's initialization; ncclInvalidArgument for NULL, the init error if it failed,
// ncclInvalidUsage while the comm is suspended (unless allow_suspended: ncclCommResume).
ncclResult_t ReadyComm(ncclComm* comm, const char* call, bool allow_suspended = false);

// The fields of ncclConfig_t the shim honours, read only within the caller's struct size
// (an application built against an older nccl.h passes a smaller struct, torch built against
// a newer one a larger struct). The CTA, NVLS, network and name fields tune NCCL's GPU
// kernels or its logs and have no weft counterpart: ignored.
struct ConfigView {
  bool blocking = true;
};
// Reads config (NULL: the defaults) into *view; ncclInvalidArgument naming call when its
// magic, size or blocking field is wrong.
ncclResult_t ReadConfig(const ncclConfig_t* config, const char* call, ConfigView* view);
// A new, uninitialized communicator on the current CUDA device.
ncclComm* NewComm();

// Runs fn now, or queues it for the outermost ncclGroupEnd when a group is open.
// fn returns a weft result; on failure its message is taken from weftGetLastError(comm).
// `after` (optional) runs once the weft group that issued fn has ended (right after fn
// outside a group): what fn's call needs kept alive until then can be released there.
ncclResult_t RunOrQueue(ncclComm* comm, std::function<weftResult_t()> fn,
                        std::function<void()> after = {});
// Runs init now (blocking), on a thread (non-blocking), or at ncclGroupEnd inside a group.
ncclResult_t StartInit(ncclComm* comm, bool blocking, std::function<weftResult_t()> init);
bool InGroup();
ncclResult_t GroupStart();
ncclResult_t GroupEnd();

}  // namespace weft_nccl

#endif  // WEFT_BINDINGS_NCCL_NCCL_SHIM_H_
