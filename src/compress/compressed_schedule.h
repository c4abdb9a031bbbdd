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
#include "compress/compress_common.h"
#include "exec/scratch.h"
#include "sim/engine.h"
#include "topo/fabric.h"
#include "weft/weft_compress.h"
#include "algorithms/compressed.h"

namespace weft::compress {

// Error feedback of a compressed call: the executor puts what each of this rank's encodes
// drops into `residual` as the encode runs (exec/executor.h CodecFeedback: stored for a
// contribution or partial sum, added times reduced_weight for the reduced result). Elements
// no encode covers are left as they are: the caller zeroes them where this rank keeps nothing
// of them (TakeResidual with StoredRanges).
struct ResidualFeedback {
  float* residual = nullptr;    // over the call's count of values
  float reduced_weight = 1.0f;  // nranks for avg, since the next call divides it again
  // Where each encode's values lie in the count, in step order; null: FlatEncodedSpans of the
  // steps that run, the reduced slice at reduced_offset.
  const std::vector<EncodedSpan>* spans = nullptr;
  size_t reduced_offset = 0;
  // The input's elements in `patched` read as input + residual (ExecBuffers::patch, addend):
  // where this rank's residual is not known to be zero. `patch`: space for the executor to
  // build them in, as large as the input.
  float* patch = nullptr;
  const std::vector<ElementRange>* patched = nullptr;
};

// Builds the compressed `collective` schedule of this rank for `count` (ScheduleRequest
// count) and runs it on float32 `in` / `out` with the codec `spec`. `scratch` receives the
// schedule's scratch (grown as needed, valid until the next call with it). `feedback`: null,
// or error feedback into its residual.
Status RunCompressedSchedule(weftComm_t comm, Collective collective, size_t count,
                             const weftCompression& spec, weftRedOp_t op, const float* in,
                             float* out, ScratchBuffer* scratch,
                             const ResidualFeedback* feedback);

// WEFT_COMPRESSION_CHUNK_BYTES as the ChunkPolicy::chunk_elems (float32 values) of compressed
// schedules (CompressedPieces in algorithms/compressed.h): unset or "auto": 0, the pieces'
// own rule; 0: SIZE_MAX, one piece (not pipelined); else bytes / 4, at least 1. A value that
// does not parse: auto (communicator creation has already reported it).
size_t CompressionChunkElems();

// The general form: runs `algorithm` (one of CompressedAlgorithms()) for `shape` (its
// collective, count, groups and all-to-allv tables; nranks, codec and scope are filled in
// here, and the chunk from CompressionChunkElems where shape's is 0). weftCommGetLastAlgorithm then names the algorithm.
Status RunCompressedRequest(weftComm_t comm, const AlgorithmInfo& algorithm,
                            const ScheduleRequest& shape, const weftCompression& spec,
                            weftRedOp_t op, const float* in, float* out,
                            ScratchBuffer* scratch, const ResidualFeedback* feedback);
// The same on values of `dtype`: float32, or bf16 for a schedule whose codec steps are encodes
// and decodes only (the all-to-all(v); a decode-reduce sums float32). shape.elem_bytes is set
// here from dtype, so the schedule's encoded regions fit the executor's elements.
Status RunCompressedRequestOn(weftComm_t comm, const AlgorithmInfo& algorithm,
                              const ScheduleRequest& shape, const weftCompression& spec,
                              weftRedOp_t op, weftDataType_t dtype, const void* in, void* out,
                              ScratchBuffer* scratch, const ResidualFeedback* feedback);

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

// The calling thread's scratch for compressed schedules (host memory from the CPU kernel
// backend; grows only; thread-per-rank tests keep one per rank).
ScratchBuffer& CompressedScheduleScratch();

// The element ranges error feedback stores into (the spans that are not reduced):
// sorted, disjoint, merged where they touch. Whatever the residual held there is overwritten
// by a successful call, so taking the residual need not zero it there.
std::vector<ElementRange> StoredRanges(const std::vector<EncodedSpan>& spans);

// The spans of a flat compressed schedule's encodes (allreduce, reduce-scatter, allgather):
// an encode of the input covers its own elements of the input; an encode of scratch is the
// reduced slice, which lies at `reduced_offset` of the count.
std::vector<EncodedSpan> FlatEncodedSpans(const RankSchedule& steps, size_t reduced_offset);

}  // namespace weft::compress
