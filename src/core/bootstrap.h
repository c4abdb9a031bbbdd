// core/bootstrap.h: the rendezvous that turns "nranks processes that share a unique id" into
// connected ranks, and the small setup collectives (allgather, broadcast, barrier) that
// communicator creation needs. Setup only: the data path uses transports.
//
// Phases (NCCL's shape):
//   1. The root service (StartBootstrapRoot, a thread in one process, joined by the process:
//      see CancelBootstrapRoot) listens on the address in the unique id.
//   2. Every rank opens its own ring listener on the local address that routes to the root,
//      connects to the root, presents the secret, and sends {rank, nranks, listener address}.
//   3. Once all nranks arrived, the root sends everyone the table of listener addresses and
//      exits. It reports wrong nranks, duplicate ranks and missing ranks (by number) to every
//      rank it has heard from; connections with a wrong secret are dropped unanswered.
//   4. Each rank connects to rank+1 and accepts rank-1 (the ring), over which the setup
//      collectives run with a small header per call so mismatched calls fail with a message.
//
// Usage:
//   StatusOr<BootstrapId> id = StartBootstrapRoot(addr, net::Secret::Random(), 300);  // root
//   ... ship the weftUniqueId (PackUniqueId) to every rank ...
//   auto bs = Bootstrap::Join(*id, rank, nranks, 300);                     // every rank
//   (*bs)->AllGather(&mine, sizeof(mine), all.data());
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "net/socket.h"
#include "transports/bootstrap_iface.h"
#include "weft/weft.h"

namespace weft {

struct BootstrapId {
  net::SockAddr root;
  net::Secret secret;
};

// Layout in the 128 bytes: magic u32 "WFTU", version u16, reserved u16, address (28 bytes,
// net::EncodeSockAddr), secret (16 bytes), zeros.
Status PackUniqueId(const BootstrapId& id, weftUniqueId* out);
// Bad magic/version (e.g. an uninitialized id) -> InvalidArgument.
StatusOr<BootstrapId> UnpackUniqueId(const weftUniqueId& uid);

// Starts the root service in this process (a thread) listening on `listen_addr`
// (port 0 = pick one; the returned id carries the real port; a wildcard address is replaced
// in the id by ChooseLocalAddress()). It serves exactly one rendezvous (learning nranks from
// the first rank), then exits; it gives up after `timeout_s` (<= 0: never), telling the ranks
// that did arrive which ranks are missing. When `listen_addr` is not a local address (e.g. a
// name for this host that resolves elsewhere) it binds the wildcard address with that port.
StatusOr<BootstrapId> StartBootstrapRoot(const net::SockAddr& listen_addr,
                                         const net::Secret& secret, double timeout_s);
// Stops the root this process started for `id` if it still waits: the ranks that reached it
// get an error at once (RemoteError, "cancelled"), and its listener and connections are closed
// before this returns (an eventfd wakes it at once). For a creator whose own join failed (weftCommSplit's
// leader), so that nothing it started outlives the failure. True when a waiting root was
// stopped; false when it had finished or `id` names no root of this process. At exit every
// root still waiting is cancelled and joined the same way.
bool CancelBootstrapRoot(const BootstrapId& id);

// The transports see it through TransportBootstrap (transports/bootstrap_iface.h) only.
class Bootstrap : public TransportBootstrap {
 public:
  // Every rank (the root process too) calls this. Blocks until all nranks joined or the
  // timeout (<= 0: never) — plus up to one second to hear the root's verdict on who is
  // missing. Retries connecting to the root (it may start after this rank).
  static StatusOr<std::unique_ptr<Bootstrap>> Join(const BootstrapId& id, int rank, int nranks,
                                                   double timeout_s);
  ~Bootstrap() override;

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const net::Secret& secret() const override { return secret_; }
  // The address of this host that reaches the root (port 0): a good default for other
  // listeners of this rank (the TCP transport's), since peers could reach the root the same way.
  const net::SockAddr& local_address() const override { return local_address_; }
  // Timeout applied to each setup collective (<= 0: none, only Abort() unblocks).
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds) { timeout_s_ = seconds; }

  // `all` holds nranks*bytes; rank r's `mine` lands at all + r*bytes. `mine` may alias
  // all + rank*bytes. Every rank must pass the same `bytes`.
  Status AllGather(const void* mine, size_t bytes, void* all) override;
  // Copies root's `buf` to every rank's `buf`.
  Status Broadcast(void* buf, size_t bytes, int root);
  // No rank returns before every rank has entered.
  Status Barrier() override;
  // Unblocks current calls (they fail) and fails future ones. Any thread; idempotent.
  void Abort();

 private:
  Bootstrap() = default;
  // The values of bootstrap_wire::CallOp (the ring's call header).
  enum class Op : uint32_t { kAllGather = 1, kBroadcast = 2, kBarrier = 3 };
  // Exchanges {op, sequence, bytes, root} with the ring neighbours so that ranks calling
  // different setup collectives (or sizes) fail with a message instead of corrupting data.
  Status CheckCall(Op op, size_t bytes, int root);
  Status Fail(Status s);  // records the first error: later calls fail fast with it
  std::string Name(const char* op) const;

  int rank_ = 0;
  int nranks_ = 1;
  net::Secret secret_;
  net::SockAddr local_address_;
  double timeout_s_ = 0;
  net::Socket next_;  // to rank+1
  net::Socket prev_;  // from rank-1
  uint32_t sequence_ = 0;
  std::atomic<bool> aborted_{false};
  std::mutex error_mu_;
  Status error_;
};

}  // namespace weft
