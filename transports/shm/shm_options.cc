#include "transports/shm/shm_options.h"

#include <algorithm>
#include <cstdint>

#include "common/settings.h"

namespace weft {

StatusOr<ShmOptions> ShmOptionsFromEnv() {
  // Every value through the settings facility (src/common/settings.cc): flags accept
  // 0/1, off/on, false/true, no/yes alike, and sizes below their row's minimum are refused.
  ShmOptions o;
  WEFT_ASSIGN_OR_RETURN(o.disabled, SettingFlag("WEFT_SHM_DISABLE", o.disabled));
  WEFT_ASSIGN_OR_RETURN(o.ring_bytes_per_peer, SettingBytes("WEFT_SHM_RING_BYTES", o.ring_bytes_per_peer));
  WEFT_ASSIGN_OR_RETURN(o.slice_bytes, SettingBytes("WEFT_SHM_SLICE_BYTES", o.slice_bytes));
  WEFT_ASSIGN_OR_RETURN(o.initial_window_bytes,
                        SettingBytes("WEFT_SHM_WINDOW_BYTES", o.initial_window_bytes));
  WEFT_ASSIGN_OR_RETURN(o.max_bytes, SettingBytes("WEFT_SHM_MAX_BYTES", o.max_bytes));
  WEFT_ASSIGN_OR_RETURN(o.single_copy_min_bytes,
                        SettingBytes("WEFT_SHM_CMA_MIN_BYTES", o.single_copy_min_bytes));
  WEFT_ASSIGN_OR_RETURN(o.single_copy, SettingFlag("WEFT_SHM_CMA", o.single_copy));
  WEFT_ASSIGN_OR_RETURN(int64_t ms, SettingInt("WEFT_SHM_LIVENESS_MS", o.liveness_ms));
  o.liveness_ms = static_cast<int>(std::min<int64_t>(ms, 60000));
  return o;
}

}  // namespace weft
