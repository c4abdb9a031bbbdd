// Microbenchmark of the compression codecs (kernels/codec.h) on one core, against memcpy.
//
// `float_GBps` is float32 data per second: the input of an encode, the output of a decode, the
// bytes copied for memcpy -- so codec / memcpy is the fraction of the copy bandwidth a codec
// reaches (issue 14's goal: >= 40% for every codec but top-k; top-k 1% of 64 MiB < 30 ms).
// Inputs: Gaussian values with one large outlier per 1000 (a gradient-like distribution; top-k's
// selection time depends on how many values share their top 15 bits). Sizes 256 KiB (cache)
// and 64 MiB (DRAM). The active kernel table (AVX2 when the CPU has it) unless WEFT_KERNEL_ISA.
//
// DecodeReduce is the fused decode-and-add of a contribution into a float32 sum (the owner's
// reduction); Feedback is error feedback's pass over an encoding (what it dropped, stored into
// the residual): "fused" is codec::DroppedIntoResidual, "unfused" the decode to a buffer and
// the subtraction after it that it replaced. DecodeAdd is codec::DecodeAddRange, the per-block
// fused decode-and-add (kernels/codec_reduce.h) of the block codecs without rotation, against
// DecodeReduce's tile path (decode 4096 values to a buffer, then kernels::Reduce).
// ReduceEncode is a chain's host reduce and top-k encode, in one pass or with the sum stored.
//
//   codec_bench --benchmark_filter='64M|memcpy' --benchmark_repetitions=3
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/memref.h"
#include "kernels/codec.h"
#include "kernels/codec_backend.h"
#include "kernels/codec_reduce.h"
#include "kernels/reduce.h"
#include "weft/weft_compress.h"

namespace {

constexpr int64_t kSmall = int64_t{256} << 10;
constexpr int64_t kLarge = int64_t{64} << 20;

std::vector<float> GradientLike(size_t count, uint32_t seed = 42) {
  std::vector<float> v(count);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) v[i] = normal(rng) * (i % 1000 == 7 ? 100.0f : 1.0f);
  return v;
}

weftCompression Parse(const char* text) {
  weftCompression spec;
  weftCompressionParse(text, &spec);
  return spec;
}

