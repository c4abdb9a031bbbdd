// Internal: the reduction loops as templates, instantiated once per instruction set.
//
// reduce_generic.cc includes this as is; reduce_avx2.cc includes it under
// `#pragma GCC target("avx2,f16c")` so the same source compiles to AVX2 code. Everything here
// has internal linkage (anonymous namespace) on purpose: were these ordinary inline templates,
// both translation units would emit the same mangled symbols and the linker would keep one
// copy for both, possibly the AVX2 one, which would then run on CPUs without AVX2.
//
// The loops are written for GCC's vectorizer: plain element-wise loops, `#pragma GCC ivdep`
// (dst may equal a or b exactly, which creates no loop-carried dependence), branch-free
// element operations, and O3 forced for this code because the project builds at -O2 where
// GCC 12 only vectorizes loops it needs no epilogue for. Callers must include every standard
// header this file uses before setting a target pragma (see reduce_avx2.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/reduce_table.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#define WEFT_IVDEP _Pragma("GCC ivdep")
#else
#define WEFT_IVDEP
#endif

namespace weft::kernels {
namespace {

// ---- storage <-> compute types ----
// Native types compute in themselves; fp16/bf16 are stored as uint16_t and compute in float.
template <typename T>
struct NativeTraits {
  using Storage = T;
  using Compute = T;
  static T Load(T x) { return x; }
  static T Store(T x) { return x; }
};

struct HalfTraits {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t x) { return HalfToFloat(x); }
  static uint16_t Store(float x) { return FloatToHalf(x); }
};

struct Bfloat16Traits {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t x) { return Bfloat16ToFloat(x); }
  static uint16_t Store(float x) { return FloatToBfloat16(x); }
};

// ---- element operations (the semantics of reduce.h, one place) ----
template <typename F>
F BitAnd(F a, F b) {
  using U = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  U ua, ub;
  std::memcpy(&ua, &a, sizeof a);
  std::memcpy(&ub, &b, sizeof b);
  ua &= ub;
  std::memcpy(&a, &ua, sizeof a);
  return a;
}

template <typename F>
F BitOr(F a, F b) {
  using U = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  U ua, ub;
  std::memcpy(&ua, &a, sizeof a);
  std::memcpy(&ub, &b, sizeof b);
  ua |= ub;
  std::memcpy(&a, &ua, sizeof a);
  return a;
}

template <typename T>
struct SumOp {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Unsigned arithmetic wraps by definition; the conversion back is modulo 2^bits (GCC
      // defines it so, and C++20 requires it).
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct ProdOp {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // For 8-bit types U promotes to int; 255 * 255 fits, and the cast truncates mod 2^8.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

template <typename T>
struct MaxOp {
  static T Apply(T a, T b) {
    T r = a > b ? a : b;
    if constexpr (std::is_floating_point_v<T>) {
      if (a == b) r = BitAnd(a, b);  // max(-0, +0) = +0; equal non-zero values have equal bits
      if (a != a) r = a;             // NaN propagates
      if (b != b) r = b;
    }
    return r;
  }
};

template <typename T>
struct MinOp {
  static T Apply(T a, T b) {
    T r = a < b ? a : b;
    if constexpr (std::is_floating_point_v<T>) {
      if (a == b) r = BitOr(a, b);  // min(-0, +0) = -0
      if (a != a) r = a;
      if (b != b) r = b;
    }
    return r;
  }
};

// ---- loops ----
template <typename Traits, template <typename> class Op>
void ReduceLoop(void* dst, const void* a, const void* b, size_t count) {
  using S = typename Traits::Storage;
  using C = typename Traits::Compute;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  WEFT_IVDEP
  for (size_t i = 0; i < count; ++i) {
    d[i] = Traits::Store(Op<C>::Apply(Traits::Load(x[i]), Traits::Load(y[i])));
  }
}

template <typename Traits>
void FinalizeAvgLoop(void* dst, size_t count, int divisor) {
  using S = typename Traits::Storage;
  using C = typename Traits::Compute;
  S* d = static_cast<S*>(dst);
  if constexpr (std::is_integral_v<C>) {
    // C++ integer division truncates toward zero. The divisor (>= 2, checked by Finalize) is
    // not narrowed to an 8-bit type (200 would become -56 as int8): 8-bit values divide as
    // int, wider ones in their own type, where any int >= 2 fits and INT_MIN / n cannot
    // overflow.
    using Wide = std::conditional_t<(sizeof(C) < sizeof(int)), int, C>;
    const Wide n = static_cast<Wide>(divisor);
    for (size_t i = 0; i < count; ++i) d[i] = static_cast<C>(static_cast<Wide>(d[i]) / n);
  } else {
    const C n = static_cast<C>(divisor);
    WEFT_IVDEP
    for (size_t i = 0; i < count; ++i) d[i] = Traits::Store(Traits::Load(d[i]) / n);
  }
}

template <typename Traits>
void FillRow(KernelTable& table, weftDataType_t dtype) {
  table.reduce[dtype][weftSum] = &ReduceLoop<Traits, SumOp>;
  table.reduce[dtype][weftProd] = &ReduceLoop<Traits, ProdOp>;
  table.reduce[dtype][weftMax] = &ReduceLoop<Traits, MaxOp>;
  table.reduce[dtype][weftMin] = &ReduceLoop<Traits, MinOp>;
  table.reduce[dtype][weftAvg] = &ReduceLoop<Traits, SumOp>;  // avg divides in Finalize
  table.finalize_avg[dtype] = &FinalizeAvgLoop<Traits>;
}

// The full table from the portable loops; an ISA variant may then replace rows.
KernelTable MakePortableTable(const char* isa) {
  KernelTable table;
  table.isa = isa;
  FillRow<NativeTraits<int8_t>>(table, weftInt8);
  FillRow<NativeTraits<uint8_t>>(table, weftUint8);
  FillRow<NativeTraits<int32_t>>(table, weftInt32);
  FillRow<NativeTraits<uint32_t>>(table, weftUint32);
  FillRow<NativeTraits<int64_t>>(table, weftInt64);
  FillRow<NativeTraits<uint64_t>>(table, weftUint64);
  FillRow<HalfTraits>(table, weftFloat16);
  FillRow<NativeTraits<float>>(table, weftFloat32);
  FillRow<NativeTraits<double>>(table, weftFloat64);
  FillRow<Bfloat16Traits>(table, weftBfloat16);
  return table;
}

}  // namespace
}  // namespace weft::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
