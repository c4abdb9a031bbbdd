// Analytic model: a closed-form alpha-beta estimate of a candidate's time on the Fabric,
// computed without building its schedule. The selector uses it as a pre-filter at scale
// (selector.h): at 1k-16k ranks building and simulating every candidate costs seconds to
// minutes, so candidates are ranked analytically and only the competitive few simulated.
//
// Each known algorithm is described by its communication pattern as a sequence of rounds; a
// round is a set of concurrent messages (every rank's message of the round, with its real
// peer), and is timed on the Fabric itself:
//   round(bytes) = max over messages of [latency + max(overhead + bytes / stream cap,
//                                                      load(resource) / capacity, for every
//                                                      resource on its route)]
// where load(resource) sums the bytes of the round's messages through it. Tiers (NVLink, NIC,
// spine, TCP stack, memory bus) and their sharing thus come from the same routes and
// capacities the simulator uses, not from a second table. Pipelined patterns (tree,
// hierarchical parts) use the usual (depth + chunks - 1) x stage time. Reductions add
// bytes / reduce rate per round on the receiving rank. Exchanges with a different peer each
// round (pairwise, the hierarchical leaders') share resources but not streams, in waves as
// wide as the generator's window; a ring's dependent hops take their mean time, or the most
// loaded resource's when that is longer.
//
// Patterns exist for every allreduce, all-to-all, reduce-scatter and allgather generator but
// the reduce-scatter/allgather hierarchical compositions (tens of steps per rank: always cheap
// to simulate). Broadcast has none (analytic_model.cc says why).
//
// The estimate is meant to be optimistic (no window limits but the stated ones, perfect
// overlap inside a round), which is what a pre-filter needs: it must not drop the candidate
// the simulation would pick (tests/selection_scale_test.cc holds it to at most 5% above the
// simulation for all-to-all, and the pre-filtered choice to full simulation's on 128 ranks).
// Unknown algorithms (no pattern here: new generators, test fakes) report known = false and
// are always simulated.
//
// Estimated step counts (all ranks together) bound the simulator's work: the cost model
// coarsens chunking to stay under a step budget, and a schedule too large to simulate at all
// is reported with its analytic time (cost_model.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/registry.h"
#include "topo/fabric.h"

namespace weft {

struct AnalyticEstimate {
  bool known = false;      // the algorithm has a pattern here
  double time_us = 0;      // best over the chunk policy given (see EstimateAnalytic)
  double steps = 0;        // schedule steps over all ranks, for the request's chunk policy
  double build_cost = 0;   // work to build the schedule in step-visits (>= steps; embedding
                           // generators revisit the partial schedule per embedded part)
  std::string formula;     // short human-readable form, e.g. "2(p-1)=2046 x 4.1us"
};

// `request` must have groups / all_ranks_mappable filled (as the selector does). The time is
// for the request's chunk policy (chunk_elems 0 = unpipelined).
AnalyticEstimate EstimateAnalytic(const AlgorithmInfo& algorithm, const ScheduleRequest& request,
                                  size_t elem_size, const Fabric& fabric, bool shm_enabled);

// One round of concurrent messages (from -> to, each `bytes`, over `streams` channels) timed
// as the patterns above are: max over messages of the larger of its own stream time and the
// most loaded resource on its route, plus its latency. `rounds` > 1: that many rounds of the
// same shape, each to peers of their own (fresh streams: the resources carry every round's
// bytes, a stream one message, the latency is paid once), as an exchange with every other
// host. For compositions outside the registry (the compressed allreduce's closed form,
// compress/compression_pays.cc).
double RoundTime(const Fabric& fabric, bool shm_enabled, const std::vector<std::pair<int, int>>& messages,
                 double bytes, int streams = 1, double rounds = 1);

}  // namespace weft
