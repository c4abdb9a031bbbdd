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
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "weft/weft_compress.h"

namespace weft {

// Elements (float32, 4 bytes) of an encoded region holding the encoding of `values` values:
// the codec's exact encoded size, rounded up to whole elements (schedule.h says why regions
// count elements).
size_t EncodedElements(const weftCompression& spec, size_t values);

// Whether `request` carries a usable codec (a compressed generator applies).
bool HasUsableCodec(const ScheduleRequest& request);

// The start every compressed generator shares: the request's basic checks, a usable codec
// (else an error naming the generator and what is wrong with the spec), and an empty schedule
// named "compressed" whose window lets every message of a rank be in flight (2p).
StatusOr<Schedule> NewCompressedSchedule(const ScheduleRequest& request, const char* generator);

// The generators (algorithms/<collective>_compressed.cc).
StatusOr<Schedule> BuildAllReduceCompressed(const ScheduleRequest& request);
StatusOr<Schedule> BuildReduceScatterCompressed(const ScheduleRequest& request);
StatusOr<Schedule> BuildAllGatherCompressed(const ScheduleRequest& request);

// The compressed generators, each with its collective and name ("compressed").
const std::vector<AlgorithmInfo>& CompressedAlgorithms();
const AlgorithmInfo* FindCompressedAlgorithm(Collective collective);

}  // namespace weft
