// Argument translation and checks for the weft c10d backend (see tensor_args.h).
#include "tensor_args.h"

#include <c10/util/Exception.h>

#include <weft/weft_device.h>

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
  auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
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

void CallDevice::AddDevice(const at::Device& device, const std::string& argument,
                           const std::string& runtime) {
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda(), "weft ", collective_, ": ", argument,
                    " is on ", device, "; the weft backend handles CPU and CUDA tensors");
  if (device.is_cuda())
    TORCH_CHECK_VALUE(runtime == "cuda", "weft ", collective_, ": ", argument, " is on ",
                      device, " but weft's device runtime is \"", runtime,
                      "\", not \"cuda\"; set WEFT_DEVICE=cuda (with weft's CUDA plugin, "
                      "libweft-device-cuda.so, loadable) to run collectives on CUDA tensors");
  if (!device_) {
    device_ = device;
    first_ = argument;
    return;
  }
  TORCH_CHECK_VALUE(*device_ == device, "weft ", collective_, ": ", argument, " is on ", device,
                    " but ", first_, " is on ", *device_,
                    "; all tensors of one call must be on the same device");
}

void CallDevice::Add(const at::Tensor& t, const std::string& argument) {
  TORCH_CHECK_VALUE(t.defined(), "weft ", collective_, ": ", argument, " is an undefined tensor");
  AddDevice(t.device(), argument, t.is_cuda() ? weftDeviceRuntimeName() : "");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "weft ", collective_, ": ", argument,
                    " has layout ", t.layout(), "; only dense (strided) tensors are supported");
}

void CallDevice::AddAll(const std::vector<at::Tensor>& ts, const std::string& argument) {
  for (size_t i = 0; i < ts.size(); ++i) Add(ts[i], argument + "[" + std::to_string(i) + "]");
}

c10::optional<at::Device> CallDevice::CudaDevice() const {
  if (device_ && device_->is_cuda()) return device_;
  return c10::nullopt;
}

void CheckSingleTensor(const std::vector<at::Tensor>& ts, CallDevice& dev,
                       const std::string& argument) {
  TORCH_CHECK_VALUE(ts.size() == 1, "weft ", dev.collective(), ": ", argument,
                    " must hold exactly one tensor, got ", ts.size());
  dev.Add(ts[0], argument + "[0]");
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
