// ucx_selection: parsing WEFT_TRANSPORT and the default rule (see ucx_selection.h).
#include "transports/ucx/ucx_selection.h"

#include "transports/ucx/ucx_transport.h"

namespace weft {

StatusOr<NetworkTransportChoice> ParseTransportSetting(const std::string& value) {
  if (value.empty()) return NetworkTransportChoice::kAuto;
  if (value == "ucx") return NetworkTransportChoice::kUcx;
  if (value == "tcp" || value == "^ucx") return NetworkTransportChoice::kTcp;
  return InvalidArgument("WEFT_TRANSPORT=" + value +
                         ": expected ucx, tcp or ^ucx (unset: ucx where UCX has an RDMA lane)");
}

bool UcxWantedByDefault() { return UcxHasRdmaLane(); }

}  // namespace weft
