// DeviceRuntime: the one seam between weft and a device (GPU) runtime (issue 35).
//
// Everything weft does with device memory goes through this interface: allocation, pointer
// attributes, pinned host memory, streams, events, stream waits and flag writes, asynchronous
// copies, IPC handles and weft's kernels. Implementations are plugins, shared libraries loaded
// at first use (device_runtime.cc), so libweft.so itself links no device library and loads on
// a machine without a driver:
//   libweft-device-cuda.so       CUDA (src/device/cuda/), kernels compiled by nvcc;
//   libweft-device-emulated.so   a CPU model of discrete GPUs (src/device/emulated/) whose
//                                device memory faults on any host load or store.
// WEFT_DEVICE=cuda|emulated[:N]|none picks one; without it: cuda when its plugin loads and
// reports a device, else none (every pointer is host memory, device calls fail clearly).
//
// Semantics every implementation follows (the emulated GPU is the test of them):
//   * Stream work runs asynchronously, in the order it was enqueued; a call returns once the
//     work is queued. A null stream is the runtime's default stream (DefaultStream(device)).
//   * MemcpyAsync takes its direction from the pointers (PointerInfo): host<->device,
//     device<->device, host<->host all work; host memory may be pageable or pinned.
//   * WaitFlag(stream, flag, v) stalls the stream until the 32-bit host word *flag reaches v,
//     compared cyclically ((int32_t)(*flag - v) >= 0, cuStreamWaitValue32's GEQ), so flags are
//     counters that only grow. WriteFlag stores v once the earlier work on the stream is done.
//     Flags live in pinned host memory (HostAlloc) or in device memory, also another
//     process's imported through IPC (the ipc transport's signal slots; cuStreamWriteValue32
//     on a peer's memory), where the host cannot read them.
//   * Kernels take device pointers only (a host pointer is an InvalidArgument naming it).
//   * Errors name the argument and its value; nothing aborts the process.
//
// ABI between libweft and a plugin: this C++ interface (the plugin is built from the same tree
// by the same compiler) created through one C entry point, kPluginEntry, whose options carry
// kPluginAbiVersion. Only header-only parts of weft cross it (Status, weft.h's enums,
// weft_compress.h's weftCompression).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft::device {

inline constexpr int kPluginAbiVersion = 3;  // 2: the codec launches; 3: LaunchCopy
inline constexpr const char* kPluginEntry = "weftDevicePluginCreate";
inline constexpr size_t kIpcHandleBytes = 64;

using StreamHandle = void*;  // nullptr = the default stream of the calling thread's device
using EventHandle = void*;
using HostFn = void (*)(void* arg);

struct PointerAttributes {
  bool is_device = false;  // device memory of `device` (allocated or imported here)
  int device = -1;
  bool is_pinned = false;  // page-locked host memory from HostAlloc
};

// An exported device allocation: opaque bytes another process of this host imports.
struct IpcHandle {
  unsigned char bytes[kIpcHandleBytes] = {};
};

// What libweft passes to a plugin's entry point (settings are read on libweft's side: a
// plugin never reads the environment).
struct PluginOptions {
  int abi_version = kPluginAbiVersion;
  int emulated_devices = 8;         // emulated: how many GPUs (WEFT_DEVICE=emulated:N)
  uint32_t emulated_delay_us = 0;   // emulated: random delay up to this per operation
  char* error = nullptr;            // where a plugin that cannot start explains why
  size_t error_bytes = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // "cuda", "emulated" or "none".
  virtual const char* name() const = 0;
  virtual int DeviceCount() const = 0;

  // ---- memory ----
  virtual Status Malloc(void** ptr, size_t bytes, int device) = 0;
  virtual Status Free(void* ptr) = 0;
  virtual PointerAttributes PointerInfo(const void* ptr) const = 0;
  virtual Status HostAlloc(void** ptr, size_t bytes) = 0;  // pinned host memory
  virtual Status HostFree(void* ptr) = 0;

