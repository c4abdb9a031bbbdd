// The collectives of the weft c10d backend: each checks its tensors on the caller's thread,
// then builds a PendingOp whose `issue` makes the weft call(s) and whose `finish` copies out of
// staging buffers. Data-movement collectives move bytes (weftUint8), so they accept any dtype;
// reductions map the dtype (tensor_args.h). Non-contiguous tensors go through a contiguous
// staging copy. weft has no gather/scatter: they are grouped weftSend/weftRecv.
#include <numeric>

#include <c10/util/Exception.h>

#include "tensor_args.h"
#include "weft_backend.h"

namespace weft_torch {
namespace {

using c10d::OpType;
using Work = c10::intrusive_ptr<c10d::Work>;

size_t Bytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

at::Tensor Contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// A buffer weft may write: the tensor itself when contiguous, else a staging copy that
// CopyBack returns into the caller's tensor.
at::Tensor OutputBuffer(const at::Tensor& t) {
  return t.is_contiguous() ? t : at::empty(t.sizes(), t.options());
}
void CopyBack(const at::Tensor& user, const at::Tensor& buffer) {
  if (!buffer.is_same(user)) const_cast<at::Tensor&>(user).copy_(buffer);
}

// The send buffer of a reduction: the input itself, or factor * input for PREMUL_SUM (a new
// tensor, so that the caller's input is left untouched where it is not also the output).
at::Tensor ScaledInput(const at::Tensor& input, bool premul, const at::Tensor& factor) {
  return premul ? Contiguous(input) * factor.to(input.scalar_type()) : Contiguous(input);
}

void* Ptr(const at::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }

// Per-rank element offsets of a dim-0 split (all_to_all_single); empty splits = even split.
std::vector<size_t> SplitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                               const char* argument) {
  std::vector<size_t> bytes(size);
  const int64_t rows = t.dim() ? t.size(0) : 1;
  const size_t row_bytes = rows ? Bytes(t) / rows : 0;
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "weft all_to_all_single: ", argument, " has ", rows,
                      " rows, not divisible by the group size ", size,
                      " (pass split sizes for an uneven exchange)");
    for (int r = 0; r < size; ++r) bytes[r] = rows / size * row_bytes;
    return bytes;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "weft all_to_all_single: ",
                    argument, "_split_sizes has ", splits.size(), " entries, expected ", size);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    TORCH_CHECK_VALUE(splits[r] >= 0, "weft all_to_all_single: ", argument, "_split_sizes[",
                      r, "]=", splits[r], " is negative");
    total += splits[r];
    bytes[r] = static_cast<size_t>(splits[r]) * row_bytes;
  }
  TORCH_CHECK_VALUE(total == rows, "weft all_to_all_single: ", argument,
                    "_split_sizes sum to ", total, " but the tensor has ", rows, " rows");
  return bytes;
}

std::vector<size_t> Displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  return displs;
}

}  // namespace

// ---- reductions ----

