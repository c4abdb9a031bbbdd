// Whether a communicator's compressed allreduce takes the hierarchical placement (full
// precision inside hosts, the codec only across them: algorithms/
// allreduce_compressed_hierarchical.cc), from its host groups. The schedule runs on the
// communicator itself, so no per-host sub-communicators are made or cached.
#pragma once

#include "weft/weft.h"

namespace weft::compress {

// True when the communicator spans two or more hosts and some host holds more than one rank
// (hosts may be uneven). One rank per host: the flat compressed allreduce already crosses only
// the slow tier; one host: nothing crosses a slow tier.
bool HierarchicalPlacementApplies(weftComm_t comm);

}  // namespace weft::compress
