// ipc_options.h: the ipc transport's knobs and how the settings (WEFT_IPC, WEFT_IPC_WINDOW_BYTES)
// fill them; every transport folder has this file (transports/README.md, "File set").
#pragma once

#include <cstddef>

#include "common/status.h"

namespace weft::ipc {

struct IpcOptions {
  // Device buffers of ranks on one host go device to device (WEFT_IPC; 0: staged through
  // pinned host memory like any other device call).
  bool enabled = true;
  // Data bytes of each rank's window. The direct schedules keep their Scratch within 512 Ki
  // elements (algorithms/direct_pattern.h: kDirectScratchElems), 4 MiB for 8-byte types, and
  // run larger calls in rounds through it; a smaller window makes the rounds smaller.
  size_t window_bytes = size_t{4} << 20;
};

// Defaults above, overridden by WEFT_IPC and WEFT_IPC_WINDOW_BYTES through the settings facility;
// a bad value is an error naming the variable.
StatusOr<IpcOptions> IpcOptionsFromEnv();

}  // namespace weft::ipc
