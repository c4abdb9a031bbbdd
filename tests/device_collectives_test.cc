// Collectives on device buffers of the emulated GPU, stream-ordered (issue 35, phase 5).
//
// Each rank is a forked process with its own emulated GPU (device = rank) or, in the sharing
// case, all on device 0. Every collective x a few dtypes/ops, in place and out of place,
// counts 0, 1, odd and 2 MiB, with guard bytes around each device buffer; results are checked
// against the closed-form expectations of test_util.h after copying back to the host. The
// emulated device adds random delays per stream operation, so a missing stream wait or a
// host access to device memory (which faults) shows up here. Plus: a call returns before its
// work completes, ordering with earlier work on the stream, and a peer that dies during device
// work reaches weftCommGetAsyncError naming the failed rank.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/device_ipc.h"
#include "device/device_runtime.h"
#include "device_test_util.h"
#include "kernels/dtype.h"
#include "test_util.h"
#include "weft/weft.h"
#include "weft/weft_device.h"

namespace {

using weft::device::ActiveRuntime;

constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xAB;
constexpr unsigned char kUnwritten = 0xCD;

// A device buffer with kGuard bytes of its own pattern on each side.
struct DeviceBuffer {
  char* base = nullptr;
  size_t bytes = 0;
  int device = 0;
  char* data() const { return base + kGuard; }
};

std::string Err(const std::string& what) { return what + ": " + weftGetLastError(nullptr); }

std::string Allocate(size_t bytes, int device, const std::vector<unsigned char>& contents,
                     DeviceBuffer* b) {
  b->bytes = bytes;
  b->device = device;
  if (weftDeviceMalloc(reinterpret_cast<void**>(&b->base), bytes + 2 * kGuard, device) != weftSuccess)
    return Err("weftDeviceMalloc");
  std::vector<unsigned char> image(bytes + 2 * kGuard, kGuardByte);
  std::memcpy(image.data() + kGuard, contents.data(), std::min(bytes, contents.size()));
  if (weftDeviceMemcpy(b->base, image.data(), image.size()) != weftSuccess) return Err("upload");
  return "";
}

// Downloads the data bytes and checks both guards.
std::string Download(const DeviceBuffer& b, std::vector<unsigned char>* data) {
  std::vector<unsigned char> image(b.bytes + 2 * kGuard);
  if (weftDeviceMemcpy(image.data(), b.base, image.size()) != weftSuccess) return Err("download");
  for (size_t i = 0; i < kGuard; ++i) {
    if (image[i] != kGuardByte) return "guard before the buffer overwritten at byte " + std::to_string(i);
    if (image[kGuard + b.bytes + i] != kGuardByte)
      return "guard after the buffer overwritten at byte " + std::to_string(i);
  }
  data->assign(image.begin() + kGuard, image.begin() + kGuard + b.bytes);
  return "";
}

enum class Kind { kAllReduce, kReduceScatter, kReduce, kAllGather, kBroadcast, kAllToAll, kAllToAllv, kSendRecv };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "allreduce";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kReduce: return "reduce";
    case Kind::kAllGather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllToAll: return "alltoall";
    case Kind::kAllToAllv: return "alltoallv";
    case Kind::kSendRecv: return "sendrecv";
  }
  return "?";
}

struct Case {
  Kind kind;
  weftDataType_t dtype;
  weftRedOp_t op;
  bool in_place;
  size_t count;
};

struct Rank {
  weftComm_t comm;
  int rank, nranks, device;
  weftStream_t stream;
  // Ranks that are threads of one process sharing a GPU meet here before issuing and after
  // their streams drained: CUDA's allocation, free and pageable copies wait on the whole
  // device, so one thread's weftDeviceFree while a peer's stream waits for this thread's
  // next collective never returns (NCCL has the same rule). Empty for one rank per process.
  std::function<void()> rendezvous;
};

