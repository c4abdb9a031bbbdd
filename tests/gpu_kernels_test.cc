// GPU reduction kernels (kernels/reduce.cu) against the CPU kernels (kernels/reduce.h).
//
// For every dtype x op: random bit patterns (so NaN, inf, subnormals and wrap-around all
// occur), reduced on the GPU and on the CPU, compared bitwise; NaN results only need to be NaN
// on both (x86 and CUDA produce different NaN payloads). Aligned pointers (uint4 path),
// pointers offset by one element (element-by-element path), in-place, odd counts, and
// Finalize(avg) per dtype. Skips, saying why, when CUDA support was not built or no device
// is present.
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

class GpuKernelsTest : public ::testing::TestWithParam<std::tuple<weftDataType_t, weftRedOp_t>> {
 protected:
  void SetUp() override {
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess) {
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount failed: " << cudaGetErrorString(err);
    }
    if (devices == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned 0";
  }
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

TEST_P(GpuKernelsTest, FinalizeMatchesCpuBitwise) {
  const weftDataType_t t = std::get<0>(GetParam());
  const weftRedOp_t op = std::get<1>(GetParam());
  const size_t size = TypeSize(t);
  const size_t count = 10007;
  std::mt19937_64 rng(99 + t);
  for (int divisor : {1, 2, 3, 7, 200}) {
    std::vector<uint8_t> host(count * size), gpu(count * size);
    for (auto& x : host) x = static_cast<uint8_t>(rng());
    DeviceBuffer d(host.size());
    ASSERT_EQ(d.error, cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d.ptr, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(kernels::cuda::Finalize(d.ptr, count, t, op, divisor, nullptr), weftSuccess);
    ASSERT_EQ(cudaMemcpy(gpu.data(), d.ptr, gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    kernels::Finalize(host.data(), count, t, op, divisor);
    if (!ExpectSameElements(t, gpu, host, count,
                            std::string(DataTypeName(t)) + " finalize " + RedOpName(op) +
                                " / " + std::to_string(divisor))) {
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, GpuKernelsTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         [](const auto& info) {
                           return std::string(DataTypeName(std::get<0>(info.param))) + "_" +
                                  RedOpName(std::get<1>(info.param));
                         });

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
