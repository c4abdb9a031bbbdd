// The kinds of CPU work the simulator books on a rank's core (SimResult::cpu_work_us,
// CompressionDecision::compressed_cpu_work_us), in a header of their own so that callers
// that only report them need not include the engine.
#pragma once

#include <cstddef>

namespace weft {

// What a rank's core does for its CPU time (SimResult::cpu_work_us): a same-host receive's
// copy (CMA's single copy, the ring's copies, a direct read), a software network stack's
// share (TCP), a local copy, a reduction (a recv-reduce's, a decode-reduce's), an encode, a
// decode.
enum class CpuWork : size_t { kReceiveCopy, kStack, kCopy, kReduce, kEncode, kDecode };
inline constexpr size_t kCpuWorkKinds = 6;
inline constexpr const char* kCpuWorkNames[kCpuWorkKinds] = {"receive copies", "network stack", "copies",
                                                             "reductions", "encodes", "decodes"};

}  // namespace weft
