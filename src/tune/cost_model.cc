// Cost model (see cost_model.h).
#include "tune/cost_model.h"

#include <algorithm>
#include <cmath>

namespace weft {

size_t NcclBytes(const ScheduleRequest& req, size_t elem) {
  switch (req.collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return static_cast<size_t>(req.nranks) * req.count * elem;
    case Collective::kAllToAllv: {
      size_t total = 0;
      for (size_t c : req.a2av_counts) total += c;
      return req.nranks > 0 ? total * elem / static_cast<size_t>(req.nranks) : 0;
    }
    case Collective::kBarrier:
      return 0;
    default:
      return req.count * elem;
  }
}

double BusBandwidthFactor(Collective c, int n) {
  if (n <= 1) return 1.0;
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kAllToAllv:
      return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

StatusOr<CostEstimate> PredictCost(const AlgorithmInfo& algorithm, const ScheduleRequest& request,
                                   size_t elem_size, const Fabric& fabric, const CostOptions& options) {
  if (request.nranks != fabric.nranks())
    return InvalidArgument("cost model: request nranks=" + std::to_string(request.nranks) + " but fabric has " +
                           std::to_string(fabric.nranks()));
  CostEstimate est;
  ScheduleRequest req = request;
  int k = options.max_chunks_per_segment;
  if (k <= 0) k = std::max(1, std::min(8, 2048 / std::max(1, request.nranks)));
  size_t elem = std::max<size_t>(1, elem_size);
  size_t seg_elems = NcclBytes(request, elem) / elem / static_cast<size_t>(std::max(1, request.nranks));
  size_t min_chunk = (seg_elems + static_cast<size_t>(k) - 1) / static_cast<size_t>(k);
  const size_t real_chunk = req.chunk.chunk_elems;
  if (req.chunk.chunk_elems > 0 && req.chunk.chunk_elems < min_chunk) {
    est.multiplier = static_cast<double>(min_chunk) / static_cast<double>(req.chunk.chunk_elems);
    req.chunk.chunk_elems = min_chunk;
  }
  est.evaluated = req.chunk;
  StatusOr<Schedule> sched = algorithm.build(req);
  if (!sched.ok()) return sched.status().WithContext("cost model: building " + algorithm.name);
  SimOptions so;
  so.shm_enabled = options.shm_enabled;
  so.overhead_multiplier = est.multiplier;
  so.real_chunk_elems = real_chunk;
  StatusOr<SimResult> sim = SimulateSchedule(sched.value(), fabric, elem, so);
  if (!sim.ok()) return sim.status().WithContext("cost model: " + algorithm.name);
  est.sim = std::move(sim.value());
  est.time_us = est.sim.time_us;
  return est;
}

}  // namespace weft
