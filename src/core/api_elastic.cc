// The C API of fault tolerance: weftCommRevoke, weftCommShrink, weftCommFailedRanks,
// weftCommGetUniqueId, weftCommGrow (argument checks here; the work in core/elastic.cc).
#include <string>
#include <vector>

#include "core/api_internal.h"
#include "core/bootstrap.h"
#include "core/elastic.h"
#include "weft/weft.h"

using namespace weft;

namespace {

// A communicator that may have failed: revoke, shrink and failed ranks are for exactly those.
Status CheckLiveOrFailed(const weftComm* comm, const char* api) {
  Status st = CheckLiveComm(comm);
  if (st.ok() || (IsLiveComm(comm) && comm->init_error.ok())) return OkStatus();
  return st.WithContext(api);
}

// Hands `child` to the caller on success; frees it otherwise.
weftResult_t Deliver(weftComm* child, const Status& st, bool member, weftComm_t* newcomm) {
  if (!member || !st.ok()) {
    FreeComm(child, st.ok() ? InvalidUsage("not a member") : st);
    return Report(st);
  }
  *newcomm = child;
  return weftSuccess;
}

}  // namespace

weftResult_t weftCommRevoke(weftComm_t comm, int revokeFlags) {
  Status st = CheckLiveOrFailed(comm, "weftCommRevoke");
  if (st.ok() && revokeFlags != 0)
    st = InvalidArgument("weftCommRevoke: revokeFlags=" + std::to_string(revokeFlags) + " must be 0");
  if (!st.ok()) return Report(st);
  return Report(RevokeComm(comm));
}

weftResult_t weftCommShrink(weftComm_t comm, const int* excludeRanks, int excludeCount,
                            weftComm_t* newcomm, int shrinkFlags) {
  if (newcomm == nullptr) return Report(InvalidArgument("weftCommShrink: newcomm (output pointer) is NULL"));
  *newcomm = nullptr;
  Status st = CheckLiveOrFailed(comm, "weftCommShrink");
  if (!st.ok()) return Report(st);
  if (shrinkFlags != WEFT_SHRINK_DEFAULT && shrinkFlags != WEFT_SHRINK_ABORT)
    return Report(InvalidArgument("weftCommShrink: shrinkFlags=" + std::to_string(shrinkFlags) +
                                  " is neither WEFT_SHRINK_DEFAULT nor WEFT_SHRINK_ABORT"));
  if (excludeCount < 0 || excludeCount >= comm->nranks || (excludeCount > 0 && excludeRanks == nullptr))
    return Report(InvalidArgument("weftCommShrink: excludeCount=" + std::to_string(excludeCount) +
                                  " with excludeRanks=" + PtrStr(excludeRanks) + " (comm has " +
                                  std::to_string(comm->nranks) + " ranks)"));
  std::vector<int> exclude(excludeRanks, excludeRanks + excludeCount);
  for (int i = 0; i < excludeCount; ++i) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks || exclude[i] == comm->rank)
      return Report(InvalidArgument("weftCommShrink: excludeRanks[" + std::to_string(i) + "]=" +
                                    std::to_string(exclude[i]) + " is not another rank of comm (rank " +
                                    std::to_string(comm->rank) + " of " + std::to_string(comm->nranks) + ")"));
  }
  weftComm* child = NewComm();
  bool member = false;
  st = ShrinkComm(comm, exclude, shrinkFlags, child, &member);
  return Deliver(child, st, member, newcomm);
}

weftResult_t weftCommFailedRanks(weftComm_t comm, int* ranks, int maxRanks, int* count) {
  if (count == nullptr) return Report(InvalidArgument("weftCommFailedRanks: count is NULL"));
  if (maxRanks < 0 || (maxRanks > 0 && ranks == nullptr))
    return Report(InvalidArgument("weftCommFailedRanks: maxRanks=" + std::to_string(maxRanks) +
                                  " with ranks=" + PtrStr(ranks)));
  Status st = CheckLiveOrFailed(comm, "weftCommFailedRanks");
  if (!st.ok()) return Report(st);
  std::vector<int> failed = FailedRanks(comm);
  *count = static_cast<int>(failed.size());
  for (int i = 0; i < maxRanks && i < *count; ++i) ranks[i] = failed[i];
  return weftSuccess;
}

weftResult_t weftCommGetUniqueId(weftComm_t comm, weftUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Report(InvalidArgument("weftCommGetUniqueId: uniqueId is NULL"));
  Status st = CheckLiveComm(comm);
  if (!st.ok()) return Report(st.WithContext("weftCommGetUniqueId"));
  StatusOr<BootstrapId> id = GrowUniqueId(comm);
  if (!id.ok()) return Report(id.status());
  return Report(PackUniqueId(*id, uniqueId));
}

weftResult_t weftCommGrow(weftComm_t comm, int nRanks, const weftUniqueId* uniqueId, int rank,
                          weftComm_t* newcomm) {
  if (newcomm == nullptr) return Report(InvalidArgument("weftCommGrow: newcomm (output pointer) is NULL"));
  *newcomm = nullptr;
  Status st;
  if (comm != nullptr) {
    st = CheckLiveComm(comm);
    if (st.ok() && nRanks < comm->nranks)
      st = InvalidArgument("weftCommGrow: nRanks=" + std::to_string(nRanks) + " is below comm's " +
                           std::to_string(comm->nranks) + " ranks");
  } else if (uniqueId == nullptr) {
    st = InvalidArgument("weftCommGrow: a new rank (comm = NULL) needs uniqueId");
  } else if (nRanks < 1 || rank < 0 || rank >= nRanks) {
    st = InvalidArgument("weftCommGrow: rank=" + std::to_string(rank) + " is outside [0, nRanks=" +
                         std::to_string(nRanks) + ")");
  }
  if (!st.ok()) return Report(st.WithContext(comm != nullptr ? "weftCommGrow" : "weftCommGrow (new rank)"));
  weftComm* child = NewComm();
  st = GrowComm(comm, nRanks, uniqueId, rank, child);
  return Deliver(child, st, true, newcomm);
}
