// The element operations of every reduction, avg's finalize and the floating casts, defined
// once for both compilers (kernels/host_device.h): the CPU backend (reduce_loops.h, and the
// scalar semantics behind reduce_avx2.cc's vector paths), the CUDA kernels (reduce.cu, in the
// cuda device plugin) and the emulated GPU's kernels all instantiate these templates, so the
// three agree bit for bit by construction (tests/device_kernels_test.cc checks it). The
// user-visible semantics are documented in kernels/reduce.h.
//
// Internal linkage on purpose (anonymous namespace), as reduce_loops.h explains: a file that
// compiles this header under an AVX2 target pragma must not share its inline symbols with the
// baseline build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/host_device.h"
#include "weft/weft.h"

namespace weft::kernels {
namespace {

// ---- bit patterns (exact on both compilers) ----
WEFT_HOST_DEVICE inline uint64_t DoubleBits(double d) { return BitCast<uint64_t>(d); }
WEFT_HOST_DEVICE inline double DoubleFromBits(uint64_t u) { return BitCast<double>(u); }

WEFT_HOST_DEVICE inline float BitAnd(float a, float b) { return FloatFromBits(FloatBits(a) & FloatBits(b)); }
WEFT_HOST_DEVICE inline float BitOr(float a, float b) { return FloatFromBits(FloatBits(a) | FloatBits(b)); }
WEFT_HOST_DEVICE inline double BitAnd(double a, double b) { return DoubleFromBits(DoubleBits(a) & DoubleBits(b)); }
WEFT_HOST_DEVICE inline double BitOr(double a, double b) { return DoubleFromBits(DoubleBits(a) | DoubleBits(b)); }

// ---- storage <-> compute types ----
// Native types compute in themselves; fp16/bf16 are stored as uint16_t and compute in float.
template <typename T>
struct NativeTraits {
  using Storage = T;
  using Compute = T;
  WEFT_HOST_DEVICE static T Load(T x) { return x; }
  WEFT_HOST_DEVICE static T Store(T x) { return x; }
};

struct HalfTraits {
  using Storage = uint16_t;
  using Compute = float;
  WEFT_HOST_DEVICE static float Load(uint16_t x) { return HalfToFloat(x); }
  WEFT_HOST_DEVICE static uint16_t Store(float x) { return FloatToHalf(x); }
};

struct Bfloat16Traits {
  using Storage = uint16_t;
  using Compute = float;
  WEFT_HOST_DEVICE static float Load(uint16_t x) { return Bfloat16ToFloat(x); }
  WEFT_HOST_DEVICE static uint16_t Store(float x) { return FloatToBfloat16(x); }
};

// ---- element operations (the semantics of reduce.h) ----
template <typename T>
struct SumOp {
  WEFT_HOST_DEVICE static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Unsigned arithmetic wraps by definition; the conversion back is modulo 2^bits (GCC and
      // nvcc define it so, and C++20 requires it).
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct ProdOp {
  WEFT_HOST_DEVICE static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // For 8-bit types U promotes to int; 255 * 255 fits, and the cast truncates mod 2^8.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// Not fmax/fmin: those return the non-NaN operand; weft propagates NaN and orders -0 < +0.
template <typename T>
struct MaxOp {
  WEFT_HOST_DEVICE static T Apply(T a, T b) {
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
  WEFT_HOST_DEVICE static T Apply(T a, T b) {
    T r = a < b ? a : b;
    if constexpr (std::is_floating_point_v<T>) {
      if (a == b) r = BitOr(a, b);  // min(-0, +0) = -0
      if (a != a) r = a;
      if (b != b) r = b;
    }
    return r;
  }
};

// One element of dst = a (op) b: load to the compute type, apply, round once.
template <typename Traits, template <typename> class Op>
WEFT_HOST_DEVICE inline typename Traits::Storage ApplyElement(typename Traits::Storage x,
                                                              typename Traits::Storage y) {
  using C = typename Traits::Compute;
  return Traits::Store(Op<C>::Apply(Traits::Load(x), Traits::Load(y)));
}

// One element of avg's finalize: x / divisor (divisor >= 2).
template <typename Traits>
WEFT_HOST_DEVICE inline typename Traits::Storage AvgElement(typename Traits::Storage x,
                                                            int divisor) {
  using C = typename Traits::Compute;
  if constexpr (std::is_integral_v<C>) {
    // C++ integer division truncates toward zero. The divisor is not narrowed to an 8-bit type
    // (200 would become -56 as int8): 8-bit values divide as int, wider ones in their own type,
    // where any int >= 2 fits and INT_MIN / n cannot overflow.
    using Wide = std::conditional_t<(sizeof(C) < sizeof(int)), int, C>;
    return static_cast<C>(static_cast<Wide>(x) / static_cast<Wide>(divisor));
  } else {
    return Traits::Store(Traits::Load(x) / static_cast<C>(divisor));
  }
}

// ---- casts between the floating types (KernelBackend::Cast) ----
WEFT_HOST_DEVICE inline bool IsFloatingType(weftDataType_t t) {
  return t == weftFloat16 || t == weftBfloat16 || t == weftFloat32 || t == weftFloat64;
}

// Element i of a floating-type array, exactly, as double.
WEFT_HOST_DEVICE inline double CastLoad(weftDataType_t t, const void* p, size_t i) {
  switch (t) {
    case weftFloat16: return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case weftBfloat16: return Bfloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case weftFloat32: return static_cast<const float*>(p)[i];
    default: return static_cast<const double*>(p)[i];
  }
}

// Stores v rounded to nearest even; float16/bfloat16 round through float32.
WEFT_HOST_DEVICE inline void CastStore(weftDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case weftFloat16: static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v)); break;
    case weftBfloat16: static_cast<uint16_t*>(p)[i] = FloatToBfloat16(static_cast<float>(v)); break;
    case weftFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    default: static_cast<double*>(p)[i] = v; break;
  }
}

// ---- kernel bodies: elements first, first + stride, ... below count ----
// A CUDA kernel passes its global thread index and the grid's size; the emulated GPU runs the
// whole range on its stream thread (first 0, stride 1). Same source, same bits.
template <typename Traits, template <typename> class Op>
WEFT_HOST_DEVICE void ReduceBody(typename Traits::Storage* d, const typename Traits::Storage* x,
                                 const typename Traits::Storage* y, size_t first, size_t count,
                                 size_t stride) {
  for (size_t i = first; i < count; i += stride) d[i] = ApplyElement<Traits, Op>(x[i], y[i]);
}

template <typename Traits>
WEFT_HOST_DEVICE void AvgBody(typename Traits::Storage* d, int divisor, size_t first,
                              size_t count, size_t stride) {
  for (size_t i = first; i < count; i += stride) d[i] = AvgElement<Traits>(d[i], divisor);
}

WEFT_HOST_DEVICE inline void CastBody(void* dst, weftDataType_t dst_type, const void* src,
                                      weftDataType_t src_type, size_t first, size_t count,
                                      size_t stride) {
  for (size_t i = first; i < count; i += stride) {
    CastStore(dst_type, dst, i, CastLoad(src_type, src, i));
  }
}

// Calls f.template operator()<Traits>() with the traits of dtype; false for an invalid or
// reserved dtype. Host-side dispatch (the kernels themselves are instantiated per traits).
template <typename F>
bool WithTraits(weftDataType_t dtype, F&& f) {
  switch (dtype) {
    case weftInt8: f(NativeTraits<int8_t>{}); return true;
    case weftUint8: f(NativeTraits<uint8_t>{}); return true;
    case weftInt32: f(NativeTraits<int32_t>{}); return true;
    case weftUint32: f(NativeTraits<uint32_t>{}); return true;
    case weftInt64: f(NativeTraits<int64_t>{}); return true;
    case weftUint64: f(NativeTraits<uint64_t>{}); return true;
    case weftFloat16: f(HalfTraits{}); return true;
    case weftFloat32: f(NativeTraits<float>{}); return true;
    case weftFloat64: f(NativeTraits<double>{}); return true;
    case weftBfloat16: f(Bfloat16Traits{}); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace weft::kernels
