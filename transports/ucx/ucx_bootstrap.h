// UcxBootstrap: the ucx transport's name for the abstract setup interface every transport
// gets (transports/bootstrap_iface.h): rank, nranks and an allgather of small variable-size
// blobs (UCX worker addresses, packed rkeys). Never on the data path.
//
// BootstrapAdapter is kept for callers written before the interface existed: it forwards to
// any TransportBootstrap (src/core's Bootstrap is one), so nothing here includes src/core.
#pragma once

#include <string>
#include <vector>

#include "transports/bootstrap_iface.h"

namespace weft {

using UcxBootstrap = TransportBootstrap;

class BootstrapAdapter : public TransportBootstrap {
 public:
  explicit BootstrapAdapter(TransportBootstrap* inner) : inner_(inner) {}
  int rank() const override { return inner_->rank(); }
  int nranks() const override { return inner_->nranks(); }
  const net::Secret& secret() const override { return inner_->secret(); }
  const net::SockAddr& local_address() const override { return inner_->local_address(); }
  Status AllGather(const void* mine, size_t bytes, void* all) override {
    return inner_->AllGather(mine, bytes, all);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status AllGatherBlobs(const std::string& mine, std::vector<std::string>* all) override {
    return inner_->AllGatherBlobs(mine, all);
  }

 private:
  TransportBootstrap* inner_;
};

}  // namespace weft
