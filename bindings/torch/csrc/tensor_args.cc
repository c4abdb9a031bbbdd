// Argument translation and checks for the weft c10d backend (see tensor_args.h).
#include "tensor_args.h"

#include <c10/util/Exception.h>

namespace weft_torch {

weftDataType_t ReductionType(const at::Tensor& t, const char* collective) {
  switch (t.scalar_type()) {
    case at::kFloat: return weftFloat32;
    case at::kDouble: return weftFloat64;
    case at::kBFloat16: return weftBfloat16;
    case at::kHalf: return weftFloat16;
    case at::kLong: return weftInt64;
    case at::kInt: return weftInt32;
    case at::kChar: return weftInt8;
    case at::kByte: return weftUint8;
    case at::kUInt32: return weftUint32;
    case at::kUInt64: return weftUint64;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "weft ", collective, ": dtype ", t.scalar_type(),
                   " is not supported by weft reductions (supported: float32, float64, "
                   "bfloat16, float16, int64, int32, int8, uint8, uint32, uint64; complex "
                   "tensors are reduced as their real view by torch.distributed)");
}

bool PremulFactor(const c10d::ReduceOp& op, at::Tensor* factor) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return false;
  auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK_VALUE(supplement != nullptr, "weft: PREMUL_SUM without its factor");
  if (supplement->tensor_factor.defined())
    *factor = supplement->tensor_factor.cpu();
  else
    *factor = at::scalar_tensor(supplement->double_factor, at::kDouble);
  return true;
}

weftRedOp_t ReductionOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* collective) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return weftSum;
    case c10d::ReduceOp::AVG: return weftAvg;
    case c10d::ReduceOp::PRODUCT: return weftProd;
    case c10d::ReduceOp::MIN: return weftMin;
    case c10d::ReduceOp::MAX: return weftMax;
    case c10d::ReduceOp::PREMUL_SUM:
      // sum(factor * x_r): the backend scales this rank's input, weft sums.
      TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "weft ", collective,
                        ": PREMUL_SUM needs a floating-point tensor, got ", t.scalar_type());
      return weftSum;
    default: break;
  }
  TORCH_CHECK_VALUE(false, "weft ", collective, ": reduce op ", static_cast<int>(op.op_),
                    " (bitwise AND/OR/XOR) is not supported; weft reduces with SUM, AVG, "
                    "PRODUCT, MIN, MAX and PREMUL_SUM");
}

void CheckHostTensor(const at::Tensor& t, const char* collective, const std::string& argument) {
  TORCH_CHECK_VALUE(t.defined(), "weft ", collective, ": ", argument, " is an undefined tensor");
  if (t.is_cuda())
    TORCH_CHECK_VALUE(false, "weft ", collective, ": ", argument, " is on ", t.device(),
                      "; the weft backend handles CPU tensors only until weft's GPU path "
                      "lands (use backend=\"cpu:weft,cuda:nccl\" for CUDA tensors)");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "weft ", collective, ": ", argument, " is on ",
                    t.device(), "; the weft backend handles CPU tensors only");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "weft ", collective, ": ", argument,
                    " has layout ", t.layout(), "; only dense (strided) tensors are supported");
}

void CheckHostTensors(const std::vector<at::Tensor>& ts, const char* collective,
                      const std::string& argument) {
  for (size_t i = 0; i < ts.size(); ++i)
    CheckHostTensor(ts[i], collective, argument + "[" + std::to_string(i) + "]");
}

void CheckSingleTensor(const std::vector<at::Tensor>& ts, const char* collective,
                       const std::string& argument) {
  TORCH_CHECK_VALUE(ts.size() == 1, "weft ", collective, ": ", argument,
                    " must hold exactly one tensor, got ", ts.size());
  CheckHostTensor(ts[0], collective, argument + "[0]");
}

void CheckSameDtype(const at::Tensor& ref, const at::Tensor& t, const char* collective,
                    const std::string& argument) {
  TORCH_CHECK_TYPE(ref.scalar_type() == t.scalar_type(), "weft ", collective, ": ", argument,
                   " has dtype ", t.scalar_type(), ", expected ", ref.scalar_type());
}

void CheckSameShape(const at::Tensor& ref, const at::Tensor& t, const char* collective,
                    const std::string& argument) {
  CheckSameDtype(ref, t, collective, argument);
  TORCH_CHECK_VALUE(ref.numel() == t.numel(), "weft ", collective, ": ", argument, " has ",
                    t.numel(), " elements (shape ", t.sizes(), "), expected ", ref.numel(),
                    " (shape ", ref.sizes(), ")");
}

void CheckRoot(int64_t root, int size, const char* collective) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "weft ", collective, ": root rank ", root,
                    " is outside [0, ", size, ")");
}

void CheckWeft(weftResult_t result, const char* call) {
  if (result == weftSuccess) return;
  std::string message = std::string("weft ") + call + " failed (" +
                        weftGetErrorString(result) + "): " + weftGetLastError(nullptr);
  if (result == weftInvalidArgument) TORCH_CHECK_VALUE(false, message);
  C10_THROW_ERROR(DistBackendError, message);
}

}  // namespace weft_torch
