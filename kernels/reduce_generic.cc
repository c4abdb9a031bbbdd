// The baseline kernel table: reduce_loops.h compiled for the target's default instruction set
// (SSE2 on x86-64). Always available; used on CPUs without AVX2/F16C or when
// WEFT_KERNEL_ISA=generic.
#include "kernels/reduce_loops.h"

namespace weft::kernels {

const KernelTable& GenericKernelTable() {
  static const KernelTable table = MakePortableTable("generic");
  return table;
}

}  // namespace weft::kernels
