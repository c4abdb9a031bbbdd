// Per-communicator cache of the host tiers of the hierarchical compressed allreduce: see
// host_tiers.h.
#include "compress/host_tiers.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compress/compress_common.h"
#include "core/comm.h"

namespace weft::compress {
namespace {

struct CachedTiers {
  std::weak_ptr<const void> identity;  // the communicator's fabric or hub
  HostTiers tiers;
};

std::mutex g_tiers_mu;
std::map<weftComm_t, CachedTiers> g_tiers;

// Something owned by this communicator instance alone (or by its group of thread ranks), whose
// control block outlives it while we hold a weak pointer: no later communicator can have it.
std::shared_ptr<const void> Identity(weftComm_t comm) {
  if (comm->fabric) return comm->fabric;
  return comm->hub;
}

bool SameOwner(const std::weak_ptr<const void>& a, const std::shared_ptr<const void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

void DestroyTiers(const HostTiers& t) {
  if (t.cross != nullptr) (void)weftCommDestroy(t.cross);
  if (t.local != nullptr) (void)weftCommDestroy(t.local);
}

// This rank's host index and local index in comm->host_groups.
void Locate(weftComm_t comm, int* host, int* local_index) {
  for (size_t h = 0; h < comm->host_groups.size(); ++h)
    for (size_t i = 0; i < comm->host_groups[h].size(); ++i)
      if (comm->host_groups[h][i] == comm->rank) {
        *host = static_cast<int>(h);
        *local_index = static_cast<int>(i);
      }
}

// The two weftCommSplit calls (collective over comm, in this order on every rank).
Status MakeTiers(weftComm_t comm, HostTiers* t) {
  int host = 0, local_index = 0;
  Locate(comm, &host, &local_index);
  const int nhosts = static_cast<int>(comm->host_groups.size());
  const int per_host = static_cast<int>(comm->host_groups[0].size());
  WEFT_RETURN_IF_ERROR(FromResult(weftCommSplit(comm, host, comm->rank, &t->local),
                                  "splitting the communicator by host (weftCommSplit)", comm));
  const Status cross = FromResult(weftCommSplit(comm, local_index, host, &t->cross),
                                  "splitting the communicator by local rank (weftCommSplit)", comm);
  if (!cross.ok()) {
    DestroyTiers(*t);
    return cross;
  }
  int local_size = 0, cross_size = 0;
  (void)weftCommCount(t->local, &local_size);
  (void)weftCommCount(t->cross, &cross_size);
  (void)weftCommUserRank(t->local, &t->local_rank);
  (void)weftCommUserRank(t->cross, &t->host);
  t->local_size = local_size;
  t->nhosts = cross_size;
  if (local_size != per_host || cross_size != nhosts) {
    DestroyTiers(*t);
    return InternalError("host tiers of " + std::to_string(local_size) + " x " +
                    std::to_string(cross_size) + " ranks, expected " + std::to_string(per_host) +
                    " per host x " + std::to_string(nhosts) + " hosts");
  }
  return OkStatus();
}

}  // namespace

bool HierarchicalPlacementApplies(weftComm_t comm) {
  const std::vector<std::vector<int>>& groups = comm->host_groups;
  if (groups.size() < 2) return false;
  for (const std::vector<int>& g : groups)
    if (g.size() > 1) return true;
  return false;
}

Status GetHostTiers(weftComm_t comm, HostTiers* tiers) {
  const std::shared_ptr<const void> identity = Identity(comm);
  HostTiers stale;
  {
    std::lock_guard<std::mutex> lock(g_tiers_mu);
    auto it = g_tiers.find(comm);
    if (it != g_tiers.end() && SameOwner(it->second.identity, identity)) {
      *tiers = it->second.tiers;
      return OkStatus();
    }
    if (it != g_tiers.end()) {  // a destroyed communicator had this address
      stale = it->second.tiers;
      g_tiers.erase(it);
    }
  }
  DestroyTiers(stale);  // outside the lock: destroying a tier may release its own tiers
  HostTiers made;
  WEFT_RETURN_IF_ERROR(MakeTiers(comm, &made));  // collective: never under the lock
  std::lock_guard<std::mutex> lock(g_tiers_mu);
  g_tiers[comm] = CachedTiers{identity, made};
  *tiers = made;
  return OkStatus();
}

void ReleaseHostTiers(weftComm_t comm) {
  HostTiers released;
  {
    std::lock_guard<std::mutex> lock(g_tiers_mu);
    auto it = g_tiers.find(comm);
    if (it == g_tiers.end()) return;
    released = it->second.tiers;
    g_tiers.erase(it);
  }
  DestroyTiers(released);
}

size_t CachedHostTierCount() {
  std::lock_guard<std::mutex> lock(g_tiers_mu);
  return g_tiers.size();
}

}  // namespace weft::compress
