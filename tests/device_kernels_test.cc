// The emulated GPU's kernels against the CPU backend, bitwise (issue 35, phase 3): both are
// instantiated from kernels/element_ops.h, so every (dtype, op), avg's finalize and every
// floating cast must agree bit for bit. Inputs are random bit patterns, so NaN, inf,
// subnormals, -0 and integer wrap-around all occur. Compared with every CPU kernel table this
// machine has (generic, and AVX2 when present). The one place the CPU definition itself is not
// deterministic is a NaN's payload (x86 returns the first operand's NaN and the vectorizer may
// commute; kernels_test accepts the same between the CPU's own vector body and scalar tail):
// there both must be NaN. Casts have no such freedom and are compared bit for bit throughout.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/device_runtime.h"
#include "device_test_util.h"
#include "kernels/dtype.h"
#include "kernels/kernel_backend.h"
#include "kernels/reduce_table.h"
#include "test_util.h"

namespace {

using weft::Status;
using weft::device::ActiveRuntime;
using weft::device::DeviceRuntime;

const std::vector<std::pair<std::string, std::string>> kEmulated = {
    {"WEFT_DEVICE", weft_test::SuiteDevice("emulated:2")}, {"WEFT_EMULATED_DELAY_US", "100"}};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<const weft::kernels::KernelTable*> CpuTables() {
  std::vector<const weft::kernels::KernelTable*> t = {&weft::kernels::GenericKernelTable()};
  if (const auto* avx2 = weft::kernels::Avx2KernelTable()) t.push_back(avx2);
  return t;
}

// Copies host bytes to a new device buffer (synchronously on the default stream).
Status Upload(DeviceRuntime& rt, const std::vector<uint8_t>& host, void** dev) {
  WEFT_RETURN_IF_ERROR(rt.Malloc(dev, host.size(), 0));
  WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(*dev, host.data(), host.size(), nullptr));
  return rt.StreamSynchronize(nullptr);
}

Status Download(DeviceRuntime& rt, const void* dev, std::vector<uint8_t>* host) {
  WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(host->data(), dev, host->size(), nullptr));
  return rt.StreamSynchronize(nullptr);
}

std::string FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return "first differing byte " + std::to_string(i);
  return "";
}

bool IsNan(weftDataType_t t, const uint8_t* p) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, weft::TypeSize(t));
  switch (t) {
    case weftFloat16: return (bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu) != 0;
    case weftBfloat16: return (bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu) != 0;
    case weftFloat32: return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFFu) != 0;
    case weftFloat64:
      return (bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (bits & 0xFFFFFFFFFFFFFull) != 0;
    default: return false;
  }
}

// "" when every element has equal bits, or (reductions only) both are NaN.
std::string ElementDifference(weftDataType_t t, const std::vector<uint8_t>& cpu,
                              const std::vector<uint8_t>& dev) {
  const size_t size = weft::TypeSize(t);
  for (size_t i = 0; i * size < cpu.size(); ++i) {
    const uint8_t* c = cpu.data() + i * size;
    const uint8_t* d = dev.data() + i * size;
    if (std::memcmp(c, d, size) == 0 || (IsNan(t, c) && IsNan(t, d))) continue;
    return "element " + std::to_string(i) + " differs";
  }
  return "";
}