// A reusable barrier for n threads (C++17 has no std::barrier).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    const long gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(l, [&] { return generation_ != gen; });
  }
  // A thread that stops early (an error) no longer counts, so the others do not wait for it.
  void Leave() {
    std::lock_guard<std::mutex> l(mu_);
    if (--n_ > 0 && arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
  long generation_ = 0;
};

std::vector<unsigned char> Inputs(weftDataType_t t, weftRedOp_t op, int rank, size_t count,
                                  size_t base = 0) {
  std::vector<unsigned char> v(count * weft::TypeSize(t));
  weft_test::FillInputs(v.data(), t, op, rank, count, base);
  return v;
}

// Sizes in elements of the send and receive buffers, and the input of this rank's send buffer.
void Layout(const Case& c, const Rank& r, size_t* send, size_t* recv) {
  const size_t n = static_cast<size_t>(r.nranks);
  *send = *recv = c.count;
  if (c.kind == Kind::kAllGather) *recv = n * c.count;
  if (c.kind == Kind::kReduceScatter) *send = n * c.count;
  if (c.kind == Kind::kAllToAll || c.kind == Kind::kAllToAllv) *send = *recv = n * c.count;
}

weftResult_t Issue(const Case& c, const Rank& r, const char* send, char* recv) {
  const int root = r.nranks - 1;
  std::vector<size_t> counts(r.nranks, c.count), displs(r.nranks);
  for (int i = 0; i < r.nranks; ++i) displs[i] = static_cast<size_t>(i) * c.count;
  switch (c.kind) {
    case Kind::kAllReduce: return weftAllReduce(send, recv, c.count, c.dtype, c.op, r.comm, r.stream);
    case Kind::kReduceScatter: return weftReduceScatter(send, recv, c.count, c.dtype, c.op, r.comm, r.stream);
    case Kind::kReduce: return weftReduce(send, recv, c.count, c.dtype, c.op, root, r.comm, r.stream);
    case Kind::kAllGather: return weftAllGather(send, recv, c.count, c.dtype, r.comm, r.stream);
    case Kind::kBroadcast: return weftBroadcast(send, recv, c.count, c.dtype, root, r.comm, r.stream);
    case Kind::kAllToAll: return weftAllToAll(send, recv, c.count, c.dtype, r.comm, r.stream);
    case Kind::kAllToAllv:
      return weftAllToAllv(send, counts.data(), displs.data(), recv, counts.data(), displs.data(),
                           c.dtype, r.comm, r.stream);
    case Kind::kSendRecv: {
      const int next = (r.rank + 1) % r.nranks, prev = (r.rank + r.nranks - 1) % r.nranks;
      weftGroupStart();
      weftResult_t a = weftSend(send, c.count, c.dtype, next, r.comm, r.stream);
      weftResult_t b = weftRecv(recv, c.count, c.dtype, prev, r.comm, r.stream);
      weftResult_t e = weftGroupEnd();
      return a != weftSuccess ? a : b != weftSuccess ? b : e;
    }
  }
  return weftInternalError;
}

// The receive buffer this rank must hold afterwards; "" in *skip when it is not checked
// (reduce's non-root ranks keep their buffer: it must come back unchanged).
std::vector<unsigned char> Expected(const Case& c, const Rank& r, const std::vector<unsigned char>& before) {
  const size_t elem = weft::TypeSize(c.dtype);
  const size_t n = static_cast<size_t>(r.nranks);
  const int root = r.nranks - 1;
  std::vector<unsigned char> e = before;
  switch (c.kind) {
    case Kind::kAllReduce:
    case Kind::kReduce:
    case Kind::kReduceScatter:
      break;  // checked with CheckReduced
    case Kind::kAllGather:
      for (size_t j = 0; j < n; ++j)
        weft_test::FillInputs(e.data() + j * c.count * elem, c.dtype, weftSum, static_cast<int>(j), c.count);
      break;
    case Kind::kBroadcast: e = Inputs(c.dtype, weftSum, root, c.count); break;
    case Kind::kAllToAll:
    case Kind::kAllToAllv:
      for (size_t j = 0; j < n; ++j)
        weft_test::FillInputs(e.data() + j * c.count * elem, c.dtype, weftSum, static_cast<int>(j),
                              c.count, static_cast<size_t>(r.rank) * c.count);
      break;
    case Kind::kSendRecv: e = Inputs(c.dtype, weftSum, (r.rank + r.nranks - 1) % r.nranks, c.count); break;
  }
  return e;
}

bool IsReduction(Kind k) { return k == Kind::kAllReduce || k == Kind::kReduce || k == Kind::kReduceScatter; }

std::string Check(const Case& c, const Rank& r, const std::vector<unsigned char>& got,
                  const std::vector<unsigned char>& before) {
  if (IsReduction(c.kind)) {
    if (c.kind == Kind::kReduce && r.rank != r.nranks - 1)
      return got == before ? "" : "reduce wrote a non-root rank's receive buffer";
    const size_t base = c.kind == Kind::kReduceScatter ? static_cast<size_t>(r.rank) * c.count : 0;
    return weft_test::CheckReduced(got.data(), c.dtype, c.op, r.nranks, c.count, base);
  }
  const std::vector<unsigned char> e = Expected(c, r, before);
  for (size_t i = 0; i < e.size(); ++i)
    if (got[i] != e[i]) return "byte " + std::to_string(i) + " differs";
  return "";
}

// One case on this rank: upload, issue on the stream, synchronize, check. "" on success.
std::string RunCase(const Case& c, const Rank& r) {
  const size_t elem = weft::TypeSize(c.dtype);
  size_t send_n = 0, recv_n = 0;
  Layout(c, r, &send_n, &recv_n);
  const weftRedOp_t fill_op = IsReduction(c.kind) ? c.op : weftSum;
  const std::vector<unsigned char> input = Inputs(c.dtype, fill_op, r.rank, send_n);
  std::vector<unsigned char> recv_init(recv_n * elem, kUnwritten);
  DeviceBuffer sb, rb;
  const char* send = nullptr;
  char* recv = nullptr;
  std::string e;
  if (c.in_place) {
    // NCCL's in-place layouts: the larger buffer holds both (allgather: send is this rank's
    // block of recv; reduce-scatter: recv is this rank's block of send).
    std::vector<unsigned char> image = c.kind == Kind::kReduceScatter ? input : recv_init;
    const size_t at = c.kind == Kind::kAllGather ? static_cast<size_t>(r.rank) * c.count * elem : 0;
    if (c.kind != Kind::kReduceScatter) std::memcpy(image.data() + at, input.data(), input.size());
    e = Allocate(image.size(), r.device, image, &rb);
    send = rb.data() + at;
    recv = rb.data() + (c.kind == Kind::kReduceScatter ? static_cast<size_t>(r.rank) * c.count * elem : 0);
    recv_init = image;
  } else {
    e = Allocate(input.size(), r.device, input, &sb);
    if (e.empty()) e = Allocate(recv_init.size(), r.device, recv_init, &rb);
    send = sb.data();
    recv = rb.data();
  }
  if (r.rendezvous) r.rendezvous();  // every rank's buffers ready before any stream parks
  if (!e.empty()) return e;
  if (Issue(c, r, send, recv) != weftSuccess) e = Err("issue");
  if (e.empty() && weftDeviceStreamSynchronize(r.stream) != weftSuccess) e = Err("stream synchronize");
  if (r.rendezvous) r.rendezvous();  // every stream drained before anyone frees or copies
  if (!e.empty()) return e;
  std::vector<unsigned char> got, sent;
  if (!(e = Download(rb, &got)).empty()) return "receive buffer: " + e;
  if (!c.in_place) {
    if (!(e = Download(sb, &sent)).empty()) return "send buffer: " + e;
    if (sent != input) return "the send buffer changed";
  }
  const size_t recv_off = static_cast<size_t>(recv - rb.data());
  // The receive buffer within the allocation (in place: reduce-scatter's block of it).
  const size_t recv_bytes = recv_n * elem;
  std::vector<unsigned char> view(got.begin() + recv_off, got.begin() + recv_off + recv_bytes);
  std::vector<unsigned char> before(recv_init.begin() + recv_off, recv_init.begin() + recv_off + recv_bytes);
  e = Check(c, r, view, before);
  weftDeviceFree(sb.base);
  weftDeviceFree(rb.base);
  return e;
}

std::vector<Case> Matrix(int nranks) {
  std::vector<Case> cases;
  const weftDataType_t types[] = {weftFloat32, weftInt32, weftFloat16, weftBfloat16, weftInt8};
  const size_t counts[] = {0, 1, 1001};
  for (Kind k : {Kind::kAllReduce, Kind::kReduceScatter, Kind::kReduce})
    for (weftDataType_t t : types)
      for (weftRedOp_t op : weft_test::AllOps())
        for (size_t n : counts)
          for (bool in_place : {false, true})
            if (!(k == Kind::kReduce && in_place)) cases.push_back({k, t, op, in_place, n});
  for (Kind k : {Kind::kAllGather, Kind::kBroadcast, Kind::kAllToAll, Kind::kAllToAllv, Kind::kSendRecv})
    for (weftDataType_t t : {weftFloat32, weftInt8, weftBfloat16})
      for (size_t n : counts)
        for (bool in_place : {false, true}) {
          if (in_place && (k == Kind::kAllToAll || k == Kind::kAllToAllv || k == Kind::kSendRecv)) continue;
          if (k == Kind::kSendRecv && nranks == 1) continue;
          cases.push_back({k, t, weftSum, in_place, n});
        }
  // About 2 MiB: allreduce, reduce and broadcast go in chunks (device_staging.h), the odd
  // count leaving a partial last chunk.
  const size_t big = (size_t{2} << 20) / 4 + 3;
  for (Kind k : {Kind::kAllReduce, Kind::kAllGather, Kind::kReduceScatter, Kind::kBroadcast, Kind::kReduce})
    for (bool in_place : {false, true})
      if (!(k == Kind::kReduce && in_place))
        cases.push_back({k, weftFloat32, k == Kind::kReduce ? weftMax : weftSum, in_place,
                         big / static_cast<size_t>(k == Kind::kAllGather || k == Kind::kReduceScatter ? nranks : 1)});
  return cases;
}

// How ranks map to emulated GPUs: each its own, all on device 0, or two per device.
enum class Gpus { kOwn, kShared, kTwoPerGpu };

// The cases the ipc transport runs (device_ipc.h): allreduce, allgather, reduce-scatter,
// all-to-all, broadcast and reduce, counts 0, 1, odd, and larger than the 4 MiB window
// (several rounds).
std::vector<Case> IpcMatrix(int nranks) {
  std::vector<Case> cases;
  const size_t big = (size_t{6} << 20) / 4 / static_cast<size_t>(nranks) + 7;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, big})
    for (bool in_place : {false, true}) {
      cases.push_back({Kind::kAllReduce, weftFloat32, weftSum, in_place, n});
      cases.push_back({Kind::kAllReduce, weftBfloat16, weftAvg, in_place, n});
      cases.push_back({Kind::kAllReduce, weftInt32, weftMax, in_place, n});
      cases.push_back({Kind::kReduceScatter, weftFloat32, weftSum, in_place, n});
      cases.push_back({Kind::kReduceScatter, weftInt8, weftMin, in_place, n});
      cases.push_back({Kind::kAllGather, weftFloat16, weftSum, in_place, n});
      if (!in_place) cases.push_back({Kind::kAllToAll, weftFloat32, weftSum, false, n});
      cases.push_back({Kind::kBroadcast, weftBfloat16, weftSum, in_place, n});
      if (!in_place) cases.push_back({Kind::kReduce, weftFloat32, weftAvg, false, n});
      if (!in_place) cases.push_back({Kind::kReduce, weftInt32, weftProd, false, n});
    }
  return cases;
}

