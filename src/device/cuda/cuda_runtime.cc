// The CUDA device runtime as a plugin (libweft-device-cuda.so): the CUDA runtime API (linked
// statically, so the plugin needs only the driver, libcuda.so.1, which cudart opens at run
// time), the stream memory operations of the driver API (cuStreamWaitValue32 /
// cuStreamWriteValue32, reached through cudaGetDriverEntryPointByVersion: no link to libcuda),
// and weft's kernels compiled by nvcc (kernels/reduce.cu from kernels/element_ops.h,
// kernels/codec.cu from kernels/codec_kernels.h, the SM copy of kernels/copy.cu).
// Without a driver or a device the entry point fails and libweft falls back to "none".
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "device/device_runtime.h"
#include "kernels/codec_cuda.h"
#include "kernels/codec_kernels.h"
#include "kernels/copy_cuda.h"
#include "kernels/reduce_cuda.h"

namespace weft::device::cuda {
namespace {

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

std::string Hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

Status Check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return OkStatus();
  return Status(weftUnhandledCudaError, what + ": " + cudaGetErrorName(e) + " (" +
                                            cudaGetErrorString(e) + ")");
}

// A query's answer: done, weftInProgress while work is pending, or the error.
Status Query(cudaError_t e, const char* what) {
  if (e == cudaErrorNotReady) return Status(weftInProgress, std::string(what) + ": work pending");
  return Check(e, what);
}

// `refused` names the values the kernel refused (as the emulated runtime does), so that the
// caller's error says which argument was wrong on either runtime.
Status CheckLaunch(weftResult_t r, const char* kernel, const std::string& refused) {
  if (r == weftSuccess) return OkStatus();
  if (r == weftInvalidArgument)
    return InvalidArgument(std::string(kernel) + ": " + refused + " is not supported");
  // The launcher read (and so cleared) a launch error already: still a failure, never success.
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Check(e, kernel);
  return Status(weftUnhandledCudaError, std::string(kernel) + ": the launch failed");
}

std::string TypeOp(weftDataType_t dtype, weftRedOp_t op) {
  return "dtype " + std::to_string(static_cast<int>(dtype)) + " with op " +
         std::to_string(static_cast<int>(op));
}

cudaStream_t S(StreamHandle s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(EventHandle e) { return static_cast<cudaEvent_t>(e); }

class CudaRuntime final : public DeviceRuntime {
 public:
  CudaRuntime(int devices, WaitValueFn wait, WriteValueFn write)
      : devices_(devices), wait_value_(wait), write_value_(write) {}
  const char* name() const override { return "cuda"; }
  int DeviceCount() const override { return devices_; }

  Status Malloc(void** ptr, size_t bytes, int device) override {
    if (ptr == nullptr) return InvalidArgument("device malloc: ptr (output pointer) is NULL");
    if (device < 0 || device >= devices_)
      return InvalidArgument("device malloc: device=" + std::to_string(device) + " is not in [0, " +
                             std::to_string(devices_) + ")");
    *ptr = nullptr;
    if (bytes == 0) return OkStatus();
    WEFT_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
    return Check(cudaMalloc(ptr, bytes), "cudaMalloc(" + std::to_string(bytes) + ")");
  }
  Status Free(void* ptr) override { return Check(cudaFree(ptr), "cudaFree(" + Hex(ptr) + ")"); }
  PointerAttributes PointerInfo(const void* ptr) const override {
    PointerAttributes a;
    cudaPointerAttributes attr{};
    if (ptr == nullptr || cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      (void)cudaGetLastError();  // unknown pointers are host memory, not a sticky error
      return a;
    }
    a.is_device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    a.is_pinned = attr.type == cudaMemoryTypeHost;
    a.device = a.is_device ? attr.device : -1;
    return a;
  }
  Status HostAlloc(void** ptr, size_t bytes) override {
    return Check(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
                 "cudaHostAlloc(" + std::to_string(bytes) + ")");
  }
  Status HostFree(void* ptr) override { return Check(cudaFreeHost(ptr), "cudaFreeHost"); }

  Status StreamCreate(StreamHandle* stream, int device) override {
    if (stream == nullptr) return InvalidArgument("stream create: stream (output pointer) is NULL");
    WEFT_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"));
    cudaStream_t s = nullptr;
    WEFT_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    *stream = s;
    return OkStatus();
  }
  Status StreamDestroy(StreamHandle stream) override {
    WEFT_RETURN_IF_ERROR(Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize"));
    return Check(cudaStreamDestroy(S(stream)), "cudaStreamDestroy");
  }
  Status StreamSynchronize(StreamHandle stream) override {
    return Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize");
  }
  Status StreamQuery(StreamHandle stream) override {
    return Query(cudaStreamQuery(S(stream)), "cudaStreamQuery");
  }
  int StreamDevice(StreamHandle stream) const override {
    int device = -1;
    if (stream == nullptr) {
      (void)cudaGetDevice(&device);
    } else if (cudaStreamGetDevice(S(stream), &device) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return device;
  }
  Status EventCreate(EventHandle* event) override {
    cudaEvent_t e = nullptr;
    WEFT_RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    *event = e;
    return OkStatus();
  }
  Status EventDestroy(EventHandle event) override {
    return Check(cudaEventDestroy(E(event)), "cudaEventDestroy");
  }
  Status EventRecord(EventHandle event, StreamHandle stream) override {
    return Check(cudaEventRecord(E(event), S(stream)), "cudaEventRecord");
  }
  Status EventSynchronize(EventHandle event) override {
    return Check(cudaEventSynchronize(E(event)), "cudaEventSynchronize");
  }
  Status EventQuery(EventHandle event) override {
    return Query(cudaEventQuery(E(event)), "cudaEventQuery");
  }
  Status StreamWaitEvent(StreamHandle stream, EventHandle event) override {
    return Check(cudaStreamWaitEvent(S(stream), E(event), 0), "cudaStreamWaitEvent");
  }
  Status WriteFlag(StreamHandle stream, uint32_t* flag, uint32_t value) override {
    return DriverCheck(write_value_(S(stream), reinterpret_cast<CUdeviceptr>(flag), value, 0),
                       "cuStreamWriteValue32");
  }
  Status WaitFlag(StreamHandle stream, const uint32_t* flag, uint32_t value) override {
    return DriverCheck(wait_value_(S(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                                   CU_STREAM_WAIT_VALUE_GEQ),
                       "cuStreamWaitValue32");
  }
  Status LaunchHostFunc(StreamHandle stream, HostFn fn, void* arg) override {
    return Check(cudaLaunchHostFunc(S(stream), fn, arg), "cudaLaunchHostFunc");
  }
  Status MemcpyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)), "cudaMemcpyAsync");
  }
  Status ExportHandle(void* ptr, IpcHandle* handle) override {
    static_assert(sizeof(cudaIpcMemHandle_t) <= kIpcHandleBytes, "IPC handle too large");
    cudaIpcMemHandle_t h{};
    WEFT_RETURN_IF_ERROR(Check(cudaIpcGetMemHandle(&h, ptr), "cudaIpcGetMemHandle(" + Hex(ptr) + ")"));
    *handle = IpcHandle{};
    std::memcpy(handle->bytes, &h, sizeof h);
    return OkStatus();
  }
  Status ImportHandle(const IpcHandle& handle, void** ptr) override {
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle.bytes, sizeof h);
    return Check(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  }
  Status CloseImported(void* ptr) override {
    return Check(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
  }
  Status LaunchCopy(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    if (bytes == 0) return OkStatus();
    WEFT_RETURN_IF_ERROR(CheckDevice("copy kernel: dst", dst, 1));
    WEFT_RETURN_IF_ERROR(CheckDevice("copy kernel: src", src, 1));
    const auto* d = static_cast<const char*>(dst);
    const auto* x = static_cast<const char*>(src);
    if (d < x + bytes && x < d + bytes)
      return InvalidArgument("copy kernel: dst=" + Hex(dst) + " and src=" + Hex(src) +
                             " overlap (bytes=" + std::to_string(bytes) + ")");
    return CheckLaunch(kernels::cuda::Copy(dst, src, bytes, stream), "copy kernel", "the copy");
  }
  Status LaunchReduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
                      weftRedOp_t op, StreamHandle stream) override {
    return CheckLaunch(kernels::cuda::Reduce(dst, a, b, count, dtype, op, stream), "reduce kernel",
                       TypeOp(dtype, op));
  }
  Status LaunchFinalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op, int divisor,
                        StreamHandle stream) override {
    return CheckLaunch(kernels::cuda::Finalize(dst, count, dtype, op, divisor, stream),
                       "finalize kernel", TypeOp(dtype, op));
  }
  Status LaunchCast(void* dst, weftDataType_t dst_type, const void* src, weftDataType_t src_type,
                    size_t count, StreamHandle stream) override {
    return CheckLaunch(kernels::cuda::Cast(dst, dst_type, src, src_type, count, stream), "cast kernel",
                       "a cast from type " + std::to_string(static_cast<int>(src_type)) + " to " +
                           std::to_string(static_cast<int>(dst_type)));
  }
  Status LaunchEncode(void* dst, const void* src, size_t count, const weftCompression& spec,
                      uint64_t rounding_stream, StreamHandle stream) override {
    codec::CodecPlan plan;
    WEFT_RETURN_IF_ERROR(
        codec::MakeCodecPlan("encode kernel", spec, count, rounding_stream, &plan));
    if (count == 0) return OkStatus();
    WEFT_RETURN_IF_ERROR(CheckDevice("encode kernel: src", src, alignof(float)));
    WEFT_RETURN_IF_ERROR(CheckDevice("encode kernel: dst", dst, 1));
    return CheckLaunch(kernels::cuda::Encode(plan, dst, src, stream), "encode kernel", "the spec");
  }
  Status LaunchDecode(void* dst, const void* src, size_t count, const weftCompression& spec,
                      StreamHandle stream) override {
    codec::CodecPlan plan;
    WEFT_RETURN_IF_ERROR(codec::MakeCodecPlan("decode kernel", spec, count, 0, &plan));
    if (count == 0) return OkStatus();
    WEFT_RETURN_IF_ERROR(CheckDevice("decode kernel: dst", dst, alignof(float)));
    WEFT_RETURN_IF_ERROR(CheckDevice("decode kernel: src", src, 1));
    return CheckLaunch(kernels::cuda::Decode(plan, dst, src, stream), "decode kernel", "the spec");
  }
  Status LaunchDecodeReduce(void* dst, const void* src, size_t count, const weftCompression& spec,
                            weftRedOp_t op, StreamHandle stream) override {
    const char* what = "decode-reduce kernel";
    if (static_cast<int>(op) < 0 || static_cast<int>(op) >= weftNumOps)
      return InvalidArgument(std::string(what) + ": op " + std::to_string(static_cast<int>(op)) +
                             " is not a valid weftRedOp_t");
    codec::CodecPlan plan;
    WEFT_RETURN_IF_ERROR(codec::MakeCodecPlan(what, spec, count, 0, &plan));
    if (count == 0) return OkStatus();
    WEFT_RETURN_IF_ERROR(CheckDevice("decode-reduce kernel: dst", dst, alignof(float)));
    WEFT_RETURN_IF_ERROR(CheckDevice("decode-reduce kernel: src", src, 1));
    return CheckLaunch(kernels::cuda::DecodeReduce(plan, dst, src, op, stream), what,
                       "op " + std::to_string(static_cast<int>(op)));
  }