void Report(benchmark::State& state, int64_t float_bytes) {
  state.SetBytesProcessed(state.iterations() * float_bytes);
  state.counters["float_GBps"] = benchmark::Counter(
      static_cast<double>(float_bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  Report(state, static_cast<int64_t>(bytes));
}

void BM_Encode(benchmark::State& state, const char* codec) {
  const weftCompression spec = Parse(codec);
  const size_t count = static_cast<size_t>(state.range(0)) / 4;
  const std::vector<float> in = GradientLike(count);
  std::vector<uint8_t> out(weft::codec::EncodedBytes(spec, count) + 1, 0);
  for (auto _ : state) {
    weft::codec::Encode(spec, in.data(), count, out.data(), 0);
    benchmark::DoNotOptimize(out.data());
  }
  Report(state, state.range(0));
  state.counters["ratio"] = static_cast<double>(out.size() - 1) / static_cast<double>(count * 4);
}

// streamed: codec::DecodeValuesStreamed, a call's final decode into a large output.
void BM_Decode(benchmark::State& state, const char* codec, bool streamed) {
  const weftCompression spec = Parse(codec);
  const size_t count = static_cast<size_t>(state.range(0)) / 4;
  const std::vector<float> in = GradientLike(count);
  std::vector<uint8_t> encoded(weft::codec::EncodedBytes(spec, count) + 1, 0);
  weft::codec::Encode(spec, in.data(), count, encoded.data(), 0);
  std::vector<float> out(count, 0.0f);
  for (auto _ : state) {
    if (streamed) weft::codec::DecodeValuesStreamed(spec, encoded.data(), count, weftFloat32, out.data());
    else weft::codec::Decode(spec, encoded.data(), count, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  Report(state, state.range(0));
}

// The encoding of the benchmark's size of gradient-like values, and a float32 sum to reduce it
// into (DecodeReduce and DecodeAdd).
struct Contribution {
  weftCompression spec;
  size_t count;
  std::vector<uint8_t> encoded;
  std::vector<float> sum;
};
Contribution EncodedContribution(benchmark::State& state, const char* codec) {
  Contribution c{Parse(codec), static_cast<size_t>(state.range(0)) / 4, {}, {}};
  const std::vector<float> in = GradientLike(c.count);
  c.encoded.assign(weft::codec::EncodedBytes(c.spec, c.count), 0);
  weft::codec::Encode(c.spec, in.data(), c.count, c.encoded.data(), 0);
  c.sum.assign(c.count, 0.0f);
  return c;
}

void BM_DecodeReduce(benchmark::State& state, const char* codec) {
  Contribution c = EncodedContribution(state, codec);
  const weft::MemRef dst = weft::MemRef::Host(c.sum.data(), c.count * 4);
  const weft::MemRef src = weft::MemRef::Host(c.encoded.data(), c.encoded.size());
  for (auto _ : state) {
    if (!weft::CpuDecodeReduce(dst, src, c.count, c.spec, weftSum).ok())
      state.SkipWithError("decode-reduce failed");
    benchmark::DoNotOptimize(c.sum.data());
  }
  Report(state, state.range(0));
}

void BM_DecodeAdd(benchmark::State& state, const char* codec) {
  Contribution c = EncodedContribution(state, codec);
  float* sum = c.sum.data();
  for (auto _ : state) {
    if (!weft::codec::DecodeAddRange(c.spec, c.encoded.data(), c.count, 0, c.count, sum))
      state.SkipWithError("DecodeAddRange does not apply to this codec");
    benchmark::DoNotOptimize(sum);
  }
  Report(state, state.range(0));
}

void BM_Feedback(benchmark::State& state, const char* codec, bool fused) {
  const weftCompression spec = Parse(codec);
  const size_t count = static_cast<size_t>(state.range(0)) / 4;
  const std::vector<float> in = GradientLike(count);
  std::vector<uint8_t> encoded(weft::codec::EncodedBytes(spec, count), 0);
  weft::codec::Encode(spec, in.data(), count, encoded.data(), 0);
  std::vector<float> residual(count, 0.0f), decoded(fused ? 0 : count, 0.0f);
  for (auto _ : state) {
    if (fused) {
      weft::codec::DroppedIntoResidual(spec, encoded.data(), count, in.data(),
                                       weft::codec::Feedback::kStore, 1.0f, residual.data());
    } else {
      weft::codec::DecodeWithDropped(spec, encoded.data(), count, in.data(), decoded.data(),
                                     residual.data());
    }
    benchmark::DoNotOptimize(residual.data());
  }
  Report(state, state.range(0));
}

// The host reduce and top-k encode of a codec chain (exec/codec_chain.cc, untiled): "fused"
// is codec::EncodeOfSum, one pass that reads both operands and stores no sum; "stored" the
// float32 sum written (kernels::Reduce), then encoded. float_GBps counts one operand's bytes.
void BM_ReduceEncode(benchmark::State& state, const char* codec, bool fused) {
  const weftCompression spec = Parse(codec);
  const size_t count = static_cast<size_t>(state.range(0)) / 4;
  // Two ranks' gradients. (Not a's mirror image: its outliers at i % 1000 == 208 alias with the
  // selection's samples, every 1024th value at this size, so the sample misjudges and top-k
  // takes its radix path, fused or not.)
  const std::vector<float> a = GradientLike(count), b = GradientLike(count, 43);
  std::vector<float> sum(fused ? 0 : count);
  std::vector<uint8_t> out(weft::codec::EncodedBytes(spec, count), 0);
  if (fused && !weft::codec::EncodeOfSum(spec, a.data(), b.data(), count, out.data())) {
    state.SkipWithError("EncodeOfSum does not apply to this input");
    return;
  }
  for (auto _ : state) {
    if (fused) {
      weft::codec::EncodeOfSum(spec, a.data(), b.data(), count, out.data());
    } else {
      weft::kernels::Reduce(sum.data(), a.data(), b.data(), count, weftFloat32, weftSum);
      weft::codec::Encode(spec, sum.data(), count, out.data(), 0);
    }
    benchmark::DoNotOptimize(out.data());
  }
  Report(state, state.range(0));
}

#define WEFT_SIZES ->Arg(kSmall)->Arg(kLarge)->Arg(kLarge)->Unit(benchmark::kMillisecond)
#define WEFT_CODEC(name, text)                          \
  BENCHMARK_CAPTURE(BM_Encode, name, text) WEFT_SIZES; \
  BENCHMARK_CAPTURE(BM_Decode, name, text, false) WEFT_SIZES;    \
  BENCHMARK_CAPTURE(BM_Decode, name##_streamed, text, true) WEFT_SIZES; \
  BENCHMARK_CAPTURE(BM_DecodeReduce, name, text) WEFT_SIZES;     \
  BENCHMARK_CAPTURE(BM_Feedback, name##_fused, text, true) WEFT_SIZES; \
  BENCHMARK_CAPTURE(BM_Feedback, name##_unfused, text, false) WEFT_SIZES;

BENCHMARK(BM_Memcpy) WEFT_SIZES;
WEFT_CODEC(bf16, "bf16")
WEFT_CODEC(fp16, "fp16")
WEFT_CODEC(fp8e4m3, "fp8e4m3")
WEFT_CODEC(fp8e5m2, "fp8e5m2")
WEFT_CODEC(int8, "int8")
WEFT_CODEC(int4, "int4")
WEFT_CODEC(sign1, "sign1")
WEFT_CODEC(topk_1pct, "topk:0.01")
WEFT_CODEC(int8_stochastic, "int8:stochastic")
WEFT_CODEC(int4_hadamard, "int4:hadamard")
BENCHMARK_CAPTURE(BM_DecodeAdd, fp8e4m3, "fp8e4m3") WEFT_SIZES;
BENCHMARK_CAPTURE(BM_DecodeAdd, fp8e5m2, "fp8e5m2") WEFT_SIZES;
BENCHMARK_CAPTURE(BM_DecodeAdd, int8, "int8") WEFT_SIZES;
BENCHMARK_CAPTURE(BM_DecodeAdd, int4, "int4") WEFT_SIZES;
BENCHMARK_CAPTURE(BM_DecodeAdd, sign1, "sign1") WEFT_SIZES;
BENCHMARK_CAPTURE(BM_ReduceEncode, topk_1pct_fused, "topk:0.01", true)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReduceEncode, topk_1pct_stored, "topk:0.01", false)->Arg(kLarge)->Unit(benchmark::kMillisecond);

}  // namespace
