// The device runtimes' codec kernels (DeviceRuntime::LaunchEncode / LaunchDecode /
// LaunchDecodeReduce, one source in kernels/codec_kernels.h) against the CPU hooks
// (kernels/codec_backend.h), bitwise (issue 35 item 4): every codec, every flag combination
// (stochastic rounding, Hadamard, both), block sizes (1, odd, powers of two), top-k ratios
// (k = 1 up to every value); counts 0, 1, odd, a partial last block and a few MiB; inputs with
// NaN (quiet and signalling), inf, denormals, -0, and ties (few distinct values).
//
//   encode         device bytes == CpuEncode's bytes, always (scales, codes, top-k pairs are
//                  integers or copied bits; a NaN scale is a constant).
//   decode         of the CPU's encoding: == CpuDecode bitwise on the emulated GPU; on CUDA a
//                  NaN need only be NaN (the GPU's arithmetic writes the canonical NaN where
//                  x86 propagates an operand's payload), everything else bit for bit.
//   decode-reduce  every op, == CpuDecodeReduce, NaN as NaN on both (the CPU's own vectorized
//                  reduction may commute a NaN's operands; device_kernels_test says the same).
// Every device buffer has guard bytes before and after; a host or misaligned pointer, a bad
// spec or op is an InvalidArgument naming it; the "none" runtime refuses the launches.
// Runs in a child per test (device_test_util.h) on the emulated GPU with random delays, or on
// CUDA with WEFTTEST_DEVICE=cuda (tests/gpu/run.sh).
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/memref.h"
#include "device/device_runtime.h"
#include "device_test_util.h"
#include "kernels/codec.h"
#include "kernels/codec_backend.h"
#include "kernels/half.h"
#include "test_util.h"
#include "weft/weft_compress.h"

namespace {

using weft::Status;
using weft::device::ActiveRuntime;
using weft::device::DeviceRuntime;

const std::vector<std::pair<std::string, std::string>> kEmulated = {
    {"WEFT_DEVICE", weft_test::SuiteDevice("emulated:1")}, {"WEFT_EMULATED_DELAY_US", "30"}};

constexpr size_t kGuard = 64;        // bytes before and after every device buffer
constexpr uint8_t kGuardByte = 0xA5;
constexpr uint64_t kRoundingStream = 7;

// A device buffer of `bytes` with kGuard guard bytes on either side, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceRuntime& rt, size_t bytes) : rt_(rt), bytes_(bytes) {
    status_ = rt_.Malloc(&base_, bytes + 2 * kGuard, 0);
    if (status_.ok()) status_ = Upload(std::vector<uint8_t>(bytes, 0x5A));
  }
  ~DeviceBuffer() {
    if (base_ != nullptr) (void)rt_.Free(base_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* ptr() const { return static_cast<char*>(base_) + kGuard; }
  const Status& status() const { return status_; }
  // Writes the guards and `data` (at most bytes()).
  Status Upload(const std::vector<uint8_t>& data) {
    std::vector<uint8_t> all(bytes_ + 2 * kGuard, kGuardByte);
    std::memcpy(all.data() + kGuard, data.data(), data.size());
    WEFT_RETURN_IF_ERROR(rt_.MemcpyAsync(base_, all.data(), all.size(), nullptr));
    return rt_.StreamSynchronize(nullptr);
  }
  // The contents after the work queued on the default stream; "" or what went wrong (a guard
  // byte overwritten included).
  std::string Download(std::vector<uint8_t>* data) const {
    std::vector<uint8_t> all(bytes_ + 2 * kGuard);
    Status s = rt_.MemcpyAsync(all.data(), base_, all.size(), nullptr);
    if (s.ok()) s = rt_.StreamSynchronize(nullptr);
    if (!s.ok()) return s.message();
    for (size_t i = 0; i < kGuard; ++i)
      if (all[i] != kGuardByte || all[kGuard + bytes_ + i] != kGuardByte)
        return "a guard byte around the device buffer changed";
    data->assign(all.begin() + kGuard, all.begin() + kGuard + bytes_);
    return "";
  }

 private:
  DeviceRuntime& rt_;
  size_t bytes_;
  void* base_ = nullptr;
  Status status_;
};

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

weftCompression Spec(weftCodec_t codec, uint32_t block, uint32_t flags, float ratio = 0.01f) {
  return weft_test::CodecSpec(codec, block, flags, ratio, 0x5EED);
}

std::string Describe(const weftCompression& s) {
  std::string d = weft::codec::CodecName(s.codec);
  d += " block=" + std::to_string(s.block);
  if (s.flags & WEFT_COMPRESS_STOCHASTIC) d += " stochastic";
  if (s.flags & WEFT_COMPRESS_HADAMARD) d += " hadamard";
  if (s.codec == weftCodecTopK) d += " ratio=" + std::to_string(s.ratio);
  return d;
}

enum class Input { kFinite, kSpecials, kTies };
const char* InputName(Input in) {
  return in == Input::kFinite ? "finite" : in == Input::kSpecials ? "nan/inf" : "ties";
}

// Gaussians over a wide range of exponents, with -0, denormals and huge values; kSpecials adds
// quiet and signalling NaNs and infinities now and then; kTies draws from six values.
std::vector<float> Values(size_t n, Input in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  const float ties[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    if (in == Input::kTies) {
      v[i] = ties[r % 6];
      continue;
    }
    switch (r % 16) {
      case 0: v[i] = -0.0f; break;
      case 1: v[i] = weft::FloatFromBits((r & 0x80000000u) | (rng() & 0x7FFFFFu)); break;
      case 2: v[i] = (r & 2 ? 1e30f : -3e29f) * normal(rng); break;
      default: v[i] = std::ldexp(normal(rng), static_cast<int>(rng() % 40) - 20);
    }
    if (in == Input::kSpecials && i % 997 == 5)
      v[i] = weft::FloatFromBits(r & 1 ? 0x7FC00000u | (rng() & 0x3FFFFFu) : 0xFF800001u);
    if (in == Input::kSpecials && i % 1499 == 9) v[i] = r & 1 ? INFINITY : -INFINITY;
  }
  return v;
}

bool IsNanBits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return (bits & 0x7FFFFFFFu) > 0x7F800000u;
}

