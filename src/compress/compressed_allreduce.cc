// Compressed allreduce: each contribution is quantized once, reduced in float32 at the owner of
// its slice, the reduced slice quantized once and gathered; every rank decodes the same bytes.
//
//   phase 1 (encode):   x = input + residual; each of the nranks slices of x is encoded on its
//                       own; residual = what that dropped.
//   phase 2 (exchange): weftAllToAllv of the encoded slices: rank r receives every rank's
//                       encoding of slice r.
//   phase 3 (reduce):   the owner decodes the nranks contributions and adds them in float32 in
//                       rank order (avg: one division by nranks at the end), so the sum does not
//                       depend on arrival order or on the algorithm under weftAllToAllv.
//   phase 4 (re-encode): the reduced slice is encoded once, padded to the largest slice's
//                       encoded size; its dropped part goes into the owner's residual (times
//                       nranks for avg, since the next call divides it again).
//   phase 5 (gather):   weftAllGather of the padded encodings; every rank, the owner included,
//                       decodes all slices from the same bytes: bitwise-identical results.
//
// Two forms of the same phases: FlatAllReduceCompressed runs them as the compressed schedule
// (algorithms/allreduce_compressed.cc: encode/decode steps the checker proves, run by the
// executor); FlatAllReduceToEncoded, which stops before the last decode, still composes weft's
// public collectives (the reference tests/compressed_schedule_test.cc compares with). Both give the same bits. Wire bytes per
// rank: about 2 (nranks - 1) / nranks x the encoded size, as a ring allreduce of the encoded data.
//
// This is the flat placement. On a communicator of several hosts the public call runs
// hierarchical_allreduce.cc instead (full precision inside hosts; its own schedule,
// algorithms/allreduce_compressed_hierarchical.cc).
#include <cstring>
#include <vector>

#include "compress/compress_common.h"
#include "compress/compress_error.h"
#include "compress/compressed_schedule.h"
#include "compress/compressed_collectives.h"
#include "compress/host_tiers.h"
#include "core/comm.h"
#include "kernels/codec.h"