Work WeftBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* name = "all_reduce";
  CallDevice dev(name);
  CheckSingleTensor(tensors, dev, "tensor");
  at::Tensor tensor = tensors[0];
  const weftDataType_t dtype = ReductionType(tensor, name);
  const weftRedOp_t op = ReductionOp(opts.reduceOp, tensor, name);
  at::Tensor factor;
  const bool premul = PremulFactor(opts.reduceOp, &factor);
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  PendingOp p = NewOp(dev, OpType::ALLREDUCE, {tensor}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, buffer, dtype, op, premul, factor] {
    at::Tensor send = premul ? buffer * factor.to(buffer.scalar_type()) : buffer;
    CheckWeft(weftAllReduce(Ptr(send), Ptr(buffer), buffer.numel(), dtype, op, Comm(), stream),
              "weftAllReduce");
  };
  if (!buffer.is_same(tensor)) p.finish = [tensor, buffer] { CopyBack(tensor, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                      const c10d::AllreduceCoalescedOptions& opts) {
  const char* name = "all_reduce_coalesced";
  CallDevice dev(name);
  dev.AddAll(tensors, "tensors");
  std::vector<weftDataType_t> dtypes;
  for (const at::Tensor& t : tensors) dtypes.push_back(ReductionType(t, name));
  const weftRedOp_t op = tensors.empty() ? weftSum : ReductionOp(opts.reduceOp, tensors[0], name);
  at::Tensor factor;
  const bool premul = PremulFactor(opts.reduceOp, &factor);
  std::vector<at::Tensor> buffers;
  for (const at::Tensor& t : tensors) buffers.push_back(OutputBuffer(t));
  PendingOp p = NewOp(dev, OpType::ALLREDUCE_COALESCED, tensors, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, tensors, buffers, dtypes, op, premul, factor] {
    for (size_t i = 0; i < buffers.size(); ++i) {
      at::Tensor send = ScaledInput(tensors[i], premul, factor);
      CheckWeft(weftAllReduce(Ptr(send), Ptr(buffers[i]), buffers[i].numel(), dtypes[i], op,
                              Comm(), stream),
                "weftAllReduce (coalesced)");
    }
  };
  p.finish = [tensors, buffers] {
    for (size_t i = 0; i < buffers.size(); ++i) CopyBack(tensors[i], buffers[i]);
  };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const char* name = "reduce";
  CallDevice dev(name);
  CheckSingleTensor(tensors, dev, "tensor");
  CheckRoot(opts.rootRank, getSize(), name);
  at::Tensor tensor = tensors[0];
  const weftDataType_t dtype = ReductionType(tensor, name);
  const weftRedOp_t op = ReductionOp(opts.reduceOp, tensor, name);
  at::Tensor factor;
  const bool premul = PremulFactor(opts.reduceOp, &factor);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  at::Tensor buffer = OutputBuffer(tensor);
  PendingOp p = NewOp(dev, OpType::REDUCE, {tensor}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, tensor, buffer, dtype, op, premul, factor, root, is_root] {
    at::Tensor send = ScaledInput(tensor, premul, factor);
    CheckWeft(weftReduce(Ptr(send), is_root ? Ptr(buffer) : nullptr, tensor.numel(), dtype, op,
                         root, Comm(), stream),
              "weftReduce");
  };
  if (is_root) p.finish = [tensor, buffer] { CopyBack(tensor, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                       const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor";
  CallDevice dev(name);
  dev.Add(output, "output");
  dev.Add(input, "input");
  CheckSameDtype(input, output, name, "output");
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), "weft ", name, ": input has ",
                    input.numel(), " elements, expected output's ", output.numel(), " x ",
                    getSize(), " ranks = ", output.numel() * getSize());
  return ReduceScatterFlat(output, input, {}, opts, dev, OpType::_REDUCE_SCATTER_BASE);
}

Work WeftBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                 std::vector<std::vector<at::Tensor>>& inputs,
                                 const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter";
  CallDevice dev(name);
  CheckSingleTensor(outputs, dev, "output");
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "weft ", name, ": input_list must hold one tensor per rank (", getSize(),
                    "), got ", inputs.empty() ? 0 : inputs[0].size());
  bool even = true;
  for (int r = 0; r < getSize(); ++r) {
    const std::string argument = "input_list[" + std::to_string(r) + "]";
    dev.Add(inputs[0][r], argument);
    CheckSameDtype(outputs[0], inputs[0][r], name, argument);
    even = even && inputs[0][r].sizes() == outputs[0].sizes();
  }
  CheckSameShape(outputs[0], inputs[0][getRank()], name,
                 "input_list[" + std::to_string(getRank()) + "] (this rank's block)");
  // One flat send buffer, rank r's block after the blocks of ranks before it: the layout of
  // weftReduceScatter (even sizes) and of weftReduceScatterV (uneven).
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& t : inputs[0]) flat_parts.push_back(t.reshape(-1));
  at::Tensor flat = at::cat(flat_parts);
  if (even) return _reduce_scatter_base(outputs[0], flat, opts);
  std::vector<size_t> counts;
  for (const at::Tensor& t : inputs[0]) counts.push_back(static_cast<size_t>(t.numel()));
  return ReduceScatterFlat(outputs[0], flat, std::move(counts), opts, dev, OpType::REDUCE_SCATTER);
}