// "" when the float32 arrays agree bit for bit, NaN matching any NaN unless `exact`.
std::string FloatDifference(const std::vector<uint8_t>& cpu, const std::vector<uint8_t>& dev,
                            bool exact) {
  if (cpu.size() != dev.size()) return "sizes differ";
  for (size_t i = 0; i + 4 <= cpu.size(); i += 4) {
    if (std::memcmp(&cpu[i], &dev[i], 4) == 0) continue;
    if (!exact && IsNanBits(&cpu[i]) && IsNanBits(&dev[i])) continue;
    uint32_t c, d;
    std::memcpy(&c, &cpu[i], 4);
    std::memcpy(&d, &dev[i], 4);
    return "value " + std::to_string(i / 4) + ": cpu bits " + std::to_string(c) + ", device " +
           std::to_string(d);
  }
  return "";
}

std::string ByteDifference(const std::vector<uint8_t>& cpu, const std::vector<uint8_t>& dev) {
  if (cpu.size() != dev.size()) return "sizes differ";
  for (size_t i = 0; i < cpu.size(); ++i)
    if (cpu[i] != dev[i])
      return "byte " + std::to_string(i) + " of " + std::to_string(cpu.size()) + ": cpu " +
             std::to_string(cpu[i]) + ", device " + std::to_string(dev[i]);
  return "";
}

