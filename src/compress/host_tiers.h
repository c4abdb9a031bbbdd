// The two tiers the hierarchical compressed allreduce runs on, per communicator: the ranks of
// this rank's host (full precision, shm) and the ranks of the same local index on every host
// (the slow tier, where the data is compressed). Both are made with weftCommSplit at the first
// hierarchical call on a communicator (all its ranks make that call together) and cached.
//
// The cache is keyed by the communicator's address and checked against the communicator's
// identity (its fabric or in-process hub, held by a weak pointer): a communicator destroyed and
// another allocated at the same address never reuses the old tiers. Tiers of a destroyed
// communicator are freed at the next lookup of that address or by ReleaseHostTiers; weft's
// weftCommDestroy/weftCommAbort should call ReleaseHostTiers (see the report of issue 14: the
// hook belongs in src/core, which this folder does not own).
#pragma once

#include "common/status.h"
#include "weft/weft.h"

namespace weft::compress {

struct HostTiers {
  weftComm_t local = nullptr;  // this host's ranks, ordered by parent rank
  weftComm_t cross = nullptr;  // one rank per host (same local index), ordered by host
  int local_rank = 0, local_size = 1;  // this rank in `local`
  int host = 0, nhosts = 1;            // this rank's host in `cross`
};

// True when the communicator spans two or more hosts and some host holds more than one rank:
// the placement that keeps full precision inside hosts applies (hosts may be uneven: the
// hierarchical schedule, algorithms/allreduce_compressed_hierarchical.cc, handles them). One
// rank per host: the flat compressed allreduce already crosses only the slow tier.
// The tiers below are no longer used by that schedule (it needs no sub-communicators).
bool HierarchicalPlacementApplies(weftComm_t comm);

// The tiers of comm, made (collectively) on first use. Only when
// HierarchicalPlacementApplies(comm).
Status GetHostTiers(weftComm_t comm, HostTiers* tiers);

// Destroys the tiers cached for comm (no-op when none). Call before destroying comm; safe to
// call from any thread, never collective (weftCommDestroy of a tier does not wait for peers).
void ReleaseHostTiers(weftComm_t comm);

// Number of communicators whose tiers are cached (tests).
size_t CachedHostTierCount();

}  // namespace weft::compress
