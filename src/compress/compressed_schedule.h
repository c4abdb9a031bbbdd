// Runs this rank's part of a compressed schedule (algorithms/compressed.h: codec steps proved
// by the checker) on a communicator, through the executor, as one operation of the
// communicator (its lock, sequence number, call tag, flight recorder and sticky error), and
// leaves the schedule's scratch readable afterwards: error feedback reads the encodings there.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "sim/engine.h"
#include "topo/fabric.h"
#include "weft/weft_compress.h"

namespace weft::compress {

// Builds the compressed `collective` schedule of this rank for `count` (ScheduleRequest
// count) and runs it on float32 `in` / `out` with the codec `spec`. `scratch` receives the
// schedule's scratch (grown as needed, valid until the next call with it). `rank_schedule`
// (if not null) receives the steps that ran, to read back their encodings.
Status RunCompressedSchedule(weftComm_t comm, Collective collective, size_t count,
                             const weftCompression& spec, weftRedOp_t op, const float* in,
                             float* out, std::vector<unsigned char>* scratch,
                             RankSchedule* rank_schedule);

// The predicted time of the compressed `collective` schedule of `count` (every rank's steps)
// on `fabric`, its codec steps at the codec's measured speed (MeasuredCodecSpeed,
// compression_pays.h) and its messages of the encoded size.
StatusOr<SimResult> SimulateCompressedSchedule(const Fabric& fabric, Collective collective,
                                               int nranks, size_t count,
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

}  // namespace weft::compress