// The device's encoding of x equals the CPU's; returns the CPU's encoding in *encoded.
std::string CheckEncode(DeviceRuntime& rt, const weftCompression& spec, const std::vector<float>& x,
                        std::vector<uint8_t>* encoded) {
  const size_t count = x.size(), bytes = weft::codec::EncodedBytes(spec, count);
  std::vector<float> src = x;
  encoded->assign(bytes, 0);
  size_t written = 0;
  Status s = weft::CpuEncode(weft::MemRef::Host(encoded->data(), bytes),
                             weft::MemRef::Host(src.data(), count * 4), count, spec,
                             kRoundingStream, &written);
  if (!s.ok()) return "cpu encode: " + s.message();
  DeviceBuffer dsrc(rt, count * 4), ddst(rt, bytes);
  if (s.ok()) s = dsrc.status();
  if (s.ok()) s = ddst.status();
  if (s.ok()) s = dsrc.Upload(Bytes(x));
  if (s.ok()) s = rt.LaunchEncode(ddst.ptr(), dsrc.ptr(), count, spec, kRoundingStream, nullptr);
  if (!s.ok()) return "device encode: " + s.message();
  std::vector<uint8_t> dev;
  std::string e = ddst.Download(&dev);
  if (e.empty()) e = ByteDifference(*encoded, dev);
  std::vector<uint8_t> src_after;
  if (e.empty()) e = dsrc.Download(&src_after);
  if (e.empty() && src_after != Bytes(x)) e = "the encode changed its source";
  return e.empty() ? "" : "encode: " + e;
}

// Decoding `encoded` on the device equals CpuDecode; decode-reduce into `base` equals
// CpuDecodeReduce for each op.
std::string CheckDecode(DeviceRuntime& rt, const weftCompression& spec, size_t count,
                        const std::vector<uint8_t>& encoded, const std::vector<float>& base,
                        const std::vector<weftRedOp_t>& ops) {
  const bool exact = std::string(rt.name()) == "emulated";
  std::vector<uint8_t> enc = encoded;
  std::vector<float> cpu(count, -7.0f);
  Status s = weft::CpuDecode(weft::MemRef::Host(cpu.data(), count * 4),
                             weft::MemRef::Host(enc.data(), enc.size()), count, spec);
  if (!s.ok()) return "cpu decode: " + s.message();
  DeviceBuffer dsrc(rt, enc.size()), ddst(rt, count * 4);
  if (s.ok()) s = dsrc.status();
  if (s.ok()) s = ddst.status();
  if (s.ok()) s = dsrc.Upload(enc);
  if (s.ok()) s = rt.LaunchDecode(ddst.ptr(), dsrc.ptr(), count, spec, nullptr);
  if (!s.ok()) return "device decode: " + s.message();
  std::vector<uint8_t> dev;
  std::string e = ddst.Download(&dev);
  if (e.empty()) e = FloatDifference(Bytes(cpu), dev, exact);
  if (!e.empty()) return "decode: " + e;
  for (weftRedOp_t op : ops) {
    std::vector<float> reduced = base;
    s = weft::CpuDecodeReduce(weft::MemRef::Host(reduced.data(), count * 4),
                              weft::MemRef::Host(enc.data(), enc.size()), count, spec, op);
    if (s.ok()) s = ddst.Upload(Bytes(base));
    if (s.ok()) s = rt.LaunchDecodeReduce(ddst.ptr(), dsrc.ptr(), count, spec, op, nullptr);
    if (!s.ok()) return "decode-reduce " + weft_test::OpName(op) + ": " + s.message();
    e = ddst.Download(&dev);
    if (e.empty()) e = FloatDifference(Bytes(reduced), dev, false);
    if (!e.empty()) return "decode-reduce " + weft_test::OpName(op) + ": " + e;
  }
  return "";
}

// Every check for one (spec, count, input).
std::string CheckCase(const weftCompression& spec, size_t count, Input in,
                      const std::vector<weftRedOp_t>& ops) {
  DeviceRuntime& rt = ActiveRuntime();
  const uint32_t seed = static_cast<uint32_t>(count * 31 + spec.codec * 7 + spec.block);
  const std::vector<float> x = Values(count, in, seed);
  std::vector<uint8_t> encoded;
  std::string e = CheckEncode(rt, spec, x, &encoded);
  const std::vector<float> base = Values(count, Input::kSpecials, seed + 1);  // decode-reduce's dst
  if (e.empty()) e = CheckDecode(rt, spec, count, encoded, base, ops);
  if (e.empty()) return "";
  return Describe(spec) + ", count " + std::to_string(count) + ", " + InputName(in) +
         " input: " + e;
}

// Counts 0, 1, odd, and a partial last block (for block codecs: 3 blocks and a bit).
std::vector<size_t> SmallCounts(const weftCompression& spec) {
  return {0, 1, 7, 3 * static_cast<size_t>(spec.block) + 5};
}

