// The placement rule of the compressed allreduce: see host_tiers.h.
#include "compress/host_tiers.h"

#include <vector>

#include "core/comm.h"

namespace weft::compress {

bool HierarchicalPlacementApplies(weftComm_t comm) {
  const std::vector<std::vector<int>>& groups = comm->host_groups;
  if (groups.size() < 2) return false;
  for (const std::vector<int>& g : groups)
    if (g.size() > 1) return true;
  return false;
}

}  // namespace weft::compress
