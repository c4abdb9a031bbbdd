// core/metrics.h: WEFT_METRICS_FILE: one JSON line per completed collective per communicator,
// for dashboards and regression tracking (NCCL's Inspector is the model):
//   {"comm":"0x...","rank":0,"nranks":4,"seq":17,"collective":"allreduce","bytes":1048576,
//    "dtype":"float32","algorithm":"ring","transport":"shm","time_us":412.3,
//    "algbw_GBps":2.54,"busbw_GBps":3.81}
// bytes, algbw and busbw as nccl-tests count them. The file name takes %r (rank), %h (host)
// and %p (pid) as WEFT_DEBUG_FILE does (one file per rank). Off by default; off, a collective
// pays one load of a process-wide flag (MetricsEnabled).
#pragma once

#include <cstdint>

#include "core/comm.h"

namespace weft {

// WEFT_METRICS_FILE is set (read once per process).
bool MetricsEnabled();
// Monotonic nanoseconds, for the call's time.
int64_t MetricsNowNs();
// Appends the line of a completed call (`bytes`: nccl-tests' size; `ns`: its duration).
void RecordCallMetrics(const weftComm* comm, const CollectiveCall& call, uint64_t seq,
                       uint64_t bytes, int64_t ns);

}  // namespace weft
