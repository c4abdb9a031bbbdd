// Hierarchical compressed allreduce: full precision inside each host, compression only across
// hosts (issue 14 item 4), run as one proved schedule (algorithms/
// allreduce_compressed_hierarchical.cc: the checker proves it for even and uneven hosts)
// through the executor, with the communicator's host groups as the request's groups.
//
// Error feedback: the residual is added to this rank's input before the call and zeroed
// outside the lanes this rank owns; the call then keeps in it what each of this rank's
// encodings dropped, computed by the executor as each encode runs (ResidualFeedback; inside a
// codec chain, tile by tile in the cache): stored for the host's float32 sum of each
// sub-slice it sends across (this rank owns that lane of its host, so the next call's host
// sum carries it again; this overwrites the lanes' old residual), added for each reduced
// sub-slice it re-encodes (times nranks for avg, since the next call divides it again). Every
// dropped value is kept by exactly one rank of the job.
//
// Against the composition this replaced (weftReduceScatter inside the host, the flat compressed
// allreduce across, weftAllGather of encodings inside, in up to 4 pipelined pieces of >= 8 MiB):
// for sum, 2 ranks per host, deterministic codecs and one piece with the count a multiple of
// the ranks per host, both cut the same slices and compute the same bits (tests/
// compressed_collectives_test.cc rebuilds them with the codec alone). They differ where the
// composition padded the count to pieces x ranks per host (other slice boundaries, so the
// codec's blocks start elsewhere), for avg (it divided the decoded result, the schedule divides
// the float32 sum before re-encoding it, as the flat schedule does), with 3+ ranks per host
// (the reduce-scatter's float32 summation order), and for stochastic rounding (other streams).
// Both quantize each host sum once and the reduced slice once, and leave every rank the same
// bits. The pipelining of pieces is gone: the executor overlaps the messages of one schedule.

#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/compressed.h"
#include "compress/compress_common.h"
#include "compress/compressed_collectives.h"
#include "compress/compressed_schedule.h"
#include "core/comm.h"
#include "kernels/codec.h"