// Runs `cases` (default: the whole matrix) on nranks processes. With expect_ipc, every call
// must have gone through the ipc transport and each rank's WEFT_DEBUG=INFO log names it for
// every peer.
void RunMatrix(int nranks, Gpus gpus, std::vector<std::pair<std::string, std::string>> env = {},
               const std::vector<Case>* cases = nullptr, bool expect_ipc = false) {
  env.push_back({"WEFT_DEVICE", weft_test::SuiteDevice("emulated:4")});
  env.push_back({"WEFT_EMULATED_DELAY_US", "30"});
  if (expect_ipc) env.push_back({"WEFT_DEBUG", "INFO"});
  const std::vector<Case> all = cases != nullptr ? *cases : Matrix(nranks);
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      nranks,
      [&](int rank) {
        int devices = 1;
        weftDeviceGetCount(&devices);
        const int device = gpus == Gpus::kShared ? 0 : gpus == Gpus::kTwoPerGpu ? rank / 2 : rank;
        Rank r{nullptr, rank, nranks, device % std::max(devices, 1), nullptr};
        if (weftCommInitFromEnv(&r.comm) != weftSuccess) return std::fprintf(stderr, "%s\n", Err("init").c_str()), 1;
        if (weftDeviceStreamCreate(&r.stream, r.device) != weftSuccess) return std::fprintf(stderr, "%s\n", Err("stream").c_str()), 1;
        for (const Case& c : all) {
          const std::string e = RunCase(c, r);
          if (!e.empty()) {
            std::fprintf(stderr, "rank %d: %s %s %s %s count=%zu: %s\n", rank, KindName(c.kind),
                         weft_test::TypeName(c.dtype).c_str(), weft_test::OpName(c.op).c_str(),
                         c.in_place ? "in-place" : "out-of-place", c.count, e.c_str());
            return 1;
          }
        }
        if (weftBarrier(r.comm, r.stream) != weftSuccess || weftDeviceStreamSynchronize(r.stream) != weftSuccess)
          return std::fprintf(stderr, "%s\n", Err("barrier on the stream").c_str()), 1;
        weftResult_t async = weftSuccess;
        weftCommGetAsyncError(r.comm, &async);
        const size_t ipc_calls = weft::IpcCallCount(r.comm);
        weftDeviceStreamDestroy(r.stream);
        weftCommDestroy(r.comm);
        // A count of 0 returns at once, as NCCL's: no call reaches a transport.
        const size_t calls = std::count_if(all.begin(), all.end(), [](const Case& c) { return c.count > 0; });
        if (expect_ipc && ipc_calls != calls)
          return std::fprintf(stderr, "%zu of %zu calls went through the ipc transport\n", ipc_calls, calls), 1;
        return async == weftSuccess ? 0 : 1;
      },
      env, 240);
  for (int r = 0; r < nranks; ++r) {
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
    for (int q = 0; expect_ipc && q < nranks; ++q)
      if (q != r)
        EXPECT_NE(o.output[r].find("rank " + std::to_string(q) + " via ipc"), std::string::npos)
            << "rank " << r << "'s log does not name the ipc transport for rank " << q << ":\n" << o.output[r];
  }
}

