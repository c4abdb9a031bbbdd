// The compressed collectives on device buffers (issue 35): staged through pinned host memory
// on the caller's device stream (core/device_calls.h, StageHostWork), they must give the bits
// the same call gives on host buffers: the results and the error-feedback residual (on the
// device, or in host memory), over two calls so the residual carried from the first shapes the
// second; in place too. WEFT_COMPRESSION (job-wide) applies to device allreduces as well.
// The emulated GPU faults when the host touches device memory, so a call that read or wrote
// the caller's buffers from the host instead of staging them fails here.
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device_test_util.h"
#include "test_util.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"
#include "weft/weft_device.h"

namespace {

std::string Err(const std::string& what) { return what + ": " + weftGetLastError(nullptr); }

std::vector<float> Inputs(int rank, size_t n, int round) {
  std::mt19937 gen(1000 * rank + round);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// A device copy of host bytes, freed with the object.
struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  Dev(size_t b, int device) : bytes(b) { weftDeviceMalloc(&p, b ? b : 1, device); }
  ~Dev() { weftDeviceFree(p); }
  bool Put(const void* host) const { return weftDeviceMemcpy(p, host, bytes) == weftSuccess; }
  bool Get(void* host) const { return weftDeviceMemcpy(host, p, bytes) == weftSuccess; }
};

// Which compressed call, as one function of (send, recv, residual, stream) for both placements.
struct Call {
  const char* name;
  size_t send_floats, recv_floats, residual_floats;
  std::function<weftResult_t(const void*, void*, float*, weftStream_t)> run;
};

std::vector<Call> Calls(weftComm_t comm, int n, const weftCompression* spec) {
  const size_t c = 3001;  // odd: slices of unequal length
  const size_t nr = static_cast<size_t>(n);
  return {
      {"allreduce", c, c, c,
       [=](const void* s, void* r, float* res, weftStream_t st) {
         return weftAllReduceCompressed(s, r, c, weftFloat32, weftSum, spec, res, comm, st);
       }},
      {"reduce-scatter", c * nr, c, c * nr,
       [=](const void* s, void* r, float* res, weftStream_t st) {
         return weftReduceScatterCompressed(s, r, c, weftFloat32, weftAvg, spec, res, comm, st);
       }},
      {"allgather", c, c * nr, c,
       [=](const void* s, void* r, float* res, weftStream_t st) {
         return weftAllGatherCompressed(s, r, c, weftFloat32, spec, res, comm, st);
       }},
      {"all-to-all", c * nr, c * nr, 0,
       [=](const void* s, void* r, float*, weftStream_t st) {
         return weftAllToAllCompressed(s, r, c, weftFloat32, spec, comm, st);
       }},
  };
}

// One call, two rounds, on host buffers and on device buffers (residual on the device when
// residual_on_device, else in host memory): the same bytes out, the same residual.
std::string Compare(const Call& call, int rank, int device, weftStream_t stream, bool residual_on_device,
                    bool in_place) {
  std::vector<float> h_res(call.residual_floats, 0.0f), d_res_host(call.residual_floats, 0.0f);
  Dev d_send(call.send_floats * 4, device), d_recv(std::max(call.send_floats, call.recv_floats) * 4, device),
      d_res(call.residual_floats * 4, device);
  if (!d_res.Put(d_res_host.data())) return Err("upload residual");
  for (int round = 0; round < 2; ++round) {
    const std::vector<float> in = Inputs(rank, call.send_floats, round);
    std::vector<float> h_out(std::max(call.send_floats, call.recv_floats), -7.0f);
    std::vector<float> h_in = in;
    const void* hs = in_place ? static_cast<const void*>(h_out.data()) : h_in.data();
    if (in_place) std::memcpy(h_out.data(), in.data(), in.size() * 4);
    if (call.run(hs, h_out.data(), call.residual_floats ? h_res.data() : nullptr, nullptr) != weftSuccess)
      return Err(std::string("host ") + call.name);
    std::vector<float> init(std::max(call.send_floats, call.recv_floats), -7.0f);
    if (in_place) std::memcpy(init.data(), in.data(), in.size() * 4);
    if (!d_recv.Put(init.data()) || !d_send.Put(in.data())) return Err("upload");
    float* res = call.residual_floats == 0 ? nullptr
                 : residual_on_device      ? static_cast<float*>(d_res.p)
                                           : d_res_host.data();
    const void* ds = in_place ? d_recv.p : d_send.p;
    if (call.run(ds, d_recv.p, res, stream) != weftSuccess) return Err(std::string("device ") + call.name);
    if (weftDeviceStreamSynchronize(stream) != weftSuccess) return Err("stream synchronize");
    std::vector<float> got(h_out.size());
    if (!d_recv.Get(got.data())) return Err("download");
    if (std::memcmp(got.data(), h_out.data(), call.recv_floats * 4) != 0)
      return std::string(call.name) + " round " + std::to_string(round) + ": device result differs from host";
    if (residual_on_device && call.residual_floats && !d_res.Get(d_res_host.data())) return Err("download residual");
    if (call.residual_floats && std::memcmp(d_res_host.data(), h_res.data(), h_res.size() * 4) != 0)
      return std::string(call.name) + " round " + std::to_string(round) + ": residual differs from host";
  }
  return "";
}

// Runs body(rank, comm, stream, device) on 2 forked ranks, each with its own emulated GPU.
void OnTwoRanks(const std::vector<std::pair<std::string, std::string>>& env,
                const std::function<std::string(int, weftComm_t, weftStream_t, int)>& body) {
  auto all_env = env;
  all_env.push_back({"WEFT_DEVICE", weft_test::SuiteDevice("emulated:2")});
  all_env.push_back({"WEFT_EMULATED_DELAY_US", "300"});  // stream work lags: ordering shows
  const weft_test::LaunchOutcome o = weft_test::ForkRanks(
      2,
      [&](int rank) {
        weftComm_t comm = nullptr;
        weftStream_t stream = nullptr;
        int devices = 1;
        weftDeviceGetCount(&devices);
        const int device = rank % std::max(devices, 1);
        if (weftCommInitFromEnv(&comm) != weftSuccess || weftDeviceStreamCreate(&stream, device) != weftSuccess)
          return std::fprintf(stderr, "%s\n", Err("setup").c_str()), 1;
        const std::string e = body(rank, comm, stream, device);
        weftDeviceStreamDestroy(stream);
        weftCommDestroy(comm);
        if (!e.empty()) return std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str()), 1;
        return 0;
      },
      all_env, 120);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
}

