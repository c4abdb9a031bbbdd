// Microbenchmark of the CPU reduction kernels (kernels/reduce.h) against memcpy.
//
// Reports memory traffic per second (bytes_per_second = bytes read + bytes written: 3x the
// buffer for out-of-place reduce, 2x for memcpy/Copy), so a kernel running at memory bandwidth
// shows about the same figure as memcpy. `buffer_GBps` is the size of one operand per second.
// Sizes: 256 KiB (in L2) and 64 MiB (DRAM). The kernel table is the active one (AVX2+F16C when
// available) unless the name says generic.
//
//   reduce_bench --benchmark_filter='float32|memcpy' --benchmark_repetitions=5
#include <cstdint>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/reduce.h"
#include "kernels/reduce_table.h"

namespace {

constexpr int64_t kSmall = int64_t{256} << 10;
constexpr int64_t kLarge = int64_t{64} << 20;

// Buffers with finite, non-trivial contents (so fp16/bf16 do real conversions, not zeros) and
// all pages touched before timing.
std::vector<uint8_t> MakeBuffer(weftDataType_t dtype, size_t bytes, int seed) {
  std::vector<uint8_t> buf(bytes);
  const size_t size = weft::TypeSize(dtype);
  for (size_t i = 0; i + size <= bytes; i += size) {
    const float v = static_cast<float>((i / size + seed) % 61) * 0.25f - 7.0f;
    if (dtype == weftFloat16) {
      const uint16_t h = weft::FloatToHalf(v);
      std::memcpy(&buf[i], &h, 2);
    } else if (dtype == weftBfloat16) {
      const uint16_t h = weft::FloatToBfloat16(v);
      std::memcpy(&buf[i], &h, 2);
    } else if (dtype == weftFloat32) {
      std::memcpy(&buf[i], &v, 4);
    } else if (dtype == weftFloat64) {
      const double d = v;
      std::memcpy(&buf[i], &d, 8);
    } else {
      const uint64_t x = (i / size) * 2654435761u + static_cast<uint64_t>(seed);
      std::memcpy(&buf[i], &x, size);
    }
  }
  return buf;
}

void SetRates(benchmark::State& state, int64_t buffer_bytes, int traffic_multiple) {
  state.SetBytesProcessed(state.iterations() * buffer_bytes * traffic_multiple);
  state.counters["buffer_GBps"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(buffer_bytes) / 1e9,
      benchmark::Counter::kIsRate);
}

// dst = a (op) b, out of place.
void BM_Reduce(benchmark::State& state, weftDataType_t dtype, weftRedOp_t op, bool generic) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / weft::TypeSize(dtype);
  auto a = MakeBuffer(dtype, bytes, 1), b = MakeBuffer(dtype, bytes, 2);
  auto d = MakeBuffer(dtype, bytes, 3);
  const weft::kernels::ReduceFn fn =
      generic ? weft::kernels::GenericKernelTable().reduce[dtype][op]
              : weft::kernels::GetReduceFn(dtype, op);
  state.SetLabel(generic ? "generic" : weft::kernels::KernelIsaName());
  for (auto _ : state) {
    fn(d.data(), a.data(), b.data(), count);
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, static_cast<int64_t>(bytes), 3);
}

// dst = dst (op) b: the in-place form a ring's recv-reduce uses.
void BM_ReduceInPlace(benchmark::State& state, weftDataType_t dtype, weftRedOp_t op) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / weft::TypeSize(dtype);
  auto d = MakeBuffer(dtype, bytes, 1), b = MakeBuffer(dtype, bytes, 2);
  state.SetLabel(weft::kernels::KernelIsaName());
  for (auto _ : state) {
    // max keeps the values bounded over many iterations; sum of fp values grows but stays
    // finite for the benchmark's duration (and speed does not depend on the values).
    weft::kernels::Reduce(d.data(), d.data(), b.data(), count, dtype, op);
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, static_cast<int64_t>(bytes), 3);
}

void BM_Finalize(benchmark::State& state, weftDataType_t dtype) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / weft::TypeSize(dtype);
  auto d = MakeBuffer(dtype, bytes, 1);
  for (auto _ : state) {
    weft::kernels::Finalize(d.data(), count, dtype, weftAvg, 3);
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, static_cast<int64_t>(bytes), 2);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto s = MakeBuffer(weftUint8, bytes, 1), d = MakeBuffer(weftUint8, bytes, 2);
  for (auto _ : state) {
    std::memcpy(d.data(), s.data(), bytes);
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, static_cast<int64_t>(bytes), 2);
}

void BM_Copy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto s = MakeBuffer(weftUint8, bytes, 1), d = MakeBuffer(weftUint8, bytes, 2);
  for (auto _ : state) {
    weft::kernels::Copy(d.data(), s.data(), bytes);
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, static_cast<int64_t>(bytes), 2);
}

}  // namespace

#define WEFT_SIZES ->Arg(kSmall)->Arg(kLarge)

BENCHMARK(BM_Memcpy) WEFT_SIZES;
BENCHMARK(BM_Copy) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, float32_sum, weftFloat32, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, bfloat16_sum, weftBfloat16, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, float16_sum, weftFloat16, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, int32_sum, weftInt32, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, float64_sum, weftFloat64, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, int64_sum, weftInt64, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, int8_sum, weftInt8, weftSum, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, float32_max, weftFloat32, weftMax, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, bfloat16_max, weftBfloat16, weftMax, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, float16_max, weftFloat16, weftMax, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, float32_prod, weftFloat32, weftProd, false) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, generic_float32_sum, weftFloat32, weftSum, true) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, generic_bfloat16_sum, weftBfloat16, weftSum, true) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Reduce, generic_float16_sum, weftFloat16, weftSum, true) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_ReduceInPlace, float32_sum, weftFloat32, weftSum) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_ReduceInPlace, bfloat16_sum, weftBfloat16, weftSum) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Finalize, float32_avg, weftFloat32) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Finalize, bfloat16_avg, weftBfloat16) WEFT_SIZES;
BENCHMARK_CAPTURE(BM_Finalize, int32_avg, weftInt32) WEFT_SIZES;
