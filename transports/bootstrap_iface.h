// TransportBootstrap: what a transport may ask of the communicator's bootstrap while it is
// being set up — who am I, how many are we, the job's secret and a routable local address,
// and small collectives (allgather of fixed-size records or of variable-size blobs, barrier).
// Setup only: never on the data path.
//
// Why an interface: transports live below the communicator (DESIGN.md, layer 11 vs 2-3) and
// must not include src/core. src/core/bootstrap.h's Bootstrap implements this; tests hand
// transports small fakes. Everything here is collective over all nranks ranks: every rank
// calls the same functions in the same order with the same sizes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/socket.h"

namespace weft {

class TransportBootstrap {
 public:
  virtual ~TransportBootstrap() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // The 128-bit job secret every connection of this job presents (tcp's handshake).
  virtual const net::Secret& secret() const = 0;
  // An address of this host that reached the rendezvous (port 0), or an empty address when
  // there is none: a good default for a transport's own listener.
  virtual const net::SockAddr& local_address() const = 0;
  // `all` holds nranks*bytes; rank r's `mine` lands at all + r*bytes.
  virtual Status AllGather(const void* mine, size_t bytes, void* all) = 0;
  // No rank returns before every rank has entered.
  virtual Status Barrier() = 0;
  // (*all)[r] = rank r's `mine`; sizes may differ per rank. Default: two AllGathers (sizes,
  // then blobs padded to the largest).
  virtual Status AllGatherBlobs(const std::string& mine, std::vector<std::string>* all);
};

}  // namespace weft
