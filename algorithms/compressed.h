// Compressed schedules: generators whose steps encode and decode with the call's codec
// (ScheduleRequest::codec; the codec steps of schedule.h), proved by the checker like every
// other schedule (decode(encode(x)) carries x's contributions; each contribution quantized
// once; every rank decodes the same bytes).
//
// They live in their own list, not in the selector's registry (registry.h): they run only
// with a codec, which the selector and WEFT_ALGO never hand a plain collective; the
// compressed collectives (src/compress/) build them directly.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "weft/weft_compress.h"

namespace weft {

// Elements (float32, 4 bytes; or `elem_bytes` each, ScheduleRequest::elem_bytes) of an
// encoded region holding the encoding of `values` values: the codec's exact encoded size,
// rounded up to whole elements (schedule.h says why regions count elements).
size_t EncodedElements(const weftCompression& spec, size_t values,
                       size_t elem_bytes = sizeof(float));

// Whether `request` carries a usable codec (a compressed generator applies).
bool HasUsableCodec(const ScheduleRequest& request);

// The start every compressed generator shares: the request's basic checks, a usable codec
// (else an error naming the generator and what is wrong with the spec), and an empty schedule
// named "compressed" whose window lets every message of a rank be in flight (2p).
StatusOr<Schedule> NewCompressedSchedule(const ScheduleRequest& request, const char* generator);

// How many pieces a compressed generator pipelines its `elements` values in (each rank derives
// the same): request.chunk.chunk_elems values each (at most kMaxCompressedPieces; a chunk of
// SIZE_MAX: one piece, not pipelined), or without a chunk (0: "auto") up to 4 pieces of at
// least 8 MiB of float32. Pieces run as a software pipeline: piece k's encodes and transfers
// are issued before piece k-1's decode-reduce and piece k-2's decodes, so the local work of one
// piece runs while another's bytes are on the wire.
constexpr size_t kMaxCompressedPieces = 64;
size_t CompressedPieces(const ScheduleRequest& request, size_t elements);

// The generators (algorithms/<collective>_compressed.cc).
StatusOr<Schedule> BuildAllReduceCompressed(const ScheduleRequest& request);
StatusOr<Schedule> BuildReduceScatterCompressed(const ScheduleRequest& request);
StatusOr<Schedule> BuildAllGatherCompressed(const ScheduleRequest& request);
// Hierarchical placement of the compressed allreduce (request.groups = hosts; see
// algorithms/allreduce_compressed_hierarchical.cc): float32 inside hosts, codec across.
StatusOr<Schedule> BuildAllReduceCompressedHierarchical(const ScheduleRequest& request);
// All-to-all(v) with every block encoded once by its sender and decoded by its receiver
// (MoE token dispatch, e.g. fp8); request.a2av_* as for the plain all-to-allv.
StatusOr<Schedule> BuildAllToAllvCompressed(const ScheduleRequest& request);

// Elements [begin, end) of a call's count.
struct ElementRange {
  size_t begin, end;
};

// What an encode step of a compressed allreduce schedule encodes, for error feedback: the
// elements [offset, offset + count) of the call's count, either a partial sum of
// contributions (reduced = false: what it drops is this rank's to send again) or the reduced
// result (reduced = true: weighted by nranks for avg, as the next call divides it again).
struct EncodedSpan {
  size_t offset;
  bool reduced;
  size_t count;  // the encode's src count: the span is [offset, offset + count)
};
// The spans of rank's encode steps, in their order in the hierarchical schedule.
std::vector<EncodedSpan> AllReduceHierarchicalEncodedSpans(const ScheduleRequest& request,
                                                           int rank);
// The same for the flat compressed allreduce.
std::vector<EncodedSpan> AllReduceFlatEncodedSpans(const ScheduleRequest& request, int rank);

// Where a compressed generator's steps go and, for error feedback, what each encode encodes
// (spans may be null: the generator builds steps only).
struct CompressedEmitter {
  std::vector<Step>* steps;
  std::vector<EncodedSpan>* spans;
  void Push(const Step& s) { steps->push_back(s); }
  void Encode(Region src, Region dst, uint32_t stream, size_t offset, bool reduced) {
    steps->push_back(EncodeStep(src, dst, stream));
    if (spans != nullptr) spans->push_back({offset, reduced, src.count});
  }
};

// The compressed generators, each with its collective and name ("compressed").
const std::vector<AlgorithmInfo>& CompressedAlgorithms();
// The first for `collective` (allreduce: the flat one), or the one named `name`.
const AlgorithmInfo* FindCompressedAlgorithm(Collective collective);
const AlgorithmInfo* FindCompressedAlgorithm(Collective collective, const std::string& name);

}  // namespace weft
