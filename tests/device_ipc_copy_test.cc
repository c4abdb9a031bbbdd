// Copy engine or SM kernel for the ipc transport's copies (issue 36 item 1):
//   * the model (transports/ipc/ipc_options.h): auto picks the SM kernel below the crossover
//     and the copy engine from it, each side the faster by the model; ce and sm are forced;
//   * WEFT_IPC_COPY parses auto|ce|sm and names itself on a bad value;
//   * DeviceRuntime::LaunchCopy (the SM copy) is exact for sizes and offsets around its
//     16-byte words, leaves guard bytes alone, and refuses host pointers and overlaps;
//   * two processes, each with its own emulated GPU, run direct allreduce and allgather over the
//     ipc transport exact with WEFT_IPC_COPY forced to ce and to sm, and in auto with a small and
//     a large call, each rank's WEFT_DEBUG=INFO log naming the paths its copies took.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device_ipc.h"
#include "device/device_runtime.h"
#include "device_test_util.h"
#include "test_util.h"
#include "transports/ipc/ipc_options.h"
#include "weft/weft.h"
#include "weft/weft_device.h"

namespace {

using weft::Status;
using weft::device::ActiveRuntime;
using weft::device::DeviceRuntime;
using weft::ipc::ChooseCopyPath;
using weft::ipc::CopyCostUs;
using weft::ipc::CopyCrossoverBytes;
using weft::ipc::CopyPath;

TEST(IpcCopyModel, AutoPicksTheSmKernelBelowTheCrossoverAndTheCopyEngineFromIt) {
  const size_t crossover = CopyCrossoverBytes();
  // 3.5 us of head start against 1/240 - 1/400 us per kB: 2.1 MB (ipc_options.h).
  EXPECT_GT(crossover, size_t{2000000});
  EXPECT_LT(crossover, size_t{2200000});
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{1} << 20, crossover - 1}) {
    EXPECT_EQ(ChooseCopyPath(CopyPath::kAuto, bytes), CopyPath::kSmKernel) << bytes;
    EXPECT_LT(CopyCostUs(CopyPath::kSmKernel, bytes), CopyCostUs(CopyPath::kCopyEngine, bytes)) << bytes;
  }
  for (size_t bytes : {crossover, crossover + 1, size_t{64} << 20, size_t{1} << 30}) {
    EXPECT_EQ(ChooseCopyPath(CopyPath::kAuto, bytes), CopyPath::kCopyEngine) << bytes;
    EXPECT_GE(CopyCostUs(CopyPath::kSmKernel, bytes), CopyCostUs(CopyPath::kCopyEngine, bytes)) << bytes;
  }
  for (size_t bytes : {size_t{1}, crossover, size_t{1} << 30}) {
    EXPECT_EQ(ChooseCopyPath(CopyPath::kCopyEngine, bytes), CopyPath::kCopyEngine);
    EXPECT_EQ(ChooseCopyPath(CopyPath::kSmKernel, bytes), CopyPath::kSmKernel);
  }
  // A model whose kernel is no slower per byte never hands a copy to the engine.
  weft::ipc::CopyModel same_rate;
  same_rate.kernel_gbps = same_rate.engine_gbps;
  EXPECT_EQ(ChooseCopyPath(CopyPath::kAuto, size_t{1} << 30, same_rate), CopyPath::kSmKernel);
}

TEST(IpcCopyModel, SettingParsesAndNamesABadValue) {
  const std::pair<const char*, CopyPath> values[] = {
      {"auto", CopyPath::kAuto}, {"ce", CopyPath::kCopyEngine}, {"sm", CopyPath::kSmKernel},
      {"SM", CopyPath::kSmKernel}};
  for (const auto& [value, path] : values) {
    EXPECT_EQ(weft_test::InChild({{"WEFT_IPC_COPY", value}}, [path = path] {
      auto o = weft::ipc::IpcOptionsFromEnv();
      if (!o.ok()) return o.status().message();
      return o->copy == path ? std::string() : std::string("parsed to ") + weft::ipc::CopyPathName(o->copy);
    }), "") << value;
  }
  EXPECT_EQ(weft_test::InChild({{"WEFT_IPC_COPY", "dma"}}, [] {
    auto o = weft::ipc::IpcOptionsFromEnv();
    if (o.ok()) return std::string("dma was accepted");
    const std::string m = o.status().message();
    return m.find("WEFT_IPC_COPY") != std::string::npos && m.find("dma") != std::string::npos
               ? std::string()
               : "the error does not name the variable and value: " + m;
  }), "");
}

const std::vector<std::pair<std::string, std::string>> kEmulated = {
    {"WEFT_DEVICE", weft_test::SuiteDevice("emulated:1")}, {"WEFT_EMULATED_DELAY_US", "30"}};