// The whole matrix, with the default path for each call (allreduce, allgather, reduce-scatter
// and all-to-all device to device through ipc; the rest staged) and with everything staged.
TEST(DeviceCollectives, OneProcess) { RunMatrix(1, Gpus::kOwn); }
TEST(DeviceCollectives, TwoProcessesOwnGpus) { RunMatrix(2, Gpus::kOwn); }
TEST(DeviceCollectives, ThreeProcessesOwnGpus) { RunMatrix(3, Gpus::kOwn); }
TEST(DeviceCollectives, FourProcessesOwnGpus) { RunMatrix(4, Gpus::kOwn); }
TEST(DeviceCollectives, TwoProcessesShareOneGpu) { RunMatrix(2, Gpus::kShared); }
TEST(DeviceCollectives, ThreeProcessesAllStaged) { RunMatrix(3, Gpus::kOwn, {{"WEFT_IPC", "0"}}); }
TEST(DeviceCollectives, TwoProcessesShareOneGpuAllStaged) { RunMatrix(2, Gpus::kShared, {{"WEFT_IPC", "0"}}); }

// Each direct algorithm forced with WEFT_ALGO on device buffers, over the ipc transport: exact
// on 2, 3 and 4 processes, each with its own GPU and two per GPU (issue 36).
class IpcForced : public ::testing::TestWithParam<std::tuple<int, Gpus>> {};
TEST_P(IpcForced, EveryDirectAlgorithmExact) {
  const auto [nranks, gpus] = GetParam();
  const std::vector<Case> cases = IpcMatrix(nranks);
  // Rounds are as large as the window (ScheduleRequest::direct_scratch_elems): the default 4 MiB
  // window, and a 256 KiB one, so that the large cases run in many rounds on every rank count.
  for (const auto& [spec, window] :
       {std::pair<const char*, const char*>{"allreduce:oneshot;allgather:direct;reducescatter:direct;"
                                            "alltoall:direct;broadcast:direct;reduce:direct", "4M"},
        {"allreduce:twoshot;allgather:direct;reducescatter:direct;alltoall:direct;broadcast:direct;"
         "reduce:direct", "4M"},
        {"allreduce:oneshot;allgather:direct;reducescatter:direct;alltoall:direct;broadcast:direct;"
         "reduce:direct", "256K"},
        {"allreduce:twoshot;allgather:direct;reducescatter:direct;alltoall:direct;broadcast:direct;"
         "reduce:direct", "256K"}}) {
    SCOPED_TRACE(std::string(spec) + ", window " + window);
    RunMatrix(nranks, gpus, {{"WEFT_ALGO", spec}, {"WEFT_IPC_WINDOW_BYTES", window}}, &cases,
              /*expect_ipc=*/true);
  }
}
INSTANTIATE_TEST_SUITE_P(Ranks, IpcForced,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(Gpus::kOwn, Gpus::kTwoPerGpu)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "Processes" +
                                  (std::get<1>(info.param) == Gpus::kOwn ? "OwnGpus" : "TwoPerGpu");
                         });

