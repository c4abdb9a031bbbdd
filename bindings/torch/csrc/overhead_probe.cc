// The backend's own per-call cost: the same 8-byte (or any size) allreduce timed through
// WeftBackend::allreduce + Work::wait (what torch.distributed calls, minus Python) and as a
// bare weftAllReduce on the same communicator, alternating in blocks so that both see the same
// machine load; each is the median of its blocks' per-call means. Collective: every rank of
// the group calls it with the same arguments.
#include "overhead_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tensor_args.h"

namespace weft_torch {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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
  // Blocks alternate between the two ways (which goes first alternates too); the medians of
  // the per-block means drop the blocks a burst of load from other processes landed in.
  const int blocks = 20, per_block = std::max(1, iters / blocks);
  std::vector<double> through_backend, bare;
  auto time_backend = [&] {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < per_block; ++i) backend.allreduce(tensors, opts)->wait();
    through_backend.push_back(SecondsSince(start) / per_block * 1e6);
  };
  auto time_bare = [&] {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < per_block; ++i)
      CheckWeft(weftAllReduce(tensor.data_ptr(), tensor.data_ptr(), numel, weftFloat32, weftSum,
                              comm, nullptr),
                "weftAllReduce");
    bare.push_back(SecondsSince(start) / per_block * 1e6);
  };
  for (int b = 0; b < blocks; ++b) {
    if (b % 2 == 0) {
      time_backend();
      time_bare();
    } else {
      time_bare();
      time_backend();
    }
  }
  return {Median(through_backend), Median(bare)};
}

}  // namespace weft_torch