// LaunchCopy of `bytes` from src offset `from` to dst offset `to` inside guarded buffers.
std::string CheckLaunchCopy(DeviceRuntime& rt, size_t bytes, size_t from, size_t to) {
  constexpr size_t kSlack = 64;  // guard bytes around both ranges
  const size_t total = bytes + 2 * kSlack;
  std::mt19937 rng(static_cast<uint32_t>(bytes * 131 + from * 7 + to));
  std::vector<unsigned char> src(total), dst_before(total), dst_after(total);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (auto& b : dst_before) b = static_cast<unsigned char>(rng());
  const size_t n = bytes - (from > to ? from : to);  // the copy stays inside both ranges
  void *dsrc = nullptr, *ddst = nullptr;
  Status s = rt.Malloc(&dsrc, total, 0);
  if (s.ok()) s = rt.Malloc(&ddst, total, 0);
  if (s.ok()) s = rt.MemcpyAsync(dsrc, src.data(), total, nullptr);
  if (s.ok()) s = rt.MemcpyAsync(ddst, dst_before.data(), total, nullptr);
  if (s.ok())
    s = rt.LaunchCopy(static_cast<char*>(ddst) + kSlack + to,
                      static_cast<char*>(dsrc) + kSlack + from, n, nullptr);
  if (s.ok()) s = rt.MemcpyAsync(dst_after.data(), ddst, total, nullptr);
  if (s.ok()) s = rt.StreamSynchronize(nullptr);
  if (dsrc != nullptr) (void)rt.Free(dsrc);
  if (ddst != nullptr) (void)rt.Free(ddst);
  if (!s.ok()) return s.message();
  std::vector<unsigned char> expected = dst_before;
  std::memcpy(expected.data() + kSlack + to, src.data() + kSlack + from, n);
  for (size_t i = 0; i < total; ++i)
    if (dst_after[i] != expected[i])
      return "byte " + std::to_string(i) + " of a copy of " + std::to_string(n) + " bytes (src +" +
             std::to_string(from) + ", dst +" + std::to_string(to) + ")" +
             (i < kSlack + to || i >= kSlack + to + n ? ": outside the copy" : "");
  return "";
}

TEST(IpcCopyKernel, ExactForEverySizeAndOffset) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    for (size_t bytes : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4099},
                         (size_t{1} << 20) + 5})
      for (const auto& [from, to] : {std::pair<size_t, size_t>{0, 0}, {1, 1}, {0, 3}, {5, 0}, {16, 16}}) {
        if (from >= bytes || to >= bytes) continue;
        const std::string e = CheckLaunchCopy(rt, bytes, from, to);
        if (!e.empty()) return e;
      }
    return std::string();
  }), "");
}

TEST(IpcCopyKernel, RefusesHostPointersAndOverlaps) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    void* d = nullptr;
    Status s = rt.Malloc(&d, 256, 0);
    if (!s.ok()) return s.message();
    std::vector<char> host(256);
    const struct {
      const char* what;
      Status status;
      const char* needle;
    } cases[] = {
        {"host src", rt.LaunchCopy(d, host.data(), 64, nullptr), "src"},
        {"host dst", rt.LaunchCopy(host.data(), d, 64, nullptr), "dst"},
        {"overlap", rt.LaunchCopy(static_cast<char*>(d) + 8, d, 64, nullptr), "overlap"},
    };
    for (const auto& c : cases)
      if (c.status.code() != weftInvalidArgument || c.status.message().find(c.needle) == std::string::npos)
        return std::string(c.what) + ": " + c.status.message();
    if (!rt.LaunchCopy(d, d, 0, nullptr).ok()) return std::string("a copy of 0 bytes failed");
    return std::string();
  }), "");
  EXPECT_EQ(weft_test::InChild({{"WEFT_DEVICE", "none"}}, [] {
    std::vector<char> a(8), b(8);
    const Status s = ActiveRuntime().LaunchCopy(a.data(), b.data(), 8, nullptr);
    return s.message().find("no device runtime") != std::string::npos ? "" : "none ran a copy: " + s.message();
  }), "");
}

// ---- two processes over the ipc transport ----

std::string Err(const std::string& what) { return what + ": " + weftGetLastError(nullptr); }

