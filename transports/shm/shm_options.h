// shm_options.h: the shm transport's knobs and how the settings (WEFT_SHM_*, listed in
// shm_transport.h) fill them; every transport folder has this file (transports/README.md,
// "File set").
#pragma once

#include <cstddef>

#include "common/status.h"

namespace weft {

// Messages of at least this many bytes take the single-copy (CMA) path by default; smaller
// ones go through the ring (WEFT_SHM_CMA_MIN_BYTES changes it per job). The cost model prices
// the two paths by the same threshold (sim/engine.cc).
inline constexpr size_t kShmSingleCopyMinBytesDefault = size_t{256} << 10;

struct ShmOptions {
  bool disabled = false;
  size_t ring_bytes_per_peer = size_t{1} << 20;
  size_t slice_bytes = size_t{64} << 10;
  size_t initial_window_bytes = size_t{4} << 20;
  size_t max_bytes = 0;  // 0 = no cap
  int liveness_ms = 100;
  bool single_copy = true;                         // WEFT_SHM_CMA=0 turns it off
  size_t single_copy_min_bytes = kShmSingleCopyMinBytesDefault;  // WEFT_SHM_CMA_MIN_BYTES
  int spin_us = -1;   // -1: BackoffPolicy::FromEnv for the number of local ranks
  int yield_us = -1;  // -1: idem
  // Ranks of the job on this machine, counting other "hosts" that share its CPUs (network
  // namespaces: weft's host identity includes the netns, so their ranks are not this
  // transport's peers). 0 = only this transport's ranks. When larger than the local ranks,
  // the waiting policy is chosen for this many ranks on the machine's CPUs: 2 x 2 ranks in
  // two namespaces on 2 cores are oversubscribed although each namespace has a core per rank,
  // and spinning for 2 ms there starved the peer the spinner waited for (netns 2x2 allreduce
  // 128-512 KiB took ~3 ms flat instead of 0.5-2.2 ms, RESULTS.md session 5).
  int ranks_on_machine = 0;
};
// Defaults overridden by the WEFT_SHM_* variables above. Bad values fail with InvalidArgument
// naming the variable and value.
StatusOr<ShmOptions> ShmOptionsFromEnv();

}  // namespace weft