Work WeftBackend::ReduceScatterFlat(at::Tensor& output, at::Tensor& flat, std::vector<size_t> counts,
                                    const c10d::ReduceScatterOptions& opts, const CallDevice& dev,
                                    c10d::OpType type) {
  const char* name = dev.collective();
  const weftDataType_t dtype = ReductionType(flat, name);
  const weftRedOp_t op = ReductionOp(opts.reduceOp, flat, name);
  at::Tensor factor;
  const bool premul = PremulFactor(opts.reduceOp, &factor);
  at::Tensor buffer = OutputBuffer(output);
  PendingOp p = NewOp(dev, type, {output}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, flat, buffer, counts, dtype, op, premul, factor] {
    at::Tensor send = ScaledInput(flat, premul, factor);
    if (counts.empty())
      CheckWeft(weftReduceScatter(Ptr(send), Ptr(buffer), buffer.numel(), dtype, op, Comm(), stream),
                "weftReduceScatter");
    else
      CheckWeft(weftReduceScatterV(Ptr(send), Ptr(buffer), counts.data(), dtype, op, Comm(), stream),
                "weftReduceScatterV");
  };
  p.finish = [output, buffer] { CopyBack(output, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "weft reduce_scatter_tensor_coalesced: ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  return Coalesce(opts.asyncOp, [&] {
    Work last;
    for (size_t i = 0; i < outputs.size(); ++i)
      last = _reduce_scatter_base(outputs[i], inputs[i], opts);
    return last;
  });
}

// ---- data movement ----

Work WeftBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const char* name = "broadcast";
  CallDevice dev(name);
  CheckSingleTensor(tensors, dev, "tensor");
  CheckRoot(opts.rootRank, getSize(), name);
  at::Tensor tensor = tensors[0];
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  const int root = static_cast<int>(opts.rootRank);
  PendingOp p = NewOp(dev, OpType::BROADCAST, {tensor}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, buffer, root] {
    CheckWeft(weftBroadcast(Ptr(buffer), Ptr(buffer), Bytes(buffer), weftUint8, root, Comm(),
                            stream),
              "weftBroadcast");
  };
  if (!buffer.is_same(tensor)) p.finish = [tensor, buffer] { CopyBack(tensor, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                  const c10d::AllgatherOptions& opts) {
  const char* name = "all_gather_into_tensor";
  CallDevice dev(name);
  dev.Add(output, "output");
  dev.Add(input, "input");
  CheckSameDtype(input, output, name, "output");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "weft ", name, ": output has ",
                    output.numel(), " elements, expected input's ", input.numel(), " x ",
                    getSize(), " ranks = ", input.numel() * getSize());
  at::Tensor send = Contiguous(input);
  at::Tensor buffer = OutputBuffer(output);
  PendingOp p = NewOp(dev, OpType::_ALLGATHER_BASE, {output}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, send, buffer] {
    CheckWeft(weftAllGather(Ptr(send), Ptr(buffer), Bytes(send), weftUint8, Comm(), stream),
              "weftAllGather");
  };
  if (!buffer.is_same(output)) p.finish = [output, buffer] { CopyBack(output, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                            std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const char* name = "all_gather";
  CallDevice dev(name);
  CheckSingleTensor(inputs, dev, "tensor");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    "weft ", name, ": tensor_list must hold one tensor per rank (", getSize(),
                    "), got ", outputs.empty() ? 0 : outputs[0].size());
  const at::Tensor& input = inputs[0];
  bool even = true;
  for (int r = 0; r < getSize(); ++r) {
    const std::string argument = "tensor_list[" + std::to_string(r) + "]";
    dev.Add(outputs[0][r], argument);
    CheckSameDtype(input, outputs[0][r], name, argument);
    even = even && outputs[0][r].sizes() == input.sizes();
  }
  CheckSameShape(input, outputs[0][getRank()], name,
                 "tensor_list[" + std::to_string(getRank()) + "] (this rank's block)");
  if (!even) return AllGatherUneven(outputs[0], input, opts, dev);
  at::Tensor send = Contiguous(input);
  at::Tensor flat = at::empty({getSize(), input.numel()}, input.options());
  std::vector<at::Tensor> targets = outputs[0];
  PendingOp p = NewOp(dev, OpType::ALLGATHER, targets, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, send, flat] {
    CheckWeft(weftAllGather(Ptr(send), Ptr(flat), Bytes(send), weftUint8, Comm(), stream),
              "weftAllGather");
  };
  p.finish = [targets, flat] {
    for (size_t r = 0; r < targets.size(); ++r)
      const_cast<at::Tensor&>(targets[r]).copy_(flat[r].view(targets[r].sizes()));
  };
  return Submit(std::move(p), opts.asyncOp);
}

// all_gather with tensors of different sizes per rank: weftAllGatherV on bytes, blocks packed
// in rank order in one staging buffer, then copied out to each rank's tensor.
Work WeftBackend::AllGatherUneven(std::vector<at::Tensor>& targets, const at::Tensor& input,
                                  const c10d::AllgatherOptions& opts, const CallDevice& dev) {
  std::vector<size_t> counts, displs;
  size_t total = 0;
  for (const at::Tensor& t : targets) {
    displs.push_back(total);
    counts.push_back(Bytes(t));
    total += Bytes(t);
  }
  at::Tensor send = Contiguous(input);
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, input.options().dtype(at::kByte));
  PendingOp p = NewOp(dev, OpType::ALLGATHER, targets, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, send, flat, counts, displs] {
    CheckWeft(weftAllGatherV(Ptr(send), Bytes(send), Ptr(flat), counts.data(), displs.data(),
                             weftUint8, Comm(), stream),
              "weftAllGatherV");
  };
  p.finish = [targets, flat, counts, displs] {
    for (size_t r = 0; r < targets.size(); ++r) {
      at::Tensor block = flat.narrow(0, static_cast<int64_t>(displs[r]), static_cast<int64_t>(counts[r]));
      at::Tensor& target = const_cast<at::Tensor&>(targets[r]);
      target.copy_(block.view(target.scalar_type()).view(target.sizes()));
    }
  };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "weft all_gather_coalesced: ",
                    outputs.size(), " output lists for ", inputs.size(), " inputs");
  return Coalesce(opts.asyncOp, [&] {
    Work last;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<std::vector<at::Tensor>> out{outputs[i]};
      std::vector<at::Tensor> in{inputs[i]};
      last = allgather(out, in, opts);
    }
    return last;
  });
}

