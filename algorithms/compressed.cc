// The list of compressed generators and the sizing they share (see compressed.h).
#include "algorithms/compressed.h"

#include <algorithm>

#include "algorithms/patterns.h"
#include "kernels/codec.h"

namespace weft {
namespace {

bool Applies(const ScheduleRequest& req, Collective c) {
  return req.collective == c && HasUsableCodec(req);
}

}  // namespace

size_t EncodedElements(const weftCompression& spec, size_t values, size_t elem_bytes) {
  return (codec::EncodedBytes(spec, values) + elem_bytes - 1) / elem_bytes;
}

size_t CompressedPieces(const ScheduleRequest& request, size_t elements) {
  // Below ~8 MiB a piece's fixed costs (a message and a codec call per peer) outweigh what
  // overlapping it saves; 4 pieces hide all but a quarter of the local work (measured on the
  // 2-host harness, perf/RESULTS.md).
  constexpr size_t kAutoMaxPieces = 4, kAutoMinPieceElems = (size_t{8} << 20) / sizeof(float);
  if (request.chunk.chunk_elems > 0)
    return std::clamp<size_t>(NumChunks(elements, request.chunk.chunk_elems), 1, kMaxCompressedPieces);
  return std::clamp<size_t>(elements / kAutoMinPieceElems, 1, kAutoMaxPieces);
}

bool HasUsableCodec(const ScheduleRequest& request) {
  return request.codec.codec != weftCodecNone && codec::ValidateSpec(request.codec).empty();
}

StatusOr<Schedule> NewCompressedSchedule(const ScheduleRequest& request, const char* generator) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  if (!HasUsableCodec(request))
    return InvalidArgument(std::string(generator) + " needs a codec (ScheduleRequest::codec): " +
                           codec::ValidateSpec(request.codec));
  // Encoded regions count the call's elements (ScheduleRequest::elem_bytes).
  if (request.elem_bytes != 2 && request.elem_bytes != 4)
    return InvalidArgument(std::string(generator) + " runs on float32 or bf16 values, not elements of " +
                           std::to_string(request.elem_bytes) + " bytes (ScheduleRequest::elem_bytes)");
  Schedule sched = NewSchedule(request, "compressed");
  sched.window = 2 * request.nranks;  // every exchange and gather message of a rank may be in flight
  return sched;
}

const std::vector<AlgorithmInfo>& CompressedAlgorithms() {
  static const std::vector<AlgorithmInfo> list = {
      AlgorithmInfo{"compressed", Collective::kAllReduce,
                    [](const ScheduleRequest& r) { return Applies(r, Collective::kAllReduce); },
                    BuildAllReduceCompressed, nullptr},
      AlgorithmInfo{"compressed", Collective::kReduceScatter,
                    [](const ScheduleRequest& r) { return Applies(r, Collective::kReduceScatter); },
                    BuildReduceScatterCompressed, nullptr},
      AlgorithmInfo{"compressed", Collective::kAllGather,
                    [](const ScheduleRequest& r) { return Applies(r, Collective::kAllGather); },
                    BuildAllGatherCompressed, nullptr},
      AlgorithmInfo{"compressed_hierarchical", Collective::kAllReduce,
                    [](const ScheduleRequest& r) {
                      return Applies(r, Collective::kAllReduce) && ValidGroups(r).ok();
                    },
                    BuildAllReduceCompressedHierarchical, nullptr},
      AlgorithmInfo{"compressed", Collective::kAllToAllv,
                    [](const ScheduleRequest& r) { return Applies(r, Collective::kAllToAllv); },
                    BuildAllToAllvCompressed, nullptr},
  };
  return list;
}

const AlgorithmInfo* FindCompressedAlgorithm(Collective collective) {
  for (const AlgorithmInfo& a : CompressedAlgorithms())
    if (a.collective == collective) return &a;
  return nullptr;
}

const AlgorithmInfo* FindCompressedAlgorithm(Collective collective, const std::string& name) {
  for (const AlgorithmInfo& a : CompressedAlgorithms())
    if (a.collective == collective && a.name == name) return &a;
  return nullptr;
}

}  // namespace weft
