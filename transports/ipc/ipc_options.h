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
  // Data bytes of each rank's window. A direct schedule runs a call larger than it in rounds
  // of half the window (ScheduleRequest::direct_scratch_elems); on a stream every round is
  // serial (copy in, a signal round trip, the reduction, a second round trip: tens of us on
  // an H100, whatever the size), so fewer, larger rounds are faster. 32 MiB: a 256 MiB
  // allreduce in 16 rounds (the H100 measured 49 GB/s bus bandwidth with 256 rounds), slots of
  // 16 MiB that stay within a GPU's L2 cache (50 MB on an H100), and memory a GPU does not miss.
  size_t window_bytes = size_t{32} << 20;
};

// Defaults above, overridden by WEFT_IPC and WEFT_IPC_WINDOW_BYTES through the settings facility;
// a bad value is an error naming the variable.
StatusOr<IpcOptions> IpcOptionsFromEnv();

}  // namespace weft::ipc