  // ---- streams and events ----
  virtual Status StreamCreate(StreamHandle* stream, int device) = 0;
  virtual Status StreamDestroy(StreamHandle stream) = 0;  // waits for its queued work first
  virtual Status StreamSynchronize(StreamHandle stream) = 0;
  // OkStatus when every queued operation completed, weftInProgress while some are pending,
  // or the stream's first error.
  virtual Status StreamQuery(StreamHandle stream) = 0;
  // The device a stream belongs to (the default stream: the calling thread's device, 0).
  virtual int StreamDevice(StreamHandle stream) const = 0;
  virtual Status EventCreate(EventHandle* event) = 0;
  virtual Status EventDestroy(EventHandle event) = 0;
  virtual Status EventRecord(EventHandle event, StreamHandle stream) = 0;
  virtual Status EventSynchronize(EventHandle event) = 0;
  virtual Status EventQuery(EventHandle event) = 0;  // as StreamQuery
  // Later work on `stream` waits for the event's most recent record (at the time of this call).
  virtual Status StreamWaitEvent(StreamHandle stream, EventHandle event) = 0;
  virtual Status WriteFlag(StreamHandle stream, uint32_t* flag, uint32_t value) = 0;
  virtual Status WaitFlag(StreamHandle stream, const uint32_t* flag, uint32_t value) = 0;
  virtual Status LaunchHostFunc(StreamHandle stream, HostFn fn, void* arg) = 0;

  // ---- copies ----
  virtual Status MemcpyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;

  // ---- IPC ----
  virtual Status ExportHandle(void* device_ptr, IpcHandle* handle) = 0;
  virtual Status ImportHandle(const IpcHandle& handle, void** device_ptr) = 0;
  virtual Status CloseImported(void* device_ptr) = 0;

  // ---- weft's kernels (kernels/element_ops.h semantics), asynchronous on `stream` ----
  // dst = src, `bytes` bytes of device memory (this device's, or a peer's imported window),
  // moved by the SMs (a copy kernel) rather than the copy engine MemcpyAsync uses: no DMA set-up,
  // so small copies finish sooner (transports/ipc/ipc_options.h weighs the two). The ranges
  // must not overlap.
  virtual Status LaunchCopy(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;
  // dst = a (op) b, count elements; dst may alias a or b exactly. weftAvg reduces as sum.
  virtual Status LaunchReduce(void* dst, const void* a, const void* b, size_t count,
                              weftDataType_t dtype, weftRedOp_t op, StreamHandle stream) = 0;
  // weftAvg: dst /= divisor once at the end; other ops and divisor <= 1: nothing to do.
  virtual Status LaunchFinalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op,
                                int divisor, StreamHandle stream) = 0;
  // dst (dst_type) = src (src_type) for the floating types, rounding to nearest even.
  virtual Status LaunchCast(void* dst, weftDataType_t dst_type, const void* src,
                            weftDataType_t src_type, size_t count, StreamHandle stream) = 0;

  // ---- the compression codecs (kernels/codec.h semantics on float32 values), asynchronous ----
  // The CPU hooks' counterparts (kernels/codec_backend.h), bit for bit: kernels/codec_kernels.h
  // is their one source. The spec is checked as codec::ValidateSpec does (an InvalidArgument
  // naming the field); float32 operands must be 4-byte aligned.
  // dst (codec::EncodedBytes(spec, count) bytes) = encode(src[0..count)); `rounding_stream`
  // picks the stochastic-rounding stream (WEFT_COMPRESS_STOCHASTIC), as CpuEncode's `stream`.
  virtual Status LaunchEncode(void* dst, const void* src, size_t count,
                              const weftCompression& spec, uint64_t rounding_stream,
                              StreamHandle stream) = 0;
  // dst[0..count) = decode(src), src holding the encoding of count values.
  virtual Status LaunchDecode(void* dst, const void* src, size_t count,
                              const weftCompression& spec, StreamHandle stream) = 0;
  // dst[0..count) = dst (op) decode(src) in float32 (weftAvg reduces as sum).
  virtual Status LaunchDecodeReduce(void* dst, const void* src, size_t count,
                                    const weftCompression& spec, weftRedOp_t op,
                                    StreamHandle stream) = 0;
};

// The C entry point every plugin exports (extern "C", named kPluginEntry). Returns nullptr and
// writes options->error when it cannot start (no driver, no device, bad options).
using PluginCreateFn = DeviceRuntime* (*)(const PluginOptions* options);

// ---- the registry (device_runtime.cc) ----
// The runtime WEFT_DEVICE selects, loaded on first use; never null (the "none" runtime when
// nothing is selected or the selected plugin failed: its calls then fail with the reason).
DeviceRuntime& ActiveRuntime();
// True when ptr is device memory of the active runtime (false for every pointer with "none").
bool IsDevicePointer(const void* ptr);

}  // namespace weft::device
