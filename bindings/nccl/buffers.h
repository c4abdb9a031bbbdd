// buffers: where an NCCL call's buffers live, and so how the shim hands its stream to weft.
//
// Device memory is whatever weft's active device runtime says it is (CUDA with WEFT_DEVICE=cuda,
// the emulated GPU's buffers with WEFT_DEVICE=emulated), so the emulated GPU exercises the same
// path as CUDA. Such a call is stream-ordered as NCCL's: the buffers and the cudaStream_t (the
// device runtime's stream handle; NULL = its default stream) go to weft unchanged. A call on
// host buffers keeps the shim's host behaviour: the stream's earlier work is waited for, then the
// call runs to completion before it returns (stronger than NCCL's ordering).
#ifndef WEFT_BINDINGS_NCCL_BUFFERS_H_
#define WEFT_BINDINGS_NCCL_BUFFERS_H_

#include <nccl.h>
#include <weft/weft.h>

#include <string>

namespace weft_nccl {

// How a call reaches weft.
struct Placement {
  bool device = false;            // a buffer is device memory: weft's device path
  weftStream_t stream = nullptr;  // what to pass to weft (NULL for host buffers)
};

// "0x..." for messages.
std::string PtrString(const void* ptr);

// True when ptr is device memory of weft's active device runtime.
bool IsDeviceMemory(const void* ptr);

// Decides the placement of a call on send/recv (either may be NULL). Refuses, with
// ncclInvalidUsage and a message naming `call` and the buffer, a CUDA device pointer that
// weft's runtime does not know (WEFT_DEVICE=none) and a host address this process cannot
// read. For host buffers, waits for `stream` first.
ncclResult_t PlaceCall(const char* call, const void* send, const void* recv, void* stream,
                       Placement* out);

// Waits for the work queued on stream (the device runtime's, or CUDA's when weft has no
// device runtime); weft's result, with weftGetLastError set on failure.
weftResult_t WaitForStream(void* stream);

// The device ordinal for ncclMemAlloc: the current CUDA context's device when there is one,
// else device 0 of weft's runtime (the emulated GPU has no notion of a current device).
int AllocationDevice();

}  // namespace weft_nccl

#endif  // WEFT_BINDINGS_NCCL_BUFFERS_H_
