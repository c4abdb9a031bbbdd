// The backend's own per-call cost: the same 8-byte (or any size) allreduce timed through
// WeftBackend::allreduce + Work::wait (what torch.distributed calls, minus Python) and as a
// bare weftAllReduce on the same communicator, alternating in blocks so that both see the same
// machine load. Collective: every rank of the group calls it with the same arguments.
#include "overhead_probe.h"

#include <chrono>

#include "tensor_args.h"

namespace weft_torch {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::pair<double, double> MeasureOverhead(WeftBackend& backend, int64_t numel, int iters) {
  TORCH_CHECK_VALUE(numel >= 1 && iters >= 1, "weft overhead probe: numel=", numel,
                    " and iters=", iters, " must be positive");
  at::Tensor tensor = at::ones({numel}, at::kFloat);
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.asyncOp = false;  // what dist.all_reduce(t) passes
  weftComm_t comm = backend.RawComm();
  double through_backend = 0, bare = 0;
  const int blocks = 10, per_block = std::max(1, iters / blocks);
  for (int b = 0; b < blocks; ++b) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < per_block; ++i) backend.allreduce(tensors, opts)->wait();
    through_backend += SecondsSince(start);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < per_block; ++i)
      CheckWeft(weftAllReduce(tensor.data_ptr(), tensor.data_ptr(), numel, weftFloat32, weftSum,
                              comm, nullptr),
                "weftAllReduce");
    bare += SecondsSince(start);
  }
  const double calls = static_cast<double>(blocks) * per_block;
  return {through_backend / calls * 1e6, bare / calls * 1e6};
}

}  // namespace weft_torch
