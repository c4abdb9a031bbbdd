// Transport registry: which transport carries the traffic between two ranks, as data.
//
// Each entry says whether it can reach a peer and at what priority; for every pair of ranks
// the reaching entry with the highest priority wins (shm > ucx > tcp). Every rank computes
// the same table from the same inputs (host of every rank, settings agreed across ranks), so
// the collective Create of every entry that some pair uses is called by every rank, in
// registry order. src/core/init.cc asks the registry and wires what it returns; it names no
// transport itself.
//
// Settings (agreed at init with one allgather, see TransportSettings):
//   WEFT_SHM_DISABLE=1   this rank takes no part in shm (its same-host peers use the network)
//   WEFT_TRANSPORT       the network transport: unset = auto (ucx when every rank's UCX has
//                        an RDMA lane, else tcp), `ucx`, `tcp` or `^ucx`. Every rank must
//                        give the same value.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transports/bootstrap_iface.h"
#include "transports/transport.h"

namespace weft {

enum class NetworkTransportChoice { kAuto, kUcx, kTcp };

// WEFT_TRANSPORT's value -> choice; anything else is InvalidArgument naming the variable and
// the value.
StatusOr<NetworkTransportChoice> ParseTransportSetting(const std::string& value);

// What every rank agreed on (TransportSettings::Agree).
struct TransportSettings {
  std::vector<bool> shm_enabled;  // per rank (WEFT_SHM_DISABLE)
  bool use_ucx = false;           // the network transport is ucx (else tcp)
  std::string why_network;        // "WEFT_TRANSPORT=ucx", "auto: no RDMA lane on rank 2", ...

  // Reads this rank's settings and agrees with the others (collective; one allgather). A bad
  // or differing value fails on every rank, naming the variable, the value and the rank.
  static StatusOr<TransportSettings> Agree(TransportBootstrap* bootstrap);
};

// The facts the registry decides from: identical on every rank.
struct TransportSetupContext {
  TransportBootstrap* bootstrap = nullptr;
  int rank = 0;
  int nranks = 1;
  std::vector<int> host_of;  // rank -> host index
  int ranks_on_machine = 0;  // this rank's machine, all its hosts (netns) together; 0 = unknown
  TransportSettings settings;
  bool same_host(int a, int b) const { return host_of[a] == host_of[b]; }
};

struct TransportEntry {
  const char* name;
  int priority;  // higher wins among the entries that reach a pair
  // Whether this transport can carry messages between ranks a and b (a != b).
  bool (*reaches)(const TransportSetupContext& ctx, int a, int b);
  // Collective over all ranks (called by every rank when any pair uses this entry).
  // `my_peers`: the ranks this rank will reach through it (possibly none).
  StatusOr<std::unique_ptr<Transport>> (*create)(const TransportSetupContext& ctx,
                                                 const std::vector<int>& my_peers);
};

// The entries in priority order (shm, ucx when built, tcp).
const std::vector<TransportEntry>& TransportRegistry();

// For every pair, the index in TransportRegistry() of the entry that serves it.
struct TransportPlan {
  std::vector<std::vector<int>> entry_of_pair;  // [a][b]; -1 on the diagonal
  std::vector<bool> used;                       // per entry: some pair uses it
  // Index of the entry serving rank a -> b.
  int entry(int a, int b) const { return entry_of_pair[a][b]; }
};
// Fails when some pair is reached by no entry (names the pair).
StatusOr<TransportPlan> PlanTransports(const TransportSetupContext& ctx);

// The created transports of one rank: owned instances and, per peer, the one that serves it.
struct CreatedTransports {
  std::vector<std::unique_ptr<Transport>> owned;
  std::vector<Transport*> by_peer;  // null for this rank
  std::vector<std::string> summary;  // "shm: ranks 1,2,3" per transport, for WEFT_DEBUG=INFO
};
// Plans and creates (collective). On error every created transport is destroyed.
StatusOr<CreatedTransports> CreateTransports(const TransportSetupContext& ctx);

}  // namespace weft