std::string CheckSpecs(const std::vector<weftCompression>& specs) {
  for (const auto& spec : specs)
    for (size_t count : SmallCounts(spec))
      for (Input in : {Input::kFinite, Input::kSpecials, Input::kTies}) {
        const std::string e = CheckCase(spec, count, in, weft_test::AllOps());
        if (!e.empty()) return e;
      }
  return "";
}

const weftCodec_t kBlockCodecs[] = {weftCodecFp8E4M3, weftCodecFp8E5M2, weftCodecInt8,
                                    weftCodecInt4, weftCodecSign1};

TEST(DeviceCodecs, CastsEqualCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    return CheckSpecs({Spec(weftCodecBf16, 256, 0), Spec(weftCodecFp16, 256, 0)});
  }), "");
}

TEST(DeviceCodecs, BlockCodecsEqualCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    std::vector<weftCompression> specs;
    for (weftCodec_t c : kBlockCodecs)
      for (uint32_t block : {1u, 33u, 256u}) specs.push_back(Spec(c, block, 0));
    for (weftCodec_t c : {weftCodecInt8, weftCodecInt4})
      for (uint32_t block : {1u, 33u, 256u})
        specs.push_back(Spec(c, block, WEFT_COMPRESS_STOCHASTIC));
    return CheckSpecs(specs);
  }), "");
}

TEST(DeviceCodecs, HadamardEqualsCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    std::vector<weftCompression> specs;
    for (weftCodec_t c : kBlockCodecs)
      for (uint32_t block : {1u, 32u, 512u})
        specs.push_back(Spec(c, block, WEFT_COMPRESS_HADAMARD));
    for (weftCodec_t c : {weftCodecInt8, weftCodecInt4})
      specs.push_back(Spec(c, 64, WEFT_COMPRESS_HADAMARD | WEFT_COMPRESS_STOCHASTIC));
    return CheckSpecs(specs);
  }), "");
}

TEST(DeviceCodecs, TopKEqualsCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    std::vector<weftCompression> specs;
    for (float ratio : {1e-6f, 0.01f, 0.3f, 1.0f})
      specs.push_back(Spec(weftCodecTopK, 64, 0, ratio));
    std::string e = CheckSpecs(specs);
    // Past the CPU's sampled-selection threshold (65536 values): its other path.
    for (size_t i = 0; e.empty() && i < specs.size(); ++i)
      for (Input in : {Input::kFinite, Input::kSpecials, Input::kTies})
        if (e.empty()) e = CheckCase(specs[i], 100003, in, {weftSum});
    return e;
  }), "");
}

// A few MiB per codec and flag combination (a partial last block included), decode-reduce as
// a sum (every op is covered by the small counts).
TEST(DeviceCodecs, SeveralMiBEqualCpuBitwise) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    const size_t count = (size_t{1} << 20) + 3;
    std::vector<weftCompression> specs = {Spec(weftCodecBf16, 256, 0), Spec(weftCodecFp16, 256, 0),
                                          Spec(weftCodecTopK, 64, 0, 0.01f)};
    for (weftCodec_t c : kBlockCodecs) {
      specs.push_back(Spec(c, 256, 0));
      specs.push_back(Spec(c, 1024, WEFT_COMPRESS_HADAMARD));
    }
    specs.push_back(Spec(weftCodecInt8, 128, WEFT_COMPRESS_STOCHASTIC));
    specs.push_back(Spec(weftCodecInt4, 4096, WEFT_COMPRESS_STOCHASTIC | WEFT_COMPRESS_HADAMARD));
    for (const auto& spec : specs) {
      const std::string e = CheckCase(spec, count, Input::kSpecials, {weftSum});
      if (!e.empty()) return e;
    }
    return std::string();
  }), "");
}

// "" when s is an InvalidArgument whose message holds `needle`.
std::string ExpectRefused(const char* what, const Status& s, const std::string& needle) {
  if (s.code() == weftInvalidArgument && s.message().find(needle) != std::string::npos) return "";
  return std::string(what) + ": expected an InvalidArgument naming \"" + needle + "\", got " +
         std::to_string(s.code()) + " \"" + s.message() + "\"";
}