Work WeftBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "weft all_gather_into_tensor_coalesced: ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  return Coalesce(opts.asyncOp, [&] {
    Work last;
    for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
    return last;
  });
}

Work WeftBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                std::vector<int64_t>& output_split_sizes,
                                std::vector<int64_t>& input_split_sizes,
                                const c10d::AllToAllOptions& opts) {
  const char* name = "all_to_all_single";
  CallDevice dev(name);
  dev.Add(output, "output");
  dev.Add(input, "input");
  CheckSameDtype(input, output, name, "output");
  at::Tensor send = Contiguous(input);
  at::Tensor buffer = OutputBuffer(output);
  PendingOp p = NewOp(dev, OpType::ALLTOALL_BASE, {output}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % getSize() == 0, "weft ",
                      name, ": input has ", input.numel(), " elements and output ",
                      output.numel(), "; without split sizes both must hold the same number, "
                      "divisible by the group size ", getSize());
    const size_t block = Bytes(send) / getSize();
    p.issue = [this, stream, send, buffer, block] {
      CheckWeft(weftAllToAll(Ptr(send), Ptr(buffer), block, weftUint8, Comm(), stream),
                "weftAllToAll");
    };
  } else {
    std::vector<size_t> send_counts = SplitBytes(input, input_split_sizes, getSize(), "input");
    std::vector<size_t> recv_counts = SplitBytes(output, output_split_sizes, getSize(), "output");
    p.issue = [this, stream, send, buffer, send_counts, recv_counts] {
      std::vector<size_t> send_displs = Displacements(send_counts);
      std::vector<size_t> recv_displs = Displacements(recv_counts);
      CheckWeft(weftAllToAllv(Ptr(send), send_counts.data(), send_displs.data(), Ptr(buffer),
                              recv_counts.data(), recv_displs.data(), weftUint8, Comm(), stream),
                "weftAllToAllv");
    };
  }
  if (!buffer.is_same(output)) p.finish = [output, buffer] { CopyBack(output, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                           const c10d::AllToAllOptions& opts) {
  const char* name = "all_to_all";
  CallDevice dev(name);
  const int size = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size &&
                        static_cast<int>(inputs.size()) == size,
                    "weft ", name, ": output_tensor_list and input_tensor_list must hold one "
                    "tensor per rank (", size, "), got ", outputs.size(), " and ", inputs.size());
  dev.AddAll(outputs, "output_tensor_list");
  dev.AddAll(inputs, "input_tensor_list");
  std::vector<size_t> send_counts(size), recv_counts(size);
  std::vector<at::Tensor> send_parts;
  for (int r = 0; r < size; ++r) {
    CheckSameDtype(inputs[0], inputs[r], name, "input_tensor_list[" + std::to_string(r) + "]");
    CheckSameDtype(inputs[0], outputs[r], name, "output_tensor_list[" + std::to_string(r) + "]");
    send_counts[r] = Bytes(inputs[r]);
    recv_counts[r] = Bytes(outputs[r]);
    send_parts.push_back(inputs[r].reshape(-1));
  }
  at::Tensor send = at::cat(send_parts);
  int64_t recv_numel = 0;
  for (const at::Tensor& t : outputs) recv_numel += t.numel();
  at::Tensor flat = at::empty({recv_numel}, outputs[0].options());
  PendingOp p = NewOp(dev, OpType::ALLTOALL, outputs, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, send, flat, send_counts, recv_counts] {
    std::vector<size_t> send_displs = Displacements(send_counts);
    std::vector<size_t> recv_displs = Displacements(recv_counts);
    CheckWeft(weftAllToAllv(Ptr(send), send_counts.data(), send_displs.data(), Ptr(flat),
                            recv_counts.data(), recv_displs.data(), weftUint8, Comm(), stream),
              "weftAllToAllv");
  };
  p.finish = [outputs, flat] {
    int64_t offset = 0;
    for (const at::Tensor& t : outputs) {
      const_cast<at::Tensor&>(t).copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  };
  return Submit(std::move(p), opts.asyncOp);
}

// ---- rooted data movement: grouped point-to-point ----

Work WeftBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                         std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const char* name = "gather";
  CallDevice dev(name);
  CheckSingleTensor(inputs, dev, "tensor");
  CheckRoot(opts.rootRank, getSize(), name);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  const at::Tensor& input = inputs[0];
  std::vector<at::Tensor> targets, buffers;
  if (is_root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "weft ", name, ": gather_list on the root must hold one tensor per rank (",
                      getSize(), "), got ", outputs.empty() ? 0 : outputs[0].size());
    targets = outputs[0];
    for (int r = 0; r < getSize(); ++r) {
      const std::string argument = "gather_list[" + std::to_string(r) + "]";
      dev.Add(targets[r], argument);
      CheckSameShape(input, targets[r], name, argument);
      buffers.push_back(OutputBuffer(targets[r]));
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "weft ", name,
                      ": gather_list must be empty on non-root ranks (rank ", getRank(),
                      ", root ", root, ")");
  }
  at::Tensor send = Contiguous(input);
  PendingOp p = NewOp(dev, OpType::GATHER, targets, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, send, buffers, root, is_root] {
    if (!is_root) {
      CheckWeft(weftSend(Ptr(send), Bytes(send), weftUint8, root, Comm(), stream), "weftSend");
      return;
    }
    CheckWeft(weftGroupStart(), "weftGroupStart");
    for (int r = 0; r < static_cast<int>(buffers.size()); ++r)
      if (r != root) (void)weftRecv(Ptr(buffers[r]), Bytes(buffers[r]), weftUint8, r, Comm(), stream);
    CheckWeft(weftGroupEnd(), "weftGroupEnd (gather receives)");
    const_cast<at::Tensor&>(buffers[root]).copy_(send.view(buffers[root].sizes()));
  };
  p.finish = [targets, buffers] {
    for (size_t r = 0; r < buffers.size(); ++r) CopyBack(targets[r], buffers[r]);
  };
  return Submit(std::move(p), opts.asyncOp);
}

