// The device-runtime seam and the emulated GPU (issue 35): device memory faults on host
// access, copies round-trip, stream work is asynchronous and ordered, events, flag waits, IPC
// between two processes, the public weft_device.h API, and the "none" runtime's errors.
// Every case runs in a forked child (tests/device_test_util.h).
#include <signal.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/device_runtime.h"
#include "device_test_util.h"
#include "weft/weft.h"
#include "weft/weft_device.h"

namespace {

using weft::Status;
using weft::device::ActiveRuntime;
using weft::device::DeviceRuntime;
using weft_test::InChild;
using weft_test::RunInChild;

const std::vector<std::pair<std::string, std::string>> kEmulated = {{"WEFT_DEVICE", "emulated:4"}};

std::string Fail(const std::string& where, const Status& s) { return where + ": " + s.message(); }
#define CHILD_OK(expr)                                 \
  do {                                                 \
    const Status s_ = (expr);                          \
    if (!s_.ok()) return Fail(#expr, s_);              \
  } while (0)

std::vector<std::pair<std::string, std::string>> WithDelay(int us) {
  auto env = kEmulated;
  env.push_back({"WEFT_EMULATED_DELAY_US", std::to_string(us)});
  return env;
}

TEST(DeviceRuntime, EmulatedIsSelectedAndCounted) {
  EXPECT_EQ(InChild(kEmulated, [] {
    int n = 0;
    if (weftDeviceGetCount(&n) != weftSuccess) return std::string("weftDeviceGetCount failed");
    if (n != 4) return "count " + std::to_string(n) + ", expected 4";
    if (std::string(weftDeviceRuntimeName()) != "emulated")
      return std::string("runtime ") + weftDeviceRuntimeName();
    return std::string();
  }), "");
}

TEST(DeviceRuntime, HostLoadOfDevicePointerFaults) {
  const weft_test::ChildResult r = RunInChild(kEmulated, [] {
    void* p = nullptr;
    if (weftDeviceMalloc(&p, 4096, 1) != weftSuccess) return std::string("malloc failed");
    std::signal(SIGSEGV, SIG_DFL);  // not a sanitizer's or UCX's reporting handler: die by it
    volatile const char* c = static_cast<const char*>(p);
    const char x = c[100];  // must fault
    return "host load of a device pointer returned " + std::to_string(x);
  });
  EXPECT_FALSE(r.exited) << r.message;
  EXPECT_EQ(r.signal, SIGSEGV) << r.message;
}

TEST(DeviceRuntime, HostStoreOfDevicePointerFaults) {
  const weft_test::ChildResult r = RunInChild(kEmulated, [] {
    void* p = nullptr;
    if (weftDeviceMalloc(&p, 64, 0) != weftSuccess) return std::string("malloc failed");
    std::signal(SIGSEGV, SIG_DFL);
    std::memset(p, 1, 64);  // must fault
    return std::string("host store to a device pointer did not fault");
  });
  EXPECT_FALSE(r.exited) << r.message;
  EXPECT_EQ(r.signal, SIGSEGV) << r.message;
}

TEST(DeviceRuntime, CopiesRoundTripBetweenHostAndDevices) {
  EXPECT_EQ(InChild(WithDelay(200), [] {
    const size_t n = (1 << 20) + 13;  // odd, larger than a page
    std::vector<uint8_t> in(n), out(n, 0);
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
    void *d0 = nullptr, *d3 = nullptr;
    if (weftDeviceMalloc(&d0, n, 0) != weftSuccess || weftDeviceMalloc(&d3, n, 3) != weftSuccess)
      return std::string("malloc: ") + weftGetLastError(nullptr);
    if (weftDeviceMemcpy(d0, in.data(), n) != weftSuccess ||   // host -> device 0
        weftDeviceMemcpy(d3, d0, n) != weftSuccess ||          // device 0 -> device 3
        weftDeviceMemcpy(out.data(), d3, n) != weftSuccess)    // device 3 -> host
      return std::string("memcpy: ") + weftGetLastError(nullptr);
    if (out != in) return std::string("bytes differ after host -> dev0 -> dev3 -> host");
    DeviceRuntime& rt = ActiveRuntime();
    if (!rt.PointerInfo(d3).is_device || rt.PointerInfo(d3).device != 3 ||
        rt.PointerInfo(in.data()).is_device)
      return std::string("PointerInfo misreports device 3 / host memory");
    if (weftDeviceFree(d0) != weftSuccess || weftDeviceFree(d3) != weftSuccess)
      return std::string("free failed");
    if (weftDeviceFree(d0) != weftInvalidArgument) return std::string("double free accepted");
    return std::string();
  }), "");
}

TEST(DeviceRuntime, CallReturnsBeforeDelayedWorkCompletes) {
  EXPECT_EQ(InChild(WithDelay(50000), [] {
    DeviceRuntime& rt = ActiveRuntime();
    weftStream_t s = nullptr;
    if (weftDeviceStreamCreate(&s, 2) != weftSuccess) return std::string("stream create failed");
    void* d = nullptr;
    CHILD_OK(rt.Malloc(&d, 1 << 16, 2));
    std::vector<uint8_t> host(1 << 16, 5), back(1 << 16, 0);
    // 20 operations of up to 50 ms each: the calls return at once, the work is still queued.
    for (int i = 0; i < 10; ++i) {
      CHILD_OK(rt.MemcpyAsync(d, host.data(), host.size(), s));
      CHILD_OK(rt.MemcpyAsync(back.data(), d, back.size(), s));
    }
    const Status q = rt.StreamQuery(s);
    if (q.code() != weftInProgress) return "query right after enqueueing: " + std::to_string(q.code());
    if (weftDeviceStreamSynchronize(s) != weftSuccess) return std::string("synchronize failed");
    CHILD_OK(rt.StreamQuery(s));
    if (back != host) return std::string("copy incomplete after synchronize");
    return weftDeviceStreamDestroy(s) == weftSuccess ? std::string() : std::string("destroy failed");
  }), "");
}

TEST(DeviceRuntime, StreamOrderHoldsUnderRandomDelays) {
  EXPECT_EQ(InChild(WithDelay(300), [] {
    DeviceRuntime& rt = ActiveRuntime();
    weftStream_t s = nullptr;
    CHILD_OK(rt.StreamCreate(&s, 1));
    const size_t n = 1000;
    std::vector<int32_t> zero(n, 0), one(n, 1), out(n, -1);
    void *acc = nullptr, *ones = nullptr;
    CHILD_OK(rt.Malloc(&acc, n * 4, 1));
    CHILD_OK(rt.Malloc(&ones, n * 4, 1));
    CHILD_OK(rt.MemcpyAsync(acc, zero.data(), n * 4, s));
    CHILD_OK(rt.MemcpyAsync(ones, one.data(), n * 4, s));
    // Each reduce reads the previous one's result: out of order, the count would be short.
    for (int i = 0; i < 100; ++i) CHILD_OK(rt.LaunchReduce(acc, acc, ones, n, weftInt32, weftSum, s));
    CHILD_OK(rt.MemcpyAsync(out.data(), acc, n * 4, s));
    CHILD_OK(rt.StreamSynchronize(s));
    for (size_t i = 0; i < n; ++i)
      if (out[i] != 100) return "element " + std::to_string(i) + " = " + std::to_string(out[i]);
    return std::string();
  }), "");
}

TEST(DeviceRuntime, EventsOrderWorkAcrossStreams) {
  EXPECT_EQ(InChild(WithDelay(2000), [] {
    DeviceRuntime& rt = ActiveRuntime();
    weftStream_t a = nullptr, b = nullptr;
    weft::device::EventHandle e = nullptr;
    CHILD_OK(rt.StreamCreate(&a, 0));
    CHILD_OK(rt.StreamCreate(&b, 0));
    CHILD_OK(rt.EventCreate(&e));
    const size_t n = 4096;
    void* d = nullptr;
    CHILD_OK(rt.Malloc(&d, n, 0));
    std::vector<uint8_t> first(n, 1), second(n, 2), out(n, 0);
    for (int round = 0; round < 20; ++round) {
      CHILD_OK(rt.MemcpyAsync(d, first.data(), n, a));
      CHILD_OK(rt.MemcpyAsync(d, second.data(), n, a));
      CHILD_OK(rt.EventRecord(e, a));
      CHILD_OK(rt.StreamWaitEvent(b, e));
      CHILD_OK(rt.MemcpyAsync(out.data(), d, n, b));
      CHILD_OK(rt.StreamSynchronize(b));
      if (out != second) return "round " + std::to_string(round) + ": b read before a's event";
      CHILD_OK(rt.EventSynchronize(e));
      CHILD_OK(rt.EventQuery(e));
    }
    CHILD_OK(rt.EventDestroy(e));
    return std::string();
  }), "");
}

// The emulated GPU must make a missing stream wait visible: a flag holds stream a back, so
// stream b, which does not wait for a's event, reads the old contents.
TEST(DeviceRuntime, MissingWaitIsVisible) {
  EXPECT_EQ(InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    weftStream_t a = nullptr, b = nullptr;
    CHILD_OK(rt.StreamCreate(&a, 0));
    CHILD_OK(rt.StreamCreate(&b, 0));
    uint32_t* flag = nullptr;
    CHILD_OK(rt.HostAlloc(reinterpret_cast<void**>(&flag), 64));
    if (!rt.PointerInfo(flag).is_pinned) return std::string("HostAlloc memory is not pinned");
    *flag = 0;
    void* d = nullptr;
    CHILD_OK(rt.Malloc(&d, 256, 0));
    std::vector<uint8_t> old_bytes(256, 1), new_bytes(256, 2), out(256, 0);
    CHILD_OK(rt.MemcpyAsync(d, old_bytes.data(), 256, a));
    CHILD_OK(rt.StreamSynchronize(a));
    CHILD_OK(rt.WaitFlag(a, flag, 1));
    CHILD_OK(rt.MemcpyAsync(d, new_bytes.data(), 256, a));
    CHILD_OK(rt.MemcpyAsync(out.data(), d, 256, b));  // no wait for a
    CHILD_OK(rt.StreamSynchronize(b));
    if (out != old_bytes) return std::string("b saw a's held-back write");
    if (rt.StreamQuery(a).code() != weftInProgress) return std::string("a did not wait for its flag");
    __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);
    CHILD_OK(rt.StreamSynchronize(a));
    CHILD_OK(rt.MemcpyAsync(out.data(), d, 256, b));
    CHILD_OK(rt.StreamSynchronize(b));
    if (out != new_bytes) return std::string("a's write missing after the flag");
    // WriteFlag: stored once the earlier work on the stream is done.
    CHILD_OK(rt.WriteFlag(a, flag + 1, 7));
    CHILD_OK(rt.StreamSynchronize(a));
    if (__atomic_load_n(flag + 1, __ATOMIC_ACQUIRE) != 7u) return std::string("WriteFlag not stored");
    return std::string();
  }), "");
}