namespace weft::compress {
namespace {

constexpr int kInputSlot = 4, kResultSlot = 5;  // compress_common float slots of this file

const AlgorithmInfo& HierarchicalAlgorithm() {
  static const AlgorithmInfo* algorithm =
      FindCompressedAlgorithm(Collective::kAllReduce, "compressed_hierarchical");
  return *algorithm;
}

ScheduleRequest HierarchicalShape(weftComm_t comm, size_t count, const weftCompression& spec) {
  ScheduleRequest shape;
  shape.collective = Collective::kAllReduce;
  shape.nranks = comm->nranks;
  shape.count = count;
  shape.codec = spec;
  shape.groups = comm->host_groups;
  shape.chunk.chunk_elems = CompressionChunkElems();  // the schedule's and the spans' pieces
  return shape;
}

thread_local size_t t_residual_zero_checks = 0;

// The stored ranges' digest (KnownResidual::zero_outside): never kUnknown nor kZeroEverywhere.
uint64_t LanesDigest(const std::vector<ElementRange>& lanes) {
  uint64_t h = 1469598103934665603ull;
  for (const ElementRange& r : lanes)
    for (const uint64_t v : {static_cast<uint64_t>(r.begin), static_cast<uint64_t>(r.end)}) h = (h ^ v) * 1099511628211ull;
  return h == KnownResidual::kUnknown || h == KnownResidual::kZeroEverywhere ? 1 : h;
}

// Whether the residual is zero outside `lanes`: known (a residual only weft writes), or read.
bool ZeroOutsideLanes(const float* residual, size_t count, const std::vector<ElementRange>& lanes,
                      uint64_t digest, const KnownResidual* known) {
  if (known != nullptr &&
      (known->zero_outside == KnownResidual::kZeroEverywhere || known->zero_outside == digest))
    return true;
  ++t_residual_zero_checks;
  return ResidualZeroOutside(residual, count, lanes);
}

}  // namespace

size_t ResidualZeroChecksOnThisThread() { return t_residual_zero_checks; }

Status HierarchicalAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                       weftDataType_t datatype, weftRedOp_t op,
                                       const weftCompression& spec, float* residual,
                                       weftComm_t comm, KnownResidual* known) {
  // float32 without feedback: the schedule reads the caller's buffer (no copy of count).
  const bool as_is = datatype == weftFloat32 && residual == nullptr;
  const ScheduleRequest shape = HierarchicalShape(comm, count, spec);
  // This rank encodes (and so keeps the residual of) only the lanes it owns: elsewhere the
  // residual it adds in is zeroed; in its lanes the call's feedback overwrites it. In the
  // steady state the residual outside its lanes is zero already (the last call zeroed it and
  // wrote only the lanes): then only the lanes read as input + residual, which the codec
  // chains add tile by tile (ResidualFeedback::patch), and the schedule reads the rest of the
  // input where it is, so the call reads the residual once and writes none of it but what
  // its feedback stores.
  const std::vector<EncodedSpan> spans =
      residual != nullptr ? AllReduceHierarchicalEncodedSpans(shape, comm->rank) : std::vector<EncodedSpan>();
  const std::vector<ElementRange> lanes = StoredRanges(spans);
  float* x = as_is ? nullptr : ScratchFloats(kInputSlot, count);
  const uint64_t digest = LanesDigest(lanes);
  const bool lanes_only = residual != nullptr && datatype == weftFloat32 &&
                          ZeroOutsideLanes(residual, count, lanes, digest, known);
  // Until the call is through, what the residual holds is not known (a failed call may have
  // stored some lanes' feedback and not others: still zero outside them, but not proved so).
  if (known != nullptr) known->zero_outside = KnownResidual::kUnknown;
  if (residual != nullptr && !lanes_only) TakeResidual(sendbuff, datatype, count, residual, x, lanes);
  else if (residual == nullptr && !as_is) LoadWithResidual(sendbuff, datatype, count, nullptr, x);
  const float* in = as_is || lanes_only ? static_cast<const float*>(sendbuff) : x;
  float* result =
      datatype == weftFloat32 ? static_cast<float*>(recvbuff) : ScratchFloats(kResultSlot, count);
  ResidualFeedback feedback;
  feedback.residual = residual;
  feedback.reduced_weight = op == weftAvg ? static_cast<float>(comm->nranks) : 1.0f;
  feedback.spans = &spans;
  if (lanes_only) {
    feedback.patch = x;
    feedback.patched = &lanes;
  }
  WEFT_RETURN_IF_ERROR(RunCompressedRequest(comm, HierarchicalAlgorithm(), shape, spec, op, in,
                                            result, &CompressedScheduleScratch(), &feedback));
  // Both ways the residual is now zero outside the lanes: TakeResidual zeroed it there, or it
  // was already, and the feedback stores only inside them.
  if (known != nullptr && residual != nullptr) known->zero_outside = digest;
  StoreAs(result, count, datatype, recvbuff);
  return OkStatus();
}

AllReduceWireBytes HierarchicalWireBytes(const weftCompression& spec, size_t count,
                                         const std::vector<std::vector<int>>& hosts, int rank) {
  AllReduceWireBytes bytes;
  ScheduleRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = 0;
  for (const std::vector<int>& g : hosts) req.nranks += static_cast<int>(g.size());
  req.count = count;
  req.codec = spec;
  req.groups = hosts;
  req.scope = PlanScope::ForRank(rank);
  StatusOr<Schedule> sched = BuildSchedule(HierarchicalAlgorithm(), req);
  if (!sched.ok()) return bytes;
  std::vector<int> host_of(req.nranks, 0);
  for (size_t h = 0; h < hosts.size(); ++h)
    for (int r : hosts[h]) host_of[r] = static_cast<int>(h);
  for (const Step& s : sched->ranks[rank].steps) {
    if (s.op != StepOp::kSend) continue;
    // Scratch regions sent are encodings: whole elements, at most 3 bytes over the exact size.
    const size_t n = s.src.count * sizeof(float);
    (host_of[s.peer] == host_of[rank] ? bytes.inside_hosts : bytes.across_hosts) += n;
  }
  return bytes;
}

}  // namespace weft::compress