namespace weft::compress {
namespace {

// Phases 1 and 2: returns the received encodings of this rank's slice (nranks x slice bytes).
Status ExchangeContributions(const weftCompression& spec, const float* x, size_t count,
                             int nranks, int rank, float* residual, weftComm_t comm,
                             uint8_t** received) {
  std::vector<size_t> send_bytes(nranks), send_displs(nranks), recv_bytes(nranks), recv_displs(nranks);
  size_t total = 0;
  for (int r = 0; r < nranks; ++r) {
    send_bytes[r] = codec::EncodedBytes(spec, SliceCount(count, nranks, r));
    send_displs[r] = total;
    total += send_bytes[r];
  }
  uint8_t* send = ScratchBytes(0, total);
  for (int r = 0; r < nranks; ++r) {
    const size_t offset = SliceOffset(count, nranks, r);
    EncodeWithFeedback(spec, x + offset, SliceCount(count, nranks, r), send + send_displs[r],
                       (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(r),
                       residual ? residual + offset : nullptr);
  }
  const size_t mine = codec::EncodedBytes(spec, SliceCount(count, nranks, rank));
  for (int q = 0; q < nranks; ++q) {
    recv_bytes[q] = mine;
    recv_displs[q] = static_cast<size_t>(q) * mine;
  }
  *received = ScratchBytes(1, mine * nranks);
  return FromResult(weftAllToAllv(send, send_bytes.data(), send_displs.data(), *received,
                                  recv_bytes.data(), recv_displs.data(), weftUint8, comm, nullptr),
                    "exchanging encoded contributions (weftAllToAllv)", comm);
}

// Phase 3: sum (or average) of the nranks decoded contributions, in rank order.
void ReduceSlice(const weftCompression& spec, const uint8_t* received, size_t slice, int nranks,
                 weftRedOp_t op, float* sum) {
  const size_t bytes = codec::EncodedBytes(spec, slice);
  codec::Decode(spec, received, slice, sum);
  float* contribution = ScratchFloats(2, slice);
  for (int q = 1; q < nranks; ++q) {
    codec::Decode(spec, received + q * bytes, slice, contribution);
    for (size_t i = 0; i < slice; ++i) sum[i] += contribution[i];
  }
  if (op == weftAvg && nranks > 1)
    for (size_t i = 0; i < slice; ++i) sum[i] /= static_cast<float>(nranks);
}

}  // namespace

Status FlatAllReduceToEncoded(const void* sendbuff, size_t count, weftDataType_t datatype,
                              weftRedOp_t op, const weftCompression& spec, float* residual,
                              weftComm_t comm, const uint8_t** gathered, size_t* stride) {
  int nranks = 0, rank = 0;
  WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
  // float32 without feedback: encode straight from the caller's buffer (no copy of count).
  const bool as_is = datatype == weftFloat32 && residual == nullptr;
  float* x = as_is ? nullptr : ScratchFloats(0, count);
  if (!as_is) LoadWithResidual(sendbuff, datatype, count, residual, x);
  uint8_t* received = nullptr;
  WEFT_RETURN_IF_ERROR(ExchangeContributions(spec, as_is ? static_cast<const float*>(sendbuff) : x,
                                             count, nranks, rank, residual, comm, &received));

  const size_t slice = SliceCount(count, nranks, rank), offset = SliceOffset(count, nranks, rank);
  float* sum = ScratchFloats(1, slice);
  ReduceSlice(spec, received, slice, nranks, op, sum);

  const size_t padded = codec::EncodedBytes(spec, SliceCount(count, nranks, 0));  // the largest
  uint8_t* all = ScratchBytes(2, padded * nranks);
  uint8_t* own = ScratchBytes(0, padded);  // phase 1's buffer is free again
  std::memset(own, 0, padded);
  float* reduced_dropped = residual != nullptr ? ScratchFloats(2, slice) : nullptr;
  EncodeWithFeedback(spec, sum, slice, own, static_cast<uint64_t>(rank) << 32 | 0xFFFFFFFFu,
                     reduced_dropped);
  if (residual != nullptr) {
    const float weight = op == weftAvg ? static_cast<float>(nranks) : 1.0f;
    for (size_t i = 0; i < slice; ++i) residual[offset + i] += weight * reduced_dropped[i];
  }
  WEFT_RETURN_IF_ERROR(FromResult(weftAllGather(own, all, padded, weftUint8, comm, nullptr),
                                  "gathering reduced slices (weftAllGather)", comm));
  *gathered = all;
  *stride = padded;
  return OkStatus();
}

void DecodeGathered(const weftCompression& spec, const uint8_t* gathered, size_t stride,
                    size_t count, int nranks, float* out) {
  for (int r = 0; r < nranks; ++r)
    codec::Decode(spec, gathered + r * stride, SliceCount(count, nranks, r),
                  out + SliceOffset(count, nranks, r));
}

// The flat placement runs the compressed schedule (algorithms/allreduce_compressed.cc, proved
// by the checker) through the executor: the same phases as FlatAllReduceToEncoded above, with
// the same encodings, reductions and streams, so the same bits. Error feedback is no step of
// the schedule: it is this rank's own state, not a contribution, and needs no message; the
// executor computes it from each encoding as the encode runs (ResidualFeedback), as
// EncodeWithFeedback does here.
Status FlatAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                               weftDataType_t datatype, weftRedOp_t op,
                               const weftCompression& spec, float* residual, weftComm_t comm) {
  int nranks = 0, rank = 0;
  WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
  // float32 without feedback: encode straight from the caller's buffer (no copy of count).
  const bool as_is = datatype == weftFloat32 && residual == nullptr;
  float* x = as_is ? nullptr : ScratchFloats(0, count);
  if (!as_is) LoadWithResidual(sendbuff, datatype, count, residual, x);
  const float* in = as_is ? static_cast<const float*>(sendbuff) : x;
  float* result = datatype == weftFloat32 ? static_cast<float*>(recvbuff) : ScratchFloats(1, count);
  ScheduleRequest shape;  // the request the schedule and its encodes' spans are built from
  shape.collective = Collective::kAllReduce;
  shape.nranks = nranks;
  shape.count = count;
  shape.codec = spec;
  shape.chunk.chunk_elems = CompressionChunkElems();
  // Every rank encodes all of its values once, first: the feedback stores over the whole
  // residual, so it is read into x but needs no zeroing.
  const std::vector<EncodedSpan> spans =
      residual != nullptr ? AllReduceFlatEncodedSpans(shape, rank) : std::vector<EncodedSpan>();
  ResidualFeedback feedback;
  feedback.residual = residual;
  feedback.reduced_weight = op == weftAvg ? static_cast<float>(nranks) : 1.0f;
  feedback.spans = &spans;
  WEFT_RETURN_IF_ERROR(RunCompressedRequest(comm, *FindCompressedAlgorithm(Collective::kAllReduce, "compressed"),
                                            shape, spec, op, in, result, &CompressedScheduleScratch(),
                                            &feedback));
  StoreAs(result, count, datatype, recvbuff);
  return OkStatus();
}

namespace {

// Placement: full precision inside hosts where the communicator spans several (host_tiers.h),
// unless the spec asks for the flat form.
Status AllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, const weftCompression& spec,
                           float* residual, weftComm_t comm, KnownResidual* known) {
  int nranks = 0, rank = 0;
  WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));  // a live communicator first
  if ((spec.flags & WEFT_COMPRESS_FLAT) == 0 && HierarchicalPlacementApplies(comm))
    return HierarchicalAllReduceCompressed(sendbuff, recvbuff, count, datatype, op, spec,
                                           residual, comm, known);
  // The flat placement reads the whole residual and leaves it nonzero anywhere.
  if (known != nullptr) known->zero_outside = KnownResidual::kUnknown;
  return FlatAllReduceCompressed(sendbuff, recvbuff, count, datatype, op, spec, residual, comm);
}

}  // namespace