int DeviceOf(weftStream_t s) { return ActiveRuntime().StreamDevice(s); }

// Large calls queued back to back need more pinned staging at once than the pool keeps
// (256 MiB): the blocks a finished job returns must not be freed by the progress thread.
// Freeing pinned memory waits for the whole device, whose stream waits for that thread's next
// flag; the H100 hung so from 8 MiB allreduces in a weft-perf sweep, and the emulated GPU now
// waits in its frees as CUDA does. A hang here dies by SIGALRM instead of the ctest timeout.
TEST(DeviceCollectives, QueuedLargeCallsOutgrowTheStagingPool) {
  EXPECT_EQ(weft_test::InChild({{"WEFT_DEVICE", weft_test::SuiteDevice("emulated:1")}}, [] {
    alarm(60);
    weftComm_t comm = nullptr;
    if (weftCommInitAll(&comm, 1, nullptr) != weftSuccess) return Err("weftCommInitAll");
    weftStream_t stream = nullptr;
    if (weftDeviceStreamCreate(&stream, 0) != weftSuccess) return Err("stream");
    const size_t count = size_t{10} << 20;  // 40 MiB of float: 128 MiB staging blocks
    void *send = nullptr, *recv = nullptr;
    if (weftDeviceMalloc(&send, count * 4, 0) != weftSuccess ||
        weftDeviceMalloc(&recv, count * 4, 0) != weftSuccess)
      return Err("weftDeviceMalloc");
    std::vector<float> host(count, 1.5f);
    if (weftDeviceMemcpy(send, host.data(), count * 4) != weftSuccess) return Err("upload");
    for (int i = 0; i < 8; ++i)
      if (weftAllReduce(send, recv, count, weftFloat32, weftSum, comm, stream) != weftSuccess)
        return Err("allreduce " + std::to_string(i));
    if (weftDeviceStreamSynchronize(stream) != weftSuccess) return Err("stream synchronize");
    std::vector<float> got(count);
    if (weftDeviceMemcpy(got.data(), recv, count * 4) != weftSuccess) return Err("download");
    for (size_t i = 0; i < count; i += 4099)
      if (got[i] != 1.5f) return "element " + std::to_string(i) + " is " + std::to_string(got[i]);
    weftDeviceStreamDestroy(stream);
    weftDeviceFree(send);
    weftDeviceFree(recv);
    return weftCommDestroy(comm) == weftSuccess ? std::string() : Err("weftCommDestroy");
  }), "");
}