Work WeftBackend::scatter(std::vector<at::Tensor>& outputs,
                          std::vector<std::vector<at::Tensor>>& inputs,
                          const c10d::ScatterOptions& opts) {
  const char* name = "scatter";
  CallDevice dev(name);
  CheckSingleTensor(outputs, dev, "tensor");
  CheckRoot(opts.rootRank, getSize(), name);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  at::Tensor output = outputs[0];
  std::vector<at::Tensor> sends;
  if (is_root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "weft ", name, ": scatter_list on the root must hold one tensor per rank (",
                      getSize(), "), got ", inputs.empty() ? 0 : inputs[0].size());
    for (int r = 0; r < getSize(); ++r) {
      const std::string argument = "scatter_list[" + std::to_string(r) + "]";
      dev.Add(inputs[0][r], argument);
      CheckSameShape(output, inputs[0][r], name, argument);
      sends.push_back(Contiguous(inputs[0][r]));
    }
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "weft ", name,
                      ": scatter_list must be empty on non-root ranks (rank ", getRank(),
                      ", root ", root, ")");
  }
  at::Tensor buffer = OutputBuffer(output);
  PendingOp p = NewOp(dev, OpType::SCATTER, {output}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, sends, buffer, root, is_root] {
    if (!is_root) {
      CheckWeft(weftRecv(Ptr(buffer), Bytes(buffer), weftUint8, root, Comm(), stream),
                "weftRecv");
      return;
    }
    CheckWeft(weftGroupStart(), "weftGroupStart");
    for (int r = 0; r < static_cast<int>(sends.size()); ++r)
      if (r != root) (void)weftSend(Ptr(sends[r]), Bytes(sends[r]), weftUint8, r, Comm(), stream);
    CheckWeft(weftGroupEnd(), "weftGroupEnd (scatter sends)");
    const_cast<at::Tensor&>(buffer).copy_(sends[root].view(buffer.sizes()));
  };
  if (!buffer.is_same(output)) p.finish = [output, buffer] { CopyBack(output, buffer); };
  return Submit(std::move(p), opts.asyncOp);
}

