// UcxBootstrap: the only thing the ucx transport needs from the communicator's bootstrap:
// who am I, how many are we, and an allgather of small variable-size blobs (UCX worker
// addresses, packed rkeys) during setup. Never on the data path.
//
// Core v2 replaces today's concrete weft::Bootstrap (src/core/bootstrap.h) with an abstract
// setup interface for every transport; until then BootstrapAdapter wraps the concrete one,
// so transports/ucx depends on src/core only in ucx_bootstrap.cc.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace weft {

class Bootstrap;

class UcxBootstrap {
 public:
  virtual ~UcxBootstrap() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Collective over all ranks: (*all)[r] = rank r's `mine` (sizes may differ per rank).
  virtual Status AllGatherBlobs(const std::string& mine, std::vector<std::string>* all) = 0;
};

// Adapter over weft::Bootstrap: two fixed-size allgathers (lengths, then padded blobs).
class BootstrapAdapter : public UcxBootstrap {
 public:
  explicit BootstrapAdapter(Bootstrap* bootstrap) : bootstrap_(bootstrap) {}
  int rank() const override;
  int nranks() const override;
  Status AllGatherBlobs(const std::string& mine, std::vector<std::string>* all) override;

 private:
  Bootstrap* bootstrap_;
};

}  // namespace weft
