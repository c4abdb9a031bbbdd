// The AVX2 + F16C kernel table: reduce_loops.h compiled with `target("avx2,f16c")`, plus
// hand-written F16C loops for float16 (the vectorizer does not turn the integer fp16
// conversion into vcvtph2ps/vcvtps2ph by itself). Selected at startup when the CPU has both
// extensions; other architectures compile this file to a stub returning nullptr.
//
// Every header that reduce_loops.h (transitively) includes is included *before* the target
// pragma: inline functions defined under the pragma would be AVX2 code, and the linker could
// pick that copy for the generic table's callers too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/reduce_table.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define WEFT_KERNELS_AVX2 1
#include <immintrin.h>
#endif

#if WEFT_KERNELS_AVX2
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#include "kernels/reduce_loops.h"

namespace weft::kernels {
namespace {

// ---- vector element operations on 8 floats: the same semantics as reduce_loops.h ----
struct VectorSum {
  static __m256 Apply(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
};
struct VectorProd {
  static __m256 Apply(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
};
struct VectorMax {
  static __m256 Apply(__m256 a, __m256 b) {
    __m256 r = _mm256_max_ps(a, b);  // returns b when a is NaN or a == b
    r = _mm256_blendv_ps(r, _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));  // +0 wins
    return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));  // a NaN propagates
  }
};
struct VectorMin {
  static __m256 Apply(__m256 a, __m256 b) {
    __m256 r = _mm256_min_ps(a, b);
    r = _mm256_blendv_ps(r, _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));  // -0 wins
    return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};

// float16: 16 elements per iteration (two independent conversion chains keep the F16C units
// busy), rounding once to nearest even per result as the scalar tail does.
template <typename VectorOp, template <typename> class ScalarOp>
void ReduceHalfF16c(void* dst, const void* a, const void* b, size_t count) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    // Load everything before storing: with dst == a or dst == b the stores must not be seen
    // by this iteration's loads (they are not: all loads come first).
    const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 x1 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8)));
    const __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    const __m256 y1 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(VectorOp::Apply(x0, y0), kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 8),
                     _mm256_cvtps_ph(VectorOp::Apply(x1, y1), kRound));
  }
  for (; i + 8 <= count; i += 8) {
    const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(VectorOp::Apply(x0, y0), kRound));
  }
  for (; i < count; ++i) {
    d[i] = FloatToHalf(ScalarOp<float>::Apply(HalfToFloat(x[i]), HalfToFloat(y[i])));
  }
}

void FinalizeAvgHalfF16c(void* dst, size_t count, int divisor) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const float n = static_cast<float>(divisor);
  const __m256 vn = _mm256_set1_ps(n);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i* p = reinterpret_cast<__m128i*>(d + i);
    _mm_storeu_si128(p, _mm256_cvtps_ph(_mm256_div_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), vn),
                                        kRound));
  }
  for (; i < count; ++i) d[i] = FloatToHalf(HalfToFloat(d[i]) / n);
}

KernelTable MakeAvx2Table() {
  KernelTable table = MakePortableTable("avx2");
  table.reduce[weftFloat16][weftSum] = &ReduceHalfF16c<VectorSum, SumOp>;
  table.reduce[weftFloat16][weftProd] = &ReduceHalfF16c<VectorProd, ProdOp>;
  table.reduce[weftFloat16][weftMax] = &ReduceHalfF16c<VectorMax, MaxOp>;
  table.reduce[weftFloat16][weftMin] = &ReduceHalfF16c<VectorMin, MinOp>;
  table.reduce[weftFloat16][weftAvg] = &ReduceHalfF16c<VectorSum, SumOp>;
  table.finalize_avg[weftFloat16] = &FinalizeAvgHalfF16c;
  return table;
}

}  // namespace
}  // namespace weft::kernels
#pragma GCC pop_options
#endif  // WEFT_KERNELS_AVX2

namespace weft::kernels {

const KernelTable* Avx2KernelTable() {
#if WEFT_KERNELS_AVX2
  // Built only after the CPU check: constructing the table runs no AVX2 code, but keeping the
  // order obvious costs nothing.
  static const bool supported =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (!supported) return nullptr;
  static const KernelTable table = MakeAvx2Table();
  return &table;
#else
  return nullptr;
#endif
}

}  // namespace weft::kernels
