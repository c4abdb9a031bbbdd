// GPU reduction kernels (kernels/reduce.cu) against the CPU kernels (kernels/reduce.h).
//
// For every dtype x op: random bit patterns (so NaN, inf, subnormals and wrap-around all
// occur), reduced on the GPU and on the CPU, compared bitwise; NaN results only need to be NaN
// on both (x86 and CUDA produce different NaN payloads). Aligned pointers (uint4 path),
// pointers offset by one element (element-by-element path), in-place, odd counts; counts past
// the kernel's grid limit (kMaxBlocks x kThreads work items, so the grid-stride loop wraps)
// with canary bytes before and after the destination; and reduce-then-finalize for every op
// (avg divides, every other op must leave the data bitwise unchanged).
//
// Availability: the tests skip, saying why, only when CUDA support was not built or there is
// no device or no driver (cudaErrorNoDevice, cudaErrorInsufficientDriver, cudaErrorStubLibrary).
// A GPU that is present but unusable (any other error, or a failing probe allocation and
// kernel) FAILS them: a broken driver must not look like a machine without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/reduce.h"
#include "kernels/reduce_cuda.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weft {
namespace {

constexpr weftDataType_t kAllTypes[] = {weftInt8,    weftUint8,   weftInt32,   weftUint32,
                                        weftInt64,   weftUint64,  weftFloat16, weftFloat32,
                                        weftFloat64, weftBfloat16};
constexpr weftRedOp_t kAllOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};

#ifdef WEFT_HAVE_CUDA

bool IsNanElement(weftDataType_t t, const uint8_t* p) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case weftFloat16: std::memcpy(&h, p, 2); return std::isnan(HalfToFloat(h));
    case weftBfloat16: std::memcpy(&h, p, 2); return std::isnan(Bfloat16ToFloat(h));
    case weftFloat32: std::memcpy(&f, p, 4); return std::isnan(f);
    case weftFloat64: std::memcpy(&d, p, 8); return std::isnan(d);
    default: return false;
  }
}

std::string Hex(const uint8_t* p, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = size; i-- > 0;) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Compares element by element; returns false (with a failure) at the first difference.
bool ExpectSameElements(weftDataType_t t, const std::vector<uint8_t>& gpu,
                        const std::vector<uint8_t>& cpu, size_t count, const std::string& what) {
  const size_t size = TypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* g = &gpu[i * size];
    const uint8_t* c = &cpu[i * size];
    if (std::memcmp(g, c, size) == 0) continue;
    if (IsNanElement(t, g) && IsNanElement(t, c)) continue;
    ADD_FAILURE() << what << " element " << i << ": gpu " << Hex(g, size) << " cpu "
                  << Hex(c, size);
    return false;
  }
  return true;
}

// Device buffer freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { error = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { if (ptr != nullptr) cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* bytes() { return static_cast<uint8_t*>(ptr); }
  void* ptr = nullptr;
  cudaError_t error = cudaSuccess;
};

// "" when a usable device is present; otherwise why not, and whether that is a skip (no
// device, no driver) or a failure (present but unusable).
struct GpuState {
  bool usable = false;
  bool absent = false;  // skip: nothing to test on
  std::string why;
};

GpuState ProbeGpu() {
  GpuState g;
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorStubLibrary) {
    g.absent = true;
    g.why = std::string("no CUDA device or driver: cudaGetDeviceCount: ") + cudaGetErrorName(err) + ": " +
            cudaGetErrorString(err);
    return g;
  }
  if (err != cudaSuccess) {
    g.why = std::string("a CUDA driver is present but unusable: cudaGetDeviceCount: ") + cudaGetErrorName(err) +
            ": " + cudaGetErrorString(err);
    return g;
  }
  if (devices == 0) {
    g.absent = true;
    g.why = "no CUDA device: cudaGetDeviceCount returned 0";
    return g;
  }
  // Present: it must work. A tiny allocation, a memset kernel and a synchronize.
  void* probe = nullptr;
  err = cudaMalloc(&probe, 256);
  if (err == cudaSuccess) err = cudaMemset(probe, 0x5a, 256);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (probe != nullptr) cudaFree(probe);
  if (err != cudaSuccess) {
    g.why = std::to_string(devices) + " CUDA device(s) present but unusable: " + cudaGetErrorName(err) + ": " +
            cudaGetErrorString(err);
    return g;
  }
  g.usable = true;
  return g;
}

const GpuState& Gpu() {
  static const GpuState state = ProbeGpu();
  return state;
}

// Skips (no device/driver) or fails (present but unusable) the current test.
#define REQUIRE_USABLE_GPU()                         \
  do {                                               \
    const GpuState& gpu_state = Gpu();               \
    if (gpu_state.absent) GTEST_SKIP() << gpu_state.why; \
    if (!gpu_state.usable) FAIL() << gpu_state.why;  \
  } while (0)

