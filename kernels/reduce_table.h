// Internal: the (dtype, op) -> kernel tables behind kernels/reduce.h.
//
// Each instruction-set variant (reduce_generic.cc, reduce_avx2.cc) fills one KernelTable from
// the templates in reduce_loops.h; reduce.cc picks one at startup. Tests and benchmarks use
// these declarations to run every variant the CPU supports, not only the selected one.
#pragma once

#include <cstddef>

#include "kernels/reduce.h"
#include "weft/weft.h"

namespace weft::kernels {

// Divides count elements in place by divisor (>= 2): the avg finalization for one dtype.
using FinalizeFn = void (*)(void* dst, size_t count, int divisor);

struct KernelTable {
  const char* isa = "";
  ReduceFn reduce[weftNumTypes][weftNumOps] = {};  // nullptr for reserved types
  FinalizeFn finalize_avg[weftNumTypes] = {};
};

// Baseline x86-64 (SSE2) or whatever the target's default is; always available.
const KernelTable& GenericKernelTable();
// AVX2 + F16C variant, or nullptr when this build or this CPU lacks it.
const KernelTable* Avx2KernelTable();
// The table Reduce/Finalize use (honours WEFT_KERNEL_ISA).
const KernelTable& ActiveKernelTable();

}  // namespace weft::kernels