 private:
  // The codec and copy launches take device memory only, `align`-byte aligned: a host pointer would
  // fault inside the kernel and poison the context, so it is refused here, named.
  Status CheckDevice(const char* what, const void* ptr, size_t align) const {
    if (!PointerInfo(ptr).is_device)
      return InvalidArgument(std::string(what) + "=" + Hex(ptr) +
                             " is not device memory (kernels take device pointers only)");
    if (reinterpret_cast<uintptr_t>(ptr) % align != 0)
      return InvalidArgument(std::string(what) + "=" + Hex(ptr) + " is not " +
                             std::to_string(align) + "-byte aligned (float32 values)");
    return OkStatus();
  }
  static Status DriverCheck(CUresult r, const char* what) {
    if (r == CUDA_SUCCESS) return OkStatus();
    return Status(weftUnhandledCudaError, std::string(what) + ": CUresult " + std::to_string(r));
  }
  const int devices_;
  const WaitValueFn wait_value_;
  const WriteValueFn write_value_;
};

template <typename Fn>
bool DriverEntry(const char* symbol, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr)
    return false;
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

}  // namespace
}  // namespace weft::device::cuda

extern "C" __attribute__((visibility("default"))) weft::device::DeviceRuntime*
weftDevicePluginCreate(const weft::device::PluginOptions* options) {
  auto fail = [&](const std::string& why) -> weft::device::DeviceRuntime* {
    if (options != nullptr && options->error != nullptr && options->error_bytes > 0)
      std::snprintf(options->error, options->error_bytes, "%s", why.c_str());
    return nullptr;
  };
  if (options == nullptr || options->abi_version != weft::device::kPluginAbiVersion)
    return fail("plugin ABI version differs from libweft's (rebuild both from one tree)");
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) return fail(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e));
  if (devices == 0) return fail("no CUDA device");
  weft::device::cuda::WaitValueFn wait = nullptr;
  weft::device::cuda::WriteValueFn write = nullptr;
  if (!weft::device::cuda::DriverEntry("cuStreamWaitValue32", &wait) ||
      !weft::device::cuda::DriverEntry("cuStreamWriteValue32", &write))
    return fail("the driver lacks cuStreamWaitValue32/cuStreamWriteValue32");
  return new weft::device::cuda::CudaRuntime(devices, wait, write);
}