// ---- point-to-point and barrier ----

Work WeftBackend::send(std::vector<at::Tensor>& tensors, int dst_rank, int /*tag*/) {
  const char* name = "send";
  CallDevice dev(name);
  CheckSingleTensor(tensors, dev, "tensor");
  TORCH_CHECK_VALUE(dst_rank >= 0 && dst_rank < getSize() && dst_rank != getRank(), "weft ",
                    name, ": dst=", dst_rank, " must be another rank in [0, ", getSize(), ")");
  at::Tensor send = Contiguous(tensors[0]);
  PendingOp p = NewOp(dev, OpType::SEND, {tensors[0]}, std::chrono::milliseconds(-1));
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, send, dst_rank] {
    CheckWeft(weftSend(Ptr(send), Bytes(send), weftUint8, dst_rank, Comm(), stream), "weftSend");
  };
  // torch's send() waits on the Work at once; isend() keeps it. Either way the op is ordered
  // with this group's other operations, and posted with the other held-back sends/receives.
  return SubmitPointToPoint(std::move(p));
}

Work WeftBackend::recv(std::vector<at::Tensor>& tensors, int src_rank, int /*tag*/) {
  const char* name = "recv";
  CallDevice dev(name);
  CheckSingleTensor(tensors, dev, "tensor");
  TORCH_CHECK_VALUE(src_rank >= 0 && src_rank < getSize() && src_rank != getRank(), "weft ",
                    name, ": src=", src_rank, " must be another rank in [0, ", getSize(),
                    ") (weft has no receive-from-any-source)");
  at::Tensor tensor = tensors[0];
  at::Tensor buffer = OutputBuffer(tensor);
  PendingOp p = NewOp(dev, OpType::RECV, {tensor}, std::chrono::milliseconds(-1));
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream, buffer, src_rank] {
    CheckWeft(weftRecv(Ptr(buffer), Bytes(buffer), weftUint8, src_rank, Comm(), stream),
              "weftRecv");
  };
  if (!buffer.is_same(tensor)) p.finish = [tensor, buffer] { CopyBack(tensor, buffer); };
  return SubmitPointToPoint(std::move(p));
}

// A barrier has no tensor: it runs on the host (after the device calls queued before it, as
// weft orders a host call after the communicator's queued device calls) and returns when all
// ranks reached it.
Work WeftBackend::barrier(const c10d::BarrierOptions& opts) {
  CallDevice dev("barrier");
  PendingOp p = NewOp(dev, OpType::BARRIER, {}, opts.timeout);
  const weftStream_t stream = p.WeftStream();
  p.issue = [this, stream] { CheckWeft(weftBarrier(Comm(), stream), "weftBarrier"); };
  return Submit(std::move(p), opts.asyncOp);
}

}  // namespace weft_torch
