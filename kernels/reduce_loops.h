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

#include "kernels/element_ops.h"
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

// The element operations and storage traits are kernels/element_ops.h's, shared with the
// device kernels; this file only adds the loops GCC vectorizes.

// ---- loops ----
template <typename Traits, template <typename> class Op>
void ReduceLoop(void* dst, const void* a, const void* b, size_t count) {
  using S = typename Traits::Storage;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  WEFT_IVDEP
  for (size_t i = 0; i < count; ++i) d[i] = ApplyElement<Traits, Op>(x[i], y[i]);
}

template <typename Traits>
void FinalizeAvgLoop(void* dst, size_t count, int divisor) {
  using S = typename Traits::Storage;
  S* d = static_cast<S*>(dst);
  WEFT_IVDEP
  for (size_t i = 0; i < count; ++i) d[i] = AvgElement<Traits>(d[i], divisor);
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
