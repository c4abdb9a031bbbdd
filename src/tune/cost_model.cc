// Cost model (see cost_model.h).
#include "tune/cost_model.h"

#include <algorithm>
#include <cmath>

namespace weft {

size_t NcclBytes(const ScheduleRequest& req, size_t elem) {
  size_t total = 0;
  switch (req.collective) {
    case Collective::kAllToAllv:
      for (size_t c : req.a2av_counts) total += c;
      return req.nranks > 0 ? total * elem / static_cast<size_t>(req.nranks) : 0;
    case Collective::kAllGatherV:  // as allgather/reduce-scatter: every rank's block, once
    case Collective::kReduceScatterV:
      for (size_t c : req.v_counts) total += c;
      return total * elem;
    default:
      return NcclBytes(req.collective, req.nranks, req.count, elem);
  }
}

size_t NcclBytes(Collective collective, int nranks, size_t count, size_t elem) {
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return static_cast<size_t>(nranks) * count * elem;
    case Collective::kAllToAllv:  // need the count table: NcclBytes(request, elem)
    case Collective::kAllGatherV:
    case Collective::kReduceScatterV:
    case Collective::kBarrier:
      return 0;
    default:
      return count * elem;
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
    case Collective::kAllGatherV:
    case Collective::kReduceScatterV:
      return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

namespace {

// Coarsens `req`'s chunk (doubling) until the analytic build cost fits the budget; when even
// one chunk per segment does not fit, marks `est` analytic_only with the analytic time of the
// original request. Updates est->multiplier to the total coarsening.
Status FitBudget(const AlgorithmInfo& algorithm, const ScheduleRequest& original, size_t elem,
                 const Fabric& fabric, const CostOptions& options, ScheduleRequest* req, CostEstimate* est) {
  AnalyticEstimate a = EstimateAnalytic(algorithm, *req, elem, fabric, options.shm_enabled);
  if (!a.known) return OkStatus();
  const size_t real_chunk = original.chunk.chunk_elems;
  const size_t whole = std::max<size_t>(1, req->count);
  while (a.build_cost > options.max_build_cost && req->chunk.chunk_elems > 0 && req->chunk.chunk_elems < whole) {
    req->chunk.chunk_elems = std::min(whole, req->chunk.chunk_elems * 2);
    a = EstimateAnalytic(algorithm, *req, elem, fabric, options.shm_enabled);
  }
  if (real_chunk > 0 && req->chunk.chunk_elems > real_chunk)
    est->multiplier = static_cast<double>(req->chunk.chunk_elems) / static_cast<double>(real_chunk);
  est->analytic_us = EstimateAnalytic(algorithm, original, elem, fabric, options.shm_enabled).time_us;
  if (a.build_cost > options.max_build_cost) {
    est->analytic_only = true;
    est->time_us = est->analytic_us;
    est->evaluated = original.chunk;
    est->multiplier = 1;
  }
  return OkStatus();
}

}  // namespace

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
  if (options.max_build_cost > 0) {
    WEFT_RETURN_IF_ERROR(FitBudget(algorithm, request, elem, fabric, options, &req, &est));
    if (est.analytic_only) return est;
  }
  est.evaluated = req.chunk;
  req.scope = PlanScope::AllRanks();  // the simulation needs every rank's steps
  StatusOr<Schedule> sched = BuildSchedule(algorithm, req);
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
