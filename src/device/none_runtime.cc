#include "device/none_runtime.h"

namespace weft::device {
namespace {

class NoneRuntime final : public DeviceRuntime {
 public:
  explicit NoneRuntime(std::string reason) : reason_(std::move(reason)) {}
  const char* name() const override { return "none"; }
  int DeviceCount() const override { return 0; }
  Status Malloc(void**, size_t, int) override { return Refuse("device malloc"); }
  Status Free(void*) override { return Refuse("device free"); }
  PointerAttributes PointerInfo(const void*) const override { return {}; }
  Status HostAlloc(void**, size_t) override { return Refuse("pinned host alloc"); }
  Status HostFree(void*) override { return Refuse("pinned host free"); }
  Status StreamCreate(StreamHandle*, int) override { return Refuse("stream create"); }
  Status StreamDestroy(StreamHandle) override { return Refuse("stream destroy"); }
  Status StreamSynchronize(StreamHandle) override { return Refuse("stream synchronize"); }
  Status StreamQuery(StreamHandle) override { return Refuse("stream query"); }
  int StreamDevice(StreamHandle) const override { return -1; }
  Status EventCreate(EventHandle*) override { return Refuse("event create"); }
  Status EventDestroy(EventHandle) override { return Refuse("event destroy"); }
  Status EventRecord(EventHandle, StreamHandle) override { return Refuse("event record"); }
  Status EventSynchronize(EventHandle) override { return Refuse("event synchronize"); }
  Status EventQuery(EventHandle) override { return Refuse("event query"); }
  Status StreamWaitEvent(StreamHandle, EventHandle) override { return Refuse("stream wait"); }
  Status WriteFlag(StreamHandle, uint32_t*, uint32_t) override { return Refuse("flag write"); }
  Status WaitFlag(StreamHandle, const uint32_t*, uint32_t) override { return Refuse("flag wait"); }
  Status LaunchHostFunc(StreamHandle, HostFn, void*) override { return Refuse("host function"); }
  Status MemcpyAsync(void*, const void*, size_t, StreamHandle) override {
    return Refuse("device copy");
  }
  Status ExportHandle(void*, IpcHandle*) override { return Refuse("IPC export"); }
  Status ImportHandle(const IpcHandle&, void**) override { return Refuse("IPC import"); }
  Status CloseImported(void*) override { return Refuse("IPC close"); }
  Status LaunchCopy(void*, const void*, size_t, StreamHandle) override {
    return Refuse("copy kernel");
  }
  Status LaunchReduce(void*, const void*, const void*, size_t, weftDataType_t, weftRedOp_t,
                      StreamHandle) override {
    return Refuse("reduce kernel");
  }
  Status LaunchFinalize(void*, size_t, weftDataType_t, weftRedOp_t, int, StreamHandle) override {
    return Refuse("finalize kernel");
  }
  Status LaunchCast(void*, weftDataType_t, const void*, weftDataType_t, size_t,
                    StreamHandle) override {
    return Refuse("cast kernel");
  }
  Status LaunchEncode(void*, const void*, size_t, const weftCompression&, uint64_t,
                      StreamHandle) override {
    return Refuse("encode kernel");
  }
  Status LaunchDecode(void*, const void*, size_t, const weftCompression&, StreamHandle) override {
    return Refuse("decode kernel");
  }
  Status LaunchDecodeReduce(void*, const void*, size_t, const weftCompression&, weftRedOp_t,
                            StreamHandle) override {
    return Refuse("decode-reduce kernel");
  }

 private:
  Status Refuse(const char* what) const {
    return InvalidUsage(std::string(what) + ": no device runtime is active (" + reason_ + ")");
  }
  std::string reason_;
};

}  // namespace

std::unique_ptr<DeviceRuntime> MakeNoneRuntime(std::string reason) {
  return std::make_unique<NoneRuntime>(std::move(reason));
}

}  // namespace weft::device