// One (dtype, op): reduce (out of place and in place) then avg's finalize, on the device and
// with every CPU table.
std::string CheckReduce(weftDataType_t dtype, weftRedOp_t op) {
  DeviceRuntime& rt = ActiveRuntime();
  const size_t count = 4099;  // odd: no kernel may assume whole vectors
  const size_t bytes = count * weft::TypeSize(dtype);
  const auto a = RandomBytes(bytes, 1 + dtype * 7 + op);
  const auto b = RandomBytes(bytes, 1000 + dtype * 7 + op);
  void *da = nullptr, *db = nullptr, *dd = nullptr;
  std::vector<uint8_t> dev_out(bytes), dev_inplace(bytes);
  Status s = Upload(rt, a, &da);
  if (s.ok()) s = Upload(rt, b, &db);
  if (s.ok()) s = rt.Malloc(&dd, bytes, 0);
  if (s.ok()) s = rt.LaunchReduce(dd, da, db, count, dtype, op, nullptr);
  if (s.ok()) s = rt.LaunchFinalize(dd, count, dtype, op, 3, nullptr);
  if (s.ok()) s = rt.LaunchReduce(da, da, db, count, dtype, op, nullptr);  // in place
  if (s.ok()) s = Download(rt, dd, &dev_out);
  if (s.ok()) s = Download(rt, da, &dev_inplace);
  if (!s.ok()) return s.message();
  for (const auto* table : CpuTables()) {
    std::vector<uint8_t> cpu(bytes);
    table->reduce[dtype][op](cpu.data(), a.data(), b.data(), count);
    std::string e = ElementDifference(dtype, cpu, dev_inplace);
    if (!e.empty()) return std::string(table->isa) + " reduce: " + e;
    if (op == weftAvg) table->finalize_avg[dtype](cpu.data(), count, 3);
    e = ElementDifference(dtype, cpu, dev_out);
    if (!e.empty()) return std::string(table->isa) + " reduce+finalize: " + e;
  }
  return "";
}

TEST(DeviceKernels, ReduceAndFinalizeEqualCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    for (weftDataType_t t : weft_test::AllTypes()) {
      for (weftRedOp_t op : weft_test::AllOps()) {
        const std::string e = CheckReduce(t, op);
        if (!e.empty()) return weft_test::TypeName(t) + " " + weft_test::OpName(op) + ": " + e;
      }
    }
    return std::string();
  }), "");
}

TEST(DeviceKernels, CastsEqualCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    const weftDataType_t floats[] = {weftFloat16, weftBfloat16, weftFloat32, weftFloat64};
    const size_t count = 1031;
    for (weftDataType_t from : floats) {
      for (weftDataType_t to : floats) {
        if (from == to) continue;
        const auto src = RandomBytes(count * weft::TypeSize(from), from * 16 + to);
        std::vector<uint8_t> cpu(count * weft::TypeSize(to)), dev(cpu.size());
        weft::KernelRequest req;
        Status s = weft::CpuKernelBackend().Cast(weft::MemRef::Host(cpu.data(), cpu.size()), to,
                                                 weft::MemRef::Host(src.data(), src.size()), from,
                                                 count, &req);
        void *dsrc = nullptr, *ddst = nullptr;
        if (s.ok()) s = Upload(rt, src, &dsrc);
        if (s.ok()) s = rt.Malloc(&ddst, dev.size(), 0);
        if (s.ok()) s = rt.LaunchCast(ddst, to, dsrc, from, count, nullptr);
        if (s.ok()) s = Download(rt, ddst, &dev);
        if (!s.ok()) return s.message();
        // A real GPU may canonicalize a NaN's payload when widening; the emulated one may not.
        const bool exact = std::string(rt.name()) == "emulated";
        if (exact ? cpu != dev : !ElementDifference(to, cpu, dev).empty())
          return "cast " + weft_test::TypeName(from) + " -> " + weft_test::TypeName(to) + ": " +
                 FirstDifference(cpu, dev);
      }
    }
    return std::string();
  }), "");
}

TEST(DeviceKernels, InvalidTypeOrOpIsRefused) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    void* d = nullptr;
    Status s = rt.Malloc(&d, 64, 0);
    if (!s.ok()) return s.message();
    s = rt.LaunchReduce(d, d, d, 4, weftFloat8e4m3, weftSum, nullptr);
    if (s.code() != weftInvalidArgument) return "fp8 reduce: " + s.message();
    s = rt.LaunchReduce(d, d, d, 4, weftFloat32, static_cast<weftRedOp_t>(42), nullptr);
    if (s.code() != weftInvalidArgument || s.message().find("42") == std::string::npos)
      return "op 42: " + s.message();
    return std::string();
  }), "");
}

}  // namespace
