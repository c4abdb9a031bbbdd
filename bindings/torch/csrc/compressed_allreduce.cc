// The compressed allreduce behind weft_torch.hooks: weftAllReduceCompressed on one DDP bucket,
// queued on the backend's progress thread like any asynchronous collective (so it stays in
// order with the group's other operations and overlaps backward), with a residual the hook
// keeps per bucket (error feedback). Also CompressionSpec, weft's parser behind the hooks.
#include <memory>

#include <c10/core/Event.h>
#include <c10/util/Exception.h>

#include "compression_spec.h"
#include "tensor_args.h"
#include "weft_backend.h"

namespace weft_torch {

CompressionSpec::CompressionSpec(const std::string& text) : text_(text) {
  const weftResult_t result = weftCompressionParse(text.c_str(), &spec_);
  TORCH_CHECK_VALUE(result == weftSuccess, "weft compression spec \"", text,
                    "\" is not valid: ", weftGetLastError(nullptr));
}

size_t CompressionSpec::encodedBytes(size_t count) const {
  size_t bytes = 0;
  CheckWeft(weftCompressedSize(&spec_, count, &bytes), "weftCompressedSize");
  return bytes;
}

// A CUDA tensor is staged: weft's compressed path runs on host memory, so the bucket is copied
// into pinned host memory on the tensor's current stream, the progress thread waits for that
// copy, runs the host call and copies the result back on the same stream; the Work completes
// (on that stream) after the copy back. Correct, not zero-copy: two PCIe transfers per bucket.
c10::intrusive_ptr<c10d::Work> WeftBackend::allreduceCompressed(
    at::Tensor& tensor, const CompressionSpec& spec, const c10::optional<at::Tensor>& residual,
    bool average) {
  const char* name = "compressed all_reduce";
  CallDevice dev(name);
  dev.Add(tensor, "tensor");
  TORCH_CHECK_TYPE(tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kBFloat16,
                   "weft ", name, ": tensor has dtype ", tensor.scalar_type(),
                   "; compressed allreduce takes float32 or bfloat16 (weft_compress.h)");
  TORCH_CHECK_VALUE(tensor.is_contiguous(), "weft ", name,
                    ": tensor must be contiguous (a DDP bucket is)");
  at::Tensor feedback;
  if (residual.has_value() && residual->defined()) {
    feedback = *residual;
    CallDevice host(name);  // the residual is host memory even for a CUDA tensor
    host.Add(feedback, "residual");
    TORCH_CHECK_VALUE(feedback.device().is_cpu(), "weft ", name, ": residual is on ",
                      feedback.device(), "; it must be a CPU tensor (the compressed path runs "
                      "on host memory; CUDA tensors are staged through a pinned host copy)");
    TORCH_CHECK_TYPE(feedback.scalar_type() == at::kFloat, "weft ", name,
                     ": residual has dtype ", feedback.scalar_type(), ", expected Float");
    TORCH_CHECK_VALUE(feedback.is_contiguous() && feedback.numel() == tensor.numel(), "weft ",
                      name, ": residual has ", feedback.numel(),
                      " elements (contiguous: ", feedback.is_contiguous(), "), expected ",
                      tensor.numel(), " contiguous float32 values, one per tensor element");
  }
  const weftDataType_t dtype = tensor.scalar_type() == at::kFloat ? weftFloat32 : weftBfloat16;
  const weftRedOp_t op = average ? weftAvg : weftSum;
  PendingOp p = NewOp(dev, c10d::OpType::ALLREDUCE, {tensor}, std::chrono::milliseconds(-1));
  at::Tensor data = tensor;  // what weft reads and writes: the tensor, or its pinned host copy
  std::shared_ptr<c10::Event> staged;  // recorded after the copy into `data`
  if (p.stream) {
    p.host_staged = true;
    data = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
    data.copy_(tensor, /*non_blocking=*/true);  // on the current stream, p.stream
    staged = std::make_shared<c10::Event>(p.stream->device_type());
    staged->record(*p.stream);
    p.finish = [tensor, data] { const_cast<at::Tensor&>(tensor).copy_(data, /*non_blocking=*/true); };
  }
  // The lambda holds the tensors (and a copy of the spec), so they outlive the queued call.
  p.issue = [this, data, staged, feedback, dtype, op, compression = spec.spec()] {
    if (staged) staged->synchronize();
    void* ptr = data.numel() ? data.data_ptr() : nullptr;
    float* res = feedback.defined() && feedback.numel() ? feedback.data_ptr<float>() : nullptr;
    CheckWeft(weftAllReduceCompressed(ptr, ptr, data.numel(), dtype, op, &compression, res,
                                      Comm(), nullptr),
              "weftAllReduceCompressed");
  };
  return Submit(std::move(p), /*async_op=*/true);
}

}  // namespace weft_torch
