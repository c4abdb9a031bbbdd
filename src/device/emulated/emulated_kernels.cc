#include "device/emulated/emulated_kernels.h"

#include "kernels/element_ops.h"

namespace weft::device::emulated {

using kernels::MaxOp;
using kernels::MinOp;
using kernels::ProdOp;
using kernels::SumOp;

bool RunReduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
               weftRedOp_t op) {
  bool op_ok = true;
  const bool type_ok = kernels::WithTraits(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    using S = typename Traits::Storage;
    auto* d = static_cast<S*>(dst);
    const auto* x = static_cast<const S*>(a);
    const auto* y = static_cast<const S*>(b);
    switch (op) {
      case weftSum:
      case weftAvg: kernels::ReduceBody<Traits, SumOp>(d, x, y, 0, count, 1); break;
      case weftProd: kernels::ReduceBody<Traits, ProdOp>(d, x, y, 0, count, 1); break;
      case weftMax: kernels::ReduceBody<Traits, MaxOp>(d, x, y, 0, count, 1); break;
      case weftMin: kernels::ReduceBody<Traits, MinOp>(d, x, y, 0, count, 1); break;
      default: op_ok = false;
    }
  });
  return type_ok && op_ok;
}

bool RunFinalizeAvg(void* dst, size_t count, weftDataType_t dtype, int divisor) {
  return kernels::WithTraits(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    kernels::AvgBody<Traits>(static_cast<typename Traits::Storage*>(dst), divisor, 0, count, 1);
  });
}

void RunCast(void* dst, weftDataType_t dst_type, const void* src, weftDataType_t src_type,
             size_t count) {
  kernels::CastBody(dst, dst_type, src, src_type, 0, count, 1);
}

}  // namespace weft::device::emulated
