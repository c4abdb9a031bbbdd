// The emulated GPU as a DeviceRuntime plugin (libweft-device-emulated.so): memory from
// emulated_memory.h, streams and events from emulated_stream.h, kernels from
// emulated_kernels.h. Every operation checks its arguments when it is queued (errors name the
// argument and value) and runs on the stream's thread, through the device alias of the memory.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/device_runtime.h"
#include "device/emulated/emulated_kernels.h"
#include "device/emulated/emulated_memory.h"
#include "device/emulated/emulated_stream.h"
#include "kernels/codec_kernels.h"
#include "kernels/element_ops.h"

namespace weft::device::emulated {
namespace {

std::string Hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

size_t ElementBytes(weftDataType_t dtype) {
  size_t bytes = 0;
  kernels::WithTraits(dtype, [&](auto traits) {
    bytes = sizeof(typename decltype(traits)::Storage);
  });
  return bytes;
}

Status CheckTypeOp(const char* kernel, weftDataType_t dtype, weftRedOp_t op) {
  if (ElementBytes(dtype) == 0)
    return InvalidArgument(std::string(kernel) + ": dtype " + std::to_string(static_cast<int>(dtype)) +
                           " is not a supported weftDataType_t");
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= weftNumOps)
    return InvalidArgument(std::string(kernel) + ": op " + std::to_string(static_cast<int>(op)) +
                           " is not a valid weftRedOp_t");
  return OkStatus();
}

// The flag comparison of cuStreamWaitValue32 with GEQ: cyclic, so counters may wrap.
bool FlagReached(const uint32_t* flag, uint32_t value) {
  const uint32_t now = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
  return static_cast<int32_t>(now - value) >= 0;
}

class EmulatedRuntime final : public DeviceRuntime {
 public:
  EmulatedRuntime(int devices, uint32_t delay_us)
      : memory_(devices), delay_us_(delay_us), defaults_(static_cast<size_t>(devices)) {}
  ~EmulatedRuntime() override = default;

  const char* name() const override { return "emulated"; }
  int DeviceCount() const override { return memory_.devices(); }

  Status Malloc(void** ptr, size_t bytes, int device) override {
    return memory_.Malloc(ptr, bytes, device);
  }
  // cudaFree and cudaFreeHost wait for the device's queued work before they free (CUDA's
  // implicit synchronization); so do these, so that code which frees while a stream waits
  // for the freeing thread hangs here as it would on a GPU instead of passing.
  Status Free(void* ptr) override {
    const PointerAttributes a = memory_.Info(ptr);
    if (a.is_device) WaitForDevice("device free", a.device);
    return memory_.Free(ptr);
  }
  PointerAttributes PointerInfo(const void* ptr) const override { return memory_.Info(ptr); }
  Status HostAlloc(void** ptr, size_t bytes) override { return memory_.HostAlloc(ptr, bytes); }
  Status HostFree(void* ptr) override {
    if (ptr != nullptr) WaitForDevice("pinned host free", -1);
    return memory_.HostFree(ptr);
  }

