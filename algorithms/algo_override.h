// WEFT_ALGO: user overrides of the selector, per collective and size range.
//
// Syntax (documented in README):  RULE[;RULE...]   RULE = COLLECTIVE:CHOICES
//   CHOICES = NAME | RANGE:NAME[,RANGE:NAME...]     RANGE = LO-HI, sizes like 0, 512, 64K, 1M,
//   2G, or "inf" for HI; LO inclusive, HI exclusive.
//   e.g. "allreduce:ring", "allreduce:0-64K:recursive_doubling,64K-inf:ring;alltoall:pairwise"
// Sizes are bytes as weft-perf's "size" column reports them (nccl-tests' convention):
// allreduce/broadcast/reduce: count*typesize; allgather/reducescatter/alltoall:
// nranks*count*typesize; alltoallv: the mean bytes a rank sends (whole count table / nranks,
// the same on every rank). The selector computes it, once per call (Selector::CallBytes).
// Bad strings are rejected with a message quoting the offending part; a collective called
// under an invalid WEFT_ALGO fails with weftInvalidUsage (never a silent fallback). A forced
// algorithm that cannot run the call (e.g. a direct one across hosts) also fails with
// weftInvalidUsage naming it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"

namespace weft {

struct AlgoRule {
  Collective collective = Collective::kAllReduce;
  size_t min_bytes = 0;
  size_t max_bytes = static_cast<size_t>(-1);  // exclusive; SIZE_MAX = inf
  std::string algorithm;
};

struct AlgoOverrides {
  std::vector<AlgoRule> rules;
  // The forced algorithm name for (collective, bytes), or nullptr when the selector decides.
  const std::string* Lookup(Collective collective, size_t bytes) const;
};

// Parses a WEFT_ALGO string; names are checked against the registry (unknown name -> error
// listing the known ones for that collective).
StatusOr<AlgoOverrides> ParseAlgoOverrides(const std::string& spec);
// The overrides of the WEFT_ALGO environment variable (none when unset or empty).
StatusOr<AlgoOverrides> AlgoOverridesFromEnv();

}  // namespace weft
