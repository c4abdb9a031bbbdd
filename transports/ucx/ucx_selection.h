// ucx_selection: WEFT_TRANSPORT, the setting that picks the transport for peers that are not
// reached by shared memory (other hosts; same-host peers when shm is off), between UCX and
// weft's own TCP. A pure parser plus the default rule, so the communicator (src/core/init.cc)
// applies one decision identically on every rank.
//
//   WEFT_TRANSPORT unset or ""   auto: ucx when UCX reports an RDMA lane on every rank, else tcp
//   ucx                          ucx (an error when weft was built without UCX)
//   tcp, ^ucx                    tcp
// Anything else is an InvalidArgument naming the value. Core v2 (a transport registry) will
// generalize this to any list ("ucx,tcp", "^ucx,^shm"); today only these two compete.
#pragma once

#include <string>

#include "common/status.h"

namespace weft {

enum class NetworkTransportChoice { kAuto, kUcx, kTcp };

StatusOr<NetworkTransportChoice> ParseTransportSetting(const std::string& value);

// The auto rule on this rank: does UCX have an RDMA lane here? (Combine across ranks with an
// allgather: use ucx only if every rank says yes, since UcxTransport::Create is collective.)
bool UcxWantedByDefault();

}  // namespace weft
