// Compressed schedules on a communicator (see compressed_schedule.h).
#include "compress/compressed_schedule.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

#include "algorithms/compressed.h"
#include "compress/compression_pays.h"
#include "common/settings.h"
#include "core/call_check.h"
#include "core/comm.h"
#include "exec/codec_chain.h"
#include "exec/executor.h"
#include "kernels/codec.h"
#include "kernels/dtype.h"
#include "transports/transport.h"

namespace weft::compress {
namespace {

// The call's descriptor for message tags: ranks whose calls differ (count, codec) fail as
// mismatched instead of exchanging encodings of different shapes.
uint32_t DescriptorHash(Collective collective, size_t count, const weftCompression& spec,
                        weftDataType_t dtype, weftRedOp_t op) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ count;
  for (uint64_t v : {static_cast<uint64_t>(spec.codec), static_cast<uint64_t>(spec.block),
                     static_cast<uint64_t>(spec.flags), spec.seed}) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  }
  return MixCallType(static_cast<uint32_t>(h ^ (h >> 32)), collective, dtype, op);
}

// The count every rank passes the same (all-to-allv: each rank's own counts differ, so none).
size_t HashedCount(const ScheduleRequest& shape) {
  return shape.collective == Collective::kAllToAllv ? 0 : shape.count;
}

// The elements the flight recorder shows: the count, or (all-to-allv) what this rank sends.
size_t RecordedElements(const ScheduleRequest& req, int rank) {
  if (req.collective != Collective::kAllToAllv) return req.count;
  const size_t n = static_cast<size_t>(req.nranks);
  size_t sent = 0;
  for (size_t q = 0; q < n && rank * n + q < req.a2av_counts.size(); ++q) sent += req.a2av_counts[rank * n + q];
  return sent;
}

Status Execute(weftComm_t comm, const RankSchedule& rs, int window, const weftCompression& spec,
               weftDataType_t dtype, weftRedOp_t op, uint64_t tag, const void* in, void* out,
               ScratchBuffer* scratch, const char* what, const ResidualFeedback* feedback,
               const std::vector<EncodedSpan>* spans) {
  ExecExtras extras;
  extras.codec = &spec;
  extras.scratch = scratch;
  if (feedback != nullptr && feedback->residual != nullptr) {
    extras.feedback.residual = feedback->residual;
    extras.feedback.spans = spans;
    extras.feedback.reduced_weight = feedback->reduced_weight;
    extras.input_patch = feedback->patch;
    extras.input_addend = feedback->residual;
    extras.input_patched = feedback->patched;
  }
  return ExecuteOnComm(comm, rs, window, dtype, op, tag, in, out, what, extras);
}

}  // namespace

size_t CompressionChunkElems() {
  const std::string text = SettingText("WEFT_COMPRESSION_CHUNK_BYTES");
  if (text.empty() || text == "auto") return 0;
  const size_t bytes = SettingBytesOr("WEFT_COMPRESSION_CHUNK_BYTES", 0);
  if (bytes == 0) return text.find_first_not_of('0') == std::string::npos ? SIZE_MAX : 0;
  return std::max<size_t>(1, bytes / sizeof(float));
}

Status RunCompressedRequest(weftComm_t comm, const AlgorithmInfo& algorithm,
                            const ScheduleRequest& shape, const weftCompression& spec,
                            weftRedOp_t op, const float* in, float* out,
                            ScratchBuffer* scratch, const ResidualFeedback* feedback) {
  return RunCompressedRequestOn(comm, algorithm, shape, spec, op, weftFloat32, in, out, scratch,
                                feedback);
}

Status RunCompressedRequestOn(weftComm_t comm, const AlgorithmInfo& algorithm,
                              const ScheduleRequest& shape, const weftCompression& spec,
                              weftRedOp_t op, weftDataType_t dtype, const void* in, void* out,
                              ScratchBuffer* scratch, const ResidualFeedback* feedback) {
  const Collective collective = shape.collective;
  // The call as the recorder and the metrics show it: its values, this rank's elements.
  ScheduleRequest req = shape;
  req.nranks = comm->nranks;
  req.codec = spec;
  req.scope = PlanScope::ForRank(comm->rank);
  req.elem_bytes = TypeSize(dtype);
  if (req.chunk.chunk_elems == 0) req.chunk.chunk_elems = CompressionChunkElems();
  CollectiveCall view;
  view.collective = collective;
  view.count = RecordedElements(req, comm->rank);
  view.dtype = dtype;
  view.op = op;
  CallScope scope;
  WEFT_RETURN_IF_ERROR(BeginCall(comm, view, view.count * req.elem_bytes, &scope));
  StatusOr<std::shared_ptr<const Schedule>> sched = PlanSchedule(comm, algorithm, req);
  if (!sched.ok()) return EndCall(comm, view, scope, sched.status());
  const std::string what = std::string(CollectiveName(collective)) + " " + algorithm.name;
  // Interned: the flight recorder and weftCommGetLastAlgorithm keep the pointer.
  comm->last_algorithm = &algorithm.name;
  if (scope.entry != nullptr) scope.entry->algorithm = &algorithm.name;
  const RankSchedule& rs = (*sched)->ranks[comm->rank];
  const uint64_t tag =
      MakeCallTag(DescriptorHash(collective, HashedCount(shape), spec, dtype, op), scope.seq);
  if (comm->direct != nullptr) comm->direct->PublishCurrentCall(tag);  // peers' plan check
  // Error feedback's spans: the caller's, else those of the flat schedule's encodes.
  std::vector<EncodedSpan> flat_spans;
  if (feedback != nullptr && feedback->residual != nullptr && feedback->spans == nullptr)
    flat_spans = FlatEncodedSpans(rs, feedback->reduced_offset);
  const std::vector<EncodedSpan>* spans =
      feedback != nullptr && feedback->spans != nullptr ? feedback->spans : &flat_spans;
  Status st = Execute(comm, rs, (*sched)->window, spec, dtype, op, tag, in, out, scratch,
                      what.c_str(), feedback, spans);
  return EndCall(comm, view, scope, std::move(st));
}