Status RunAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                              weftDataType_t datatype, weftRedOp_t op,
                              const weftCompression* spec, float* residual, weftComm_t comm,
                              weftStream_t stream, KnownResidual* known) {
  WEFT_RETURN_IF_ERROR(CheckCompressedCall(comm, datatype, true, op, spec, sendbuff, count,
                                           recvbuff, count));
  if (count == 0) return OkStatus();
  const size_t bytes = count * ElementBytes(datatype);
  const std::vector<WorkExtent> extents{{sendbuff, bytes, true, false},
                                        {recvbuff, bytes, false, true},
                                        {residual, count * sizeof(float), true, true}};
  return RunCompressedCall(comm, stream, "weftAllReduceCompressed", extents,
                           [=, spec = *spec](const StagingMap& at) {
                             return AllReduceCompressed(at(sendbuff), at(recvbuff), count, datatype, op, spec,
                                                        static_cast<float*>(at(residual)), comm, known);
                           });
}

}  // namespace weft::compress

extern "C" weftResult_t weftAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                                weftDataType_t datatype, weftRedOp_t op,
                                                const weftCompression* spec, float* residual,
                                                weftComm_t comm, weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  return Report(weft::CatchExceptions([&] { return RunAllReduceCompressed(sendbuff, recvbuff, count, datatype, op, spec, residual,
                                       comm, stream); })
                    .WithContext("weftAllReduceCompressed"));
}

namespace weft::compress {

AllReduceWireBytes AllReduceCompressedWireBytes(const weftCompression& spec, size_t count,
                                                weftComm_t comm) {
  AllReduceWireBytes bytes;
  int nranks = 0, rank = 0;
  if (!CommShape(comm, &nranks, &rank).ok()) return bytes;  // not a live communicator
  if ((spec.flags & WEFT_COMPRESS_FLAT) == 0 && HierarchicalPlacementApplies(comm)) {
    return HierarchicalWireBytes(spec, count, comm->host_groups, rank);
  }
  // Flat (the compressed schedule): every rank's encoded contribution slice to its owner, then
  // this rank's encoded reduced slice, unpadded, to every other rank; split by where the
  // receivers are.
  size_t total = 0;
  for (int r = 0; r < nranks && nranks > 1; ++r)
    total += r != rank ? codec::EncodedBytes(spec, SliceCount(count, nranks, r))
                       : (nranks - 1) * codec::EncodedBytes(spec, SliceCount(count, nranks, r));
  size_t local = 1;
  for (const std::vector<int>& g : comm->host_groups)
    for (int r : g)
      if (r == rank) local = g.size();
  bytes.inside_hosts = nranks > 1 ? total * (local - 1) / static_cast<size_t>(nranks - 1) : 0;
  bytes.across_hosts = total - bytes.inside_hosts;
  return bytes;
}

}  // namespace weft::compress