// One call of `count` floats per rank (allreduce: sum; allgather: each rank's block) on device
// buffers, checked exactly: rank r's value i is (r + 1) * (i % 13), small integers.
std::string RunCall(weftComm_t comm, weftStream_t stream, int rank, int device, int nranks,
                    bool allgather, size_t count) {
  const size_t out_count = allgather ? count * nranks : count;
  std::vector<float> in(count), out(out_count, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * (i % 13));
  void *din = nullptr, *dout = nullptr;
  std::string e;
  if (weftDeviceMalloc(&din, count * 4, device) != weftSuccess ||
      weftDeviceMalloc(&dout, out_count * 4, device) != weftSuccess)
    e = Err("weftDeviceMalloc");
  if (e.empty() && weftDeviceMemcpy(din, in.data(), count * 4) != weftSuccess) e = Err("upload");
  const weftResult_t r = allgather ? weftAllGather(din, dout, count, weftFloat32, comm, stream)
                                   : weftAllReduce(din, dout, count, weftFloat32, weftSum, comm, stream);
  if (e.empty() && r != weftSuccess) e = Err(allgather ? "weftAllGather" : "weftAllReduce");
  if (e.empty() && weftDeviceStreamSynchronize(stream) != weftSuccess) e = Err("synchronize");
  if (e.empty() && weftDeviceMemcpy(out.data(), dout, out_count * 4) != weftSuccess) e = Err("download");
  for (size_t i = 0; e.empty() && i < out_count; ++i) {
    const size_t j = allgather ? i % count : i;
    const float expected = allgather ? static_cast<float>((i / count + 1) * (j % 13))
                                     : static_cast<float>(nranks * (nranks + 1) / 2 * (j % 13));
    if (out[i] != expected)
      e = "value " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
          std::to_string(expected);
  }
  weftDeviceFree(din);
  weftDeviceFree(dout);
  return e.empty() ? "" : std::string(allgather ? "allgather" : "allreduce") + " of " +
                              std::to_string(count) + ": " + e;
}

// Two ranks, each with its own emulated GPU (on CUDA with one GPU: sharing it), run `counts`
// (allreduce then allgather each) with WEFT_IPC_COPY=mode and the direct algorithms forced;
// returns each rank's output.
std::vector<std::string> RunOverIpc(const std::string& algo, const std::string& mode,
                                    const std::vector<size_t>& counts) {
  const int nranks = 2;
  const std::vector<std::pair<std::string, std::string>> env = {
      {"WEFT_DEVICE", weft_test::SuiteDevice("emulated:2")}, {"WEFT_EMULATED_DELAY_US", "30"},
      {"WEFT_DEBUG", "INFO"}, {"WEFT_IPC_COPY", mode},
      {"WEFT_ALGO", "allreduce:" + algo + ";allgather:direct"}};
  const weft_test::LaunchOutcome o = weft_test::ForkDeviceRanks(
      nranks, env, [&](int rank, weftComm_t comm, weftStream_t stream) -> std::string {
        int devices = 1;
        weftDeviceGetCount(&devices);
        const int device = rank % std::max(devices, 1);  // ForkDeviceRanks' stream's GPU
        size_t calls = 0;
        for (size_t count : counts)
          for (bool allgather : {false, true}) {
            const std::string e = RunCall(comm, stream, rank, device, nranks, allgather, count);
            if (!e.empty()) return e;
            ++calls;
          }
        const size_t ipc_calls = weft::IpcCallCount(comm);
        weftDeviceStreamDestroy(stream);
        weftCommDestroy(comm);
        if (ipc_calls != calls)
          return std::to_string(ipc_calls) + " of " + std::to_string(calls) + " calls went through ipc";
        return "";
      });
  for (int r = 0; r < nranks; ++r)
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
  return o.output;
}

constexpr const char* kBySm = "first copy by the SM kernel";
constexpr const char* kByEngine = "first copy by the copy engine";

TEST(IpcCopyTwoProcesses, ForcedCopyEngineExact) {
  for (const char* algo : {"oneshot", "twoshot"})
    for (const std::string& out : RunOverIpc(algo, "ce", {1, 1001, 300007})) {
      EXPECT_NE(out.find(kByEngine), std::string::npos) << algo << ":\n" << out;
      EXPECT_EQ(out.find(kBySm), std::string::npos) << algo << ":\n" << out;
      EXPECT_NE(out.find("copies: copy engine (WEFT_IPC_COPY)"), std::string::npos) << out;
    }
}

TEST(IpcCopyTwoProcesses, ForcedSmKernelExact) {
  for (const char* algo : {"oneshot", "twoshot"})
    for (const std::string& out : RunOverIpc(algo, "sm", {1, 1001, 300007})) {
      EXPECT_NE(out.find(kBySm), std::string::npos) << algo << ":\n" << out;
      EXPECT_EQ(out.find(kByEngine), std::string::npos) << algo << ":\n" << out;
    }
}

// A small call's copies go to the SM kernel, a call of 4 MiB per rank (its input copied whole
// into the window by oneshot) to the copy engine.
TEST(IpcCopyTwoProcesses, AutoSplitsBySize) {
  for (const std::string& out : RunOverIpc("oneshot", "auto", {1001, size_t{1} << 20})) {
    EXPECT_NE(out.find(kBySm), std::string::npos) << out;
    EXPECT_NE(out.find(kByEngine), std::string::npos) << out;
    EXPECT_NE(out.find("copies: SM kernel below " + std::to_string(CopyCrossoverBytes())),
              std::string::npos) << out;
  }
}

}  // namespace