// Thread-per-rank communicators (weftCommInitAll) on device buffers: each communicator has its
// own progress thread, so ranks of one process driving their devices concurrently complete.
TEST(DeviceCollectives, ThreadRanksInOneProcess) {
  EXPECT_EQ(weft_test::InChild({{"WEFT_DEVICE", weft_test::SuiteDevice("emulated:2")},
                                {"WEFT_EMULATED_DELAY_US", "200"}},
                               [] {
    const int n = 2;
    std::vector<weftComm_t> comms(n);
    if (weftCommInitAll(comms.data(), n, nullptr) != weftSuccess) return Err("weftCommInitAll");
    int devices = 1;
    weftDeviceGetCount(&devices);
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    Barrier barrier(n);
    for (int rank = 0; rank < n; ++rank) {
      threads.emplace_back([&, rank] {
        Rank r{comms[rank], rank, n, rank % std::max(devices, 1), nullptr, [&] { barrier.Wait(); }};
        if (weftDeviceStreamCreate(&r.stream, r.device) != weftSuccess) {
          errors[rank] = Err("stream");
          barrier.Leave();
          return;
        }
        for (const Case& c : {Case{Kind::kAllReduce, weftFloat32, weftSum, false, 1001},
                              Case{Kind::kAllReduce, weftBfloat16, weftAvg, true, (size_t{3} << 20) / 2},
                              Case{Kind::kAllGather, weftInt8, weftSum, true, 999},
                              Case{Kind::kSendRecv, weftFloat32, weftSum, false, 333}}) {
          errors[rank] = RunCase(c, r);
          if (!errors[rank].empty()) {
            errors[rank] = std::string(KindName(c.kind)) + ": " + errors[rank];
            break;
          }
        }
        barrier.Leave();
        weftDeviceStreamDestroy(r.stream);
      });
    }
    for (auto& t : threads) t.join();
    for (weftComm_t c : comms) weftCommDestroy(c);
    for (int rank = 0; rank < n; ++rank)
      if (!errors[rank].empty()) return "rank " + std::to_string(rank) + ": " + errors[rank];
    return std::string();
  }), "");
}

// Runs body(rank, comm, stream) on nranks processes, each on its own emulated GPU.
void OnRanks(int nranks, const std::vector<std::pair<std::string, std::string>>& env,
             const std::function<std::string(int, weftComm_t, weftStream_t)>& body,
             const std::vector<int>& must_pass) {
  auto all_env = env;
  all_env.push_back({"WEFT_DEVICE", weft_test::SuiteDevice("emulated:4")});
  const weft_test::LaunchOutcome o = weft_test::ForkDeviceRanks(nranks, all_env, body);
  for (int r : must_pass)
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
}

// The call enqueues and returns: with up to 200 ms per stream operation, the work is still
// pending when the call is back.
TEST(DeviceStreamSemantics, CallReturnsBeforeItsWorkCompletes) {
  OnRanks(2, {{"WEFT_EMULATED_DELAY_US", "200000"}}, [](int rank, weftComm_t comm, weftStream_t s) {
    const size_t n = 1000;
    DeviceBuffer b;
    std::string e = Allocate(n * 4, DeviceOf(s), Inputs(weftFloat32, weftSum, rank, n), &b);
    if (!e.empty()) return e;
    if (weftAllReduce(b.data(), b.data(), n, weftFloat32, weftSum, comm, s) != weftSuccess) return Err("allreduce");
    const weft::Status q = ActiveRuntime().StreamQuery(s);
    if (q.code() != weftInProgress) return "stream query right after the call: code " + std::to_string(q.code());
    if (weftDeviceStreamSynchronize(s) != weftSuccess) return Err("synchronize");
    std::vector<unsigned char> got;
    if (!(e = Download(b, &got)).empty()) return e;
    return weft_test::CheckReduced(got.data(), weftFloat32, weftSum, 2, n);
  }, {0, 1});
}

