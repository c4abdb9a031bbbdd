// ucx_selection: the default rule for WEFT_TRANSPORT=auto on this rank. The parser and the
// enum live in transports/registry.h (they are needed when weft is built without UCX too);
// the registry applies one decision identically on every rank.
#pragma once

#include "transports/registry.h"

namespace weft {

// The auto rule on this rank: does UCX have an RDMA lane here? (Combined across ranks by
// TransportSettings::Agree: ucx only if every rank says yes, since UcxTransport::Create is
// collective.)
bool UcxWantedByDefault();

}  // namespace weft
