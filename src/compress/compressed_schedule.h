// Runs this rank's part of a compressed schedule (algorithms/compressed.h: codec steps proved
// by the checker) on a communicator, through the executor, as one operation of the
// communicator (its lock, sequence number, call tag, flight recorder and sticky error), and
// leaves the schedule's scratch readable afterwards: error feedback reads the encodings there.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "common/status.h"
#include "sim/engine.h"
#include "topo/fabric.h"
#include "weft/weft_compress.h"
#include "algorithms/compressed.h"

namespace weft::compress {

// Builds the compressed `collective` schedule of this rank for `count` (ScheduleRequest
// count) and runs it on float32 `in` / `out` with the codec `spec`. `scratch` receives the
// schedule's scratch (grown as needed, valid until the next call with it). `rank_schedule`
// (if not null) receives the steps that ran, to read back their encodings.
Status RunCompressedSchedule(weftComm_t comm, Collective collective, size_t count,
                             const weftCompression& spec, weftRedOp_t op, const float* in,
                             float* out, std::vector<unsigned char>* scratch,
                             RankSchedule* rank_schedule);

// The general form: runs `algorithm` (one of CompressedAlgorithms()) for `shape` (its
// collective, count, groups and all-to-allv tables; nranks, codec and scope are filled in
// here). weftCommGetLastAlgorithm then names the algorithm.
Status RunCompressedRequest(weftComm_t comm, const AlgorithmInfo& algorithm,
                            const ScheduleRequest& shape, const weftCompression& spec,
                            weftRedOp_t op, const float* in, float* out,
                            std::vector<unsigned char>* scratch, RankSchedule* rank_schedule);

// The predicted time of the compressed `collective` schedule of `count` (every rank's steps)
// on `fabric`, its codec steps at the codec's measured speed (MeasuredCodecSpeed,
// compression_pays.h) and its messages of the encoded size.
StatusOr<SimResult> SimulateCompressedSchedule(const Fabric& fabric, Collective collective,
                                               int nranks, size_t count,
                                               const weftCompression& spec);

// The same for `algorithm` (one of CompressedAlgorithms()) and `shape` (collective, nranks,
// count, groups; the codec is `spec`).
StatusOr<SimResult> SimulateCompressedRequest(const Fabric& fabric, const AlgorithmInfo& algorithm,
                                              const ScheduleRequest& shape,
                                              const weftCompression& spec);

// The calling thread's scratch for compressed schedules (grows only; thread-per-rank tests
// keep one per rank).
std::vector<unsigned char>& CompressedScheduleScratch();

// What every encode step of `steps` dropped: for each encode whose src is the input, sets
// residual[src] = src values - decode(encoding) (0 where not finite), the values read from
// `in`; for each encode of a scratch region (a reduced slice), adds weight x its dropped part to
// residual at reduced_offset. The encodings and reduced values are read from `scratch`.
void ResidualFromEncodings(const weftCompression& spec, const RankSchedule& steps,
                           const float* in, const unsigned char* scratch, size_t reduced_offset,
                           float weight, float* residual);

// The same for schedules whose encodes are described by `spans` (one per encode step, in
// order; algorithms/compressed.h): adds what each dropped to residual at its span's offset,
// times `reduced_weight` for spans of the reduced result. The caller zeroed the residual
// after adding it to the input.
void AddDroppedToResidual(const weftCompression& spec, const RankSchedule& steps,
                          const std::vector<EncodedSpan>& spans, const float* in,
                          const unsigned char* scratch, float reduced_weight, float* residual);

}  // namespace weft::compress