Status RunCompressedSchedule(weftComm_t comm, Collective collective, size_t count,
                             const weftCompression& spec, weftRedOp_t op, const float* in,
                             float* out, ScratchBuffer* scratch,
                             const ResidualFeedback* feedback) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(collective);
  if (algorithm == nullptr)
    return InternalError(std::string("no compressed schedule for ") + CollectiveName(collective));
  ScheduleRequest shape;
  shape.collective = collective;
  shape.count = count;
  return RunCompressedRequest(comm, *algorithm, shape, spec, op, in, out, scratch, feedback);
}

StatusOr<SimResult> SimulateCompressedSchedule(const Fabric& fabric, Collective collective,
                                               int nranks, size_t count,
                                               const weftCompression& spec) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(collective);
  if (algorithm == nullptr)
    return InvalidArgument(std::string("no compressed schedule for ") + CollectiveName(collective));
  ScheduleRequest shape;
  shape.collective = collective;
  shape.nranks = nranks;
  shape.count = count;
  return SimulateCompressedRequest(fabric, *algorithm, shape, spec);
}

StatusOr<SimResult> SimulateCompressedRequest(const Fabric& fabric, const AlgorithmInfo& algorithm,
                                              const ScheduleRequest& shape,
                                              const weftCompression& spec) {
  ScheduleRequest req = shape;
  req.codec = spec;
  req.scope = PlanScope::AllRanks();
  if (req.chunk.chunk_elems == 0) req.chunk.chunk_elems = CompressionChunkElems();
  StatusOr<Schedule> sched = BuildSchedule(algorithm, req);
  if (!sched.ok()) return sched.status();
  const CodecSpeed speed = CodecSpeedOn(spec, fabric.Compute(0));
  SimOptions options;
  options.encode_gbps = speed.encode_gbps;
  options.decode_gbps = speed.decode_gbps;
  options.encode_fixed_us = speed.encode_fixed_us;
  options.decode_fixed_us = speed.decode_fixed_us;
  // Top-k's decode-reduce of a sum scatters its kept values (the call's reduction is a sum).
  if (spec.codec == weftCodecTopK) options.decode_reduce_density = spec.ratio;  // the engine clamps it
  options.encode_chain_gbps = speed.encode_chain_gbps;
  options.decode_chain_gbps = speed.decode_chain_gbps;
  // The executor runs codec chains fused unless WEFT_FUSE_CODEC_STEPS=0 (exec/codec_chain.h).
  if (CodecChainsEnabled()) options.fused_codec = &req.codec;
  return SimulateSchedule(*sched, fabric, sizeof(float), options);
}

ScratchBuffer& CompressedScheduleScratch() {
  static thread_local ScratchBuffer scratch(MemKind::kHost);
  return scratch;
}

std::vector<ElementRange> StoredRanges(const std::vector<EncodedSpan>& spans) {
  std::vector<ElementRange> ranges;
  for (const EncodedSpan& s : spans)
    if (!s.reduced && s.count > 0) ranges.push_back({s.offset, s.offset + s.count});
  std::sort(ranges.begin(), ranges.end(),
            [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  std::vector<ElementRange> merged;
  for (const ElementRange& r : ranges) {
    if (!merged.empty() && r.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, r.end);
    else merged.push_back(r);
  }
  return merged;
}

std::vector<EncodedSpan> FlatEncodedSpans(const RankSchedule& steps, size_t reduced_offset) {
  std::vector<EncodedSpan> spans;
  for (const Step& s : steps.steps) {
    if (s.op != StepOp::kEncode) continue;
    if (s.src.buffer == Buffer::kInput) spans.push_back({s.src.offset, false, s.src.count});
    else spans.push_back({reduced_offset, true, s.src.count});
  }
  return spans;
}


}  // namespace weft::compress
