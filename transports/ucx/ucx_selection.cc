// ucx_selection: the default rule (see ucx_selection.h).
#include "transports/ucx/ucx_selection.h"

#include "transports/ucx/ucx_transport.h"

namespace weft {

// Once per process: the query scans UCT's components and devices, which do not change while
// we run, and every communicator (splits included) asks when WEFT_TRANSPORT is unset.
bool UcxWantedByDefault() {
  static const bool wanted = UcxHasRdmaLane();
  return wanted;
}

}  // namespace weft
