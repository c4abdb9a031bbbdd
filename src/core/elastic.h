// core/elastic.h: fault tolerance as NCCL 2.27-2.29 names it: revoke, shrink, grow, and the
// ranks a rank knows have failed (include/weft/weft.h documents the calls).
//
// Shrink without the root. The bootstrap ring and its root cannot carry the survivors' meeting
// (rank 0 may be the dead one), so each rank of a process communicator opens a recovery
// listener at creation and the ranks exchange its address with the rest of the setup. To
// shrink, the survivors meet at the lowest rank that is neither excluded nor dead:
//   1. a survivor walks the ranks upward from 0, skipping those its list excludes; a rank
//      whose listener refuses (its process is gone) is added to its list; the first that
//      accepts is the coordinator, to which it sends its list. When that first rank is itself,
//      it coordinates;
//   2. the coordinator unions the lists as survivors arrive, and probes the ranks neither
//      excluded nor arrived (refused: dead, excluded) until every rank is one or the other;
//   3. it starts a fresh rendezvous in its own process and sends each survivor the membership
//      (ranks in old order) and the rendezvous id; all then create the new communicator as
//      weftCommInitRank does. A coordinator that dies before answering is skipped (step 1).
// A live rank that some lists exclude and others do not is refused (weftInvalidUsage), not
// guessed about.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "common/status.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "net/socket.h"

namespace weft {

struct ElasticState {
  net::HandshakeServer recovery;             // this rank's recovery listener
  std::vector<net::SockAddr> recovery_addr;  // every rank's, by rank
  std::mutex mu;                             // guards `failed` and `grow_id`
  std::set<int> failed;                      // ranks found dead while shrinking
  std::unique_ptr<BootstrapId> grow_id;      // weftCommGetUniqueId's rendezvous
};

// Opens this rank's recovery listener and exchanges every rank's address (creation, over
// the bootstrap).
Status StartRecoveryListener(weftComm* comm, Bootstrap* bs);

// weftCommRevoke: aborts comm's transports with a kRevokedMarker error (peers in reach are
// told) and makes comm unusable once the operation in flight, if any, has returned.
Status RevokeComm(weftComm* comm);

// weftCommFailedRanks: the transports' verdicts and the ranks shrinking found dead, sorted.
std::vector<int> FailedRanks(weftComm* comm);

// weftCommShrink's work. *member is false when this rank was excluded by another survivor's
// list (child not initialized).
Status ShrinkComm(weftComm* comm, const std::vector<int>& exclude, int flags, weftComm* child,
                  bool* member);

// weftCommGetUniqueId: starts (once per comm) the rendezvous the grown communicator meets at.
StatusOr<BootstrapId> GrowUniqueId(weftComm* comm);
// weftCommGrow's work, existing ranks (comm non-null: id may be null) and new ones.
Status GrowComm(weftComm* comm, int nranks, const weftUniqueId* id, int rank, weftComm* child);

}  // namespace weft
