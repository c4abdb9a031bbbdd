// buffers.cc: see buffers.h.
#include "buffers.h"

#include <weft/weft_device.h>

#include <cstdio>
#include <string>

#include "cuda_probe.h"
#include "nccl_shim.h"

namespace weft_nccl {
namespace {

bool HaveDeviceRuntime() {
  int count = 0;
  return weftDeviceGetCount(&count) == weftSuccess && count > 0;
}

}  // namespace

std::string PtrString(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

bool IsDeviceMemory(const void* ptr) {
  int device = -1;
  return ptr != nullptr && weftDevicePointerGetDevice(ptr, &device) == weftSuccess &&
         device >= 0;
}

weftResult_t WaitForStream(void* stream) {
  if (HaveDeviceRuntime()) return weftDeviceStreamSynchronize(stream);
  // No device runtime in weft: a stream can only be CUDA's (a program on a GPU machine run
  // with WEFT_DEVICE=none), waited for through the driver when one is loaded.
  return SynchronizeStream(stream) ? weftSuccess : weftUnhandledCudaError;
}

ncclResult_t PlaceCall(const char* call, const void* send, const void* recv, void* stream,
                       Placement* out) {
  *out = Placement{};
  if (IsDeviceMemory(send) || IsDeviceMemory(recv)) {
    out->device = true;
    out->stream = stream;
    return ncclSuccess;
  }
  for (const void* p : {send, recv})
    if (IsDevicePointer(p))  // the CUDA driver knows it, weft's runtime does not
      return Fail(ncclInvalidUsage,
                  std::string(call) + ": buffer " + PtrString(p) +
                      " is CUDA device memory, but weft's device runtime is \"" +
                      weftDeviceRuntimeName() + "\" (set WEFT_DEVICE=cuda)");
  for (const void* p : {send, recv})
    if (p != nullptr && !IsReadableHostAddress(p))
      return Fail(ncclInvalidUsage,
                  std::string(call) + ": buffer " + PtrString(p) +
                      " is not host memory this process can read, nor device memory of "
                      "weft's \"" + weftDeviceRuntimeName() +
                      "\" runtime (an unmapped address, or a device pointer with no device "
                      "runtime loaded)");
  if (stream != nullptr && WaitForStream(stream) != weftSuccess)
    return Fail(ncclUnhandledCudaError, std::string(call) + ": waiting for stream " +
                                            PtrString(stream) + " failed: " + weftGetLastError(nullptr));
  return ncclSuccess;
}

int AllocationDevice() {
  int device = CurrentDevice();
  return device >= 0 ? device : 0;
}

}  // namespace weft_nccl
