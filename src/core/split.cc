// weftCommSplit: NCCL semantics. Ranks passing the same color form a new communicator,
// ordered by (key, old rank); WEFT_SPLIT_NOCOLOR yields NULL. Collective over the parent.
//
// Round 1 allgathers (color, key) over the parent's data path, so every rank knows every
// group. Round 2 allgathers, from each group's new rank 0 (its leader), what the members need
// to join: a fresh bootstrap unique id (network communicators) or the address of a new
// in-process hub (thread-per-rank communicators). Members then initialize as usual.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/init.h"
#include "transports/inproc/inproc_transport.h"

namespace weft {
namespace {

Status AllGatherBytes(weftComm* comm, const void* mine, size_t bytes, void* all) {
  CollectiveCall c;
  c.collective = Collective::kAllGather;
  c.sendbuff = mine;
  c.recvbuff = all;
  c.count = bytes;
  c.dtype = weftUint8;
  return RunCollective(comm, c);
}

// Parent ranks of the group of `color`, in new-rank order (by key, ties by parent rank);
// empty for WEFT_SPLIT_NOCOLOR. `all` holds every parent rank's {color, key}.
std::vector<int> GroupMembers(const std::vector<int32_t>& all, int color) {
  std::vector<int> members;
  if (color == WEFT_SPLIT_NOCOLOR) return members;
  for (int r = 0; r < static_cast<int>(all.size() / 2); ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[2 * a + 1] != all[2 * b + 1] ? all[2 * a + 1] < all[2 * b + 1] : a < b;
  });
  return members;
}

// Initializes `child` as this rank's member of the group, through its leader's offer (an
// inproc hub, or a network rendezvous id).
Status JoinGroup(weftComm* parent, const std::vector<int>& members, const weftUniqueId& id,
                 weftComm* child) {
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), parent->rank) -
                                        members.begin());
  if (parent->bootstrap != nullptr) {
    StatusOr<BootstrapId> bid = UnpackUniqueId(id);
    return bid.ok() ? JoinAndInit(child, *bid, static_cast<int>(members.size()), new_rank)
                    : bid.status();
  }
  std::shared_ptr<InprocHub>* h = nullptr;
  memcpy(&h, id.internal, sizeof(h));
  std::vector<int> host_of(parent->nranks, 0);  // parent rank -> its host group
  for (size_t g = 0; g < parent->host_groups.size(); ++g)
    for (int r : parent->host_groups[g]) host_of[r] = static_cast<int>(g);
  std::vector<std::string> hosts;  // the parent's host of each member
  for (int m : members) hosts.push_back("parent-host-" + std::to_string(host_of[m]));
  return InitInproc(child, *h, new_rank, &hosts);
}

}  // namespace

Status SplitComm(weftComm* parent, int color, int key, weftComm* child, bool* joined) {
  *joined = false;
  const int p = parent->nranks;
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * p);
  WEFT_RETURN_IF_ERROR_CTX(AllGatherBytes(parent, mine, sizeof(mine), all.data()),
                           "weftCommSplit exchanging colors");
  const std::vector<int> members = GroupMembers(all, color);
  const bool leader = !members.empty() && members[0] == parent->rank;
  const bool inproc = parent->bootstrap == nullptr;
  // Round 2: leaders publish how to join.
  weftUniqueId offer;
  memset(&offer, 0, sizeof(offer));
  std::shared_ptr<InprocHub>* holder = nullptr;
  // The rendezvous root a network leader starts: cancelled when the split fails, so that its
  // listener and the members' connections are closed now, not at WEFT_INIT_TIMEOUT (a failed
  // split under a low fd limit left 4 fds open on two ranks: issue 11).
  std::unique_ptr<BootstrapId> started_root;
  auto cancel_root = [&] {
    if (started_root) (void)CancelBootstrapRoot(*started_root);  // false: it had finished
  };
  if (leader) {
    if (inproc) {
      holder = new std::shared_ptr<InprocHub>(std::make_shared<InprocHub>(members.size()));
      memcpy(offer.internal, &holder, sizeof(holder));
    } else {
      StatusOr<BootstrapId> id = CreateUniqueId();
      if (!id.ok()) return id.status().WithContext("weftCommSplit");
      started_root = std::make_unique<BootstrapId>(*id);
      Status packed = PackUniqueId(*id, &offer);
      if (!packed.ok()) {
        cancel_root();
        return packed.WithContext("weftCommSplit");
      }
    }
  }
  std::vector<weftUniqueId> offers(p);
  Status st = AllGatherBytes(parent, &offer, sizeof(offer), offers.data());
  if (!st.ok()) {
    delete holder;
    cancel_root();
    return st.WithContext("weftCommSplit exchanging rendezvous ids");
  }
  Status init;
  if (!members.empty()) {
    init = JoinGroup(parent, members, offers[members[0]], child);
    *joined = true;
    if (!init.ok()) cancel_root();
  }
  if (inproc) {
    // Round 3: everyone has copied the hub pointer; leaders drop their holder.
    char dummy = 0;
    std::vector<char> sink(p);
    Status b = AllGatherBytes(parent, &dummy, 1, sink.data());
    delete holder;
    if (!b.ok()) return b.WithContext("weftCommSplit");
  }
  return init.WithContext("weftCommSplit");
}

}  // namespace weft
