// The compressed allreduce behind weft_torch.hooks: weftAllReduceCompressed on one DDP bucket,
// queued on the backend's progress thread like any asynchronous collective (so it stays in
// order with the group's other operations and overlaps backward), with a residual the hook
// keeps per bucket (error feedback). Also CompressionSpec, weft's parser behind the hooks.
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

// CUDA tensors: weft's compressed collectives take device buffers, stream-ordered (weft stages
// them through pinned host memory itself: device data copied to host on the stream, the host
// codecs on the communicator's progress thread, results and residual copied back, in stream
// order), so the call is queued on the tensor's current stream like the other collectives.
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
    dev.Add(feedback, "residual");  // on the tensor's device
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
  const weftStream_t stream = p.WeftStream();
  // The lambda holds the tensors (and a copy of the spec), so they outlive the queued call.
  p.issue = [this, stream, tensor, feedback, dtype, op, compression = spec.spec()] {
    void* data = tensor.numel() ? tensor.data_ptr() : nullptr;
    float* res = feedback.defined() && feedback.numel() ? feedback.data_ptr<float>() : nullptr;
    CheckWeft(weftAllReduceCompressed(data, data, tensor.numel(), dtype, op, &compression, res,
                                      Comm(), stream),
              "weftAllReduceCompressed");
  };
  return Submit(std::move(p), /*async_op=*/true);
}

}  // namespace weft_torch
