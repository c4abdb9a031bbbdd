// include/weft/weft_device.h: the device API, thin over the active device runtime
// (src/device/device_runtime.h). Errors become weftResult_t + weftGetLastError() here.
#include <cstring>

#include "core/api_internal.h"
#include "device/device_runtime.h"
#include "weft/weft_device.h"

using weft::Report;
using weft::device::ActiveRuntime;

extern "C" {

weftResult_t weftDeviceGetCount(int* count) {
  if (count == nullptr) return Report(weft::InvalidArgument("count (output pointer) is NULL"));
  *count = ActiveRuntime().DeviceCount();
  return weftSuccess;
}

const char* weftDeviceRuntimeName(void) { return ActiveRuntime().name(); }

weftResult_t weftDeviceMalloc(void** ptr, size_t bytes, int device) {
  return Report(ActiveRuntime().Malloc(ptr, bytes, device));
}

weftResult_t weftDeviceFree(void* ptr) { return Report(ActiveRuntime().Free(ptr)); }

weftResult_t weftDeviceMemcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return weftSuccess;
  if (dst == nullptr || src == nullptr)
    return Report(weft::InvalidArgument(std::string(dst == nullptr ? "dst" : "src") +
                                        " is NULL with bytes=" + std::to_string(bytes)));
  weft::device::DeviceRuntime& rt = ActiveRuntime();
  // Host to host needs no device (and works with the "none" runtime).
  if (!rt.PointerInfo(dst).is_device && !rt.PointerInfo(src).is_device) {
    std::memmove(dst, src, bytes);
    return weftSuccess;
  }
  weft::Status s = rt.MemcpyAsync(dst, src, bytes, nullptr);
  if (s.ok()) s = rt.StreamSynchronize(nullptr);
  return Report(s.WithContext("weftDeviceMemcpy"));
}

weftResult_t weftDevicePointerGetDevice(const void* ptr, int* device) {
  if (device == nullptr) return Report(weft::InvalidArgument("device (output pointer) is NULL"));
  weft::device::PointerAttributes a;
  if (ptr != nullptr) a = ActiveRuntime().PointerInfo(ptr);
  *device = a.is_device ? a.device : -1;
  return weftSuccess;
}

weftResult_t weftDeviceStreamCreate(weftStream_t* stream, int device) {
  return Report(ActiveRuntime().StreamCreate(stream, device));
}

weftResult_t weftDeviceStreamSynchronize(weftStream_t stream) {
  return Report(ActiveRuntime().StreamSynchronize(stream));
}

weftResult_t weftDeviceStreamDestroy(weftStream_t stream) {
  if (stream == nullptr) return Report(weft::InvalidArgument("stream is NULL (the default stream cannot be destroyed)"));
  return Report(ActiveRuntime().StreamDestroy(stream));
}

}  // extern "C"
