// Translation of torch arguments into weft's: dtype and reduce-op mapping, and the checks that
// turn a bad tensor (wrong device, unsupported dtype, mismatched sizes) into a clear Python
// exception before anything reaches the wire. Also the one place weft result codes become
// C++ exceptions that pybind11 raises as Python exceptions carrying weft's message.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <weft/weft.h>

namespace weft_torch {

// weft's element type for a tensor dtype that reductions accept; throws TypeError naming the
// dtype and the collective when weft cannot reduce it.
weftDataType_t ReductionType(const at::Tensor& t, const char* collective);

// The weft reduction for a c10d ReduceOp. PREMUL_SUM maps to weftSum: the caller scales the
// input first (see PremulFactor). Throws ValueError for ops weft has no kernel for (bitwise).
weftRedOp_t ReductionOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* collective);

// True when op is PREMUL_SUM; factor receives the multiplier (a double or a 1-element tensor).
bool PremulFactor(const c10d::ReduceOp& op, at::Tensor* factor);

// The device of one call's tensors, checked as each tensor is added: every tensor defined,
// dense, on the CPU or on a CUDA device, and all on the same device. A CUDA tensor also needs
// weft's CUDA device runtime (weftDeviceRuntimeName() == "cuda"). Each failure is a ValueError
// naming the argument and the device found.
class CallDevice {
 public:
  explicit CallDevice(const char* collective) : collective_(collective) {}
  void Add(const at::Tensor& t, const std::string& argument);
  void AddAll(const std::vector<at::Tensor>& ts, const std::string& argument);
  // The device part of Add, with the runtime name given (Add passes weftDeviceRuntimeName();
  // the unit tests, which have no CUDA tensor to pass, call this through _C).
  void AddDevice(const at::Device& device, const std::string& argument, const std::string& runtime);
  // The CUDA device of the call, or none for host tensors (and calls without tensors).
  c10::optional<at::Device> CudaDevice() const;
  const char* collective() const { return collective_; }

 private:
  const char* collective_;
  c10::optional<at::Device> device_;
  std::string first_;  // the argument that fixed device_
};

// Exactly one tensor in a per-device list (c10d passes lists; weft runs one buffer per rank),
// added to dev.
void CheckSingleTensor(const std::vector<at::Tensor>& ts, CallDevice& dev,
                       const std::string& argument);

// Same dtype and number of elements as the reference; throws ValueError naming both.
void CheckSameShape(const at::Tensor& ref, const at::Tensor& t, const char* collective,
                    const std::string& argument);
void CheckSameDtype(const at::Tensor& ref, const at::Tensor& t, const char* collective,
                    const std::string& argument);
void CheckRoot(int64_t root, int size, const char* collective);

// Throws unless result is weftSuccess: ValueError for weftInvalidArgument, DistBackendError
// (torch.distributed.DistBackendError in Python) for everything else, with weft's own
// message from weftGetLastError (peer and step for remote errors and timeouts).
void CheckWeft(weftResult_t result, const char* call);

}  // namespace weft_torch