TEST(DeviceRuntime, IpcBetweenTwoProcesses) {
  int to_b[2], to_a[2];
  ASSERT_EQ(pipe(to_b), 0);
  ASSERT_EQ(pipe(to_a), 0);
  const size_t n = 3 * 4096 + 100;
  // Process A exports; process B imports, checks A's bytes, overwrites them; A checks.
  const pid_t a = fork();
  if (a == 0) {
    setenv("WEFT_DEVICE", "emulated:2", 1);
    DeviceRuntime& rt = ActiveRuntime();
    void* d = nullptr;
    std::vector<uint8_t> bytes(n), back(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i % 251);
    void* pad = nullptr;  // so that the exported block does not start the arena
    if (!rt.Malloc(&pad, 1000, 1).ok() || !rt.Malloc(&d, n, 1).ok()) _exit(10);
    if (!rt.MemcpyAsync(d, bytes.data(), n, nullptr).ok() || !rt.StreamSynchronize(nullptr).ok()) _exit(11);
    weft::device::IpcHandle h;
    if (!rt.ExportHandle(d, &h).ok()) _exit(12);
    if (write(to_b[1], &h, sizeof h) != static_cast<ssize_t>(sizeof h)) _exit(13);
    char done = 0;
    if (read(to_a[0], &done, 1) != 1) _exit(14);
    if (!rt.MemcpyAsync(back.data(), d, n, nullptr).ok() || !rt.StreamSynchronize(nullptr).ok()) _exit(15);
    for (size_t i = 0; i < n; ++i)
      if (back[i] != static_cast<uint8_t>(255 - i % 251)) _exit(16);
    _exit(0);
  }
  const weft_test::ChildResult b = RunInChild({{"WEFT_DEVICE", "emulated:2"}}, [&] {
    weft::device::IpcHandle h;
    if (read(to_b[0], &h, sizeof h) != static_cast<ssize_t>(sizeof h)) return std::string("no handle");
    DeviceRuntime& rt = ActiveRuntime();
    void* d = nullptr;
    CHILD_OK(rt.ImportHandle(h, &d));
    if (!rt.PointerInfo(d).is_device || rt.PointerInfo(d).device != 1)
      return std::string("imported pointer is not device 1 memory");
    std::vector<uint8_t> seen(n), mine(n);
    CHILD_OK(rt.MemcpyAsync(seen.data(), d, n, nullptr));
    CHILD_OK(rt.StreamSynchronize(nullptr));
    for (size_t i = 0; i < n; ++i) {
      if (seen[i] != static_cast<uint8_t>(i % 251)) return "imported byte " + std::to_string(i) + " differs";
      mine[i] = static_cast<uint8_t>(255 - i % 251);
    }
    CHILD_OK(rt.MemcpyAsync(d, mine.data(), n, nullptr));
    CHILD_OK(rt.StreamSynchronize(nullptr));
    CHILD_OK(rt.CloseImported(d));
    const char done = 1;
    return write(to_a[1], &done, 1) == 1 ? std::string() : std::string("cannot signal A");
  });
  EXPECT_EQ(b.message, "");
  if (!b.message.empty()) kill(a, SIGKILL);
  int status = 0;
  waitpid(a, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exporter status " << status;
  for (int fd : {to_b[0], to_b[1], to_a[0], to_a[1]}) close(fd);
}

TEST(DeviceRuntime, BadArgumentsAreNamed) {
  EXPECT_EQ(InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    void* d = nullptr;
    std::vector<float> host(16);
    if (weftDeviceMalloc(&d, 64, 9) != weftInvalidArgument ||
        std::string(weftGetLastError(nullptr)).find("device=9") == std::string::npos)
      return std::string("malloc on device 9 of 4: ") + weftGetLastError(nullptr);
    CHILD_OK(rt.Malloc(&d, 64, 0));
    const Status s = rt.LaunchReduce(d, host.data(), d, 16, weftFloat32, weftSum, nullptr);
    if (s.code() != weftInvalidArgument || s.message().find("reduce kernel: a=") == std::string::npos)
      return "kernel on a host pointer: " + s.message();
    const Status past = rt.MemcpyAsync(d, host.data(), 65 * 4, nullptr);
    if (past.code() != weftInvalidArgument) return "copy past the allocation: " + past.message();
    weftStream_t bogus = reinterpret_cast<weftStream_t>(0x1234);
    if (weftDeviceStreamSynchronize(bogus) != weftInvalidArgument) return std::string("bogus stream accepted");
    return std::string();
  }), "");
}