// Earlier work on the stream (an asynchronous upload) is ordered before the collective, and
// later work (the download) after it, under random delays; nothing is synchronized between.
TEST(DeviceStreamSemantics, OrderedWithEarlierAndLaterStreamWork) {
  OnRanks(3, {{"WEFT_EMULATED_DELAY_US", "3000"}}, [](int rank, weftComm_t comm, weftStream_t s) {
    weft::device::DeviceRuntime& rt = ActiveRuntime();
    const size_t n = 4097;
    for (int round = 0; round < 10; ++round) {
      const std::vector<unsigned char> in = Inputs(weftInt32, weftMax, rank, n, round);
      std::vector<unsigned char> out(n * 4, 0);
      void* d = nullptr;
      if (weftDeviceMalloc(&d, n * 4, DeviceOf(s)) != weftSuccess) return Err("malloc");
      weft::Status st = rt.MemcpyAsync(d, in.data(), in.size(), s);
      if (!st.ok()) return st.message();
      if (weftAllReduce(d, d, n, weftInt32, weftMax, comm, s) != weftSuccess) return Err("allreduce");
      st = rt.MemcpyAsync(out.data(), d, out.size(), s);
      if (st.ok()) st = rt.StreamSynchronize(s);
      if (!st.ok()) return st.message();
      const std::string e = weft_test::CheckReduced(out.data(), weftInt32, weftMax, 3, n, round);
      if (!e.empty()) return "round " + std::to_string(round) + ": " + e;
      weftDeviceFree(d);
    }
    return std::string();
  }, {0, 1, 2});
}