  Status StreamCreate(StreamHandle* stream, int device) override {
    if (stream == nullptr) return InvalidArgument("stream create: stream (output pointer) is NULL");
    WEFT_RETURN_IF_ERROR(CheckDevice("stream create", device));
    auto s = std::make_shared<Stream>(device, delay_us_);
    std::lock_guard<std::mutex> l(mu_);
    *stream = s.get();
    streams_[s.get()] = std::move(s);
    return OkStatus();
  }
  Status StreamDestroy(StreamHandle stream) override {
    std::shared_ptr<Stream> doomed;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = streams_.find(static_cast<Stream*>(stream));
      if (it == streams_.end())
        return InvalidArgument("stream destroy: stream=" + Hex(stream) + " is not a live stream");
      doomed = std::move(it->second);
      streams_.erase(it);
    }
    return OkStatus();  // ~Stream finishes the queued work outside the lock
  }
  Status StreamSynchronize(StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("stream synchronize", stream, &s));
    return s->Synchronize();
  }
  Status StreamQuery(StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("stream query", stream, &s));
    return s->Query();
  }
  int StreamDevice(StreamHandle stream) const override {
    if (stream == nullptr) return 0;
    std::lock_guard<std::mutex> l(mu_);
    auto it = streams_.find(static_cast<Stream*>(stream));
    return it == streams_.end() ? -1 : it->second->device();
  }

  Status EventCreate(EventHandle* event) override {
    if (event == nullptr) return InvalidArgument("event create: event (output pointer) is NULL");
    auto e = std::make_shared<Event>();
    std::lock_guard<std::mutex> l(mu_);
    *event = e.get();
    events_[e.get()] = std::move(e);
    return OkStatus();
  }
  Status EventDestroy(EventHandle event) override {
    std::lock_guard<std::mutex> l(mu_);
    if (events_.erase(static_cast<Event*>(event)) == 0)
      return InvalidArgument("event destroy: event=" + Hex(event) + " is not a live event");
    return OkStatus();  // queued operations still hold their reference
  }
  Status EventRecord(EventHandle event, StreamHandle stream) override {
    std::shared_ptr<Event> e;
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(FindEvent("event record", event, &e));
    WEFT_RETURN_IF_ERROR(Find("event record", stream, &s));
    const uint64_t record = e->NextRecord();
    s->Enqueue([e, record] { e->Complete(record); return OkStatus(); }, /*always=*/true);
    return OkStatus();
  }
  Status EventSynchronize(EventHandle event) override {
    std::shared_ptr<Event> e;
    WEFT_RETURN_IF_ERROR(FindEvent("event synchronize", event, &e));
    e->Wait(e->LastRecord());
    return OkStatus();
  }
  Status EventQuery(EventHandle event) override {
    std::shared_ptr<Event> e;
    WEFT_RETURN_IF_ERROR(FindEvent("event query", event, &e));
    if (e->Done(e->LastRecord())) return OkStatus();
    return Status(weftInProgress, "event not yet complete");
  }
  Status StreamWaitEvent(StreamHandle stream, EventHandle event) override {
    std::shared_ptr<Event> e;
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(FindEvent("stream wait event", event, &e));
    WEFT_RETURN_IF_ERROR(Find("stream wait event", stream, &s));
    const uint64_t record = e->LastRecord();
    s->Enqueue([e, record] { e->Wait(record); return OkStatus(); });
    return OkStatus();
  }

  Status WriteFlag(StreamHandle stream, uint32_t* flag, uint32_t value) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("flag write", stream, &s));
    WEFT_RETURN_IF_ERROR(CheckFlag("flag write", flag, &flag));
    s->Enqueue([flag, value] {
      __atomic_store_n(flag, value, __ATOMIC_RELEASE);
      return OkStatus();
    });
    return OkStatus();
  }
  Status WaitFlag(StreamHandle stream, const uint32_t* flag, uint32_t value) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("flag wait", stream, &s));
    WEFT_RETURN_IF_ERROR(CheckFlag("flag wait", flag, &flag));
    s->Enqueue([s, flag, value] {
      // Polls like the GPU's front end, but mostly asleep: on a CPU this thread competes with
      // the host threads that will set the flag. Gives up only when the stream is destroyed.
      for (int spins = 0; !FlagReached(flag, value); ++spins) {
        if (s->stopping())
          return InternalError("flag wait: stream destroyed while waiting for flag " +
                               Hex(flag) + " to reach " + std::to_string(value));
        if (spins < 64) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      return OkStatus();
    });
    return OkStatus();
  }
  Status LaunchHostFunc(StreamHandle stream, HostFn fn, void* arg) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("host function", stream, &s));
    if (fn == nullptr) return InvalidArgument("host function: fn is NULL");
    s->Enqueue([fn, arg] { fn(arg); return OkStatus(); });
    return OkStatus();
  }

  Status MemcpyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("copy", stream, &s));
    if (bytes == 0) return OkStatus();
    if (dst == nullptr || src == nullptr)
      return InvalidArgument("copy: " + std::string(dst == nullptr ? "dst" : "src") +
                             " is NULL with bytes=" + std::to_string(bytes));
    void* d = nullptr;
    void* x = nullptr;
    WEFT_RETURN_IF_ERROR(memory_.Resolve("copy: dst", dst, bytes, false, &d));
    WEFT_RETURN_IF_ERROR(memory_.Resolve("copy: src", src, bytes, false, &x));
    s->Enqueue([d, x, bytes] {
      std::memmove(d, x, bytes);
      return OkStatus();
    });
    return OkStatus();
  }

  Status ExportHandle(void* ptr, IpcHandle* handle) override { return memory_.Export(ptr, handle); }
  Status ImportHandle(const IpcHandle& handle, void** ptr) override {
    return memory_.Import(handle, ptr);
  }
  Status CloseImported(void* ptr) override { return memory_.CloseImported(ptr); }

  // The SM copy: the copy engine's MemcpyAsync, but device memory only (a kernel's rule).
  Status LaunchCopy(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("copy kernel", stream, &s));
    if (bytes == 0) return OkStatus();
    void *d = nullptr, *x = nullptr;
    WEFT_RETURN_IF_ERROR(memory_.Resolve("copy kernel: dst", dst, bytes, true, &d));
    WEFT_RETURN_IF_ERROR(memory_.Resolve("copy kernel: src", src, bytes, true, &x));
    if (static_cast<const char*>(dst) < static_cast<const char*>(src) + bytes &&
        static_cast<const char*>(src) < static_cast<const char*>(dst) + bytes)
      return InvalidArgument("copy kernel: dst=" + Hex(dst) + " and src=" + Hex(src) +
                             " overlap (bytes=" + std::to_string(bytes) + ")");
    s->Enqueue([d, x, bytes] {
      std::memcpy(d, x, bytes);
      return OkStatus();
    });
    return OkStatus();
  }
  Status LaunchReduce(void* dst, const void* a, const void* b, size_t count,
                      weftDataType_t dtype, weftRedOp_t op, StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("reduce kernel", stream, &s));
    WEFT_RETURN_IF_ERROR(CheckTypeOp("reduce kernel", dtype, op));
    if (count == 0) return OkStatus();
    const size_t bytes = count * ElementBytes(dtype);
    void *d = nullptr, *x = nullptr, *y = nullptr;
    WEFT_RETURN_IF_ERROR(memory_.Resolve("reduce kernel: dst", dst, bytes, true, &d));
    WEFT_RETURN_IF_ERROR(memory_.Resolve("reduce kernel: a", a, bytes, true, &x));
    WEFT_RETURN_IF_ERROR(memory_.Resolve("reduce kernel: b", b, bytes, true, &y));
    s->Enqueue([=] {
      RunReduce(d, x, y, count, dtype, op);
      return OkStatus();
    });
    return OkStatus();
  }
  Status LaunchFinalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op,
                        int divisor, StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("finalize kernel", stream, &s));
    WEFT_RETURN_IF_ERROR(CheckTypeOp("finalize kernel", dtype, op));
    if (op != weftAvg || divisor <= 1 || count == 0) return OkStatus();
    void* d = nullptr;
    WEFT_RETURN_IF_ERROR(
        memory_.Resolve("finalize kernel: dst", dst, count * ElementBytes(dtype), true, &d));
    s->Enqueue([=] {
      RunFinalizeAvg(d, count, dtype, divisor);
      return OkStatus();
    });
    return OkStatus();
  }
  Status LaunchCast(void* dst, weftDataType_t dst_type, const void* src, weftDataType_t src_type,
                    size_t count, StreamHandle stream) override {
    Stream* s = nullptr;
    WEFT_RETURN_IF_ERROR(Find("cast kernel", stream, &s));
    if (!kernels::IsFloatingType(dst_type) || !kernels::IsFloatingType(src_type))
      return InvalidArgument("cast kernel: from type " + std::to_string(static_cast<int>(src_type)) +
                             " to " + std::to_string(static_cast<int>(dst_type)) +
                             ": only floating types convert into each other");
    if (count == 0) return OkStatus();
    void *d = nullptr, *x = nullptr;
    WEFT_RETURN_IF_ERROR(
        memory_.Resolve("cast kernel: dst", dst, count * ElementBytes(dst_type), true, &d));
    WEFT_RETURN_IF_ERROR(
        memory_.Resolve("cast kernel: src", src, count * ElementBytes(src_type), true, &x));
    s->Enqueue([=] {
      RunCast(d, dst_type, x, src_type, count);
      return OkStatus();
    });
    return OkStatus();
  }

  Status LaunchEncode(void* dst, const void* src, size_t count, const weftCompression& spec,
                      uint64_t rounding_stream, StreamHandle stream) override {
    Stream* s = nullptr;
    codec::CodecPlan plan;
    WEFT_RETURN_IF_ERROR(Find("encode kernel", stream, &s));
    WEFT_RETURN_IF_ERROR(
        codec::MakeCodecPlan("encode kernel", spec, count, rounding_stream, &plan));
    if (count == 0) return OkStatus();
    void *d = nullptr, *x = nullptr;
    WEFT_RETURN_IF_ERROR(ResolveFloats("encode kernel: src", src, count, &x));
    WEFT_RETURN_IF_ERROR(memory_.Resolve("encode kernel: dst", dst, plan.encoded_bytes, true, &d));
    s->Enqueue([plan, d, x] {
      RunEncode(plan, static_cast<const float*>(x), static_cast<uint8_t*>(d));
      return OkStatus();
    });
    return OkStatus();
  }
  Status LaunchDecode(void* dst, const void* src, size_t count, const weftCompression& spec,
                      StreamHandle stream) override {
    return LaunchDecoding("decode kernel", dst, src, count, spec, std::nullopt, stream);
  }
  Status LaunchDecodeReduce(void* dst, const void* src, size_t count, const weftCompression& spec,
                            weftRedOp_t op, StreamHandle stream) override {
    if (static_cast<int>(op) < 0 || static_cast<int>(op) >= weftNumOps)
      return InvalidArgument("decode-reduce kernel: op " + std::to_string(static_cast<int>(op)) +
                             " is not a valid weftRedOp_t");
    return LaunchDecoding("decode-reduce kernel", dst, src, count, spec, op, stream);
  }

 private:
  Status CheckDevice(const char* what, int device) const {
    if (device >= 0 && device < memory_.devices()) return OkStatus();
    return InvalidArgument(std::string(what) + ": device=" + std::to_string(device) +
                           " is not in [0, " + std::to_string(memory_.devices()) + ")");
  }
  // A flag is a 4-byte aligned word of host memory or of device memory (a window's signal
  // slot, possibly imported from another process: ipc_transport.h). *flag becomes the address
  // the stream thread uses (device memory: its alias).
  template <typename T>
  Status CheckFlag(const char* what, T* flag, T** resolved) const {
    if (flag == nullptr) return InvalidArgument(std::string(what) + ": flag is NULL");
    if (reinterpret_cast<uintptr_t>(flag) % 4 != 0)
      return InvalidArgument(std::string(what) + ": flag=" + Hex(flag) + " must be 4-byte aligned");
    *resolved = flag;
    if (!memory_.Info(flag).is_device) return OkStatus();
    void* alias = nullptr;
    WEFT_RETURN_IF_ERROR(memory_.Resolve(what, flag, sizeof(uint32_t), true, &alias));
    *resolved = static_cast<T*>(alias);
    return OkStatus();
  }
  // A decode (no op) or decode-reduce (a valid op) of `count` values from src into dst.
  Status LaunchDecoding(const char* what, void* dst, const void* src, size_t count,
                        const weftCompression& spec, std::optional<weftRedOp_t> op,
                        StreamHandle stream) {
    Stream* s = nullptr;
    codec::CodecPlan plan;
    WEFT_RETURN_IF_ERROR(Find(what, stream, &s));
    WEFT_RETURN_IF_ERROR(codec::MakeCodecPlan(what, spec, count, 0, &plan));
    if (count == 0) return OkStatus();
    void *d = nullptr, *x = nullptr;
    WEFT_RETURN_IF_ERROR(ResolveFloats((std::string(what) + ": dst").c_str(), dst, count, &d));
    WEFT_RETURN_IF_ERROR(
        memory_.Resolve((std::string(what) + ": src").c_str(), src, plan.encoded_bytes, true, &x));
    s->Enqueue([plan, d, x, op] {
      const auto* encoded = static_cast<const uint8_t*>(x);
      auto* out = static_cast<float*>(d);
      if (op) RunDecodeReduce(plan, encoded, out, *op);
      else RunDecode(plan, encoded, out);
      return OkStatus();
    });
    return OkStatus();
  }
  // `count` float32 values of device memory at ptr, 4-byte aligned as a GPU needs them.
  Status ResolveFloats(const char* what, const void* ptr, size_t count, void** out) const {
    if (reinterpret_cast<uintptr_t>(ptr) % alignof(float) != 0)
      return InvalidArgument(std::string(what) + "=" + Hex(ptr) +
                             " is not 4-byte aligned (float32 values)");
    return memory_.Resolve(what, ptr, count * sizeof(float), true, out);
  }
  // Waits until every stream of `device` (-1: of every device) has run its queued work.
  void WaitForDevice(const char* why, int device) {
    std::vector<std::shared_ptr<Stream>> streams;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [raw, s] : streams_)
        if (device < 0 || s->device() == device) streams.push_back(s);
      for (auto& s : defaults_)
        if (s && (device < 0 || s->device() == device)) streams.push_back(s);
    }
    for (auto& s : streams) s->WaitIdle(why, std::chrono::seconds(10));
  }

  // A live stream, or the default stream of device 0 for nullptr (created on first use).
  Status Find(const char* what, StreamHandle stream, Stream** out) {
    std::lock_guard<std::mutex> l(mu_);
    if (stream == nullptr) {
      if (!defaults_[0]) defaults_[0] = std::make_shared<Stream>(0, delay_us_);
      *out = defaults_[0].get();
      return OkStatus();
    }
    auto it = streams_.find(static_cast<Stream*>(stream));
    if (it == streams_.end())
      return InvalidArgument(std::string(what) + ": stream=" + Hex(stream) + " is not a live stream");
    *out = it->second.get();
    return OkStatus();
  }
  Status FindEvent(const char* what, EventHandle event, std::shared_ptr<Event>* out) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = events_.find(static_cast<Event*>(event));
    if (it == events_.end())
      return InvalidArgument(std::string(what) + ": event=" + Hex(event) + " is not a live event");
    *out = it->second;
    return OkStatus();
  }

  Memory memory_;
  const uint32_t delay_us_;
  mutable std::mutex mu_;
  // shared: a device-wide wait holds streams that a concurrent destroy drops
  std::map<Stream*, std::shared_ptr<Stream>> streams_;
  std::vector<std::shared_ptr<Stream>> defaults_;
  std::map<Event*, std::shared_ptr<Event>> events_;
};

}  // namespace
}  // namespace weft::device::emulated

extern "C" __attribute__((visibility("default"))) weft::device::DeviceRuntime*
weftDevicePluginCreate(const weft::device::PluginOptions* options) {
  auto fail = [&](const char* why) -> weft::device::DeviceRuntime* {
    if (options != nullptr && options->error != nullptr && options->error_bytes > 0)
      std::snprintf(options->error, options->error_bytes, "%s", why);
    return nullptr;
  };
  if (options == nullptr || options->abi_version != weft::device::kPluginAbiVersion)
    return fail("plugin ABI version differs from libweft's (rebuild both from one tree)");
  if (options->emulated_devices < 1) return fail("emulated device count must be at least 1");
  try {
    return new weft::device::emulated::EmulatedRuntime(options->emulated_devices,
                                                       options->emulated_delay_us);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