TEST(DeviceCompressed, EveryCollectiveEqualsItsHostRun) {
  OnTwoRanks({}, [](int rank, weftComm_t comm, weftStream_t stream, int device) {
    for (const char* codec : {"int8", "fp8"}) {
      weftCompression spec;
      if (weftCompressionParse(codec, &spec) != weftSuccess) return Err("weftCompressionParse");
      for (const Call& call : Calls(comm, 2, &spec))
        for (bool on_device : {true, false}) {
          const std::string e = Compare(call, rank, device, stream, on_device, false);
          if (!e.empty()) return std::string(codec) + (on_device ? ", residual on device: " : ", host residual: ") + e;
        }
    }
    return std::string();
  });
}

TEST(DeviceCompressed, AllReduceInPlace) {
  OnTwoRanks({}, [](int rank, weftComm_t comm, weftStream_t stream, int device) {
    weftCompression spec;
    if (weftCompressionParse("int8", &spec) != weftSuccess) return Err("weftCompressionParse");
    return Compare(Calls(comm, 2, &spec)[0], rank, device, stream, true, true);
  });
}

// WEFT_COMPRESSION=int8:always: a plain weftAllReduce on device buffers is compressed (its
// result differs from the exact sum and equals the same call on host buffers).
TEST(DeviceCompressed, JobWideCompressionAppliesToDeviceBuffers) {
  OnTwoRanks({{"WEFT_COMPRESSION", "int8:always"}, {"WEFT_COMPRESSION_MIN_BYTES", "0"}},
             [](int rank, weftComm_t comm, weftStream_t stream, int device) {
    const size_t n = 4099;
    const std::vector<float> in = Inputs(rank, n, 0);
    std::vector<float> host(n), got(n), exact_in = in, exact(n);
    if (weftAllReduce(in.data(), host.data(), n, weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return Err("host allreduce");
    Dev s(n * 4, device), r(n * 4, device);
    if (!s.Put(in.data())) return Err("upload");
    if (weftAllReduce(s.p, r.p, n, weftFloat32, weftSum, comm, stream) != weftSuccess) return Err("device allreduce");
    if (weftDeviceStreamSynchronize(stream) != weftSuccess || !r.Get(got.data())) return Err("download");
    if (std::memcmp(got.data(), host.data(), n * 4) != 0) return std::string("device result differs from host");
    const std::vector<float> peer = Inputs(1 - rank, n, 0);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += got[i] != (rank == 0 ? in[i] + peer[i] : peer[i] + in[i]);
    if (differ == 0) return std::string("every element is the exact sum: the call was not compressed");
    return std::string();
  });
}

}  // namespace
