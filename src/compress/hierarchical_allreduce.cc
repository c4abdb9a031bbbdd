// Hierarchical compressed allreduce: full precision inside each host, compression only across
// the slow tier (issue 14 item 4). On H hosts of L ranks each:
//
//   phase 1 (intra-host, float32): weftReduceScatter over the host's ranks: local rank l gets
//            the host's float32 sum of slice l (count padded to a multiple of L with zeros).
//   phase 2 (across hosts, compressed): the flat compressed allreduce (compressed_allreduce.cc)
//            of slice l with the ranks of local index l on the other hosts: each rank encodes
//            1/L of the data, and only encoded bytes cross between hosts. Its result is
//            bitwise the same on those H ranks.
//   phase 3 (intra-host, float32): weftAllGather of the reduced slices over the host's ranks:
//            copies of bits that are already identical, so every rank of every host ends
//            with the same bits.
//
// Error feedback: the residual is added to this rank's input and zeroed before phase 1; phase
// 2 then stores in the residual's slice l what it dropped (of the host's sum of slice l, and
// of the reduced part of it this rank re-encodes). Every dropped value is thus kept by exactly
// one rank, so the next call sends it. Sums stay in sum units until the end; avg divides the
// reduced slice by the total rank count once, before phase 3.
//
// The tiers are sub-communicators made by weftCommSplit and cached per communicator
// (host_tiers.h). Like the flat form, a composition of public collectives.
#include <algorithm>
#include <cstring>
#include <vector>

#include "compress/compress_common.h"
#include "compress/compressed_collectives.h"
#include "compress/host_tiers.h"

namespace weft::compress {
namespace {

// Per-thread buffers of this file (the flat allreduce it calls uses compress_common's slots).
float* HierarchyScratch(int slot, size_t count) {
  thread_local std::vector<float> buffers[2];
  if (buffers[slot].size() < count) buffers[slot].resize(count);
  return buffers[slot].data();
}

// The float32 input of phase 1, padded to `padded` elements: sendbuff itself when nothing
// needs adding, converting or padding; else input + residual in scratch (residual zeroed).
const float* PhaseOneInput(const void* sendbuff, size_t count, size_t padded,
                           weftDataType_t datatype, float* residual) {
  if (datatype == weftFloat32 && residual == nullptr && padded == count)
    return static_cast<const float*>(sendbuff);
  float* x = HierarchyScratch(0, padded);
  LoadWithResidual(sendbuff, datatype, count, residual, x);
  std::memset(x + count, 0, (padded - count) * sizeof(float));
  if (residual != nullptr) std::memset(residual, 0, count * sizeof(float));
  return x;
}

}  // namespace

Status HierarchicalAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                       weftDataType_t datatype, weftRedOp_t op,
                                       const weftCompression& spec, float* residual,
                                       weftComm_t comm) {
  HostTiers tiers;
  WEFT_RETURN_IF_ERROR(GetHostTiers(comm, &tiers));
  const size_t per_host = static_cast<size_t>(tiers.local_size);
  const size_t slice = (count + per_host - 1) / per_host;  // weftReduceScatter: equal slices
  const size_t padded = slice * per_host;
  const size_t offset = static_cast<size_t>(tiers.local_rank) * slice;
  const size_t valid = offset < count ? std::min(slice, count - offset) : 0;

  const float* in = PhaseOneInput(sendbuff, count, padded, datatype, residual);
  float* mine = HierarchyScratch(1, slice);
  WEFT_RETURN_IF_ERROR(FromResult(
      weftReduceScatter(in, mine, slice, weftFloat32, weftSum, tiers.local, nullptr),
      "reducing inside the host (weftReduceScatter)", comm));
  if (valid > 0) {  // the same on every rank of tiers.cross (same local index)
    WEFT_RETURN_IF_ERROR(FlatAllReduceCompressed(mine, mine, valid, weftFloat32, weftSum, spec,
                                                 residual != nullptr ? residual + offset : nullptr,
                                                 tiers.cross)
                             .WithContext("across hosts"));
  }
  if (op == weftAvg) {
    const float n = static_cast<float>(per_host * static_cast<size_t>(tiers.nhosts));
    for (size_t i = 0; i < valid; ++i) mine[i] /= n;
  }
  const bool direct = datatype == weftFloat32 && padded == count;
  float* out = direct ? static_cast<float*>(recvbuff) : HierarchyScratch(0, padded);
  WEFT_RETURN_IF_ERROR(FromResult(
      weftAllGather(mine, out, slice, weftFloat32, tiers.local, nullptr),
      "gathering inside the host (weftAllGather)", comm));
  if (!direct) StoreAs(out, count, datatype, recvbuff);
  return OkStatus();
}

}  // namespace weft::compress
