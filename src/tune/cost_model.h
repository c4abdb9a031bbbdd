// Cost model: the predicted time of one candidate (algorithm x chunk policy) = its Schedule,
// built through the registry, executed on the Fabric by the discrete-event engine
// (src/sim/engine.h: alpha-beta per message, shared resources contend). No closed formula per
// algorithm: whatever a generator emits is what gets timed.
//
// Coarsening (large counts): a schedule with thousands of chunks per segment would cost
// seconds to build and simulate, so the evaluated chunk is raised until a segment (the
// collective's nccl-tests "size" divided by nranks) has at most `max_chunks_per_segment`
// chunks; each simulated message then stands for m = evaluated / requested chunk messages and
// its fixed per-message overhead is multiplied by m (latencies of a pipelined stream overlap
// and are not). The pipeline is modelled with fewer, larger stages: fill time is slightly
// overestimated for tiny chunks, which only favours larger chunks when it matters least.
//
// Simulation budget (max_build_cost > 0, used at scale): the analytic model
// (analytic_model.h) estimates the work of building and simulating the schedule; chunks are
// coarsened further (doubling) until it fits, and a schedule that does not fit even unchunked
// (a flat ring over 16k ranks: 10^9 steps) is not built: its estimate is the analytic one,
// marked analytic_only. Algorithms without an analytic pattern are always simulated.
#pragma once

#include <cstddef>

#include "algorithms/registry.h"
#include "common/status.h"
#include "sim/engine.h"
#include "topo/fabric.h"
#include "tune/analytic_model.h"

namespace weft {

// nccl-tests "size" of a call (bytes), the convention WEFT_ALGO ranges and weft-perf use:
// allreduce/broadcast/reduce/sendrecv count*elem; allgather/reducescatter/alltoall
// nranks*count*elem; alltoallv: total bytes sent by all ranks / nranks; barrier 0.
size_t NcclBytes(const ScheduleRequest& request, size_t elem_size);
// The same for every collective but all-to-allv (whose size needs its count table), from the
// call's fields alone: the per-call paths (the flight recorder) build no request for it.
size_t NcclBytes(Collective collective, int nranks, size_t count, size_t elem_size);
// nccl-tests bus bandwidth factor: busbw = algbw * factor.
double BusBandwidthFactor(Collective c, int nranks);

struct CostOptions {
  bool shm_enabled = true;
  // <= 0: automatic, max(1, min(8, 2048 / nranks)) (keeps 1000-rank evaluations bounded).
  int max_chunks_per_segment = 0;
  // > 0: bound on the estimated build + simulation work (step visits) of one candidate.
  double max_build_cost = 0;
};

struct CostEstimate {
  double time_us = 0;
  ChunkPolicy evaluated;     // the (possibly coarsened) policy actually simulated
  double multiplier = 1;     // messages each simulated message stands for
  SimResult sim;
  bool analytic_only = false;  // over max_build_cost even unchunked: time_us is analytic
  double analytic_us = 0;      // the analytic estimate (0 when the algorithm has no pattern)
};

StatusOr<CostEstimate> PredictCost(const AlgorithmInfo& algorithm, const ScheduleRequest& request,
                                   size_t elem_size, const Fabric& fabric, const CostOptions& options);

}  // namespace weft
