// Per-call overhead probe of the weft backend (see overhead_probe.cc).
#pragma once

#include <utility>

#include "weft_backend.h"

namespace weft_torch {

// Microseconds per call (through the backend, bare weftAllReduce) of a float32 allreduce of
// numel elements, over about iters calls each: medians of alternated blocks' per-call means.
std::pair<double, double> MeasureOverhead(WeftBackend& backend, int64_t numel, int iters);

}  // namespace weft_torch
