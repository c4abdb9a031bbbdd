// The compressed collectives as Status-returning functions (the C entry points in
// include/weft/weft_compress.h wrap these and report errors). Each checks its arguments, then
// runs (NULL stream) or queues on the host stream (RunOnStream in compress_common.h).
//
// Which of them run proved schedules and which compose public collectives: compress_common.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "weft/weft_compress.h"

namespace weft::compress {

// What a residual only weft writes is known to hold (WEFT_COMPRESSION's, job_wide_compression.h):
// the hierarchical allreduce then skips its read-only check that the residual is zero outside
// the lanes this rank keeps (ResidualZeroOutside), the steady state after a first call of the
// same shape. A caller's own residual (weftAllReduceCompressed) is checked every call: the
// caller may have written it.
struct KnownResidual {
  static constexpr uint64_t kUnknown = 0, kZeroEverywhere = ~uint64_t{0};
  // kUnknown; kZeroEverywhere (a new residual); else zero outside the stored ranges of this
  // digest (LanesDigest), which the last call left.
  uint64_t zero_outside = kUnknown;
};

Status RunAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                              weftDataType_t datatype, weftRedOp_t op,
                              const weftCompression* spec, float* residual, weftComm_t comm,
                              weftStream_t stream, KnownResidual* known = nullptr);
Status RunReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  weftDataType_t datatype, weftRedOp_t op,
                                  const weftCompression* spec, float* residual, weftComm_t comm,
                                  weftStream_t stream);
Status RunAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount,
                              weftDataType_t datatype, const weftCompression* spec,
                              float* residual, weftComm_t comm, weftStream_t stream);

// The two placements of the allreduce, after the checks (compressed_allreduce.cc,
// hierarchical_allreduce.cc). Flat: every transfer carries encoded data. Hierarchical: only
// transfers between hosts do; needs HierarchicalPlacementApplies(comm) (host_tiers.h).
Status FlatAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                               weftDataType_t datatype, weftRedOp_t op,
                               const weftCompression& spec, float* residual, weftComm_t comm);
// The flat allreduce up to its last phase: what every rank decodes, nranks encoded reduced
// slices of `stride` bytes each (per-thread scratch, valid until this thread's next compressed
// call); DecodeGathered turns them into the count results. Bitwise the same on every rank.
Status FlatAllReduceToEncoded(const void* sendbuff, size_t count, weftDataType_t datatype,
                              weftRedOp_t op, const weftCompression& spec, float* residual,
                              weftComm_t comm, const uint8_t** gathered, size_t* stride);
void DecodeGathered(const weftCompression& spec, const uint8_t* gathered, size_t stride,
                    size_t count, int nranks, float* out);
Status HierarchicalAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                       weftDataType_t datatype, weftRedOp_t op,
                                       const weftCompression& spec, float* residual,
                                       weftComm_t comm, KnownResidual* known = nullptr);
// How many times this thread's hierarchical allreduces read a residual to check that it is
// zero outside their lanes (tests: a known residual is not read again).
size_t ResidualZeroChecksOnThisThread();

// The same for the placement weftAllReduceCompressed takes on comm, split into bytes sent to
// ranks of this rank's host and to ranks of other hosts. Hierarchical: each lane in float32 to
// its owner inside the host and the owner's gathered encodings of it back, encodings across
// hosts. (weft-perf's "wire bytes" column reports across_hosts + inside_hosts from this.) Zero
// when comm is not a live communicator.
struct AllReduceWireBytes {
  size_t inside_hosts = 0, across_hosts = 0;
};
AllReduceWireBytes AllReduceCompressedWireBytes(const weftCompression& spec, size_t count,
                                                weftComm_t comm);
// The hierarchical placement's (read from its schedule), for `rank` of ranks grouped by host as
// `hosts`; encodings counted in whole float32 elements (at most 3 bytes over each).
AllReduceWireBytes HierarchicalWireBytes(const weftCompression& spec, size_t count,
                                         const std::vector<std::vector<int>>& hosts, int rank);

}  // namespace weft::compress
