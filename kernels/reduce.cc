// The one dispatch point for CPU reductions: picks the kernel table once (AVX2+F16C when the
// CPU has it, else the baseline; WEFT_KERNEL_ISA=generic|avx2 overrides) and indexes it by
// (dtype, op). Also Copy.
#include "kernels/reduce.h"

#include <cstdlib>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/reduce_table.h"

namespace weft::kernels {

namespace {

const KernelTable& ChooseTable() {
  const KernelTable* avx2 = Avx2KernelTable();
  const char* forced = std::getenv("WEFT_KERNEL_ISA");
  // An unknown value or an unavailable ISA falls back to the default choice rather than
  // failing: this knob is for testing and measurements, never needed for correctness.
  if (forced != nullptr && std::strcmp(forced, "generic") == 0) return GenericKernelTable();
  if (avx2 != nullptr) return *avx2;
  return GenericKernelTable();
}

}  // namespace

const KernelTable& ActiveKernelTable() {
  static const KernelTable& table = ChooseTable();
  return table;
}

const char* KernelIsaName() { return ActiveKernelTable().isa; }

ReduceFn GetReduceFn(weftDataType_t dtype, weftRedOp_t op) {
  if (!IsValidDataType(dtype) || !IsValidRedOp(op)) return nullptr;
  return ActiveKernelTable().reduce[dtype][op];
}

void Reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
            weftRedOp_t op) {
  if (count == 0) return;
  ReduceFn fn = GetReduceFn(dtype, op);
  if (fn != nullptr) fn(dst, a, b, count);
}

void Finalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op, int divisor) {
  if (op != weftAvg || divisor <= 1 || count == 0 || !IsValidDataType(dtype)) return;
  ActiveKernelTable().finalize_avg[dtype](dst, count, divisor);
}

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  // glibc's memcpy already switches to non-temporal stores above a cache-size-derived
  // threshold; a hand-written streaming copy measured no faster here (perf/RESULTS.md).
  std::memcpy(dst, src, bytes);
}

}  // namespace weft::kernels
