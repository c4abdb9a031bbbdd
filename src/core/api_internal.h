// Shared by the C API's implementation files — not public. The C API is split by role:
//   api.cc          the communicator and collective entry points (argument checks, Entry)
//   api_checks.cc   argument checks, error reporting, the registry of live communicators
//   host_stream.cc  weftStream_t: host streams (a worker thread per stream), weftStream*
//   groups.cc       weftGroupStart/End and submission (now, on a stream, or queued in a group)
#pragma once

#include <functional>
#include <string>
#include <variant>

#include "common/status.h"
#include "core/comm.h"
#include "weft/weft.h"

namespace weft {

// Records a failed status as the thread's last error (weftGetLastError) and returns its code.
weftResult_t Report(const Status& s);
// The thread's last error message (SetLastErrorMessage, in compress/compress_error.h, sets it).
const std::string& LastErrorMessage();
std::string PtrStr(const void* p);

// ---- argument checks (messages name the argument and its value) ----
Status CheckType(weftDataType_t t);
Status CheckOp(weftRedOp_t op);
// count * multiplier * elem must fit in a signed size (no buffer can be larger).
Status CheckCount(const char* name, size_t count, size_t multiplier, size_t elem);
Status CheckBuffer(const char* name, const void* p, size_t count);
Status CheckRank(const char* name, int value, const weftComm* comm);
// One side of an all-to-allv (see api_checks.cc); *extent = elements the buffer must hold.
// displs_name: the displacement argument's name in messages (default sdispls / rdispls).
Status CheckBlockTable(const char* side, const size_t* counts, const size_t* displs, int nranks,
                       size_t elem, size_t* extent, const char* displs_name = nullptr);

// ---- live communicators ----
// comm is a handle weftCommInit* returned and weftCommDestroy/Abort has not freed.
Status CheckLiveComm(const weftComm* comm);
bool IsLiveComm(const weftComm* comm);
weftComm* NewComm();
void FreeComm(weftComm* c, const Status& why);

// ---- submission (groups.cc) ----
// Runs `op` now (blocking), queues it on a host stream, or keeps it for weftGroupEnd.
Status Submit(weftComm* comm, std::variant<CollectiveCall, P2POp> op, weftStream_t stream);
Status SubmitCollective(weftComm* comm, CollectiveCall&& call, weftStream_t stream);
// Runs validated ops on the calling thread (send/recv batched), blocking until they finish.
Status RunOps(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops);
// True between weftGroupStart and its weftGroupEnd on this thread.
bool InGroup();

// ---- host streams (host_stream.cc) ----
class HostStream;
// The host stream behind a handle, or nullptr when it is not one (NULL included).
HostStream* LookupStream(weftStream_t s);
// Queues `fn` on the stream (it runs on the stream's worker thread, in order).
void EnqueueOnStream(HostStream* hs, std::function<Status()> fn);

}  // namespace weft