TEST(DeviceCodecs, BadArgumentsAreRefusedNamingThem) {
  EXPECT_EQ(weft_test::InChild(kEmulated, [] {
    DeviceRuntime& rt = ActiveRuntime();
    const size_t count = 100;
    const weftCompression spec = Spec(weftCodecInt8, 32, 0);
    DeviceBuffer values(rt, count * 4 + 4), encoded(rt, weft::codec::EncodedBytes(spec, count));
    if (!values.status().ok()) return values.status().message();
    if (!encoded.status().ok()) return encoded.status().message();
    std::vector<float> host(count + 1, 1.0f);
    std::vector<uint8_t> host_encoded(weft::codec::EncodedBytes(spec, count));
    void* misaligned = static_cast<char*>(values.ptr()) + 2;
    weftCompression bad = spec;
    int codec_42 = 42;
    std::memcpy(&bad.codec, &codec_42, sizeof codec_42);
    weftCompression bad_block = spec;
    bad_block.block = 48;
    bad_block.flags = WEFT_COMPRESS_HADAMARD;
    // Each launch is refused before anything is queued, naming what is wrong.
    const struct {
      const char* what;
      Status status;
      const char* needle;
    } cases[] = {
        {"encode, host src",
         rt.LaunchEncode(encoded.ptr(), host.data(), count, spec, 0, nullptr), "src"},
        {"encode, host dst",
         rt.LaunchEncode(host_encoded.data(), values.ptr(), count, spec, 0, nullptr), "dst"},
        {"decode, host dst", rt.LaunchDecode(host.data(), encoded.ptr(), count, spec, nullptr),
         "dst"},
        {"decode, host src",
         rt.LaunchDecode(values.ptr(), host_encoded.data(), count, spec, nullptr), "src"},
        {"decode-reduce, host src",
         rt.LaunchDecodeReduce(values.ptr(), host_encoded.data(), count, spec, weftSum, nullptr),
         "src"},
        {"encode, misaligned src",
         rt.LaunchEncode(encoded.ptr(), misaligned, count, spec, 0, nullptr), "aligned"},
        {"encode, codec 42", rt.LaunchEncode(encoded.ptr(), values.ptr(), count, bad, 0, nullptr),
         "spec->codec=42"},
        {"decode, hadamard block 48",
         rt.LaunchDecode(values.ptr(), encoded.ptr(), count, bad_block, nullptr), "spec->block=48"},
        {"decode-reduce, op 42",
         rt.LaunchDecodeReduce(values.ptr(), encoded.ptr(), count, spec,
                               static_cast<weftRedOp_t>(42), nullptr),
         "42"},
    };
    for (const auto& c : cases) {
      const std::string e = ExpectRefused(c.what, c.status, c.needle);
      if (!e.empty()) return e;
    }
    // Nothing was queued by the refused launches: the stream is healthy and the guards intact.
    std::vector<uint8_t> after;
    std::string e = values.Download(&after);
    if (e.empty()) e = encoded.Download(&after);
    return e;
  }), "");
}

TEST(DeviceCodecs, NoneRuntimeRefusesTheLaunches) {
  EXPECT_EQ(weft_test::InChild({{"WEFT_DEVICE", "none"}}, [] {
    DeviceRuntime& rt = ActiveRuntime();
    const weftCompression spec = Spec(weftCodecInt8, 32, 0);
    std::vector<float> host(8, 1.0f);
    std::vector<uint8_t> encoded(weft::codec::EncodedBytes(spec, 8));
    const Status statuses[] = {
        rt.LaunchEncode(encoded.data(), host.data(), 8, spec, 0, nullptr),
        rt.LaunchDecode(host.data(), encoded.data(), 8, spec, nullptr),
        rt.LaunchDecodeReduce(host.data(), encoded.data(), 8, spec, weftSum, nullptr)};
    for (const Status& s : statuses)
      if (s.ok() || s.message().find("no device runtime") == std::string::npos)
        return "the none runtime ran a codec launch: " + s.message();
    return std::string();
  }), "");
}

}  // namespace