// A host-buffer call after a device call on the same communicator runs after it (issue order),
// instead of racing the progress thread for the communicator and failing as a second thread.
TEST(DeviceStreamSemantics, HostCallAfterDeviceCallWaitsForIt) {
  // Rank 1 comes late, so rank 0's progress thread is inside the device allreduce (holding the
  // communicator) when rank 0 issues its host call.
  OnRanks(2, {{"WEFT_EMULATED_DELAY_US", "1000"}}, [](int rank, weftComm_t comm, weftStream_t s) {
    const size_t n = 1000;
    DeviceBuffer b;
    std::string e = Allocate(n * 4, DeviceOf(s), Inputs(weftFloat32, weftSum, rank, n), &b);
    if (!e.empty()) return e;
    if (rank == 1) usleep(600 * 1000);
    if (weftAllReduce(b.data(), b.data(), n, weftFloat32, weftSum, comm, s) != weftSuccess)
      return Err("device allreduce");
    if (rank == 0) usleep(300 * 1000);
    std::vector<unsigned char> host = Inputs(weftFloat32, weftSum, rank, n);
    if (weftAllReduce(host.data(), host.data(), n, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return Err("host allreduce right after the device call");
    if (!(e = weft_test::CheckReduced(host.data(), weftFloat32, weftSum, 2, n)).empty()) return e;
    if (weftDeviceStreamSynchronize(s) != weftSuccess) return Err("synchronize");
    std::vector<unsigned char> got;
    if (!(e = Download(b, &got)).empty()) return e;
    return weft_test::CheckReduced(got.data(), weftFloat32, weftSum, 2, n);
  }, {0, 1});
}

// A peer that dies while device work is queued: the stream still drains (no hang) and
// weftCommGetAsyncError reports the failure, naming the rank that died.
// (Staged: with the ipc transport the first device call sets it up, an exchange that fails at
// once when the peer is dead; the ipc case is the next test.)
TEST(DeviceStreamSemantics, DeadPeerReachesAsyncErrorNamingIt) {
  OnRanks(2, {{"WEFT_TIMEOUT", "10"}, {"WEFT_IPC", "0"}}, [](int rank, weftComm_t comm, weftStream_t s) {
    if (rank == 1) _exit(0);  // dies before its part of the collective
    DeviceBuffer b;
    std::string e = Allocate(4000, DeviceOf(s), std::vector<unsigned char>(4000, 1), &b);
    if (!e.empty()) return e;
    if (weftAllReduce(b.data(), b.data(), 1000, weftFloat32, weftSum, comm, s) != weftSuccess)
      return Err("allreduce (the call itself must return success: the failure is asynchronous)");
    weftDeviceStreamSynchronize(s);
    weftResult_t async = weftSuccess;
    if (weftCommGetAsyncError(comm, &async) != weftSuccess) return Err("weftCommGetAsyncError");
    const std::string msg = weftGetLastError(nullptr);
    if (async == weftSuccess) return std::string("no asynchronous error after the peer died");
    if (msg.find("rank 1") == std::string::npos) return "async error does not name rank 1: " + msg;
    std::fprintf(stderr, "async error as reported: %s\n", msg.c_str());
    return std::string();
  }, {0});
}

// Over the ipc transport: the peer dies after the transport is set up, so rank 0's stream
// waits on a signal that never comes. The call's watchdog notices the dead process, releases
// the stream (it drains: no hang) and reports the failure naming rank 1; a later call on the
// communicator fails at once.
TEST(DeviceStreamSemantics, DeadPeerDuringIpcCallReachesAsyncErrorNamingIt) {
  OnRanks(2, {{"WEFT_TIMEOUT", "60"}}, [](int rank, weftComm_t comm, weftStream_t s) {
    const size_t n = 1000;
    DeviceBuffer b;
    std::string e = Allocate(n * 4, DeviceOf(s), Inputs(weftFloat32, weftSum, rank, n), &b);
    if (!e.empty()) return e;
    if (weftAllReduce(b.data(), b.data(), n, weftFloat32, weftSum, comm, s) != weftSuccess ||
        weftDeviceStreamSynchronize(s) != weftSuccess)
      return Err("first allreduce");
    if (weft::IpcCallCount(comm) != 1) return std::string("the first allreduce did not go through ipc");
    if (rank == 1) _exit(0);
    if (weftAllReduce(b.data(), b.data(), n, weftFloat32, weftSum, comm, s) != weftSuccess)
      return Err("second allreduce (the call itself must return success: the failure is asynchronous)");
    if (weftDeviceStreamSynchronize(s) != weftSuccess) return Err("synchronize after the release");
    weftResult_t async = weftSuccess;
    if (weftCommGetAsyncError(comm, &async) != weftSuccess) return Err("weftCommGetAsyncError");
    const std::string msg = weftGetLastError(nullptr);
    if (async == weftSuccess) return std::string("no asynchronous error after the peer died");
    if (msg.find("rank 1") == std::string::npos) return "async error does not name rank 1: " + msg;
    if (weftAllReduce(b.data(), b.data(), n, weftFloat32, weftSum, comm, s) == weftSuccess)
      return std::string("a call after the failure was accepted");
    std::fprintf(stderr, "async error as reported: %s\n", msg.c_str());
    return std::string();
  }, {0});
}

// One rank of a job launched by perf/netns/run.sh (2 namespace "hosts" x 2 ranks, tests/
// netns.cmake): the whole matrix on device buffers, each rank on its host's emulated GPU
// WEFT_LOCAL_RANK. allreduce, allgather and all-to-all run hierarchical_direct, device to
// device through ipc inside each host and staged across (device_hybrid.h); the rest staged.
// The ctest entry checks that every rank's log names the ipc transport for its host peer.
TEST(DeviceWorker, WholeMatrixAsOneRankOfALaunchedJob) {
  const char* worker = std::getenv("DEVICE_TEST_WORKER");
  if (worker == nullptr) GTEST_SKIP() << "runs only as a rank launched by perf/netns/run.sh (DEVICE_TEST_WORKER=1)";
  const char* local = std::getenv("WEFT_LOCAL_RANK");
  int devices = 1;
  weftDeviceGetCount(&devices);
  Rank r{nullptr, 0, 0, (local != nullptr ? std::atoi(local) : 0) % std::max(devices, 1), nullptr};
  ASSERT_EQ(weftCommInitFromEnv(&r.comm), weftSuccess) << Err("init");
  ASSERT_EQ(weftCommUserRank(r.comm, &r.rank), weftSuccess);
  ASSERT_EQ(weftCommCount(r.comm, &r.nranks), weftSuccess);
  ASSERT_EQ(weftDeviceStreamCreate(&r.stream, r.device), weftSuccess) << Err("stream");
  size_t hybrid = 0;
  for (const Case& c : Matrix(r.nranks)) {
    const size_t before = weft::IpcCallCount(r.comm);
    const std::string e = RunCase(c, r);
    ASSERT_EQ(e, "") << "rank " << r.rank << ": " << KindName(c.kind) << " "
                     << weft_test::TypeName(c.dtype) << " " << weft_test::OpName(c.op) << " "
                     << (c.in_place ? "in-place" : "out-of-place") << " count=" << c.count;
    hybrid += weft::IpcCallCount(r.comm) - before;
  }
  std::printf("rank %d: %zu calls device to device inside the host, staged across\n", r.rank, hybrid);
  EXPECT_GT(hybrid, 0u) << "no call took the ipc path";
  weftResult_t async = weftSuccess;
  weftCommGetAsyncError(r.comm, &async);
  EXPECT_EQ(async, weftSuccess) << weftGetLastError(nullptr);
  weftDeviceStreamDestroy(r.stream);
  weftCommDestroy(r.comm);
}

}  // namespace