TEST(DeviceRuntime, NoneRuntimeRefusesClearly) {
  EXPECT_EQ(InChild({{"WEFT_DEVICE", "none"}}, [] {
    int n = -1;
    if (weftDeviceGetCount(&n) != weftSuccess || n != 0) return std::string("count is not 0");
    if (std::string(weftDeviceRuntimeName()) != "none") return std::string("name is not none");
    void* d = nullptr;
    if (weftDeviceMalloc(&d, 64, 0) != weftInvalidUsage) return std::string("malloc did not fail");
    if (std::string(weftGetLastError(nullptr)).find("WEFT_DEVICE=none") == std::string::npos)
      return std::string("message: ") + weftGetLastError(nullptr);
    char a[8] = "abcdefg", b[8] = {};
    if (weftDeviceMemcpy(b, a, 8) != weftSuccess || std::strcmp(a, b) != 0)
      return std::string("host-to-host memcpy failed without a device");
    return std::string();
  }), "");
}

// Without WEFT_DEVICE: cuda when its plugin loads and finds a GPU, else none (this is what a
// machine without a driver must get, with libweft.so loading and every host call working).
TEST(DeviceRuntime, DefaultIsCudaWithAGpuElseNone) {
  EXPECT_EQ(InChild({}, [] {
    unsetenv("WEFT_DEVICE");
    int n = -1;
    if (weftDeviceGetCount(&n) != weftSuccess) return std::string("count failed");
    const std::string name = weftDeviceRuntimeName();
    if (name == "cuda" ? n < 1 : (name != "none" || n != 0))
      return "runtime " + name + " with " + std::to_string(n) + " device(s)";
    return std::string();
  }), "");
}

TEST(DeviceRuntime, BadSelectionNamesTheSetting) {
  EXPECT_EQ(InChild({{"WEFT_DEVICE", "emulated:zero"}}, [] {
    void* d = nullptr;
    if (weftDeviceMalloc(&d, 64, 0) == weftSuccess) return std::string("malloc succeeded");
    if (std::string(weftGetLastError(nullptr)).find("WEFT_DEVICE=emulated:zero") == std::string::npos)
      return std::string("message: ") + weftGetLastError(nullptr);
    return std::string();
  }), "");
}

}  // namespace