class GpuKernelsTest : public ::testing::TestWithParam<std::tuple<weftDataType_t, weftRedOp_t>> {
 protected:
  void SetUp() override { REQUIRE_USABLE_GPU(); }
};

TEST_P(GpuKernelsTest, ReduceMatchesCpuBitwise) {
  const weftDataType_t t = std::get<0>(GetParam());
  const weftRedOp_t op = std::get<1>(GetParam());
  const size_t size = TypeSize(t);
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 16 + op);
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      for (bool in_place : {false, true}) {
        const std::string what = std::string(DataTypeName(t)) + " " + RedOpName(op) +
                                 " count=" + std::to_string(count) + " offset=" +
                                 std::to_string(offset) + (in_place ? " in-place" : "");
        const size_t bytes = (count + offset) * size;
        std::vector<uint8_t> a(bytes), b(bytes), cpu(bytes), gpu(bytes);
        for (auto& x : a) x = static_cast<uint8_t>(rng());
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        DeviceBuffer da(bytes), db(bytes), dd(bytes);
        ASSERT_EQ(da.error, cudaSuccess);
        ASSERT_EQ(db.error, cudaSuccess);
        ASSERT_EQ(dd.error, cudaSuccess);
        ASSERT_EQ(cudaMemcpy(da.ptr, a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(db.ptr, b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
        const size_t o = offset * size;
        uint8_t* gpu_dst = in_place ? da.bytes() + o : dd.bytes() + o;
        ASSERT_EQ(kernels::cuda::Reduce(gpu_dst, da.bytes() + o, db.bytes() + o, count, t, op,
                                        nullptr),
                  weftSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(gpu.data() + o, gpu_dst, count * size, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        kernels::Reduce(cpu.data() + o, a.data() + o, b.data() + o, count, t, op);
        std::vector<uint8_t> g(gpu.begin() + o, gpu.end()), c(cpu.begin() + o, cpu.end());
        if (!ExpectSameElements(t, g, c, count, what)) return;
      }
    }
  }
}

// What a collective does on its owner: reduce `k` contributions pairwise, then finalize with
// divisor k. GPU and CPU must agree bitwise after every step; for every op but avg the
// finalize must leave the reduced data bitwise unchanged (a no-op), for avg it divides.
TEST_P(GpuKernelsTest, ReduceThenFinalizeMatchesCpuBitwise) {
  const weftDataType_t t = std::get<0>(GetParam());
  const weftRedOp_t op = std::get<1>(GetParam());
  const size_t size = TypeSize(t);
  const size_t count = 10007;
  std::mt19937_64 rng(99 + t * 8 + op);
  for (int k : {1, 2, 3, 7, 200}) {
    const std::string what = std::string(DataTypeName(t)) + " " + RedOpName(op) + " over " + std::to_string(k);
    std::vector<uint8_t> acc(count * size), next(count * size), gpu(count * size);
    for (auto& x : acc) x = static_cast<uint8_t>(rng());
    DeviceBuffer dacc(acc.size()), dnext(acc.size());
    ASSERT_EQ(dacc.error, cudaSuccess);
    ASSERT_EQ(dnext.error, cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dacc.ptr, acc.data(), acc.size(), cudaMemcpyHostToDevice), cudaSuccess);
    for (int step = 1; step < k; ++step) {
      for (auto& x : next) x = static_cast<uint8_t>(rng());
      ASSERT_EQ(cudaMemcpy(dnext.ptr, next.data(), next.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(kernels::cuda::Reduce(dacc.ptr, dacc.ptr, dnext.ptr, count, t, op, nullptr), weftSuccess);
      kernels::Reduce(acc.data(), acc.data(), next.data(), count, t, op);
    }
    ASSERT_EQ(cudaMemcpy(gpu.data(), dacc.ptr, gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (!ExpectSameElements(t, gpu, acc, count, what + " reduced")) return;
    // The GPU's own reduced bytes: its NaNs are canonical while the CPU's keep an operand's
    // payload, so the no-op check below compares the GPU with itself.
    const std::vector<uint8_t> reduced = gpu;
    ASSERT_EQ(kernels::cuda::Finalize(dacc.ptr, count, t, op, k, nullptr), weftSuccess);
    ASSERT_EQ(cudaMemcpy(gpu.data(), dacc.ptr, gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    kernels::Finalize(acc.data(), count, t, op, k);
    if (!ExpectSameElements(t, gpu, acc, count, what + " finalized")) return;
    if (op != weftAvg || k == 1) {
      EXPECT_EQ(std::memcmp(gpu.data(), reduced.data(), gpu.size()), 0) << what << ": finalize changed the data";
    } else {
      EXPECT_NE(std::memcmp(gpu.data(), reduced.data(), gpu.size()), 0) << what << ": avg finalize did nothing";
    }
  }
}

// Counts past the grid limit (reduce.cu: at most kMaxBlocks = 4096 blocks of kThreads = 256,
// so 2^20 work items; each item is a 16-byte vector on the aligned path, one element on the
// unaligned path): the grid-stride loop must cover everything, exactly once, and write
// nothing outside [dst, dst + count). Canary bytes surround the destination.
class GpuGridTest : public ::testing::TestWithParam<weftDataType_t> {
 protected:
  void SetUp() override { REQUIRE_USABLE_GPU(); }
};

// Grid coverage does not depend on the op: sum (with a no-op finalize) and avg (dividing).
TEST_P(GpuGridTest, CountsPastTheGridLimitWithCanaries) {
  const weftDataType_t t = GetParam();
  for (weftRedOp_t op : {weftSum, weftAvg}) {
    const size_t size = TypeSize(t);
    constexpr size_t kGridItems = size_t{4096} * 256, kCanary = 256;
    for (size_t offset : {size_t{0}, size_t{1}}) {  // aligned (vector path), unaligned (elements)
      const size_t per_item = offset == 0 ? 16 / size : 1;
      const size_t count = kGridItems * per_item * 5 / 2 + 3;
      const size_t bytes = count * size, o = offset * size;
      std::vector<uint8_t> a(bytes), b(bytes), cpu(bytes), gpu(bytes + 2 * kCanary);
      uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1);
      for (size_t i = 0; i < bytes; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        a[i] = static_cast<uint8_t>(x);
        b[i] = static_cast<uint8_t>(x >> 8);
      }
      DeviceBuffer da(bytes + o), db(bytes + o), dd(bytes + o + 2 * kCanary);
      ASSERT_EQ(da.error, cudaSuccess);
      ASSERT_EQ(db.error, cudaSuccess);
      ASSERT_EQ(dd.error, cudaSuccess);
      ASSERT_EQ(cudaMemcpy(da.bytes() + o, a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db.bytes() + o, b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dd.ptr, 0xA5, bytes + o + 2 * kCanary), cudaSuccess);
      uint8_t* dst = dd.bytes() + kCanary + o;
      ASSERT_EQ(kernels::cuda::Reduce(dst, da.bytes() + o, db.bytes() + o, count, t, op, nullptr), weftSuccess);
      ASSERT_EQ(kernels::cuda::Finalize(dst, count, t, op, 3, nullptr), weftSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(gpu.data(), dst - kCanary, bytes + 2 * kCanary, cudaMemcpyDeviceToHost), cudaSuccess);
      kernels::Reduce(cpu.data(), a.data(), b.data(), count, t, op);
      kernels::Finalize(cpu.data(), count, t, op, 3);
      const std::string what = std::string(DataTypeName(t)) + " " + RedOpName(op) + " count=" +
                               std::to_string(count) + " offset=" + std::to_string(offset);
      for (size_t i = 0; i < kCanary; ++i) {
        ASSERT_EQ(gpu[i], 0xA5) << what << ": canary byte " << (kCanary - i) << " before dst overwritten";
        ASSERT_EQ(gpu[kCanary + bytes + i], 0xA5) << what << ": canary byte " << i << " after dst overwritten";
      }
      std::vector<uint8_t> body(gpu.begin() + kCanary, gpu.begin() + kCanary + bytes);
      if (!ExpectSameElements(t, body, cpu, count, what)) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuGridTest, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, GpuKernelsTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         [](const auto& info) {
                           return std::string(DataTypeName(std::get<0>(info.param))) + "_" +
                                  RedOpName(std::get<1>(info.param));
                         });

// Runs on every machine with CUDA support built: says what the probe found (a skip when there
// is no device, a failure when a device is there but broken).
TEST(GpuAvailability, UsableOrAbsentNeverBroken) {
  REQUIRE_USABLE_GPU();
  SUCCEED() << "a usable CUDA device is present";
}

TEST(GpuKernelsApiTest, InvalidArgumentsAreRejectedWithoutLaunching) {
  // Argument checks happen before any CUDA call, so they hold without a device too.
  EXPECT_EQ(kernels::cuda::Reduce(nullptr, nullptr, nullptr, 8, weftFloat8e4m3, weftSum, nullptr),
            weftInvalidArgument);
  EXPECT_EQ(kernels::cuda::Reduce(nullptr, nullptr, nullptr, 8, weftFloat32, weftNumOps, nullptr),
            weftInvalidArgument);
  EXPECT_EQ(kernels::cuda::Finalize(nullptr, 8, weftNumTypes, weftAvg, 2, nullptr),
            weftInvalidArgument);
  EXPECT_EQ(kernels::cuda::Reduce(nullptr, nullptr, nullptr, 0, weftFloat32, weftSum, nullptr),
            weftSuccess);
}

#else  // !WEFT_HAVE_CUDA

TEST(GpuKernelsTest, ReduceMatchesCpuBitwise) {
  static_assert(!kernels::cuda::kCudaKernelsBuilt);
  GTEST_SKIP() << "CUDA support was not built (no nvcc found by CMake, or WEFT_CUDA=OFF): "
                  "kernels/reduce.cu is not compiled";
}

#endif  // WEFT_HAVE_CUDA

}  // namespace
}  // namespace weft
